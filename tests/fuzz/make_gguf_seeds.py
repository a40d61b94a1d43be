#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes a small seed corpus for fuzz_gguf_header: GGUF v3 files built with struct from the
format description (metadata of every value type, arrays, F32/BF16/Q8_0/Q4_K tensors, a custom
alignment) and near-misses, so the fuzzer starts from the interesting shapes."""
import struct
import sys
from pathlib import Path


def s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def kv(key: str, vtype: int, payload: bytes) -> bytes:
    return s(key) + struct.pack("<I", vtype) + payload


def gguf(kvs: list[bytes], tensors: list[tuple[str, list[int], int, int]], data: bytes, align: int = 32,
         version: int = 3) -> bytes:
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs)
    for name, ne, gtype, offset in tensors:
        out += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<IQ", gtype, offset)
    out += bytes(-len(out) % align)
    return out + data


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    meta = [
        kv("general.architecture", 8, s("qwen35")),
        kv("qwen35.block_count", 4, struct.pack("<I", 24)),
        kv("qwen35.rope.freq_base", 6, struct.pack("<f", 1e7)),
        kv("x.i8", 1, struct.pack("<b", -1)), kv("x.u16", 2, struct.pack("<H", 7)),
        kv("x.i64", 11, struct.pack("<q", -9)), kv("x.f64", 12, struct.pack("<d", 0.5)),
        kv("x.bool", 7, b"\x01"),
        kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 3) + s("a") + s("bc") + s("")),
        kv("qwen35.rope.dimension_sections", 9, struct.pack("<IQ", 5, 4) + struct.pack("<4i", 11, 11, 10, 0)),
    ]
    seeds = {
        "valid_mixed": gguf(meta, [("a.weight", [3, 2], 0, 0), ("b", [8], 30, 32), ("q", [64, 2], 8, 64)],
                            bytes(64 + 136)),
        "valid_q4k": gguf(meta[:2], [("k", [256], 12, 0)], bytes(144)),
        "valid_align64": gguf([kv("general.alignment", 4, struct.pack("<I", 64))],
                              [("t", [16], 0, 0), ("u", [16], 0, 64)], bytes(128), align=64),
        "header_only": gguf(meta, [], b""),
        "overlap": gguf([], [("t", [16], 0, 0), ("u", [16], 0, 32)], bytes(128)),
        "past_end": gguf([], [("t", [4], 0, 1 << 20)], bytes(64)),
        "v2": gguf(meta[:1], [("t", [4], 0, 0)], bytes(16), version=2),
        "short": b"GGUF\x03\x00",
    }
    for name, blob in seeds.items():
        (out / name).write_bytes(blob)


if __name__ == "__main__":
    main()
