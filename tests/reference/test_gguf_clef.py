# SPDX-License-Identifier: MIT
"""The "clef" single-file GGUF layout (llama.cpp's Clef conversion: backbone + head in one file) and
bit-identical answers of both GGUF layouts in fp32 and bf16 mode.

tools/reference/make_gguf.py writes the files as llama.cpp does, including A = -exp(A_log) computed by
torch in fp32 (which for some bf16 A_log is one ulp from the expf the folder path uses) and RMSNorm
weights stored as fp32(1 + w). The folder here is the tiny preset made adversarial: every A_log is a
bf16 value whose torch exp differs from expf, and some RMSNorm weights are so small that 1 + w rounds.
Then `clef decide` over the corpus must print byte-identical JSON for the folder and for its
  * qwen35-layout F32 and BF16 GGUFs (head files beside), and
  * clef-layout F32 and BF16 GGUFs (head inside; the BF16 file's 2-D head tensors are bf16, so it is
    compared with the folder whose head matrices are rounded to bf16, as the file stores them),
in fp32 mode and in bf16 mode (the corpus's 21 short requests, 145-550 tokens: records longer than the
Gated DeltaNet's 64-token chunks, where a one-ulp decay difference used to show). Plus: head tensors of
every block type load (dequantized to fp32 at load: answers equal a folder holding those dequantized
values), a 1-D scorer_out, inspect's layout report, and the refusal of unknown layouts.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import pathlib
import shutil

import numpy as np
import pytest

from test_gguf_model import MODEL_LOAD_EXIT, corpus_bodies, run

HEAD_FILES = ("joint_head.safetensors", "joint_head_config.json", "random_weights.json")


def _expf_mismatches(n: int) -> list:
    """n bf16 values a (as float), 2^-7 <= |a| <= 8, where torch's fp32 -exp(a) != -expf(a). (Closer
    to 0, -expf of neighbouring bf16 values lies within an ulp or two of -1 and the A_log behind a stored
    A is not unique: clef cannot undo the converter's exp there; docs/GGUF.md.)"""
    import torch

    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    libm.expf.restype, libm.expf.argtypes = ctypes.c_float, [ctypes.c_float]
    bits = torch.arange(0, 65536, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    v = bits[torch.isfinite(bits) & (bits.abs() <= 8) & (bits.abs() >= 2.0**-7)]
    t = torch.exp(v).numpy()
    found = [float(a) for a, e in zip(v.numpy(), t) if np.float32(libm.expf(float(a))) != e]
    assert len(found) >= n, len(found)
    return found[:n]


@pytest.fixture(scope="module")
def tricky(tiny_dir, tmp_path_factory) -> pathlib.Path:
    """The tiny folder with every A_log a torch-vs-expf mismatch and tiny RMSNorm weights."""
    import torch
    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("tricky") / "model"
    shutil.copytree(tiny_dir, out)
    (out / "SHA256SUMS").unlink(missing_ok=True)
    t = load_file(str(out / "model.safetensors"))
    a_logs = sorted(k for k in t if k.endswith("linear_attn.A_log"))
    bad = iter(_expf_mismatches(sum(t[k].numel() for k in a_logs)))
    for k in a_logs:
        t[k] = torch.tensor([next(bad) for _ in range(t[k].numel())], dtype=torch.float32).to(t[k].dtype)
    norm = next(k for k in t if k.endswith("layers.0.input_layernorm.weight"))
    w = t[norm].float().clone()
    w[:4] = torch.tensor([3e-6, -7e-7, 2.0**-20, -(2.0**-17)])
    t[norm] = w.to(t[norm].dtype)
    save_file(t, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def head_rounded(folder: pathlib.Path, out: pathlib.Path, rounding) -> pathlib.Path:
    """A copy of `folder` whose joint_head.safetensors 2-D tensors (but type_embedding, which the
    converter keeps F32) are passed through rounding(float32 array) -> float32 array."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(folder, out)
    h = load_file(str(out / "joint_head.safetensors"))
    for k, v in h.items():
        if v.ndim == 2 and k != "type_embedding.weight":
            h[k] = torch.from_numpy(rounding(v.float().numpy()).astype(np.float32).reshape(v.shape))
    save_file(h, str(out / "joint_head.safetensors"), metadata={"format": "pt"})
    return out


def bf16_round(x: np.ndarray) -> np.ndarray:
    import make_gguf

    return make_gguf.bf16_bits_to_f32(make_gguf.f32_to_bf16_bits(x))


def write(folder: pathlib.Path, out_dir: pathlib.Path, layout: str, outtype: str, a_exp: str = "expf",
          **kw) -> pathlib.Path:
    """make_gguf.convert of `folder`. a_exp "expf" (default) for the tiny folder, whose fp32 A_log no reader
    can recover from a converter's one-ulp different exp; the tricky folder (bf16 A_log) uses "torch", as
    llama.cpp's converter does."""
    import make_gguf

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"model-{layout}-{outtype}.gguf"
    make_gguf.convert(folder, path, outtype, layout=layout, a_exp=a_exp, **kw)
    # qwen35: the head files beside it; both: random_weights.json (the model name in the answers)
    for f in HEAD_FILES if layout == "qwen35" else ("random_weights.json",):
        shutil.copy(folder / f, out_dir / f)
    return path


def decide(model, tmp: pathlib.Path, precision: str) -> bytes:
    """`clef decide` on the corpus's short requests (corpus_bodies(short=True): these tests compare
    answers and GDN chunk boundaries, which requests of 145-550 tokens cross several times)."""
    tmp.mkdir(parents=True, exist_ok=True)
    out = tmp / f"answers-{precision}.jsonl"
    out.unlink(missing_ok=True)
    bodies = corpus_bodies(tmp, short=True)
    lines = bodies.read_text(encoding="utf-8").splitlines(keepends=True)
    r = run("decide", "--model", model, "--jsonl", bodies, "--out", out, "--no-progress", "--threads", "2",
            "--precision", precision)
    assert r.returncode in (0, 1), r.stderr.decode()
    answers = out.read_bytes()
    assert answers.count(b'"answers"') >= len(lines) - 3, answers[:400]
    return answers


def test_the_folder_is_adversarial(tricky, tmp_path):
    """The written ssm_a differs from -expf(A_log) somewhere: the test below can fail without the fix."""
    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    libm.expf.restype, libm.expf.argtypes = ctypes.c_float, [ctypes.c_float]
    from safetensors.torch import load_file

    written = {}
    write(tricky, tmp_path, "clef", "f32", a_exp="torch", written=written)
    a = np.sort(np.concatenate([np.asarray(data, dtype=np.float32).ravel() for name, (data, _) in written.items()
                                if name.endswith("ssm_a")]))
    logs = [v for k, t in load_file(str(tricky / "model.safetensors")).items() if k.endswith("A_log")
            for v in t.float().tolist()]
    folder_a = np.sort(np.array([-libm.expf(v) for v in logs], dtype=np.float32))
    assert a.shape == folder_a.shape and (a != folder_a).any()


@pytest.fixture(scope="module")
def tricky_files(tricky, tmp_path_factory) -> dict:
    """{(layout, type): GGUF} of the tricky folder, and the folder with its head rounded to bf16."""
    root = tmp_path_factory.mktemp("tricky-gguf")
    files = {(layout, t): write(tricky, root / f"{layout}-{t}", layout, t, a_exp="torch") for layout in ("qwen35", "clef")
             for t in ("f32", "bf16")}
    files["bf16-head folder"] = head_rounded(tricky, root / "bf16-head", bf16_round)
    return files


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_both_layouts_answer_as_the_folder_bit_for_bit(tricky, tricky_files, tmp_path, precision):
    want = decide(tricky, tmp_path / "folder", precision)
    want_bf16_head = decide(tricky_files["bf16-head folder"], tmp_path / "bf16-head", precision)
    assert want_bf16_head != want  # the rounding matters, so the comparison below can tell
    for layout in ("qwen35", "clef"):
        for outtype in ("f32", "bf16"):
            ref = want_bf16_head if (layout, outtype) == ("clef", "bf16") else want
            got = decide(tricky_files[(layout, outtype)], tmp_path / f"{layout}-{outtype}", precision)
            assert got == ref, f"{layout} {outtype} GGUF answers differ from the folder's in {precision} mode"


@pytest.mark.parametrize("head_type", ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "f16"])
def test_quantized_head_tensors_load_dequantized(tiny_dir, tmp_path, head_type):
    """Head matrices in a block type answer exactly as a folder holding their dequantized values."""
    import gguf
    from gguf.quants import dequantize, quantize

    qt = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0,
          "q4_1": gguf.GGMLQuantizationType.Q4_1, "q5_0": gguf.GGMLQuantizationType.Q5_0,
          "q5_1": gguf.GGMLQuantizationType.Q5_1, "f16": None}[head_type]
    written = {}
    g = write(tiny_dir, tmp_path / "g", "clef", "f32", head_type=head_type, scorer_out_1d=True, written=written)
    types = {name: qt.name for name, (_, qt) in written.items()}
    assert types["decision.proj_memory.weight"] == head_type.upper()
    assert types["decision.scorer_out.weight"] == "F32"  # stored 1-D
    rounding = (lambda x: x.astype(np.float16).astype(np.float32)) if qt is None else \
        (lambda x: dequantize(quantize(x, qt), qt))
    ref = head_rounded(tiny_dir, tmp_path / "ref", lambda x: x if x.shape[0] == 1 else rounding(x))
    assert decide(g, tmp_path / "gr", "fp32") == decide(ref, tmp_path / "rr", "fp32")


def test_inspect_names_the_layout(tiny_dir, tmp_path):
    g = write(tiny_dir, tmp_path, "clef", "bf16")
    r = run("inspect", "--json", g)
    assert r.returncode == 0, r.stderr.decode()
    got = json.loads(r.stdout)
    want = json.loads(run("inspect", "--json", tiny_dir).stdout)
    assert got["gguf"]["architecture"] == "clef" and got["gguf"]["layout"] == "clef"
    assert got["gguf"]["tensor_types"] == {"BF16": 72, "F32": 91}
    assert got["head_config"] == want["head_config"]
    assert got["params"]["head"] == want["params"]["head"] and got["params"]["text"] == want["params"]["text"]
    assert got["gguf"]["head_f32_bytes"] == 4 * want["params"]["head"]
    text = run("inspect", g).stdout.decode()
    assert "layout           clef" in text and "joint head       inside the GGUF" in text


def test_unknown_layouts_are_refused(tiny_dir, tmp_path):
    from gguf import GGUFValueType as V

    def decision_keys(tensors, md):
        md["qwen35.decision.type"] = ("clef", V.STRING)

    g = write(tiny_dir, tmp_path / "a", "qwen35", "bf16", mutate=decision_keys)
    r = run("inspect", g)
    err = r.stderr.decode()
    assert r.returncode != 0 and "unknown GGUF layout" in err and "qwen35.decision.type" in err, err
    assert "\"qwen35\" (llama.cpp's Qwen3.5 backbone" in err and "\"clef\" (llama.cpp's Clef conversion" in err

    def no_type(tensors, md):
        del md["clef.decision.type"]

    g = write(tiny_dir, tmp_path / "b", "clef", "bf16", mutate=no_type)
    r = run("inspect", g)
    assert r.returncode != 0 and "without the string key clef.decision.type" in r.stderr.decode(), r.stderr.decode()


def test_backbone_tensor_of_a_type_without_matmul_is_refused_by_name(tiny_dir, tmp_path):
    """Backbone matmuls run F32/F16/BF16, Q8_0, Q4_0/Q4_1/Q5_0/Q5_1 and Q4_K/Q5_K/Q6_K: a tensor of
    another type (here IQ4_NL, 32-element blocks of 18 bytes) is refused naming tensor and type."""
    import gguf

    def iq4_nl_gate(tensors, md):
        x, _ = tensors["blk.0.ffn_gate.weight"]
        raw = np.random.default_rng(0).integers(0, 255, (x.shape[0], x.shape[1] // 32 * 18), dtype=np.uint8)
        tensors["blk.0.ffn_gate.weight"] = (raw, gguf.GGMLQuantizationType.IQ4_NL)

    written = {}
    g = write(tiny_dir, tmp_path, "clef", "f32", mutate=iq4_nl_gate, written=written)
    types = {name: qt.name for name, (_, qt) in written.items()}
    assert types["blk.0.ffn_gate.weight"] == "IQ4_NL"
    r = run("decide", "--model", g, "--jsonl", corpus_bodies(tmp_path), "--out", tmp_path / "a.jsonl",
            "--no-progress", "--threads", "2")
    err = r.stderr.decode()
    assert r.returncode > 1, err
    assert "blk.0.ffn_gate.weight" in err and "IQ4_NL" in err, err
