# SPDX-License-Identifier: MIT
"""GGUF model input (`--model FILE.gguf`): a GGUF written from a random release folder the way llama.cpp's
convert_hf_to_gguf.py writes it (tools/reference/make_gguf.py, PyPI gguf 0.19.0) must give clef's
answers exactly as the folder it came from.

For the Python tiny preset (tools/reference/make_model.py) and the C++ tiny preset (`clef make-model`),
both with Hk = 2 != Hv = 4 (so the V heads are stored in llama.cpp's tiled order):
  * F32 and BF16 GGUF: the final-norm hidden states (`clef hidden`) byte-identical to the folder's at
    fp32 and bf16 precision, and `clef decide --jsonl` over every corpus request byte-identical;
  * F16 GGUF: identical to the folder with the same 2-D tensors rounded to F16 (what the GGUF stores);
  * the GGUF tokenizer (tokenizer.ggml.* metadata, no tokenizer.json beside it) gives the release
    tokenizer.json's ids on every corpus request line and on every rendered record;
  * inspect reports the GGUF, the tokenizer source and the head beside it;
  * bad files (truncated, mis-shaped / missing / unused tensor, wrong architecture, no head beside,
    two GGUFs in a folder) are refused with a named error and the model-load exit code (3), never a crash.
tools/reference/make_gguf.py itself: it copies random_weights.json beside the GGUF (a random folder's GGUF
is reported as random weights), and a bad --model / --out is one error line, exit 2.
Q8_0: answers equal the folder's in `--precision int8` (without it, the file's Q8_0 weights still run on
the int8 kernels, the other ops in fp32).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import CORPUS, REPO_ROOT

MODEL_LOAD_EXIT = 3  # core/error.cc exit_code_for(kModelLoad)
HEAD_FILES = ("joint_head.safetensors", "joint_head_config.json", "random_weights.json")


def clef_bin() -> str:
    path = os.environ.get("CLEF_BIN", str(REPO_ROOT / "build" / "release" / "bin" / "clef"))
    if not pathlib.Path(path).exists():
        pytest.fail(f"{path} missing: build the release preset first")
    return path


def driver_bin() -> str:
    return str(pathlib.Path(clef_bin()).parent / "clef_decision_driver")


def run(*args, **kw):
    return subprocess.run([clef_bin(), *map(str, args)], capture_output=True, timeout=600, **kw)


def gguf_beside(folder: pathlib.Path, out_dir: pathlib.Path, outtype: str, with_tokenizer: bool = False,
                mutate=None, arch: str = "qwen35", written=None) -> pathlib.Path:
    """out_dir/model-<outtype>.gguf from `folder`, with the head files (and tokenizer files) beside it;
    `written` as make_gguf.convert's."""
    import make_gguf

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"model-{outtype}.gguf"
    # A = -exp(A_log) with expf, as clef computes it from the folder: these folders hold A_log in fp32,
    # where no reader can undo a one-ulp difference of the converter's exp (docs/GGUF.md "Bit-identical
    # answers"); every other transform is then compared bit for bit.
    make_gguf.convert(folder, path, outtype, mutate=mutate, arch=arch, a_exp="expf", written=written)
    for f in HEAD_FILES + (("tokenizer.json", "tokenizer_config.json") if with_tokenizer else ()):
        shutil.copy(folder / f, out_dir / f)
    return path


@pytest.fixture(scope="session")
def cpp_tiny(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("clef-tiny-cpp")
    r = run("make-model", "--preset", "tiny", "--out", out, "--force")
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="session", params=["py-tiny", "cpp-tiny"])
def folder(request, tiny_dir, cpp_tiny) -> pathlib.Path:
    return tiny_dir if request.param == "py-tiny" else cpp_tiny


@pytest.fixture(scope="session")
def corpus_jsonl() -> pathlib.Path:
    return CORPUS


_GGUF_CACHE: dict = {}


def cached_gguf(folder: pathlib.Path, outtype: str, tmp_root: pathlib.Path) -> pathlib.Path:
    key = (str(folder), outtype)
    if key not in _GGUF_CACHE:
        _GGUF_CACHE[key] = gguf_beside(folder, tmp_root / f"{folder.name}-{outtype}", outtype)
    return _GGUF_CACHE[key]


@pytest.fixture(scope="session")
def gguf_root(tmp_path_factory) -> pathlib.Path:
    return tmp_path_factory.mktemp("gguf")


def hidden(model, out: pathlib.Path, precision: str) -> bytes:
    r = run("hidden", "--model", model, "--random-ids", "40:7", "--chunks", "1,16", "--precision", precision,
            "--threads", "2", "--out", out)
    assert r.returncode == 0, r.stderr.decode()
    return b"".join((out.parent / f"{out.name}.chunk{c}.npy").read_bytes() for c in (1, 16))


N_CORPUS = sum(1 for ln in CORPUS.read_text(encoding="utf-8").splitlines() if ln.strip())


# Tests that compare answers rather than long-record numerics skip the corpus requests over this many bytes
# (the three of several thousand tokens, ~70% of the corpus's tokens); the other 21 have 145-550 tokens,
# several 64-token Gated DeltaNet chunks each.
SHORT_REQUEST_BYTES = 4000


def corpus_bodies(tmp: pathlib.Path, short: bool = False) -> pathlib.Path:
    """The corpus requests unwrapped (reference.load_jsonl_request), one JSON body per line; with `short`,
    only those of at most SHORT_REQUEST_BYTES."""
    import reference

    path = tmp / "bodies.jsonl"
    lines = [json.dumps(reference.load_jsonl_request(CORPUS, i), ensure_ascii=False) + "\n" for i in range(N_CORPUS)]
    if short:
        lines = [x for x in lines if len(x.encode("utf-8")) <= SHORT_REQUEST_BYTES]
    path.write_text("".join(lines), encoding="utf-8")
    return path


def decide_all(model, tmp: pathlib.Path, *extra) -> bytes:
    out = tmp / "answers.jsonl"
    if out.exists():
        out.unlink()
    r = run("decide", "--model", model, "--jsonl", corpus_bodies(tmp), "--out", out, "--no-progress", "--threads", "2",
            *extra)
    assert r.returncode in (0, 1), r.stderr.decode()  # 1: a refused corpus request (an error line)
    answers = out.read_bytes()
    assert answers.count(b'"answers"') >= N_CORPUS - 2, answers[:400]  # (nearly) every request answered
    return answers


@pytest.mark.parametrize("outtype", ["f32", "bf16"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_hidden_states_identical(folder, gguf_root, tmp_path, outtype, precision):
    g = cached_gguf(folder, outtype, gguf_root)
    want = hidden(folder, tmp_path / "folder", precision)
    got = hidden(g, tmp_path / "gguf", precision)
    assert got == want, f"{outtype} GGUF hidden states differ from the folder's at {precision}"


@pytest.mark.parametrize("outtype", ["f32", "bf16"])
def test_decide_corpus_byte_identical(folder, gguf_root, tmp_path, outtype):
    g = cached_gguf(folder, outtype, gguf_root)
    want = decide_all(folder, tmp_path)
    got = decide_all(g, tmp_path)
    assert len(want.splitlines()) == N_CORPUS
    assert got == want


def f16_folder(folder: pathlib.Path, types: dict, out: pathlib.Path) -> pathlib.Path:
    """A copy of `folder` whose 2-D backbone tensors that the GGUF stores as F16 are rounded to F16."""
    import make_gguf
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(folder, out)
    (out / "SHA256SUMS").unlink(missing_ok=True)
    cfg = json.loads((folder / "config.json").read_text())
    tensors = load_file(str(folder / "model.safetensors"))
    prefix = "model.language_model." if "model.language_model.embed_tokens.weight" in tensors else "model."
    for name, t in list(tensors.items()):
        g = make_gguf.gguf_name(name, prefix)
        if g is not None and types.get(g) == make_gguf.Q.F16:
            tensors[name] = t.to(torch.float32).to(torch.float16)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    assert cfg  # the config is unchanged
    return out


def test_f16_equals_the_folder_rounded_to_f16(folder, gguf_root, tmp_path):
    import make_gguf

    written = {}
    g = gguf_beside(folder, gguf_root / f"{folder.name}-f16", "f16", written=written)
    types = {name: qt for name, (_, qt) in written.items()}
    assert make_gguf.Q.F16 in types.values()
    ref = f16_folder(folder, types, tmp_path / "f16-folder")
    assert hidden(g, tmp_path / "gguf", "fp32") == hidden(ref, tmp_path / "folder", "fp32")
    assert decide_all(g, tmp_path) == decide_all(ref, tmp_path)


def test_tokenizer_from_gguf_metadata_matches_tokenizer_json(tiny_dir, gguf_root, tokenizer, tmp_path):
    g = cached_gguf(tiny_dir, "bf16", gguf_root)
    assert not (g.parent / "tokenizer.json").exists()  # the GGUF metadata is the only tokenizer there
    lines = [ln for ln in CORPUS.read_text(encoding="utf-8").splitlines() if ln.strip()]
    texts = tmp_path / "texts.jsonl"
    texts.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in lines), encoding="utf-8")
    r = subprocess.run([driver_bin(), "tokenize", str(g)], stdin=texts.open("rb"), capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode()
    got = [json.loads(x) for x in r.stdout.decode().splitlines()]
    want = [tokenizer.encode(t, add_special_tokens=False).ids for t in lines]
    assert got == want
    # Every rendered record (the ids the backbone reads), folder vs GGUF, through the same driver.
    encoded = []
    for model in (tiny_dir, g):
        r = subprocess.run([driver_bin(), "encode", str(model)], stdin=CORPUS.open("rb"), capture_output=True,
                           timeout=600)
        assert r.returncode == 0, r.stderr.decode()
        encoded.append(r.stdout)
    assert encoded[0] == encoded[1]
    assert len(encoded[0].splitlines()) == len(lines)


def test_inspect_reports_the_gguf(tiny_dir, gguf_root, tmp_path):
    g = cached_gguf(tiny_dir, "bf16", gguf_root)
    r = run("inspect", "--json", g)
    assert r.returncode == 0, r.stderr.decode()
    got = json.loads(r.stdout)
    want = json.loads(run("inspect", "--json", tiny_dir).stdout)
    assert got["gguf"]["file"] == g.name and got["gguf"]["architecture"] == "qwen35"
    assert got["gguf"]["tokenizer"] == "GGUF metadata"
    assert got["gguf"]["head"] == "joint_head.safetensors + joint_head_config.json beside the GGUF"
    assert want["gguf"] is None
    for key in ("model", "layer_pattern", "hidden_size", "num_hidden_layers", "tied_lm_head", "head_config"):
        assert got[key] == want[key], key
    assert got["params"]["text"] == want["params"]["text"] and got["params"]["head"] == want["params"]["head"]
    assert got["params"]["vision"] == 0  # text-only: llama.cpp writes the vision tower to an mmproj file
    text = run("inspect", g).stdout.decode()
    assert f"gguf         {g.name}: GGUF v3, architecture qwen35" in text
    assert "tokenizer        GGUF metadata" in text and "joint_head_config.json beside the GGUF" in text
    # With tokenizer.json beside the GGUF, that file is used (and said).
    d = tmp_path / "with-tok"
    shutil.copytree(g.parent, d)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_dir / f, d / f)
    got = json.loads(run("inspect", "--json", d).stdout)  # a folder holding one .gguf
    assert got["gguf"]["tokenizer"] == "tokenizer.json"


def first_request(tmp: pathlib.Path) -> pathlib.Path:
    import reference

    path = tmp / "request.json"
    path.write_text(json.dumps(reference.load_jsonl_request(CORPUS, 0), ensure_ascii=False), encoding="utf-8")
    return path


def expect_load_error(model, *needles):
    r = run("inspect", model)
    err = r.stderr.decode()
    assert r.returncode == MODEL_LOAD_EXIT, (r.returncode, err)
    assert err.startswith("clef: error: "), err
    for n in needles:
        assert n in err, (n, err)
    r = run("decide", "--model", model, first_request(pathlib.Path(model).parent))
    assert r.returncode == MODEL_LOAD_EXIT, (r.returncode, r.stderr.decode())


def test_truncated_file(tiny_dir, gguf_root, tmp_path):
    g = cached_gguf(tiny_dir, "bf16", gguf_root)
    d = tmp_path / "trunc"
    shutil.copytree(g.parent, d)
    data = (d / g.name).read_bytes()
    for cut in (len(data) // 2, len(data) - 1, 100):
        (d / g.name).write_bytes(data[:cut])
        expect_load_error(d / g.name, g.name)


def _bad(tiny_dir, tmp_path, mutate, arch="qwen35"):
    return gguf_beside(tiny_dir, tmp_path / "bad", "bf16", mutate=mutate, arch=arch)


def test_wrong_shape_tensor(tiny_dir, tmp_path):
    def mutate(t, md):
        arr, qt = t["blk.1.ffn_up.weight"]
        t["blk.1.ffn_up.weight"] = (arr[:-1], qt)

    expect_load_error(_bad(tiny_dir, tmp_path, mutate), "blk.1.ffn_up.weight", "has shape", "expected")


def test_missing_tensor(tiny_dir, tmp_path):
    expect_load_error(_bad(tiny_dir, tmp_path, lambda t, md: t.pop("blk.0.ssm_a")), "missing tensor blk.0.ssm_a")


def test_unused_tensor(tiny_dir, tmp_path):
    def mutate(t, md):
        t["blk.0.extra.weight"] = (np.zeros(32, np.float32), __import__("gguf").GGMLQuantizationType.F32)

    expect_load_error(_bad(tiny_dir, tmp_path, mutate), "unexpected tensor blk.0.extra.weight")


def test_wrong_architecture(tiny_dir, tmp_path):
    r = run("inspect", _bad(tiny_dir, tmp_path, None, arch="llama"))
    assert r.returncode not in (0, 1) and r.returncode < 128, r.returncode
    assert "general.architecture is \"llama\"" in r.stderr.decode()


def test_missing_metadata_key(tiny_dir, tmp_path):
    expect_load_error(_bad(tiny_dir, tmp_path, lambda t, md: md.pop("qwen35.ssm.group_count")),
                      "qwen35.ssm.group_count")


def test_missing_head_beside(tiny_dir, gguf_root, tmp_path):
    g = cached_gguf(tiny_dir, "bf16", gguf_root)
    d = tmp_path / "nohead"
    d.mkdir()
    shutil.copy(g, d / g.name)
    expect_load_error(d / g.name, "joint_head.safetensors and joint_head_config.json missing beside it")


def test_two_ggufs_in_a_folder(tiny_dir, gguf_root, tmp_path):
    g = cached_gguf(tiny_dir, "bf16", gguf_root)
    d = tmp_path / "two"
    shutil.copytree(g.parent, d)
    shutil.copy(g, d / "other.gguf")
    expect_load_error(d, "holds 2 .gguf files")
    r = run("inspect", d / "other.gguf")  # naming the file picks it
    assert r.returncode == 0, r.stderr.decode()


def test_image_request_is_refused(tiny_dir, gguf_root, tmp_path):
    g = cached_gguf(tiny_dir, "bf16", gguf_root)
    import reference

    req = reference.load_jsonl_request(CORPUS, 0)
    req["images"] = ["data:image/png;base64,iVBORw0KGgo="]
    path = tmp_path / "img.json"
    path.write_text(json.dumps(req, ensure_ascii=False), encoding="utf-8")
    r = run("decide", "--model", g, path)
    assert r.returncode == 2, r.stderr.decode()
    assert "images" in r.stderr.decode() and "not" in r.stderr.decode(), r.stderr.decode()


def test_q8_0_gguf_answers_exactly_as_the_folder_in_int8(folder, gguf_root, tmp_path):
    """The oracle for the int8 mode's quantizer: a Q8_0 GGUF quantized by gguf-py (llama.cpp's own
    quantizer, gguf.quants) gives byte-identical answers to the release folder quantized at load
    (--precision int8), because Int8Weight::quantize reproduces gguf-py's Q8_0 bits. token_embd
    stays the folder's own tensor here (the folder path keeps the embedding table and the head's
    lm_head rows in their stored dtype); the next test covers a Q8_0 table."""
    import make_gguf
    from gguf import GGMLQuantizationType as Q

    _, hf = make_gguf.read_folder(folder)
    prefix = "model.language_model." if "model.language_model.embed_tokens.weight" in hf else "model."
    emb = hf[prefix + "embed_tokens.weight"]
    qt = Q.BF16 if emb.dtype == np.uint16 else Q.F32

    def keep_embedding(tensors, md):
        assert tensors["token_embd.weight"][1] == Q.Q8_0
        tensors["token_embd.weight"] = (emb, qt)

    g = gguf_beside(folder, tmp_path / "q8-emb", "q8_0", mutate=keep_embedding)
    want = decide_all(folder, tmp_path, "--precision", "int8")
    got = decide_all(g, tmp_path, "--precision", "int8")
    assert got == want
    # Without --precision int8 the Q8_0 weights still run on the int8 kernels, but attention and the
    # delta rule follow the default fp32 mode, while int8 mode runs them on bf16 operands
    # (docs/NUMERICS.md "int8 mode"): the answers differ by that rounding only.
    assert hidden(g, tmp_path / "g", "int8") == hidden(folder, tmp_path / "f", "int8")


def test_q8_0_gguf_as_llama_cpp_writes_it(folder, gguf_root, tmp_path):
    """Everything 2-D in Q8_0, token_embd included (the converter's --outtype q8_0): the embedding
    rows and the head's lm_head rows are read as d · q exactly, so the answers equal those of the
    same GGUF whose token_embd holds gguf-py's dequantized values in F32."""
    import gguf
    from gguf import GGMLQuantizationType as Q

    g = cached_gguf(folder, "q8_0", gguf_root)
    r = run("inspect", g)
    assert r.returncode == 0, r.stderr.decode()

    def dequantized_embedding(tensors, md):
        blocks, qt = tensors["token_embd.weight"]
        assert qt == Q.Q8_0
        tensors["token_embd.weight"] = (gguf.quants.dequantize(blocks, Q.Q8_0).astype(np.float32), Q.F32)

    g32 = gguf_beside(folder, tmp_path / "emb-f32", "q8_0", mutate=dequantized_embedding)
    got = decide_all(g, tmp_path, "--precision", "int8")
    want = decide_all(g32, tmp_path, "--precision", "int8")
    assert got == want
    assert hidden(g, tmp_path / "g", "int8") == hidden(g32, tmp_path / "f", "int8")


def serve_matches_decide(model, tmp_path: pathlib.Path, n: int, *flags: str, files_mapped: int | None = None) -> None:
    """`clef serve --model MODEL FLAGS`: the HTTP answers to the first n corpus requests are the bytes
    `clef decide --model MODEL FLAGS` prints for each. With `files_mapped`, /metrics must also say the
    server mapped exactly that many files (clef_files_mapped_total): each model file once."""
    import http.client
    import re
    import time

    import reference

    log = tmp_path / "serve.log"
    proc = subprocess.Popen([clef_bin(), "serve", "--model", str(model), *flags, "--port", "0", "--threads", "1"],
                            stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    try:
        port, deadline = 0, time.monotonic() + 60
        while not port and time.monotonic() < deadline:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read_text(errors="replace"))
            port = int(m.group(1)) if m else 0
            assert proc.poll() is None, log.read_text(errors="replace")
            time.sleep(0.05)
        assert port, log.read_text(errors="replace")
        for i in range(n):
            req = reference.load_jsonl_request(CORPUS, i)
            path = tmp_path / f"r{i}.json"
            path.write_text(json.dumps(req, ensure_ascii=False), encoding="utf-8")
            r = run("decide", "--model", model, *flags, "--threads", "1", path)
            assert r.returncode == 0, r.stderr.decode()
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            c.request("POST", "/v1/systemone", body=json.dumps(req, ensure_ascii=False).encode(),
                      headers={"Content-Type": "application/json"})
            resp = c.getresponse()
            body = resp.read()
            c.close()
            assert resp.status == 200, body[:300]
            assert body == r.stdout.rstrip(b"\n"), i
        if files_mapped is not None:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.request("GET", "/metrics")
            text = c.getresponse().read().decode()
            c.close()
            m = re.search(r"^clef_files_mapped_total (\d+)$", text, re.M)
            assert m and int(m.group(1)) == files_mapped, text
    finally:
        proc.terminate()
        assert proc.wait(timeout=60) == 0, log.read_text(errors="replace")[-2000:]


def test_serve_answers_from_a_q8_0_gguf_in_int8_as_decide_does(cpp_tiny, gguf_root, tmp_path):
    """`clef serve --model FILE.gguf --precision int8`: the HTTP answers are the bytes `clef decide`
    prints for the same GGUF and flags (the folder's int8 answers, per the test above). Loading maps two
    files, each once: the GGUF (whose metadata also gives the tokenizer: no tokenizer.json beside it) and
    joint_head.safetensors beside it."""
    gguf = cached_gguf(cpp_tiny, "q8_0", gguf_root)
    assert not (gguf.parent / "tokenizer.json").exists()
    assert sorted(p.name for p in gguf.parent.iterdir() if p.suffix in (".gguf", ".safetensors")) == sorted(
        [gguf.name, "joint_head.safetensors"])
    serve_matches_decide(gguf, tmp_path, 4, "--precision", "int8", files_mapped=2)


MAKE_GGUF = REPO_ROOT / "tools" / "reference" / "make_gguf.py"


def test_make_gguf_copies_random_weights_beside_the_gguf(cpp_tiny, tmp_path):
    """make_gguf.py writes the folder's random_weights.json beside the GGUF (clef reads it there), so a
    single-file (clef layout) GGUF of a random folder is reported as random weights under the folder's name."""
    out = tmp_path / "m" / "tiny.gguf"
    out.parent.mkdir()
    r = subprocess.run([sys.executable, str(MAKE_GGUF), "--model", str(cpp_tiny), "--out", str(out), "--type", "f32",
                        "--layout", "clef"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert (out.parent / "random_weights.json").read_bytes() == (cpp_tiny / "random_weights.json").read_bytes()
    j = json.loads(run("inspect", "--json", out).stdout)
    assert j["random_weights"] is True and j["model"] == json.loads(run("inspect", "--json", cpp_tiny).stdout)["model"]


@pytest.mark.parametrize("case", ["missing", "no_config", "out_folder"])
def test_make_gguf_bad_paths_are_one_line_exit_2(tmp_path, case):
    """A --model that is not a release folder (or an --out in a missing folder): one error line naming it,
    exit 2, no traceback (it was a FileNotFoundError traceback)."""
    model = tmp_path / ("nonexistent" if case == "missing" else "folder")
    if case != "missing":
        model.mkdir()
    if case == "out_folder":
        (model / "config.json").write_text("{}")
    out = tmp_path / ("nowhere/x.gguf" if case == "out_folder" else "x.gguf")
    r = subprocess.run([sys.executable, str(MAKE_GGUF), "--model", str(model), "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("make_gguf.py: error: ") and "Traceback" not in r.stderr, r.stderr
    assert str(out if case == "out_folder" else model) in lines[0]
    assert not out.exists()


def test_token_not_utf8_is_refused_at_load_naming_file_key_and_index(tiny_dir, tmp_path):
    """A tokenizer.ggml.tokens string with a byte that is not UTF-8: `inspect` and `decide` both exit 3
    at load naming the file, the key and the token's index (before: inspect passed, decide exited 70
    with the JSON library's message, naming nothing). Same for a merge."""
    sentinel = "clefbadtokenzz"

    def mutate(t, md):
        toks, vt = md["tokenizer.ggml.tokens"]
        toks = list(toks)
        toks[100] = sentinel
        md["tokenizer.ggml.tokens"] = (toks, vt)

    g = _bad(tiny_dir, tmp_path, mutate)
    data = g.read_bytes()
    assert data.count(sentinel.encode()) == 1
    g.write_bytes(data.replace(sentinel.encode(), b"clef\xffadtokenzz"))
    expect_load_error(g, g.name, '"tokenizer.ggml.tokens"', "token 100 is not valid UTF-8", "\\xff")

    def mutate_merge(t, md):
        merges, vt = md["tokenizer.ggml.merges"]
        merges = list(merges)
        merges[3] = "clefbad merge"
        md["tokenizer.ggml.merges"] = (merges, vt)

    g = gguf_beside(tiny_dir, tmp_path / "badmerge", "bf16", mutate=mutate_merge)
    g.write_bytes(g.read_bytes().replace(b"clefbad merge", b"clef\xc0ad merge"))
    expect_load_error(g, g.name, '"tokenizer.ggml.merges"', "merge 3 is not valid UTF-8")


@pytest.mark.parametrize("outtype,name,field", [("q8_0", "blk.1.ffn_up.weight", "d"),
                                                ("q4_1", "blk.0.ffn_gate.weight", "m"),
                                                ("bf16", "blk.0.attn_norm.weight", "")])
def test_non_finite_tensor_is_refused_at_load_naming_it(tiny_dir, tmp_path, outtype, name, field):
    """A tensor whose block scale is an fp16 Inf (Q8_0 d, Q4_1 m; every block type's fields are in
    tests/unit/test_dtype.cc) or whose element is NaN (an F32 norm): decide exits 3 at load naming
    the file and the tensor (before: it loaded, and every decision was an engine error, `non-finite
    logit`). (`clef inspect` reads headers, not weight values.)"""

    def mutate(t, md):
        arr, qt = t[name]
        arr = np.array(arr, copy=True)
        if field == "":  # an F32 / BF16 element: NaN
            flat = arr.reshape(-1)
            flat[5] = np.float32("nan") if arr.dtype == np.float32 else np.uint16(0x7FC0)
        else:
            assert qt.name == outtype.upper(), qt
            row = arr.reshape(arr.shape[0], -1).view(np.uint8)
            block_bytes = {"q8_0": 34, "q4_1": 20}[outtype]
            offset = {"d": 0, "m": 2}[field]
            row[1, block_bytes + offset: block_bytes + offset + 2] = np.frombuffer(
                np.array([0x7C00], "<u2").tobytes(), np.uint8)  # +Inf
        t[name] = (arr, qt)

    g = gguf_beside(tiny_dir, tmp_path / "nan", outtype, mutate=mutate)
    r = run("decide", "--model", g, first_request(g.parent))
    err = r.stderr.decode()
    assert r.returncode == MODEL_LOAD_EXIT, (r.returncode, err)
    want = f"non-finite scale {field} (infinite)" if field else "element 5 is NaN"
    assert err.startswith(f"clef: error: {g.name}: tensor {name}: ") and want in err, err


def test_non_finite_safetensors_weight_is_refused_at_load(tiny_dir, tmp_path):
    """The release folder path: a bf16 -Inf in model.safetensors is exit 3 at load naming the tensor."""
    import struct

    d = tmp_path / "nan-folder"
    shutil.copytree(tiny_dir, d)
    f = d / "model.safetensors"
    data = bytearray(f.read_bytes())
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    name = next(k for k, v in header.items() if k != "__metadata__" and v["dtype"] == "BF16"
                and "layers.1.mlp.up_proj" in k)
    begin = 8 + n + header[name]["data_offsets"][0]
    data[begin + 2 * 7: begin + 2 * 7 + 2] = struct.pack("<H", 0xFF80)  # bf16 -Inf at element 7
    f.write_bytes(bytes(data))
    r = run("decide", "--model", d, first_request(tmp_path))
    err = r.stderr.decode()
    assert r.returncode == MODEL_LOAD_EXIT, (r.returncode, err)
    assert f"tensor {name}: element 7 is infinite" in err and "model.safetensors" in err, err
