# SPDX-License-Identifier: MIT
"""clef's ggml block decoding (ops/quant_gemm.h) against PyPI gguf's `gguf.quants.dequantize`.

For each of Q4_K, Q5_K, Q6_K, Q4_0, Q4_1, Q5_0 and Q5_1, random blocks (numpy random bytes for the
quantized values and packed scales, then sane random fp16 scales written over the d / dmin / m
fields) are decoded by `clef_quant_decode_driver` two ways (per block, and through the repacked
QuantWeight layout the kernels read) and by gguf-py; all three must agree bit for bit.
"""

from __future__ import annotations

import os
import pathlib
import subprocess

import gguf  # pinned in tools/reference/requirements.txt
import numpy as np
import pytest
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from conftest import REPO_ROOT

# Byte offsets of the fp16 fields of each block: (offset, may be negative).
FP16_FIELDS = {
    "Q4_K": [(0, False), (2, False)],
    "Q5_K": [(0, False), (2, False)],
    "Q6_K": [(208, True)],
    "Q4_0": [(0, True)],
    "Q5_0": [(0, True)],
    "Q4_1": [(0, False), (2, True)],
    "Q5_1": [(0, False), (2, True)],
}


def driver() -> str:
    path = os.environ.get(
        "CLEF_QUANT_DECODE_DRIVER", str(REPO_ROOT / "build" / "release" / "bin" / "clef_quant_decode_driver")
    )
    if not pathlib.Path(path).exists():
        pytest.fail(f"{path} missing: build the release preset first")
    return path


def random_blocks(name: str, n_blocks: int, seed: int) -> np.ndarray:
    qtype = GGMLQuantizationType[name]
    _, block_bytes = GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for off, signed in FP16_FIELDS[name]:
        mag = rng.uniform(1e-4, 1e-2, size=n_blocks).astype(np.float32)
        if signed:
            mag *= rng.choice(np.array([-1.0, 1.0], dtype=np.float32), size=n_blocks)
        # A few extreme but finite scales: fp16 subnormals and large values.
        mag[:3] = np.array([6e-8, 3e-5, 60000.0], dtype=np.float32)[: min(3, n_blocks)]
        blocks[:, off : off + 2] = mag.astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
    return blocks


@pytest.mark.parametrize("name", sorted(FP16_FIELDS))
def test_decoding_equals_gguf_py(name: str, tmp_path: pathlib.Path) -> None:
    qtype = GGMLQuantizationType[name]
    block_elems, _ = GGML_QUANT_SIZES[qtype]
    rows, blocks_per_row = 21, 3  # 21 rows: two panels of 16, the second partly empty
    blocks = random_blocks(name, rows * blocks_per_row, seed=len(name) * 31 + block_elems)
    k = blocks_per_row * block_elems
    src, out = tmp_path / "blocks.bin", tmp_path / "values.f32"
    src.write_bytes(blocks.tobytes())
    r = subprocess.run([driver(), name, str(rows), str(k), str(src), str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    ours = np.fromfile(out, dtype=np.float32).reshape(2, rows, k)
    theirs = gguf.quants.dequantize(blocks.reshape(rows, -1), qtype).astype(np.float32)
    assert theirs.shape == (rows, k)
    for which, got in (("decode_quant_block", ours[0]), ("QuantWeight", ours[1])):
        diff = got.view(np.uint32) != theirs.view(np.uint32)
        assert not diff.any(), f"{name} {which}: {int(diff.sum())} values differ, first at {np.argwhere(diff)[0]}"


def test_driver_refuses_partial_blocks(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "blocks.bin"
    src.write_bytes(bytes(144))
    r = subprocess.run([driver(), "Q4_K", "1", "128", str(src), str(tmp_path / "o")], capture_output=True, text=True)
    assert r.returncode == 2
