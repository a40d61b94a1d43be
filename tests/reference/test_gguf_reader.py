# SPDX-License-Identifier: MIT
"""The C++ GGUF reader (src/io/gguf.h) against PyPI `gguf`, the writer and reader llama.cpp itself uses.

Files are written by `gguf.GGUFWriter` (metadata of every value type, string/int/float arrays,
F32/F16/BF16/Q8_0/Q4_K tensors, the default and a custom alignment), then read by our reader
(`clef_gguf_driver`, which prints what it read as JSON) and by `gguf.GGUFReader`: every key, type
and value, every tensor's name, ggml shape, type, absolute data offset, byte size and bytes (sha256)
must agree. Files the writer produced and then cut short must be refused with exit 3.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pathlib
import subprocess

import gguf  # pinned in tools/reference/requirements.txt
import numpy as np
import pytest

from conftest import REPO_ROOT


def driver() -> str:
    path = os.environ.get("CLEF_GGUF_DRIVER", str(REPO_ROOT / "build" / "release" / "bin" / "clef_gguf_driver"))
    if not pathlib.Path(path).exists():
        pytest.fail(f"{path} missing: build the release preset first")
    return path


def read_ours(path: pathlib.Path) -> dict:
    r = subprocess.run([driver(), str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def write_file(path: pathlib.Path, alignment: int | None, key_only: bool = False) -> None:
    """key_only: write `general.alignment` but let the writer align to its default 32 (a file whose
    offsets contradict its own alignment key)."""
    rng = np.random.default_rng(5)
    w = gguf.GGUFWriter(str(path), arch="qwen35")
    if alignment is not None and key_only:
        w.add_uint32("general.alignment", alignment)
    elif alignment is not None:
        w.add_custom_alignment(alignment)
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**62))
    w.add_float32("t.f32", 0.1)
    w.add_float64("t.f64", -1e300)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo \u2028 wörld")
    w.add_array("t.strs", ["a", "", "日本"])
    w.add_array("t.ints", [11, 11, 10, 0])
    w.add_array("t.floats", [0.5, -2.25])
    w.add_tensor("f32", rng.standard_normal((5, 3)).astype(np.float32))
    w.add_tensor("f16", rng.standard_normal(7).astype(np.float16))
    bf16 = (rng.standard_normal((2, 8)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    w.add_tensor("bf16", bf16, raw_shape=bf16.shape, raw_dtype=gguf.GGMLQuantizationType.BF16)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    q8 = gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("blk.0.ffn_up.weight", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)  # byte shape [4, 136]
    q4k = rng.integers(0, 256, size=(2, 144), dtype=np.uint8)  # 2 Q4_K blocks of 256 weights
    w.add_tensor("q4k", q4k, raw_dtype=gguf.GGMLQuantizationType.Q4_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def field_value(field):
    """(value type, python value) of a GGUFReader field."""
    vtype = field.types[0]
    if vtype == gguf.GGUFValueType.ARRAY:
        etype = field.types[1]
        items = [field.parts[i] for i in field.data]
        if etype == gguf.GGUFValueType.STRING:
            return vtype, etype, [bytes(p).decode() for p in items]
        return vtype, etype, [p.tolist()[0] for p in items]
    part = field.parts[field.data[0]]
    if vtype == gguf.GGUFValueType.STRING:
        return vtype, None, bytes(part).decode()
    return vtype, None, part.tolist()[0]


def same_number(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(float(a), float(b), rel_tol=0, abs_tol=0) or float(a) == float(b)
    return a == b


@pytest.mark.parametrize("alignment", [None, 64])
def test_reader_agrees_with_pypi_gguf(tmp_path, alignment):
    path = tmp_path / "m.gguf"
    write_file(path, alignment)
    ours = read_ours(path)
    ref = gguf.GGUFReader(str(path))

    assert ours["version"] == 3
    assert ours["alignment"] == (alignment or 32)
    assert ours["data_offset"] == ref.data_offset
    # Metadata: every key the writer wrote (the reader adds GGUF.* pseudo-fields of its own).
    ref_fields = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert set(ours["metadata"]) == set(ref_fields)
    for key, field in ref_fields.items():
        vtype, etype, value = field_value(field)
        got = ours["metadata"][key]
        assert got["type"] == int(vtype), key
        if etype is not None:
            assert got["element_type"] == int(etype), key
            assert len(got["value"]) == len(value), key
            assert all(same_number(a, b) if not isinstance(b, str) else a == b for a, b in zip(got["value"], value)), key
        elif isinstance(value, str):
            assert got["value"] == value, key
        else:
            assert same_number(got["value"], value), (key, got["value"], value)
    # Tensors: name, ggml shape, type, where, how many bytes, which bytes.
    assert [t["name"] for t in ours["tensors"]] == [t.name for t in ref.tensors]
    for t, rt in zip(ours["tensors"], ref.tensors):
        assert t["ne"] == [int(d) for d in rt.shape], t["name"]
        assert t["type"] == int(rt.tensor_type), t["name"]
        assert ours["data_offset"] + t["offset"] == rt.data_offset, t["name"]
        assert t["nbytes"] == int(rt.n_bytes), t["name"]
        raw = path.read_bytes()[rt.data_offset:rt.data_offset + int(rt.n_bytes)]
        assert t["sha256"] == hashlib.sha256(raw).hexdigest(), t["name"]


def test_offsets_that_contradict_the_alignment_key_are_refused(tmp_path):
    path = tmp_path / "m.gguf"
    write_file(path, 64, key_only=True)
    r = subprocess.run([driver(), str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 3 and "is not a multiple of the alignment 64" in r.stderr, r.stderr


def test_truncated_writer_output_is_refused(tmp_path):
    path = tmp_path / "m.gguf"
    write_file(path, None)
    data = path.read_bytes()
    ref = gguf.GGUFReader(str(path))
    cuts = sorted({8, 20, 100, ref.data_offset - 1, ref.data_offset + 1, len(data) - 1})
    for n in cuts:
        cut = tmp_path / f"cut{n}.gguf"
        cut.write_bytes(data[:n])
        r = subprocess.run([driver(), str(cut)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 3, (n, r.stdout[:200], r.stderr)
        assert str(cut) in r.stderr and "\n" == r.stderr[-1] and r.stderr.count("\n") == 1, r.stderr
