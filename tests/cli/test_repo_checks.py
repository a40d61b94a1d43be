# SPDX-License-Identifier: MIT
"""The structure checks of scripts/test.sh can fail: check_layers.py and check_function_length.py run on
small made-up trees (each script copied into the tree's scripts/, since both read the tree they sit in) and
must refuse exactly the broken ones, naming the file and line."""
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def tree(tmp: pathlib.Path, script: str, files: dict) -> pathlib.Path:
    (tmp / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / script, tmp / "scripts" / script)
    for name, text in files.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp / "scripts" / script


def run(script: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)


LAYERS = {
    "src/CMakeLists.txt": "set(CLEF_LAYERS core ops io decision)\n",
    "src/core/CMakeLists.txt": "target_link_libraries(clef_core PRIVATE clef_warnings)\n",
    "src/ops/CMakeLists.txt": "target_link_libraries(clef_ops PUBLIC clef_core\n  PRIVATE clef_warnings)\n",
    "src/io/CMakeLists.txt": "target_link_libraries(clef_io PUBLIC clef_core PRIVATE clef_warnings)\n",
    "src/decision/CMakeLists.txt": "target_link_libraries(clef_decision PUBLIC clef_io)\n",
    "src/core/error.h": "#pragma once\n",
    "src/io/gguf.h": '#pragma once\n#include "core/error.h"\n',
    "src/decision/request.cc": '#include "io/gguf.h"\n#include "core/error.h"\n',  # core through io
}


def test_check_layers_passes_a_tree_whose_includes_follow_its_links(tmp_path):
    r = run(tree(tmp_path, "check_layers.py", LAYERS))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == ""


def test_check_layers_refuses_an_include_of_a_layer_not_linked_even_when_it_ranks_below(tmp_path):
    # io comes before decision in CLEF_LAYERS, but ops does not link it.
    files = dict(LAYERS, **{"src/ops/gemm.cc": '#include "core/error.h"\n\n#include "io/gguf.h"\n'})
    r = run(tree(tmp_path, "check_layers.py", files))
    assert r.returncode == 1
    assert "src/ops/gemm.cc:3: layer ops includes io/gguf.h, but clef_ops does not link io" in r.stdout


def test_check_layers_refuses_a_link_upward_and_an_unlisted_folder(tmp_path):
    files = dict(LAYERS, **{"src/io/CMakeLists.txt": "target_link_libraries(clef_io PUBLIC clef_decision)\n",
                            "src/extra/thing.h": "#pragma once\n"})
    r = run(tree(tmp_path, "check_layers.py", files))
    assert r.returncode == 1
    assert "src/io/CMakeLists.txt: clef_io links clef_decision, which is not below it" in r.stdout
    assert "src/extra/: not a layer" in r.stdout


def function(name: str, body_lines: int) -> str:
    body = "".join(f"  x += {i};  // {{ not a brace\n" for i in range(body_lines))
    return f'int {name}(int x)\n{{\n  const char* s = "}}}}{{";\n{body}  return x;\n}}\n'


def test_check_function_length_counts_from_the_head_and_ignores_braces_in_text(tmp_path):
    # head, "{", the string, 115 body lines, return, "}": 120 lines, allowed.
    files = {"src/a/ok.cc": "namespace n {\n" + function("fits", 115) + "}  // namespace n\n"}
    r = run(tree(tmp_path, "check_function_length.py", files))
    assert r.returncode == 0, r.stdout + r.stderr


def test_check_function_length_names_a_function_over_120_lines(tmp_path):
    files = {"src/a/ok.cc": function("fits", 115),
             "apps/b/long.cc": "struct S {\n  int f();\n};\n" + function("too_long", 117)}
    r = run(tree(tmp_path, "check_function_length.py", files))
    assert r.returncode == 1
    assert r.stdout.splitlines() == ["apps/b/long.cc:4: 122 lines: int too_long(int x)"]
