# SPDX-License-Identifier: MIT
"""tools/reference/kquants.py (our K-quant quantizer) read back by PyPI `gguf` 0.19's dequantizer:
the blocks must decode to exactly the values the chosen scales and integers encode (bit for bit),
and every value must lie within half a quantization step of its input."""

from __future__ import annotations

import numpy as np
import pytest
from gguf.quants import dequantize

import kquants


def rows() -> np.ndarray:
    rng = np.random.default_rng(11)
    r = [rng.standard_normal((6, 512)) * s for s in (1e-3, 0.02, 1.0, 300.0)]
    special = np.zeros((8, 512))
    special[1] = 1.5                      # constant positive (no negative part: dmin 0)
    special[2] = -2.0                     # constant negative
    special[3, 7] = 1e4                   # one outlier among zeros
    special[4] = np.abs(rng.standard_normal(512))
    special[5] = -np.abs(rng.standard_normal(512))
    special[6] = rng.standard_normal(512) * 1e-30  # below every fp16 step
    special[7, ::2] = -0.0
    r.append(special)
    r.append(np.where(rng.random((4, 512)) < 0.5, 60000.0, -60000.0) * rng.random((4, 512)))
    return np.concatenate(r).astype(np.float32)


@pytest.mark.parametrize("qt", kquants.TYPES, ids=lambda q: q.name)
def test_gguf_reads_our_blocks(qt) -> None:
    x = rows()
    blocks, r = kquants.quantize_blocks(x, qt)
    assert blocks.dtype == np.uint8 and blocks.shape == (x.shape[0], 2 * kquants.SIZES[qt])
    got = dequantize(blocks, qt).astype(np.float32)
    assert got.shape == x.shape
    same = got.view(np.uint32) == r["y"].view(np.uint32)
    assert same.all(), f"{qt.name}: {np.count_nonzero(~same)} values differ from what the integers encode"
    err = np.abs(got.astype(np.float64) - x.astype(np.float64))
    bound = r["step"].astype(np.float64) / 2 * (1 + 2.0**-20) + 2.0**-149 + np.abs(x) * 2.0**-23
    assert (err <= bound).all(), f"{qt.name}: max error / step {np.max(err / np.maximum(r['step'], 1e-45)):.4f}"
    # the grid is used: on the N(0,1) rows the error is far below the range
    mid = slice(12, 18)
    assert np.sqrt(np.mean((got[mid] - x[mid]) ** 2)) < {"Q2_K": 0.45, "Q3_K": 0.3}.get(qt.name, 0.12)


def test_refuses_rows_that_are_not_whole_blocks() -> None:
    with pytest.raises(ValueError):
        kquants.quantize(np.zeros((2, 100), dtype=np.float32), kquants.Q.Q4_K)
