# SPDX-License-Identifier: MIT
"""Continuous batching is exact on the files people run: a batching engine (tests/drivers/
cache_driver.cc --parallel 8: eight threads deciding at once, their prefill chunks sharing steps)
gives every corpus request the very option logits (bit for bit) and response body that the
one-at-a-time engine gives it, on a Q4_K_M GGUF (Q4_K and Q6_K blocks) written as llama.cpp's
converter and llama-quantize write it (tools/reference/make_gguf.py). The fp32, bf16 and int8
(Q8_0 weights) folder modes are covered by tests/unit/test_batching.cc.

Sequence: every corpus request twice, shuffled (seeded), so that a request's second run is warm
(its state restored from the cache) or runs cold beside the first; short chunks (32) and a step
budget of 48 tokens make the steps mix sequences, skip chunks, run long chunks alone and run
short ones nested between a long one's layers.
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
def q4_k_m(tmp_path_factory, tiny_dir) -> pathlib.Path:
    import make_gguf

    d = tmp_path_factory.mktemp("batching")
    path = d / "model-q4_k_m.gguf"
    make_gguf.convert(tiny_dir, path, "q4_k_m", layout="clef", a_exp="expf")
    (d / "random_weights.json").write_bytes((tiny_dir / "random_weights.json").read_bytes())
    return path


def run(model: pathlib.Path, lines: list, *extra: str) -> list:
    r = subprocess.run([driver_bin(), str(model), "--threads", "2", "--chunk", "32", *extra],
                       input="".join(ln + "\n" for ln in lines), capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    return [json.loads(ln) for ln in r.stdout.splitlines()]


def test_batched_answers_are_bit_identical(q4_k_m):
    reqs = [json.dumps(json.loads(ln)["request"], ensure_ascii=False)
            for ln in CORPUS.read_text(encoding="utf-8").splitlines() if ln.strip()]
    order = [i for i in range(len(reqs)) for _ in range(2)]
    random.Random(5).shuffle(order)
    lines = [reqs[i] for i in order]
    model = q4_k_m
    solo = run(model, lines)
    batched = run(model, lines, "--parallel", "8", "--max-batch-tokens", "48")
    assert len(solo) == len(batched) == len(lines)
    caches = set()
    for k, (a, b) in enumerate(zip(solo, batched)):
        assert "error" not in a, (k, a)
        assert b["logits"] == a["logits"], f"line {k} (corpus request {order[k]}): logits differ"
        assert b["body"] == a["body"], f"line {k}: body differs"
        caches.add(b["cache"])
    assert "hit" in caches and "miss" in caches, caches  # warm and cold both ran batched
