"""Seeded random values for backbone and head tensors (documented init scheme).

Every tensor gets its own ``torch.Generator`` seeded from sha256("<seed>/<name>"), so values do not
depend on generation order or sharding. Values are drawn in float32, then cast to the storage dtype.

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

import torch

OFFSET_NORM_SUFFIXES = (
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
    "language_model.norm.weight",
    "self_attn.q_norm.weight",
    "self_attn.k_norm.weight",
)
F32_SUFFIXES = ("linear_attn.A_log", "linear_attn.norm.weight")


def tensor_generator(seed: int, name: str) -> torch.Generator:
    """CPU generator seeded from sha256(f"{seed}/{name}") (first 8 bytes, masked to 63 bits)."""
    h = hashlib.sha256(f"{seed}/{name}".encode()).digest()
    g = torch.Generator()
    g.manual_seed(int.from_bytes(h[:8], "little") & ((1 << 63) - 1))
    return g


def _normal(shape, std, g, mean=0.0):
    t = torch.empty(shape, dtype=torch.float32)
    t.normal_(mean, std, generator=g)
    return t


def _uniform(shape, lo, hi, g):
    t = torch.empty(shape, dtype=torch.float32)
    t.uniform_(lo, hi, generator=g)
    return t


def backbone_tensor(name: str, shape: Tuple[int, ...], seed: int) -> torch.Tensor:
    """Random float32 tensor for backbone tensor ``name`` of ``shape`` (scheme in the module docstring)."""
    g = tensor_generator(seed, name)
    if name.endswith(OFFSET_NORM_SUFFIXES):
        return _normal(shape, 0.1, g)
    if name.endswith("linear_attn.norm.weight"):
        return _normal(shape, 0.1, g, mean=1.0)
    if name.endswith("linear_attn.A_log"):
        return _uniform(shape, 1.0, 16.0, g).log_()
    if name.endswith("linear_attn.dt_bias"):
        dt = _uniform(shape, math.log(1e-3), math.log(1e-1), g).exp_()
        return dt + torch.log(-torch.expm1(-dt))
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
        return _uniform(shape, 2.0, 8.0, g).log_()
    if name == "residual_gate":
        return _normal(shape, 1.0, g)
    if name == "type_embedding.weight":
        return _normal(shape, 0.5, g)
    if name.endswith("bias"):
        return _normal(shape, 0.02, g)
    if len(shape) == 1:  # LayerNorm weights
        return _normal(shape, 0.1, g, mean=1.0)
    return _normal(shape, 1.0 / math.sqrt(shape[1]), g)
