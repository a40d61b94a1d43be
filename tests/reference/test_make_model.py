# SPDX-License-Identifier: MIT
"""make_model.py output contract and preset parameter counts."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch
from safetensors import safe_open

from clef_ref import presets as P
from clef_ref.head import JointSchemaHead, head_param_count

EXPECTED_FILES = {
    "config.json", "model.safetensors", "joint_head.safetensors", "joint_head_config.json", "tokenizer.json",
    "tokenizer_config.json", "processor_config.json", "random_weights.json", "SHA256SUMS",
}


def test_folder_files_and_sha256sums(tiny_dir):
    assert {p.name for p in tiny_dir.iterdir()} == EXPECTED_FILES
    lines = (tiny_dir / "SHA256SUMS").read_text().splitlines()
    names = [ln.split("  ", 1)[1] for ln in lines]
    assert names == sorted(EXPECTED_FILES - {"SHA256SUMS"})
    r = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=tiny_dir, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_config_json(tiny_dir):
    cfg = json.loads((tiny_dir / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert cfg["model_type"] == "qwen3_5"
    assert cfg["tie_word_embeddings"] is True
    for k, v in {"image_token_id": 248056, "video_token_id": 248057, "vision_start_token_id": 248053,
                 "vision_end_token_id": 248054}.items():
        assert cfg[k] == v
    tc = cfg["text_config"]
    assert tc["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    assert tc["rope_parameters"] == {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                                     "mrope_section": [3, 3, 2], "mrope_interleaved": True}
    assert tc["vocab_size"] == 248320 and tc["hidden_size"] == 64
    assert cfg["vision_config"]["depth"] == 2 and cfg["vision_config"]["out_hidden_size"] == 64
    rw = json.loads((tiny_dir / "random_weights.json").read_text())
    assert rw["model_name"] == "clef-tiny-random" and rw["seed"] == 0 and "clef-flash tokenizer.json" in rw["tokenizer"]
    pp = json.loads((tiny_dir / "processor_config.json").read_text())["image_processor"]
    assert pp["size"] == {"shortest_edge": 65536, "longest_edge": 16777216} and pp["resample"] == 3


def test_backbone_dtypes_and_names(tiny_dir):
    cfg = P.make_config("tiny")
    shapes = P.checkpoint_shapes(cfg)
    with safe_open(str(tiny_dir / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert keys == set(shapes)
        assert "lm_head.weight" not in keys
        for k in keys:
            t = f.get_tensor(k)
            assert tuple(t.shape) == shapes[k]
            want = torch.float32 if k.endswith(("linear_attn.A_log", "linear_attn.norm.weight")) else torch.bfloat16
            assert t.dtype == want, k
            assert torch.isfinite(t.float()).all()
        # offset norms are centred on 0, the gated norm on 1
        assert f.get_tensor("model.language_model.norm.weight").float().abs().mean() < 0.3
        assert (f.get_tensor("model.language_model.layers.0.linear_attn.norm.weight").float().mean() - 1).abs() < 0.2
        a_log = f.get_tensor("model.language_model.layers.0.linear_attn.A_log")
        assert ((a_log >= 0) & (a_log <= torch.log(torch.tensor(16.0)))).all()


def test_transformers_and_tokenizers_load(tiny_dir):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, Qwen3_5ForConditionalGeneration

    m, info = Qwen3_5ForConditionalGeneration.from_pretrained(str(tiny_dir), dtype=torch.float32,
                                                               output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert m.get_output_embeddings().weight.data_ptr() == m.model.language_model.embed_tokens.weight.data_ptr()
    assert m.model.language_model.layers[0].linear_attn.A_log.dtype == torch.float32
    tok = Tokenizer.from_file(str(tiny_dir / "tokenizer.json"))
    assert tok.get_vocab_size(with_added_tokens=True) == 248077  # the clef-flash file lists all 33 added tokens
    at = AutoTokenizer.from_pretrained(str(tiny_dir))
    assert len(at) == 248077
    text = "<|im_start|>user\nHello, wörld! 123<|im_end|>"
    assert at(text)["input_ids"] == tok.encode(text, add_special_tokens=False).ids


def test_head_loads_strictly(tiny_dir):
    from safetensors.torch import load_file

    cfg = json.loads((tiny_dir / "joint_head_config.json").read_text())
    assert cfg == {"hidden_size": 64, "width": 32, "routing_layers": 2, "layers": 2, "heads": 4, "feedforward": 64}
    sd = load_file(str(tiny_dir / "joint_head.safetensors"))
    assert all(t.dtype == torch.float32 for t in sd.values())
    for k in ("prior_logit_scale", "joint_logit_scale", "residual_gate"):
        assert sd[k].shape == torch.Size([])
    W, H, F = 32, 64, 64
    expect = {
        "memory_projection.weight": (W, H), "type_embedding.weight": (3, W),
        "evidence_layers.1.attention.in_proj_weight": (3 * W, W), "evidence_layers.0.feedforward.0.weight": (F, W),
        "evidence_layers.0.feedforward.3.weight": (W, F), "layers.1.multihead_attn.in_proj_bias": (3 * W,),
        "layers.0.linear1.weight": (F, W), "layers.0.norm3.bias": (W,), "residual_scorer.0.weight": (W, 4 * W),
        "residual_scorer.3.weight": (1, W), "residual_scorer.3.bias": (1,), "option_summary_norm.weight": (W,),
    }
    for k, shp in expect.items():
        assert tuple(sd[k].shape) == shp, k
    head = JointSchemaHead(**cfg)
    head.load_state_dict(sd, strict=True)
    assert sum(t.numel() for t in sd.values()) == head_param_count(cfg)


def test_param_counts_meta_only():
    n08 = P.text_param_count(P.make_config("0.8b"))
    assert abs(n08 - 752.4e6) / 752.4e6 < 0.005, n08
    flash = P.make_config("flash")
    assert flash.tie_word_embeddings is False
    nfl = P.text_param_count(flash)
    assert abs(nfl - 8.954e9) / 8.954e9 < 0.005, nfl
    assert "lm_head.weight" in P.checkpoint_shapes(flash)
    assert head_param_count(P.PRESETS["flash"]["head"]) == 121_762_820
    assert abs(P.vision_param_count(P.make_config("0.8b")) - 100.6e6) / 100.6e6 < 0.005
    assert abs(P.vision_param_count(flash) - 456.0e6) / 456.0e6 < 0.005


def test_flash_shard_plan():
    import make_model

    shapes = P.checkpoint_shapes(P.make_config("flash"))
    groups = make_model.plan_shards(shapes, "bf16", True)
    assert sum(len(g) for g in groups) == len(shapes) and len(groups) >= 5
    for g in groups:
        nbytes = sum(torch.Size(shapes[n]).numel() * (4 if n.endswith(("A_log", "linear_attn.norm.weight")) else 2)
                     for n in g)
        assert nbytes <= make_model.SHARD_BYTES
