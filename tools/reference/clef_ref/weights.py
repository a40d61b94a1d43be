# SPDX-License-Identifier: MIT
"""Seeded random values for backbone and head tensors (documented init scheme).

Every tensor gets its own NumPy ``Generator`` (PCG64) seeded from sha256("<seed>/<name>"), so values do
not depend on generation order or sharding. Values are drawn in float64, scaled and shifted there (one
correctly rounded operation each), rounded once to float32, then cast to the storage dtype. The
transcendental functions of the few small tensors that need them (log, exp, expm1 of a uniform) run
per element in Python's ``math`` (the C library's scalar functions). So a folder's bytes are the same on
every x86-64 CPU: torch's own ``normal_`` takes a vectorized path on AVX2 CPUs and a scalar one on
AVX-512 CPUs, and the two differ in the last bits, which made the same seed write different folders
(and invalidated the goldens measured on one of them) on different machines.

Backbone (docs/MODEL.md §8.1 names):
* 2-D weights (projections, MLP, vision qkv/proj/fc, merger, lm_head excepted): normal(0, 1/sqrt(fan_in)),
  so every layer's contribution to the residual stream is O(1);
* ``embed_tokens.weight`` and ``lm_head.weight``: normal(0, 0.02);
* offset RMSNorm weights (input_layernorm, post_attention_layernorm, final norm, q_norm, k_norm):
  normal(0, 0.1) — around 0, so forgetting the (1 + w) is detectable;
* ``linear_attn.norm.weight`` (gated RMSNorm, used directly): 1 + normal(0, 0.1);
* ``linear_attn.A_log``: log(uniform(1, 16));
* ``linear_attn.dt_bias``: inverse-softplus of dt, dt = exp(uniform(log 1e-3, log 1e-1)) (Mamba-style), so
  decays exp(-A·softplus(a + dt_bias)) span fast and slow heads;
* ``linear_attn.conv1d.weight`` [C, 1, K]: normal(0, 1/sqrt(K));
* vision LayerNorm weights: 1 + normal(0, 0.1); all biases: normal(0, 0.02);
  ``patch_embed.proj.weight``: normal(0, 1/sqrt(3·2·16·16)); ``pos_embed.weight``: normal(0, 0.02).

Head (docs/PROTOCOL.md §4.2 names):
* Linear / in_proj weights: normal(0, 1/sqrt(fan_in)); biases normal(0, 0.02);
* LayerNorm weights 1 + normal(0, 0.1), biases normal(0, 0.02);
* ``type_embedding.weight``: normal(0, 0.5);
* ``prior_logit_scale``, ``joint_logit_scale``: log(uniform(2, 8)); ``residual_gate``: normal(0, 1).
"""

from __future__ import annotations

import hashlib
import math
from typing import Tuple

import numpy as np
import torch

OFFSET_NORM_SUFFIXES = (
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
    "language_model.norm.weight",
    "self_attn.q_norm.weight",
    "self_attn.k_norm.weight",
)
F32_SUFFIXES = ("linear_attn.A_log", "linear_attn.norm.weight")


def tensor_generator(seed: int, name: str) -> np.random.Generator:
    """PCG64 generator seeded from sha256(f"{seed}/{name}") (first 8 bytes, little-endian)."""
    h = hashlib.sha256(f"{seed}/{name}".encode()).digest()
    return np.random.Generator(np.random.PCG64(int.from_bytes(h[:8], "little")))


def _normal(shape, std, g, mean=0.0) -> torch.Tensor:
    x = g.standard_normal(size=tuple(shape), dtype=np.float64) * std + mean
    return torch.from_numpy(np.asarray(x).astype(np.float32))


def _uniform64(shape, lo, hi, g) -> np.ndarray:
    return np.asarray(g.uniform(lo, hi, size=tuple(shape)))


def _per_element(fn, x: np.ndarray) -> torch.Tensor:
    """fn (a scalar float64 function) on every element, rounded once to float32."""
    out = np.fromiter((fn(float(v)) for v in x.reshape(-1)), dtype=np.float64, count=x.size)
    return torch.from_numpy(out.reshape(x.shape).astype(np.float32))


def _inverse_softplus_dt(u: float) -> float:
    dt = math.exp(u)
    return dt + math.log(-math.expm1(-dt))


def backbone_tensor(name: str, shape: Tuple[int, ...], seed: int) -> torch.Tensor:
    """Random float32 tensor for backbone tensor ``name`` of ``shape`` (scheme in the module docstring)."""
    g = tensor_generator(seed, name)
    if name.endswith(OFFSET_NORM_SUFFIXES):
        return _normal(shape, 0.1, g)
    if name.endswith("linear_attn.norm.weight"):
        return _normal(shape, 0.1, g, mean=1.0)
    if name.endswith("linear_attn.A_log"):
        return _per_element(math.log, _uniform64(shape, 1.0, 16.0, g))
    if name.endswith("linear_attn.dt_bias"):
        return _per_element(_inverse_softplus_dt, _uniform64(shape, math.log(1e-3), math.log(1e-1), g))
    if name.endswith("conv1d.weight"):
        return _normal(shape, 1.0 / math.sqrt(shape[-1]), g)
    if name.endswith(("embed_tokens.weight", "lm_head.weight", "pos_embed.weight")):
        return _normal(shape, 0.02, g)
    if name.endswith(".bias"):
        return _normal(shape, 0.02, g)
    if len(shape) == 1:  # vision LayerNorm weights
        return _normal(shape, 0.1, g, mean=1.0)
    fan_in = int(math.prod(shape[1:]))
    return _normal(shape, 1.0 / math.sqrt(fan_in), g)


def backbone_storage_dtype(name: str, dtype: str) -> torch.dtype:
    """Storage dtype like the official checkpoints (docs/MODEL.md §8.2): bf16 except A_log and
    linear_attn.norm.weight in F32; everything F32 when ``dtype == "f32"``."""
    if dtype == "f32" or name.endswith(F32_SUFFIXES):
        return torch.float32
    return torch.bfloat16


def head_tensor(name: str, shape: Tuple[int, ...], seed: int) -> torch.Tensor:
    """Random float32 tensor for joint-head tensor ``name`` (scheme in the module docstring)."""
    g = tensor_generator(seed, "joint_head/" + name)
    if name in ("prior_logit_scale", "joint_logit_scale"):
        return _per_element(math.log, _uniform64(shape, 2.0, 8.0, g))
    if name == "residual_gate":
        return _normal(shape, 1.0, g)
    if name == "type_embedding.weight":
        return _normal(shape, 0.5, g)
    if name.endswith("bias"):
        return _normal(shape, 0.02, g)
    if len(shape) == 1:  # LayerNorm weights
        return _normal(shape, 0.1, g, mean=1.0)
    return _normal(shape, 1.0 / math.sqrt(shape[1]), g)
