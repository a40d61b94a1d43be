#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A K-quant quantizer of our own: fp32 rows -> ggml Q2_K, Q3_K, Q4_K, Q5_K and Q6_K blocks (PyPI
``gguf`` 0.19 dequantizes these types but cannot quantize them).

Block layouts: docs/GGUF.md "Block types". The method is deliberately simple (no error search as
llama-quantize does): per group, a range that covers every value, then round to nearest.

    Q4_K / Q5_K / Q2_K  (asymmetric: y = (d * sc) * q - (dmin * m), q in [0, 2^b - 1])
        group lo = min(0, min x), hi = max x. dmin = fp16 >= max(-lo) / M; m = ceil(-lo / dmin) so that
        -(dmin * m) <= lo; step needed (hi + dmin * m) / (2^b - 1); d = fp16 >= max step / S; sc =
        ceil(step / d) (M = S = 63 with 6-bit scales and mins, 15 for Q2_K's 4-bit ones).
    Q6_K / Q3_K         (symmetric: y = (d * sc) * q, q in [-2^(b-1), 2^(b-1) - 1])
        step needed amax / (2^(b-1) - 1); d = fp16 >= max step / S; sc = ceil(step / d) (S = 127, int8
        scales for Q6_K; 31, 6-bit signed scales for Q3_K).
    q = clip(round((x - low) / (d * sc)), range) with the fp32 step, so every element is within half a
    step of its value (plus fp32 rounding): |x - y| <= (d * sc) / 2 * (1 + 2^-20) + 2^-149.

quantize(x, qtype) returns the blocks as uint8 [rows, bytes per row]; decode(...) gives the values
those blocks encode computed from the chosen integers in fp32 (the oracle that gguf's dequantizer
must reproduce exactly: tests/reference/test_kquants.py).
"""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np
from gguf import GGMLQuantizationType as Q

QK = 256
SIZES = {Q.Q2_K: 84, Q.Q3_K: 110, Q.Q4_K: 144, Q.Q5_K: 176, Q.Q6_K: 210}
TYPES = tuple(SIZES)


def _fp16_at_least(v: np.ndarray) -> np.ndarray:
    """The smallest fp16 >= v (v >= 0, finite, <= 65504), as float32."""
    h = v.astype(np.float16)
    low = h.astype(np.float32) < v
    h[low] = np.nextafter(h[low], np.float16(np.inf))
    if not np.isfinite(h).all():
        raise ValueError("a K-quant scale does not fit fp16 (|x| too large)")
    return h


def _asym(x: np.ndarray, group: int, qmax: int, smax: int) -> Dict[str, np.ndarray]:
    """Asymmetric quantization of blocks x [n, 256] with groups of `group`: d, dmin [n] (fp16),
    sc, m [n, G] ints, q [n, 256] ints, y [n, 256] the encoded values."""
    n = x.shape[0]
    g = x.reshape(n, -1, group)
    lo = np.minimum(g.min(axis=2), 0.0).astype(np.float32)
    hi = g.max(axis=2).astype(np.float32)
    dmin16 = _fp16_at_least((-lo).max(axis=1) / np.float32(smax))
    dmin = dmin16.astype(np.float32)
    safe = np.where(dmin > 0, dmin, np.float32(1))[:, None]
    m = np.where(dmin[:, None] > 0, np.ceil(-lo / safe), 0).astype(np.int64)
    m = np.clip(m, 0, smax)
    ml = dmin[:, None] * m.astype(np.float32)  # fp32 product, as the dequantizer forms it
    need = (hi + ml) / np.float32(qmax)
    d16 = _fp16_at_least(need.max(axis=1) / np.float32(smax))
    d = d16.astype(np.float32)
    safe = np.where(d > 0, d, np.float32(1))[:, None]
    sc = np.where(d[:, None] > 0, np.ceil(need / safe), 0).astype(np.int64)
    sc = np.clip(sc, 0, smax)
    step = d[:, None] * sc.astype(np.float32)
    safe = np.where(step > 0, step, np.float32(1))[:, :, None]
    q = np.where(step[:, :, None] > 0, np.rint((g + ml[:, :, None]) / safe), 0)
    q = np.clip(q, 0, qmax).astype(np.int64)
    y = step[:, :, None] * q.astype(np.float32) - ml[:, :, None]
    return {"d": d16, "dmin": dmin16, "sc": sc, "m": m, "q": q.reshape(n, QK), "y": y.reshape(n, QK).astype(np.float32),
            "step": np.repeat(step, group, axis=1)}


def _sym(x: np.ndarray, group: int, qlo: int, qhi: int, smax: int) -> Dict[str, np.ndarray]:
    """Symmetric quantization (q in [qlo, qhi], signed scales up to smax)."""
    n = x.shape[0]
    g = x.reshape(n, -1, group)
    amax = np.abs(g).max(axis=2).astype(np.float32)
    need = amax / np.float32(qhi)
    d16 = _fp16_at_least(need.max(axis=1) / np.float32(smax))
    d = d16.astype(np.float32)
    safe = np.where(d > 0, d, np.float32(1))[:, None]
    sc = np.where(d[:, None] > 0, np.ceil(need / safe), 0).astype(np.int64)
    sc = np.clip(sc, 0, smax)
    step = d[:, None] * sc.astype(np.float32)
    safe = np.where(step > 0, step, np.float32(1))[:, :, None]
    q = np.where(step[:, :, None] > 0, np.rint(g / safe), 0)
    q = np.clip(q, qlo, qhi).astype(np.int64)
    y = step[:, :, None] * q.astype(np.float32)
    return {"d": d16, "sc": sc, "q": q.reshape(n, QK), "y": y.reshape(n, QK).astype(np.float32),
            "step": np.repeat(step, group, axis=1)}


def _half_bytes(h: np.ndarray) -> np.ndarray:
    return h.astype("<f2").view(np.uint8).reshape(-1, 2)


def _pack_k_scales(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """12 bytes of 6-bit scales and mins of 8 sub-blocks (Q4_K/Q5_K)."""
    s = np.zeros((sc.shape[0], 12), dtype=np.uint8)
    for j in range(4):
        s[:, j] = (sc[:, j] & 63) | ((sc[:, j + 4] >> 4) << 6)
        s[:, j + 4] = (m[:, j] & 63) | ((m[:, j + 4] >> 4) << 6)
        s[:, j + 8] = (sc[:, j + 4] & 15) | ((m[:, j + 4] & 15) << 4)
    return s


def _pack(qt: Q, r: Dict[str, np.ndarray]) -> np.ndarray:
    n = r["q"].shape[0]
    q = r["q"]
    e = np.arange(QK)
    if qt in (Q.Q4_K, Q.Q5_K):
        low = (q & 15).reshape(n, 4, 2, 32)  # [pair of sub-blocks, low/high nibble, l]
        qs = (low[:, :, 0, :] | (low[:, :, 1, :] << 4)).reshape(n, 128).astype(np.uint8)
        parts = [_half_bytes(r["d"]), _half_bytes(r["dmin"]), _pack_k_scales(r["sc"], r["m"])]
        if qt == Q.Q5_K:
            hb = ((q >> 4) & 1).reshape(n, 8, 32)  # bit j of qh[l]: element 32j + l
            qh = np.zeros((n, 32), dtype=np.int64)
            for j in range(8):
                qh |= hb[:, j, :] << j
            parts.append(qh.astype(np.uint8))
        parts.append(qs)
        return np.concatenate(parts, axis=1)
    if qt == Q.Q6_K:
        u = q + 32
        ql = np.zeros((n, 128), dtype=np.int64)
        qh = np.zeros((n, 64), dtype=np.int64)
        h, p = e // 128, e % 128
        np.add.at(ql, (slice(None), 64 * h + p % 64), (u[:, e] & 15) << (4 * (p // 64)))
        np.add.at(qh, (slice(None), 32 * h + p % 32), ((u[:, e] >> 4) & 3) << (2 * (p // 32)))
        scales = r["sc"].astype(np.int8).view(np.uint8)
        return np.concatenate([ql.astype(np.uint8), qh.astype(np.uint8), scales, _half_bytes(r["d"])], axis=1)
    if qt == Q.Q2_K:
        qs = np.zeros((n, 64), dtype=np.int64)
        h, s, l = e // 128, (e % 128) // 32, e % 32
        np.add.at(qs, (slice(None), 32 * h + l), q[:, e] << (2 * s))
        scales = (r["sc"] | (r["m"] << 4)).astype(np.uint8)
        return np.concatenate([scales, qs.astype(np.uint8), _half_bytes(r["d"]), _half_bytes(r["dmin"])], axis=1)
    if qt == Q.Q3_K:
        hbit = (q >= 0).astype(np.int64)
        low = q + 4 * (1 - hbit)
        hmask = np.zeros((n, 32), dtype=np.int64)
        qs = np.zeros((n, 64), dtype=np.int64)
        np.add.at(hmask, (slice(None), e % 32), hbit[:, e] << (e // 32))
        h, s, l = e // 128, (e % 128) // 32, e % 32
        np.add.at(qs, (slice(None), 32 * h + l), low[:, e] << (2 * s))
        v = r["sc"] + 32
        sc = np.zeros((n, 12), dtype=np.int64)
        for g in range(16):
            sc[:, g % 8] |= (v[:, g] & 15) << (4 * (g // 8))
            sc[:, 8 + g % 4] |= ((v[:, g] >> 4) & 3) << (2 * (g // 4))
        return np.concatenate([hmask.astype(np.uint8), qs.astype(np.uint8), sc.astype(np.uint8), _half_bytes(r["d"])], axis=1)
    raise ValueError(f"not a K-quant type: {qt!r}")


def quantize_blocks(x: np.ndarray, qt: Q) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
    """x: float32 with a last dimension that is a multiple of 256. Returns (blocks uint8
    [..., last / 256 * bytes], the chosen integers and scales with "y": the encoded values and
    "step": each element's quantization step, both shaped like x)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.shape[-1] % QK != 0:
        raise ValueError(f"last dimension {x.shape[-1]} is not a multiple of {QK}")
    if not np.isfinite(x).all():
        raise ValueError("K-quants hold finite values only")
    b = x.reshape(-1, QK)
    if qt == Q.Q4_K:
        r = _asym(b, 32, 15, 63)
    elif qt == Q.Q5_K:
        r = _asym(b, 32, 31, 63)
    elif qt == Q.Q2_K:
        r = _asym(b, 16, 3, 15)
    elif qt == Q.Q6_K:
        r = _sym(b, 16, -32, 31, 127)
    elif qt == Q.Q3_K:
        r = _sym(b, 16, -4, 3, 31)
    else:
        raise ValueError(f"not a K-quant type: {qt!r}")
    blocks = _pack(qt, r)
    shape = x.shape[:-1] + (x.shape[-1] // QK * SIZES[qt],)
    r["y"] = r["y"].reshape(x.shape)
    r["step"] = r["step"].reshape(x.shape)
    return blocks.reshape(shape), r


def quantize(x: np.ndarray, qt: Q) -> np.ndarray:
    """The blocks only (what a GGUF tensor of type qt stores), uint8 [..., bytes per row]."""
    return quantize_blocks(x, qt)[0]
