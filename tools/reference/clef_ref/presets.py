# SPDX-License-Identifier: MIT
"""Model presets for random-weight Clef release folders (docs/MODEL.md §1.1, §1.3; docs/PROTOCOL.md §4.1)."""

from __future__ import annotations

import copy
from typing import Any, Dict

VOCAB_SIZE = 248320
ENDOFTEXT_ID = 248044


def _layer_types(n: int, interval: int = 4):
    return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]


def _rope(mrope_section):
    return {
        "rope_type": "default",
        "rope_theta": 10000000.0,
        "partial_rotary_factor": 0.25,
        "mrope_section": list(mrope_section),
        "mrope_interleaved": True,
    }


PRESETS: Dict[str, Dict[str, Any]] = {
    "tiny": {
        "text": dict(
            vocab_size=VOCAB_SIZE, hidden_size=64, num_hidden_layers=4, intermediate_size=128,
            num_attention_heads=4, num_key_value_heads=2, head_dim=64,
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32, linear_value_head_dim=32,
            linear_conv_kernel_dim=4, layer_types=_layer_types(4), rope_parameters=_rope([3, 3, 2]),
            tie_word_embeddings=True, max_position_embeddings=262144,
        ),
        "vision": dict(depth=2, hidden_size=32, num_heads=2, intermediate_size=64, out_hidden_size=64,
                       patch_size=16, temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=2304),
        "head": dict(hidden_size=64, width=32, routing_layers=2, layers=2, heads=4, feedforward=64),
        "head_dtype": "f32",
        "sharded": False,
    },
    "0.8b": {
        "text": dict(
            vocab_size=VOCAB_SIZE, hidden_size=1024, num_hidden_layers=24, intermediate_size=3584,
            num_attention_heads=8, num_key_value_heads=2, head_dim=256,
            linear_num_key_heads=16, linear_num_value_heads=16, linear_key_head_dim=128, linear_value_head_dim=128,
            linear_conv_kernel_dim=4, layer_types=_layer_types(24), rope_parameters=_rope([11, 11, 10]),
            tie_word_embeddings=True, max_position_embeddings=262144,
        ),
        "vision": dict(depth=12, hidden_size=768, num_heads=12, intermediate_size=3072, out_hidden_size=1024,
                       patch_size=16, temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=2304),
        "head": dict(hidden_size=1024, width=1024, routing_layers=2, layers=2, heads=16, feedforward=4096),
        "head_dtype": "f32",
        "sharded": False,
        "expected_text_params": 752.4e6,
    },
    # The 0.8b preset's layer shapes (hidden, heads, head_dim, Gated DeltaNet dims, MLP, vision width,
    # head width and layers) with one block of each backbone layer kind and one vision block: the same
    # kernels with the same blocking as 0.8b at a fraction of the time; the per-level live comparisons
    # (scripts/test.sh, CLEF_ISA) run it, the full 0.8b parity and drift tests run once, natively.
    "0.8b-shapes": {
        "text": dict(
            vocab_size=VOCAB_SIZE, hidden_size=1024, num_hidden_layers=2, intermediate_size=3584,
            num_attention_heads=8, num_key_value_heads=2, head_dim=256,
            linear_num_key_heads=16, linear_num_value_heads=16, linear_key_head_dim=128, linear_value_head_dim=128,
            linear_conv_kernel_dim=4, layer_types=_layer_types(2, interval=2), rope_parameters=_rope([11, 11, 10]),
            tie_word_embeddings=True, max_position_embeddings=262144,
        ),
        "vision": dict(depth=1, hidden_size=768, num_heads=12, intermediate_size=3072, out_hidden_size=1024,
                       patch_size=16, temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=2304),
        "head": dict(hidden_size=1024, width=1024, routing_layers=2, layers=2, heads=16, feedforward=4096),
        "head_dtype": "f32",
        "sharded": False,
    },
    "flash": {
        "text": dict(
            vocab_size=VOCAB_SIZE, hidden_size=4096, num_hidden_layers=32, intermediate_size=12288,
            num_attention_heads=16, num_key_value_heads=4, head_dim=256,
            linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128, linear_value_head_dim=128,
            linear_conv_kernel_dim=4, layer_types=_layer_types(32), rope_parameters=_rope([11, 11, 10]),
            tie_word_embeddings=False, max_position_embeddings=262144,
        ),
        "vision": dict(depth=27, hidden_size=1152, num_heads=16, intermediate_size=4304, out_hidden_size=4096,
                       patch_size=16, temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=2304),
        "head": dict(hidden_size=4096, width=1024, routing_layers=2, layers=4, heads=16, feedforward=4096),
        "head_dtype": "bf16",
        "sharded": True,
        "expected_text_params": 8.954e9,
        "expected_head_params": 121762820,
    },
}


# The tiny preset widened so that every linear layer's input is whole 256-element K-quant blocks
# (hidden 256, MLP 512, 4 x 64 value dims): K-quant GGUFs of it run every block type's kernels.
PRESETS["tiny-kq"] = copy.deepcopy(PRESETS["tiny"])
PRESETS["tiny-kq"]["text"].update(hidden_size=256, intermediate_size=512, linear_key_head_dim=64,
                                  linear_value_head_dim=64)
PRESETS["tiny-kq"]["vision"]["out_hidden_size"] = 256
PRESETS["tiny-kq"]["head"]["hidden_size"] = 256

def make_config(preset: str, dtype: str = "bf16"):
    """Build the composite ``transformers.Qwen3_5Config`` for a preset (docs/MODEL.md §1.1/§1.3).

    Args: preset in {"tiny", "0.8b", "0.8b-shapes", "flash"}; dtype "bf16" or "f32" (recorded as config ``dtype``).
    Returns: Qwen3_5Config with architectures ["Qwen3_5ForConditionalGeneration"], explicit layer_types,
    rope_parameters (mrope_section, mrope_interleaved) and tie_word_embeddings at both levels.
    """
    import torch
    from transformers import Qwen3_5Config

    p = PRESETS[preset]
    text = copy.deepcopy(p["text"])
    text["eos_token_id"] = ENDOFTEXT_ID
    cfg = Qwen3_5Config(text_config=text, vision_config=copy.deepcopy(p["vision"]),
                        tie_word_embeddings=text["tie_word_embeddings"])
    cfg.architectures = ["Qwen3_5ForConditionalGeneration"]
    cfg.dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
    return cfg


def meta_model(cfg):
    """Instantiate ``Qwen3_5ForConditionalGeneration(cfg)`` on the meta device (no memory)."""
    import torch
    from transformers import Qwen3_5ForConditionalGeneration

    with torch.device("meta"):
        return Qwen3_5ForConditionalGeneration(cfg)


def checkpoint_shapes(cfg) -> Dict[str, tuple]:
    """Saved tensor names → shapes, in module order (lm_head.weight dropped when tied)."""
    m = meta_model(cfg)
    shapes = {k: tuple(v.shape) for k, v in m.state_dict().items()}
    if cfg.tie_word_embeddings:
        shapes.pop("lm_head.weight", None)
    return shapes


def text_param_count(cfg) -> int:
    """Text backbone parameters: language_model (incl. embedding) + lm_head when untied (arch. §9)."""
    m = meta_model(cfg)
    n = sum(p.numel() for p in m.model.language_model.parameters())
    if not cfg.tie_word_embeddings:
        n += m.lm_head.weight.numel()
    return n


def vision_param_count(cfg) -> int:
    """Vision tower parameters (docs/MODEL.md §9)."""
    return sum(p.numel() for p in meta_model(cfg).model.visual.parameters())
