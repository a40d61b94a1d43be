# SPDX-License-Identifier: MIT
"""clef.cpp's dequantization of every ggml block type (src/core/quant_blocks.h, through
convert_to_f32) against PyPI `gguf` 0.19's numpy dequantizer, bit for bit.

Blocks are random bytes (fp16 scale fields kept finite: ggml never writes inf/NaN scales) plus
adversarial ones: zero and -0.0 scales, subnormal and largest finite fp16 scales and mins of either
sign, all-zero and all-ones quant bytes and packed scale bytes. `clef_gguf_driver --dequant` reads the
raw blocks; every fp32 result must have the same bits as gguf's (an fp32 NaN would fail the check).
"""

from __future__ import annotations

import pathlib
import subprocess

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

from test_gguf_reader import driver

# fp16 fields (byte offsets inside one block) of each type: scales d and mins dmin / m.
FP16_FIELDS = {
    Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0],
    Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208],
}
SPECIAL_HALVES = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x83FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00]


def blocks_for(qt: Q, rng: np.random.Generator) -> np.ndarray:
    """[n, bytes] uint8: random blocks, then the adversarial ones."""
    _, size = GGML_QUANT_SIZES[qt]
    rand = rng.integers(0, 256, size=(512, size), dtype=np.uint8)
    rows = [rand]
    for fill in (0x00, 0xFF, 0x55, 0xAA):
        for h in SPECIAL_HALVES:
            b = np.full((1, size), fill, dtype=np.uint8)
            for i, off in enumerate(FP16_FIELDS[qt]):
                # every field special; the second one (a min) cycles through the list in reverse
                v = h if i == 0 else SPECIAL_HALVES[-1 - SPECIAL_HALVES.index(h)]
                b[0, off:off + 2] = np.array([v], dtype="<u2").view(np.uint8)
            rows.append(b)
    special = rng.integers(0, 256, size=(len(SPECIAL_HALVES) ** 2, size), dtype=np.uint8)
    for k, (h1, h2) in enumerate((a, b) for a in SPECIAL_HALVES for b in SPECIAL_HALVES):
        for off, v in zip(FP16_FIELDS[qt], (h1, h2)):
            special[k, off:off + 2] = np.array([v], dtype="<u2").view(np.uint8)
    rows.append(special)
    out = np.concatenate(rows, axis=0)
    for off in FP16_FIELDS[qt]:  # finite scales: an all-ones exponent (inf/NaN) loses its top bit
        half = out[:, off:off + 2].copy().view("<u2")
        bad = (half & 0x7C00) == 0x7C00
        half[bad] &= 0xBFFF
        out[:, off:off + 2] = half.view(np.uint8)
    return np.ascontiguousarray(out)


@pytest.mark.parametrize("qt", list(FP16_FIELDS), ids=lambda q: q.name)
def test_dequantize_matches_gguf_bit_for_bit(qt: Q, tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(int(qt))
    blocks = blocks_for(qt, rng)
    raw, out = tmp_path / "blocks.bin", tmp_path / "f32.bin"
    raw.write_bytes(blocks.tobytes())
    r = subprocess.run([driver(), "--dequant", qt.name, str(raw), str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    ours = np.fromfile(out, dtype="<f4")
    want = dequantize(blocks.reshape(-1), qt).astype(np.float32).reshape(-1)
    assert ours.shape == want.shape
    assert not np.isnan(want).any()
    diff = np.flatnonzero(ours.view(np.uint32) != want.view(np.uint32))
    block_elems = GGML_QUANT_SIZES[qt][0]
    assert diff.size == 0, (f"{qt.name}: {diff.size} elements differ, first at element {diff[0]} "
                            f"(block {diff[0] // block_elems}): ours {ours[diff[0]]!r} gguf {want[diff[0]]!r}")
    # The adversarial blocks do reach the edges: -0.0 results and subnormal-scale products occur.
    assert (np.signbit(want) & (want == 0)).any()


def test_driver_refuses_partial_blocks(tmp_path: pathlib.Path) -> None:
    raw = tmp_path / "short.bin"
    raw.write_bytes(bytes(143))
    r = subprocess.run([driver(), "--dequant", "Q4_K", str(raw), str(tmp_path / "o.bin")], capture_output=True, text=True)
    assert r.returncode == 2 and "whole Q4_K blocks" in r.stderr
