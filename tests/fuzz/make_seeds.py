#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes a small seed corpus for fuzz_safetensors_header: valid files (several dtypes, empty and
0-d tensors, metadata) and near-misses, so the fuzzer starts from the interesting shapes."""
import json
import struct
import sys
from pathlib import Path


def st(header: dict, data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    seeds = {
        "valid_f32": st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, bytes(8)),
        "valid_mixed": st({"__metadata__": {"format": "pt"},
                           "w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]},
                           "s": {"dtype": "F32", "shape": [], "data_offsets": [8, 12]},
                           "e": {"dtype": "F16", "shape": [0, 3], "data_offsets": [12, 12]}}, bytes(12)),
        "overlap": st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                       "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12)),
        "short": b"\x05\x00\x00",
        "bad_len": struct.pack("<Q", 1 << 40) + b"{}",
    }
    for name, blob in seeds.items():
        (out / name).write_bytes(blob)


if __name__ == "__main__":
    main()
