# SPDX-License-Identifier: MIT
"""The version's single source, README's example answer, and docs that must not call a supported feature missing.

* CHANGELOG.md's newest release heading is the version `clef --version` prints (both come from
  project(VERSION) in CMakeLists.txt; the changelog is written by hand, so it can lag).
* No sentence of README.md or docs/*.md says that something the binary supports is "not read yet",
  "not supported yet" or "not yet implemented". What the binary supports is asked of the binary:
  its GGUF layouts (the list its refusal of an unknown architecture names), its commands
  (`clef --help`) and every command's flags (`clef CMD --help`).
* README.md's request → response example is what `clef decide` prints for that request on the
  embedded default model.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import shutil
import struct
import subprocess

import pytest

from conftest import REPO_ROOT, clef_bin, run_clef

# "not read yet", "not supported yet", "not yet implemented", ... (a claim that a feature is missing).
NOT_YET = re.compile(
    r"\bnot\s+(?:yet\s+)?(?:read|supported|implemented|available|handled|wired)\s+yet\b"
    r"|\bnot\s+yet\s+(?:read|supported|implemented|available|handled|wired)\b",
    re.IGNORECASE)


def gguf_with_architecture(arch: str) -> bytes:
    """A GGUF v3 file with no tensors and one metadata key, general.architecture = arch."""
    def s(text: str) -> bytes:
        raw = text.encode()
        return struct.pack("<Q", len(raw)) + raw
    return b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s("general.architecture") + struct.pack("<I", 8) + s(arch)


def supported_gguf_layouts(tmp_path) -> list[str]:
    """The GGUF layouts the binary reads, as its refusal of an unknown architecture lists them."""
    f = tmp_path / "unknown-architecture.gguf"
    f.write_bytes(gguf_with_architecture("no-such-architecture"))
    r = run_clef("inspect", str(f))
    assert r.returncode == 4, r.stderr
    m = re.search(r"reads \w+ GGUF layouts: (.*)", r.stderr)
    assert m, f"the refusal no longer lists the layouts read: {r.stderr}"
    layouts = re.findall(r'"([A-Za-z0-9_]+)" \(', m.group(1))
    assert len(layouts) >= 2, r.stderr
    return layouts


def commands_and_flags() -> tuple[list[str], list[str]]:
    """The commands `clef --help` lists and every flag of every command's help."""
    top = run_clef("--help", check=True).stdout
    listing = re.split(r"^(?:Subcommands|SUBCOMMANDS):$", top, maxsplit=1, flags=re.M)
    assert len(listing) == 2, top
    commands = re.findall(r"^  ([a-z][a-z0-9-]*)\s", listing[1], re.M)
    assert "decide" in commands and "serve" in commands, commands
    flags: set[str] = set()
    for cmd in commands:
        text = run_clef(cmd, "--help", check=True).stdout
        flags.update(re.findall(r"^  (?:-[A-Za-z0-9],)?(--[a-z0-9][a-z0-9-]*)", text, re.M))
    flags.discard("--help")
    return commands, sorted(flags)


@pytest.fixture(scope="module")
def features(tmp_path_factory) -> dict[str, list[str]]:
    """feature → the phrases a sentence about it contains."""
    out: dict[str, list[str]] = {}
    for layout in supported_gguf_layouts(tmp_path_factory.mktemp("gguf")):
        out[f"the {layout} GGUF layout"] = [f"`{layout}` layout", f"{layout} layout", f"`{layout}` GGUF",
                                            f"{layout} GGUF"]
    commands, flags = commands_and_flags()
    for cmd in commands:
        out[f"clef {cmd}"] = [f"`clef {cmd}`"]
    for flag in flags:
        out[flag] = [f"`{flag}`", f"`{flag} "]
    return out


def contradictions(text: str, features: dict[str, list[str]]) -> list[tuple[int, str, str]]:
    """(line, feature, clause) for every clause that names a supported feature and says it is missing.

    A clause is a sentence of a paragraph or a table cell; markdown line breaks inside a paragraph
    do not split it, a table row is a paragraph of its own."""
    found = []
    blocks: list[tuple[int, str]] = []  # (first line, text) of each paragraph or table row
    para: list[str] = []
    for n, line in enumerate(text.split("\n") + [""], 1):
        if line.lstrip().startswith("|"):
            blocks.append((n, line))
        elif line.strip() and not line.startswith("```"):
            if not para:
                start = n
            para.append(line)
            continue
        if para:
            blocks.append((start, " ".join(para)))
            para = []
    for start, block in blocks:
        for cell in block.split("|"):
            for clause in re.split(r"(?<=[.;])\s+", cell):
                if not NOT_YET.search(clause):
                    continue
                for feature, phrases in features.items():
                    if any(p.lower() in clause.lower() for p in phrases):
                        found.append((start, feature, clause.strip()))
    return found


def test_changelog_heads_with_the_binary_version():
    first = run_clef("--version", check=True).stdout.splitlines()[0]
    m = re.fullmatch(r"clef (\d+\.\d+\.\d+)", first)
    assert m, first
    heads = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", (REPO_ROOT / "CHANGELOG.md").read_text(encoding="utf-8"), re.M)
    assert heads, "CHANGELOG.md has no '## [X.Y.Z]' release heading"
    assert heads[0] == m.group(1), f"CHANGELOG.md's newest release is {heads[0]}, clef --version says {m.group(1)}"


def test_the_check_flags_a_stale_claim(features):
    # The sentence docs/MODELS.md carried while the binary already read the layout, and one about
    # something the binary does not have (a Q2_K file), which must pass.
    stale = "a GGUF repository (ggml-org's single-file `clef` layout is not read yet, README)"
    assert [f for _, f, _ in contradictions(stale, features)] == ["the clef GGUF layout"]
    assert contradictions("Q2_K and IQ* files are not supported yet.", features) == []


def test_docs_do_not_call_supported_features_missing(features):
    docs = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
    problems = []
    for path in docs:
        for line, feature, clause in contradictions(path.read_text(encoding="utf-8"), features):
            problems.append(f"{path.relative_to(REPO_ROOT)}:{line}: says {feature} is missing: {clause}")
    assert not problems, "docs contradict the binary:\n" + "\n".join(problems)


def test_readme_response_is_what_clef_prints(tmp_path):
    """README's request → response example: the request in its `clef decide - <<'EOF'` block, run on
    the embedded default model, answers exactly the JSON README shows (laid out there, compact here)."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    req = re.search(r"^clef decide - <<'EOF'\n(.*?)\nEOF$", readme, re.M | re.S)
    shown = re.search(r"^```json\n(\{\"model\".*?)\n```$", readme, re.M | re.S)
    assert req and shown, "README.md lost its request → response example"
    request = tmp_path / "request.json"
    request.write_text(req.group(1), encoding="utf-8")
    r = run_clef("decide", str(request), env={"CLEF_HOME": str(tmp_path / "home")}, check=True)
    assert json.loads(r.stdout) == json.loads(shown.group(1))


def build_dir() -> pathlib.Path:
    """The CMake build folder of the binary under test (bin/clef sits in it)."""
    d = pathlib.Path(clef_bin()).resolve().parent.parent
    if not (d / "CMakeCache.txt").is_file():
        pytest.fail(f"{d} is not a CMake build folder; set CLEF_BIN to a built bin/clef")
    return d


def test_cmake_install_into_a_prefix(tmp_path):
    """`cmake --install` puts the program, its man page (every command's section), the bash completion and the
    docs into a prefix, and the installed clef runs."""
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", str(build_dir()), "--prefix", str(prefix)], check=True,
                   capture_output=True, text=True)
    r = subprocess.run([str(prefix / "bin" / "clef"), "--version"], capture_output=True, text=True, check=True)
    assert r.stdout.startswith("clef ")
    commands, _ = commands_and_flags()
    man = (prefix / "share" / "man" / "man1" / "clef.1").read_text(encoding="utf-8")
    assert r.stdout.split()[1] in man.splitlines()[1]  # .TH names the version
    for cmd in commands:
        assert f".SS clef {cmd}\n" in man, f"the man page has no section for clef {cmd}"
    for f in ("README.md", "CHANGELOG.md", "LICENSE", "copyright", "docs/PROTOCOL.md", "examples/request.json"):
        assert (prefix / "share" / "doc" / "clef" / f).is_file(), f
    completion = prefix / "share" / "bash-completion" / "completions" / "clef"
    script = f"""
source {shlex.quote(str(completion))}
t() {{ COMP_WORDS=("$@"); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); _clef; echo "${{COMPREPLY[*]}}"; }}
t clef de
t clef decide --prec
t clef decide --precision ""
t clef inspect --j
"""
    env = dict(os.environ, PATH=f"{prefix / 'bin'}:{os.environ['PATH']}")
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, check=True).stdout
    assert out.splitlines() == ["decide", "--precision", "fp32 f32 bf16 int8", "--json"], out


def test_debian_package(tmp_path):
    """cpack makes clef_<version>_amd64.deb installing /usr/bin/clef, with dpkg-shlibdeps' Depends."""
    if shutil.which("dpkg-shlibdeps") is None or shutil.which("file") is None:
        pytest.fail("cpack's DEB generator needs dpkg-shlibdeps and file (scripts/setup.sh installs them)")
    version = run_clef("--version", check=True).stdout.split()[1]
    subprocess.run(["cpack", "-B", str(tmp_path)], cwd=build_dir(), check=True, capture_output=True, text=True)
    deb = tmp_path / f"clef_{version}_amd64.deb"
    assert deb.is_file(), sorted(p.name for p in tmp_path.iterdir())
    fields = subprocess.run(["dpkg-deb", "-f", str(deb), "Package", "Version", "Depends"], capture_output=True,
                            text=True, check=True).stdout
    assert f"Version: {version}\n" in fields
    for lib in ("libc6", "libdnnl2", "libhwy1", "libcurl4", "libssl3", "libgomp1"):
        assert re.search(rf"\b{lib} \(>=", fields), f"Depends lacks {lib}: {fields}"
    files = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    for path in ("./usr/bin/clef", "./usr/share/man/man1/clef.1", "./usr/share/bash-completion/completions/clef",
                 "./usr/share/doc/clef/copyright"):
        assert re.search(rf"\s{re.escape(path)}$", files, re.M), path
