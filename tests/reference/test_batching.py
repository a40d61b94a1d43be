# SPDX-License-Identifier: MIT
"""Continuous batching is exact on the files people run: a batching engine (tests/drivers/
cache_driver.cc --parallel 8: eight threads deciding at once, their prefill chunks sharing steps)
gives every corpus request the very option logits (bit for bit) and response body that the
one-at-a-time engine gives it, on a Q4_K_M and a Q8_0 GGUF written as llama.cpp's converter and
llama-quantize write them (tools/reference/make_gguf.py). The fp32, bf16 and int8 folder modes are
covered by tests/unit/test_batching.cc.

Sequence: every corpus request twice, shuffled (seeded), so that a request's second run is warm
(its state restored from the cache) or runs cold beside the first; short chunks (16) and a step
budget of 40 tokens make the steps mix sequences, skip chunks and run long chunks alone.
"""

from __future__ import annotations

import json
import pathlib
import random
import subprocess

import pytest

from conftest import CORPUS
from test_state_cache import driver_bin


@pytest.fixture(scope="module")
def gguf_files(tmp_path_factory, tiny_dir) -> dict:
    import make_gguf

    root = tmp_path_factory.mktemp("batching")
    files = {}
    for t in ("q4_k_m", "q8_0"):
        d = root / t
        d.mkdir()
        path = d / f"model-{t}.gguf"
        make_gguf.convert(tiny_dir, path, t, layout="clef", a_exp="expf")
        (d / "random_weights.json").write_bytes((tiny_dir / "random_weights.json").read_bytes())
        files[t] = path
    return files


def run(model: pathlib.Path, lines: list, *extra: str) -> list:
    r = subprocess.run([driver_bin(), str(model), "--threads", "2", "--chunk", "16", *extra],
                       input="".join(ln + "\n" for ln in lines), capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    return [json.loads(ln) for ln in r.stdout.splitlines()]


@pytest.mark.parametrize("quant", ["q4_k_m", "q8_0"])
def test_batched_answers_are_bit_identical(gguf_files, quant):
    reqs = [json.dumps(json.loads(ln)["request"], ensure_ascii=False)
            for ln in CORPUS.read_text(encoding="utf-8").splitlines() if ln.strip()]
    order = [i for i in range(len(reqs)) for _ in range(2)]
    random.Random(5).shuffle(order)
    lines = [reqs[i] for i in order]
    model = gguf_files[quant]
    solo = run(model, lines)
    batched = run(model, lines, "--parallel", "8", "--max-batch-tokens", "40")
    assert len(solo) == len(batched) == len(lines)
    caches = set()
    for k, (a, b) in enumerate(zip(solo, batched)):
        assert "error" not in a, (k, a)
        assert b["logits"] == a["logits"], f"line {k} (corpus request {order[k]}): logits differ"
        assert b["body"] == a["body"], f"line {k}: body differs"
        caches.add(b["cache"])
    assert "hit" in caches and "miss" in caches, caches  # warm and cold both ran batched
