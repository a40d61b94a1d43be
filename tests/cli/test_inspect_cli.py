# SPDX-License-Identifier: MIT
"""`clef inspect` and `clef make-model`, black-box: the embedded default model, parameter counts
against transformers (the independent reference), and one clear error line per broken file."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import struct

import pytest
import torch

from conftest import REPO_ROOT, clef_bin, run_clef


def inspect_json(folder, *extra):
    r = run_clef("inspect", "--json", str(folder), *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def hf_counts(folder):
    """Parameter counts of the folder according to transformers' Qwen3.5 classes."""
    from transformers import Qwen3_5ForConditionalGeneration

    model, info = Qwen3_5ForConditionalGeneration.from_pretrained(
        str(folder), dtype=torch.float32, output_loading_info=True)
    assert not any(info.values()), f"transformers found missing/unexpected/mismatched keys: {info}"
    text = sum(p.numel() for p in model.model.language_model.parameters())
    if not model.config.tie_word_embeddings:
        text += model.lm_head.weight.numel()
    vision = sum(p.numel() for p in model.model.visual.parameters())
    return text, vision


def test_default_model_is_made_and_inspected(tmp_path):
    r = run_clef("inspect", env={"CLEF_HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert "embedded default model" in r.stderr and "RANDOM WEIGHTS" in r.stderr
    assert "clef-tiny-random" in r.stdout and "layer pattern    LLLF" in r.stdout
    assert (tmp_path / "default-model" / "SHA256SUMS").exists()
    again = run_clef("inspect", env={"CLEF_HOME": str(tmp_path)})  # reuses the folder
    assert again.returncode == 0 and again.stdout == r.stdout


def test_cpp_tiny_is_authentic_for_transformers_and_tokenizers(cpp_tiny):
    import tokenizers
    from transformers import AutoTokenizer

    j = inspect_json(cpp_tiny, "--verify")
    text, vision = hf_counts(cpp_tiny)
    assert j["params"]["text"] == text
    assert j["params"]["vision"] == vision
    assert j["random_weights"] is True and j["model"].endswith("-random")
    tok = tokenizers.Tokenizer.from_file(str(cpp_tiny / "tokenizer.json"))
    assert tok.get_vocab_size(with_added_tokens=True) == j["tokenizer"]["vocab_entries"] + 26
    assert len(AutoTokenizer.from_pretrained(str(cpp_tiny))) == j["tokenizer"]["vocab_entries"] + 33
    assert len(j["verified_files"]) == 8


def test_make_model_is_deterministic(tmp_path):
    for name in ("a", "b"):
        run_clef("make-model", "--preset", "tiny", "--seed", "5", "--out", str(tmp_path / name), check=True)
    assert (tmp_path / "a" / "SHA256SUMS").read_text() == (tmp_path / "b" / "SHA256SUMS").read_text()
    r = run_clef("make-model", "--preset", "tiny", "--out", str(tmp_path / "a"))
    assert r.returncode == 2 and "--force" in r.stderr
    r = run_clef("make-model", "--preset", "huge", "--out", str(tmp_path / "c"))
    assert r.returncode == 2


def test_python_tiny_counts_match_transformers_and_head(tmp_path):
    import make_model
    from clef_ref.head import head_param_count

    out = tmp_path / "py-tiny"
    make_model.make_model("tiny", out, seed=1, dtype="bf16", verbose=False)
    j = inspect_json(out, "--verify")
    text, vision = hf_counts(out)
    assert (j["params"]["text"], j["params"]["vision"]) == (text, vision)
    head_cfg = json.loads((out / "joint_head_config.json").read_text())
    assert j["params"]["head"] == head_param_count(head_cfg)
    assert j["tokenizer"]["vocab_entries"] == 248044 and j["tokenizer"]["added_tokens"] == 33
    assert j["dtypes"]["backbone"].keys() == {"BF16", "F32"}


@pytest.mark.slow
def test_0_8b_preset_counts(tmp_path):
    """The 0.8b preset (~2 GB, written in seconds): about 752M text params incl. embeddings.
    CLEF_08B_DIR (scripts/test.sh writes one 0.8b folder for every session) is used when set: the
    counts do not depend on the seed."""
    import os

    import make_model

    env = os.environ.get("CLEF_08B_DIR")
    if env:
        out = pathlib.Path(env)
    else:
        out = tmp_path / "clef-0.8b"
        make_model.make_model("0.8b", out, seed=0, dtype="bf16", verbose=False)
    j = inspect_json(out)
    assert j["layer_pattern"] == "LLLF" * 6
    assert abs(j["params"]["text"] - 752.4e6) / 752.4e6 < 0.005, j["params"]["text"]
    assert j["tied_lm_head"] is True
    head_cfg = json.loads((out / "joint_head_config.json").read_text())
    assert head_cfg == {"hidden_size": 1024, "width": 1024, "routing_layers": 2, "layers": 2, "heads": 16,
                        "feedforward": 4096}


# --- bad input: one line on stderr naming the file and the problem, exit code 3/4, no crash ----

def _rewrite_header(path, mutate):
    """Replaces the JSON header of a safetensors file by mutate(header_dict) (data unchanged)."""
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    text = json.dumps(mutate(header)).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def _first_tensor(header):
    return next(k for k in header if k != "__metadata__")


def _corrupt(case, d):
    st = d / "model.safetensors"
    if case == "truncated_file":
        st.write_bytes(st.read_bytes()[:-1000])
    elif case == "header_past_eof":
        raw = st.read_bytes()
        st.write_bytes(struct.pack("<Q", len(raw) * 2) + raw[8:])
    elif case == "malformed_header_json":
        raw = st.read_bytes()
        n = struct.unpack("<Q", raw[:8])[0]
        st.write_bytes(raw[:8] + b"{" + b"x" * (n - 1) + raw[8 + n:])
    elif case == "offsets_out_of_range":
        def f(h):
            k = _first_tensor(h)
            h[k]["data_offsets"][1] += 10**9
            return h
        _rewrite_header(st, f)
    elif case == "overlapping_offsets":
        def f(h):
            items = sorted((v["data_offsets"][0], k) for k, v in h.items() if k != "__metadata__")
            off = h[items[1][1]]["data_offsets"]
            h[items[1][1]]["data_offsets"] = [off[0] - 2, off[1] - 2]  # same size, shifted into its neighbour
            return h
        _rewrite_header(st, f)
    elif case == "dtype_shape_mismatch":
        def f(h):
            k = _first_tensor(h)
            h[k]["dtype"] = "F32" if h[k]["dtype"] == "BF16" else "BF16"
            return h
        _rewrite_header(st, f)
    elif case == "missing_shard":
        header_names = json.loads(st.read_bytes()[8:8 + struct.unpack("<Q", st.read_bytes()[:8])[0]])
        names = [k for k in header_names if k != "__metadata__"]
        st.rename(d / "model-00001-of-00002.safetensors")
        wm = {k: "model-00001-of-00002.safetensors" for k in names}
        wm["model.language_model.norm.weight"] = "model-00002-of-00002.safetensors"
        (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
    elif case == "unknown_layer_type":
        cfg = json.loads((d / "config.json").read_text())
        cfg["text_config"]["layer_types"][0] = "mamba2"
        (d / "config.json").write_text(json.dumps(cfg))
    elif case == "no_joint_head":
        (d / "joint_head.safetensors").unlink()
    elif case == "unsupported_model_type":
        cfg = json.loads((d / "config.json").read_text())
        cfg["model_type"] = "llama"
        (d / "config.json").write_text(json.dumps(cfg))
    elif case == "sha256_mismatch":
        p = d / "preprocessor_config.json"
        p.write_text(p.read_text().replace("0.5", "0.6", 1))
    else:
        raise AssertionError(case)


BAD_CASES = {
    # case: (exit code, substrings the single error line must contain)
    "truncated_file": (3, ["model.safetensors", "run past the end of the data section"]),
    "header_past_eof": (3, ["model.safetensors", "header length", "runs past the end of the file"]),
    "malformed_header_json": (3, ["model.safetensors", "header: malformed JSON"]),
    "offsets_out_of_range": (3, ["model.safetensors", "data_offsets", "run past the end"]),
    "overlapping_offsets": (3, ["model.safetensors", "overlap"]),
    "dtype_shape_mismatch": (3, ["model.safetensors", "needs", "bytes but data_offsets"]),
    "missing_shard": (3, ["model.safetensors.index.json", "shard model-00002-of-00002.safetensors", "missing"]),
    "unknown_layer_type": (3, ["config.json", "text_config.layer_types[0]", "unknown layer type \"mamba2\""]),
    "no_joint_head": (3, ["joint_head.safetensors", "not a Clef release"]),
    "unsupported_model_type": (4, ["config.json", "model_type", "\"llama\""]),
    "sha256_mismatch": (3, ["preprocessor_config.json", "sha256 mismatch"]),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_input_gives_one_clear_line(case, broken):
    _corrupt(case, broken)
    code, needles = BAD_CASES[case]
    args = ["inspect", str(broken)] + (["--verify"] if case == "sha256_mismatch" else [])
    r = run_clef(*args)
    assert r.returncode == code, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("clef: error: "), r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert r.stdout == ""


def test_usage_errors_exit_2(tmp_path):
    assert run_clef("inspect", "--chunk", "0", str(tmp_path)).returncode == 2
    assert run_clef("frobnicate").returncode == 2
    r = run_clef("inspect", str(tmp_path / "nope"))
    assert r.returncode == 3 and "nope: no such file or directory (expected a Clef release folder" in r.stderr
    # A numeric option says whether the value is no number or a number out of range.
    r = run_clef("inspect", "--chunk", "abc", str(tmp_path))
    assert r.returncode == 2 and "--chunk: 'abc' is not a whole number" in r.stderr, r.stderr
    r = run_clef("inspect", "--chunk", "0", str(tmp_path))
    assert "--chunk: 0 is outside 1..1048576" in r.stderr, r.stderr
    r = run_clef("inspect", "--chunk", "99999999999999999999", str(tmp_path))  # too large for the type: out of range
    assert r.returncode == 2 and "--chunk: 99999999999999999999 is outside 1..1048576" in r.stderr, r.stderr
    for text in ("0x40", "+64", " 64", "64 "):  # plain decimal only
        r = run_clef("inspect", "--chunk", text, str(tmp_path))
        assert r.returncode == 2 and f"--chunk: '{text}' is not a whole number" in r.stderr, (text, r.stderr)
    for text in ("nan", "inf", "0x10"):  # a float option takes finite decimal numbers only
        r = run_clef("serve", "--timeout", text, "--port", "0")
        assert r.returncode == 2 and f"--timeout: '{text}' is not a number" in r.stderr, (text, r.stderr)


def test_help_works_whatever_clef_isa_says():
    """--help runs no kernel: a bad CLEF_ISA does not stop it (any other command reports it, exit 2)."""
    env = dict(os.environ, CLEF_ISA="bogus")
    for args in (["--help"], ["decide", "--help"], ["serve", "-h"]):
        r = subprocess.run([clef_bin(), *args], capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode == 0 and "Usage:" in r.stdout, (args, r.returncode, r.stderr)
    r = subprocess.run([clef_bin(), "--version"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2 and 'CLEF_ISA: unknown level "bogus"' in r.stderr, r.stderr


@pytest.mark.parametrize("kind", ["fifo", "gguf_named_dir", "empty_dir"])
def test_a_path_that_is_no_model_says_what_it_is(tmp_path, kind):
    """A FIFO (never opened: without a writer that would block) and a directory with no model in it
    (one named x.gguf included) are refused saying what the path is and what a model path may be."""
    path = tmp_path / {"fifo": "pipe", "gguf_named_dir": "x.gguf", "empty_dir": "empty"}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    r = subprocess.run([clef_bin(), "inspect", str(path)], capture_output=True, text=True, timeout=60)
    line = _one_error_line(r)
    want = {"fifo": "pipe: a FIFO (named pipe), not a model",
            "gguf_named_dir": "x.gguf: a directory, not a .gguf file: it holds no config.json and no .gguf file",
            "empty_dir": "empty: a directory but not a model folder: it holds no config.json and no .gguf file"}[kind]
    assert want in line and "(expected a Clef release folder, a .gguf file, or a folder holding one .gguf)" in line


# --- regressions found by attacking `clef inspect` as a new user would (each was a crash, hang or silent accept) ---

def _one_error_line(r, code=3):
    assert r.returncode == code, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("clef: error: "), r.stderr
    return lines[0]


@pytest.mark.parametrize("file", ["config.json", "joint_head_config.json", "model.safetensors.index.json"])
def test_deeply_nested_json_is_an_error_not_a_stack_overflow(broken, file):
    if file == "model.safetensors.index.json":
        (broken / "model.safetensors").rename(broken / "model-00001-of-00001.safetensors")
    (broken / file).write_text("[" * 100000 + "]" * 100000)
    line = _one_error_line(run_clef("inspect", str(broken)))
    assert file in line and "nesting deeper than" in line


def test_deep_value_inside_a_config_field(broken):
    cfg = json.loads((broken / "config.json").read_text())
    text = json.dumps(cfg).replace('"hidden_size": 64', '"hidden_size": ' + "[" * 90000 + "]" * 90000, 1)
    (broken / "config.json").write_text(text)
    assert "nesting deeper than" in _one_error_line(run_clef("inspect", str(broken)))


def test_fifo_instead_of_weights_does_not_hang(broken):
    import os

    (broken / "model.safetensors").unlink()
    os.mkfifo(broken / "model.safetensors")
    line = _one_error_line(run_clef("inspect", str(broken)))
    assert "model.safetensors: not a regular file" in line


def test_symlink_loop_is_a_clean_error(broken):
    import os

    (broken / "config.json").unlink()
    os.symlink(broken / "config.json", broken / "config.json")
    line = _one_error_line(run_clef("inspect", str(broken)))
    assert "config.json" in line


def test_directory_instead_of_file(broken):
    (broken / "config.json").unlink()
    (broken / "config.json").mkdir()
    assert "config.json: not a regular file" in _one_error_line(run_clef("inspect", str(broken)))


def test_both_weight_forms_are_ambiguous(broken):
    (broken / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": "model.safetensors"}}))
    assert "ambiguous" in _one_error_line(run_clef("inspect", str(broken)))


def test_null_config_value_is_not_the_default(broken):
    cfg = json.loads((broken / "config.json").read_text())
    cfg["text_config"]["hidden_size"] = None
    (broken / "config.json").write_text(json.dumps(cfg))
    assert "text_config.hidden_size: must not be null" in _one_error_line(run_clef("inspect", str(broken)))


def test_huge_token_ids_are_refused(broken):
    tj = json.loads((broken / "tokenizer.json").read_text())
    tj["model"]["vocab"]["zzz"] = 18446744073709551615
    (broken / "tokenizer.json").write_text(json.dumps(tj))
    assert "token id must be an integer in [0, 2147483647]" in _one_error_line(run_clef("inspect", str(broken)))


def test_wrong_types_in_tokenizer_json_name_the_field(broken):
    tj = json.loads((broken / "tokenizer.json").read_text())
    tj["normalizer"] = "NFC"
    (broken / "tokenizer.json").write_text(json.dumps(tj))
    assert "tokenizer.json: normalizer: expected an object" in _one_error_line(run_clef("inspect", str(broken)))


def test_verify_covers_every_shard_the_index_names(broken):
    st = broken / "model.safetensors"
    st.rename(broken / "weights-a.safetensors")
    raw = (broken / "weights-a.safetensors").read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    names = [k for k in json.loads(raw[8:8 + n]) if k != "__metadata__"]
    (broken / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {k: "weights-a.safetensors" for k in names}}))
    import hashlib

    sums = [ln for ln in (broken / "SHA256SUMS").read_text().splitlines() if not ln.endswith("model.safetensors")]
    idx = hashlib.sha256((broken / "model.safetensors.index.json").read_bytes()).hexdigest()
    sums.append(idx + "  model.safetensors.index.json")  # the index is covered, its oddly named shard is not
    (broken / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    line = _one_error_line(run_clef("inspect", "--verify", str(broken)))
    assert "weights-a.safetensors is not covered by the manifest" in line


def test_crlf_manifest_and_conflicting_lines(broken):
    sums = (broken / "SHA256SUMS").read_text().splitlines()
    (broken / "SHA256SUMS").write_text("\r\n".join(sums) + "\r\n")
    assert run_clef("inspect", "--verify", str(broken)).returncode == 0
    (broken / "SHA256SUMS").write_text("\n".join(sums + [("0" * 64) + "  config.json"]) + "\n")
    assert "listed twice with different hashes" in _one_error_line(run_clef("inspect", "--verify", str(broken)))


def test_control_characters_in_names_stay_on_one_line(broken):
    def f(h):
        h["evil\nname\x1b[31m"] = {"dtype": "F32", "shape": [1], "data_offsets": [0, 999999999]}
        return h
    _rewrite_header(broken / "model.safetensors", f)
    line = _one_error_line(run_clef("inspect", str(broken)))
    assert "\\x0a" in line and "\x1b" not in line


def test_concurrent_make_model_gives_one_complete_folder(tmp_path):
    import subprocess
    from conftest import clef_bin

    out = tmp_path / "race"
    procs = [subprocess.Popen([clef_bin(), "make-model", "--out", str(out), "--seed", str(s)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for s in (1, 2, 3)]
    codes = [p.wait(timeout=120) for p in procs]
    assert codes.count(0) == 1 and all(c in (0, 2) for c in codes), codes
    r = run_clef("inspect", "--verify", "--json", str(out))
    assert r.returncode == 0, r.stderr
    seed = json.loads((out / "random_weights.json").read_text())["seed"]
    assert seed == (1, 2, 3)[codes.index(0)]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".race")]  # no staging left behind


def test_force_replaces_only_release_folders(tmp_path):
    d = tmp_path / "notes"
    d.mkdir()
    (d / "mine.txt").write_text("keep me")
    r = run_clef("make-model", "--force", "--out", str(d))
    assert r.returncode == 2 and "not a release folder" in r.stderr
    assert (d / "mine.txt").read_text() == "keep me"
    m = tmp_path / "m"
    run_clef("make-model", "--out", str(m), "--seed", "1", check=True)
    run_clef("make-model", "--force", "--out", str(m), "--seed", "2", check=True)
    assert json.loads((m / "random_weights.json").read_text())["seed"] == 2


@pytest.mark.parametrize("args", [["make-model", "--seed", "-1"], ["make-model", "--seed", ""],
                                  ["make-model", "--seed", "99999999999999999999"], ["bogus"],
                                  ["inspect", ""], ["inspect", "--chunk", "abc"]])
def test_bad_flags_are_one_line_exit_2(args, tmp_path):
    if args[0] == "make-model":
        args = args + ["--out", str(tmp_path / "x")]
    _one_error_line(run_clef(*args), code=2)


@pytest.mark.parametrize("args, message", [
    (["decide", "--thread", "2", "examples/request.json"], "unknown option --thread (did you mean --threads?)"),
    (["serve", "--prot", "8000"], "unknown option --prot (did you mean --port?)"),
    (["decide", "--xyzzy=3", "-"], "unknown option --xyzzy (see"),
    (["decide", "examples/request.json", "extra"], "not expected: extra"),
])
def test_a_misspelt_option_is_named(args, message):
    """A misspelt option is named with its nearest real one, not listed after the words that followed it."""
    r = run_clef(*args)
    _one_error_line(r, code=2)
    assert message in r.stderr, r.stderr


# --- regressions from the attack on `clef decide` / `clef tokenize` ---

def _req(tmp_path):
    p = tmp_path / "req.json"
    p.write_text(json.dumps({"state": "x", "questions": {"q": {"type": "noul"}}}))
    return p


def test_lost_output_is_an_io_error(cpp_tiny, tmp_path):
    import subprocess
    from conftest import clef_bin

    with open("/dev/full", "w") as full:
        for args in (["decide", "-m", str(cpp_tiny), str(_req(tmp_path))], ["tokenize", "-m", str(cpp_tiny), "hi"]):
            r = subprocess.run([clef_bin(), *args], stdout=full, stderr=subprocess.PIPE, text=True)
            assert r.returncode == 5 and "cannot write the output" in r.stderr, (args, r.stderr)


def test_decide_to_a_full_disk_says_why(cpp_tiny, tmp_path):
    """A single-request `clef decide` whose answer cannot be written names the file and the
    system's reason on its one error line (exit 5), not only that the write failed."""
    import subprocess
    from conftest import clef_bin

    with open("/dev/full", "w") as full:
        r = subprocess.run([clef_bin(), "decide", "-m", str(cpp_tiny), str(_req(tmp_path))], stdout=full,
                           stderr=subprocess.PIPE, text=True)
    line = _one_error_line(r, 5)
    assert "/dev/full" in line and "No space left on device" in line, line


def test_decide_refuses_directories_and_huge_bodies(cpp_tiny, tmp_path):
    import subprocess
    from conftest import clef_bin

    assert "not a readable regular file" in _one_error_line(run_clef("decide", "-m", str(cpp_tiny), str(tmp_path)), 2)
    r = subprocess.run([clef_bin(), "decide", "-m", str(cpp_tiny), "-"], input=b" " * (65 << 20),
                       capture_output=True)
    assert r.returncode == 2 and b"exceeds 64 MiB" in r.stderr


def test_decide_threads_capped_at_cpu_count(cpp_tiny, tmp_path):
    import os

    r = run_clef("decide", "-m", str(cpp_tiny), "--threads", str((os.cpu_count() or 1) + 1), str(_req(tmp_path)))
    _one_error_line(r, 2)


def _dynamic_loader() -> str | None:
    """The ELF interpreter of the clef binary (PT_INTERP), e.g. /lib64/ld-linux-x86-64.so.2."""
    data = pathlib.Path(clef_bin()).read_bytes()
    i = data.find(b"/lib")
    if i < 0:
        return None
    path = data[i:data.index(b"\0", i)].decode()
    return path if "ld-linux" in path and pathlib.Path(path).exists() else None


def test_started_through_the_dynamic_loader_gives_the_same_answer(cpp_tiny):
    """`ld.so clef ...` (how some packagers and sandboxes start binaries): /proc/self/exe is then the
    loader, so the one-time re-exec that sets the OpenMP spin default must not happen (it would run
    ld.so with clef's arguments); the answer is the one a direct start gives."""
    loader = _dynamic_loader()
    if loader is None:
        pytest.skip("no ld-linux interpreter found in the binary")
    req = REPO_ROOT / "examples" / "request.json"
    direct = run_clef("decide", "-m", str(cpp_tiny), "--threads", "1", str(req), check=True)
    r = subprocess.run([loader, clef_bin(), "decide", "-m", str(cpp_tiny), "--threads", "1", str(req)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout == direct.stdout
    v = subprocess.run([loader, clef_bin(), "--version"], capture_output=True, text=True, timeout=60)
    assert v.returncode == 0 and v.stdout.startswith("clef "), v.stdout


def test_decide_reads_a_request_from_a_pipe_or_fifo(cpp_tiny, tmp_path):
    """`clef decide <(cat req.json)` and a named FIFO give the answer a file gives (as --jsonl
    accepts them); a device stays refused (it may never end)."""
    import os
    import threading
    req = (REPO_ROOT / "examples" / "request.json").read_bytes()
    want = run_clef("decide", "-m", str(cpp_tiny), "--threads", "1", str(REPO_ROOT / "examples" / "request.json"),
                    check=True).stdout
    r_fd, w_fd = os.pipe()
    p = subprocess.Popen([clef_bin(), "decide", "-m", str(cpp_tiny), "--threads", "1", f"/dev/fd/{r_fd}"],
                         pass_fds=(r_fd,), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.close(r_fd)
    os.write(w_fd, req)
    os.close(w_fd)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    assert out == want
    fifo = tmp_path / "req.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(req))
    writer.start()
    r = run_clef("decide", "-m", str(cpp_tiny), "--threads", "1", str(fifo))
    writer.join(timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == want
    assert "not a readable regular file or pipe" in _one_error_line(run_clef("decide", "-m", str(cpp_tiny), "/dev/zero"), 2)
