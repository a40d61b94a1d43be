# SPDX-License-Identifier: MIT
"""K-quant GGUF backbones end to end: a random `tiny-kq` folder (every linear input whole 256-element
blocks) written as llama-quantize's Q4_K_M mix (tools/reference/make_gguf.py --type q4_k_m: Q4_K and Q6_K
tensors) and as Q4_0, answered by `clef decide` and `clef serve`. (The 24-layer pattern asserted below is the one
llama-quantize wrote into its Q4_K_M and Q5_K_M files of the 0.8b preset, read once with gguf-py.)

The oracle for the weights is the same file with every quantized tensor replaced by gguf-py's
dequantized fp32 values (an F32 GGUF): the two differ only in the activations, which the block kernels
quantize to int8 per 32 inputs (docs/NUMERICS.md "int8"). A wrong block layout, scale or kernel moves
the answers by far more than that rounding. The kernels themselves are checked against their scalar
oracle at every level by the unit tests (tests/unit/test_quant_gemm.cc).
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from test_gguf_model import corpus_bodies, run

# The block kernels quantize activations exactly as the int8 kernels do for Q8_0 weights (per row and
# block of 32), and those are proven bit-exact (test_gguf_model.py: a Q8_0 GGUF answers byte for byte
# as the folder quantized at load). So the Q8_0 file's distance to its own dequantized twin measures
# what activation rounding alone does to this folder's answers; a K-quant file may differ from its twin
# by that much, with a factor 2 for the different weights it multiplies (a wrong layout or scale
# moves answers by tenths).
ROUNDING_FACTOR = 2.0


@pytest.fixture(scope="module")
def kq(tmp_path_factory) -> dict:
    import gguf
    import make_gguf
    import make_model
    from gguf.quants import dequantize

    root = tmp_path_factory.mktemp("kq")
    folder = root / "folder"
    make_model.make_model("tiny-kq", folder, seed=0, dtype="bf16", verbose=False)
    files = {"folder": folder}
    for t in ("q4_k_m", "q4_0", "q8_0"):
        d = root / t
        d.mkdir()
        path = d / f"model-{t}.gguf"
        stored = {}  # {name: (the blocks handed to gguf-py's writer, type)}
        files[t + " types"] = make_gguf.convert(folder, path, t, layout="clef", a_exp="expf", written=stored)
        (d / "random_weights.json").write_bytes((folder / "random_weights.json").read_bytes())
        files[t] = path
        # The twin: every quantized tensor as gguf-py's dequantized fp32 values.

        def dequantized(tensors, md, stored=stored):
            for name, (arr, qt) in list(tensors.items()):
                data, st = stored[name]
                if st not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
                    tensors[name] = (dequantize(np.asarray(data), st).reshape(arr.shape), gguf.GGMLQuantizationType.F32)
                elif st == gguf.GGMLQuantizationType.F16:
                    tensors[name] = (np.asarray(data).astype(np.float32).reshape(arr.shape), gguf.GGMLQuantizationType.F32)

        twin = root / f"{t}-twin"
        twin.mkdir()
        make_gguf.convert(folder, twin / "model-f32.gguf", "f32", layout="clef", a_exp="expf", mutate=dequantized)
        (twin / "random_weights.json").write_bytes((folder / "random_weights.json").read_bytes())
        files[t + " twin"] = twin / "model-f32.gguf"
    return files


def answers(model, tmp: pathlib.Path) -> list:
    tmp.mkdir(parents=True, exist_ok=True)
    out = tmp / "answers.jsonl"
    r = run("decide", "--model", model, "--jsonl", corpus_bodies(tmp, short=True), "--out", out, "--no-progress",
            "--threads", "2")
    assert r.returncode in (0, 1), r.stderr.decode()
    lines = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert sum("answers" in x for x in lines) >= 18, lines[:2]
    return lines


def probabilities(lines: list) -> np.ndarray:
    p = []
    for x in lines:
        for a in x.get("answers", {}).values():
            p += list(a["probabilities"].values()) if "probabilities" in a else [a.get("noul", a.get("score"))]
    v = np.array(p, dtype=np.float64)
    assert np.isfinite(v).all()
    return v


def test_the_mix_is_llama_quantizes(kq):
    """Q4_K_M as llama-quantize writes it for a Qwen3.5 folder (its 0.8b file: 162 Q4_K, 25 Q6_K):
    Q4_K base; Q6_K for the tied token embedding and, in the layers more_bits picks, the V projection
    (attn_v / fused attn_qkv) and ffn_down; partial blocks (the head's 32-wide rows) take
    llama-quantize's fallback Q5_0, never F16."""
    import make_gguf
    from gguf import GGMLQuantizationType as Q

    types = kq["q4_k_m types"]
    assert types["token_embd.weight"] == Q.Q6_K
    for i in range(4):
        want = Q.Q6_K if make_gguf.more_bits(i, 4) else Q.Q4_K
        v = "attn_v" if i == 3 else "attn_qkv"
        assert types[f"blk.{i}.{v}.weight"] == want and types[f"blk.{i}.ffn_down.weight"] == want
        assert types[f"blk.{i}.ffn_gate.weight"] == Q.Q4_K
    assert {make_gguf.more_bits(i, 4) for i in range(4)} == {True, False}  # both kinds occur
    assert "".join("6" if make_gguf.more_bits(i, 24) else "." for i in range(24)) == "666..6..6..6..6..6..6666"
    assert types["decision.proj_memory.weight"] == Q.Q4_K  # [32, 256]: whole blocks
    assert types["dec.blk.0.ffn_up.weight"] == Q.Q5_0  # [64, 32]: 32-wide rows
    assert Q.F16 not in types.values()


@pytest.fixture(scope="module")
def q8_rounding(kq, tmp_path_factory) -> float:
    """Max |Δp| of the Q8_0 file against its dequantized twin (activation rounding only)."""
    tmp = tmp_path_factory.mktemp("q8")
    return float(np.abs(probabilities(answers(kq["q8_0"], tmp / "q")) -
                        probabilities(answers(kq["q8_0 twin"], tmp / "twin"))).max())


@pytest.mark.parametrize("t", ["q4_k_m", "q4_0"])
def test_answers_equal_the_dequantized_twin_up_to_activation_rounding(kq, q8_rounding, tmp_path, t):
    got = probabilities(answers(kq[t], tmp_path / "q"))
    twin = probabilities(answers(kq[t + " twin"], tmp_path / "twin"))
    folder = probabilities(answers(kq["folder"], tmp_path / "folder"))
    assert got.shape == twin.shape == folder.shape
    assert 0 < q8_rounding < 0.05, q8_rounding
    dp = np.abs(got - twin).max()
    assert dp <= ROUNDING_FACTOR * q8_rounding, (dp, q8_rounding)
    assert np.abs(twin - folder).max() > 0  # the quantization is real: the twin is not the folder


def test_serve_answers_as_decide_does(kq, tmp_path):
    from test_gguf_model import serve_matches_decide

    serve_matches_decide(kq["q4_k_m"], tmp_path, 2)
