#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write the vision tower of a Clef release folder as a projector GGUF ("mmproj") the way llama.cpp's
``convert_hf_to_gguf.py --mmproj`` writes one for Qwen3.5, with PyPI ``gguf`` (the writer llama.cpp uses).

Usage:
    python tools/reference/make_mmproj.py --model DIR --out FILE.gguf [--type f32|f16|bf16|q8_0]

What it writes (facts read from llama.cpp 3f545becc: conversion/qwen3vl.py, whose Qwen3VLVisionModel is the
projector converter registered for Qwen3_5ForConditionalGeneration; conversion/base.py MmprojModel and
ModelBase.prepare_tensors; gguf-py constants.py, tensor_mapping.py, gguf_writer.py; tools/mtmd/clip.cpp and
clip-impl.h, which read the file. Collected in docs/GGUF.md "The projector file"; no code copied):
    metadata   general.architecture "clip", general.type "mmproj", general.name, general.file_type (0 F32,
               1 F16, 32 BF16, 7 Q8_0), general.quantization_version 2, clip.has_vision_encoder true,
               clip.projector_type "qwen3vl_merger", clip.use_gelu true, clip.vision.{projection_dim (the text
               hidden size), image_size (sqrt(num_position_embeddings) * patch_size), patch_size,
               embedding_length, feed_forward_length, block_count, attention.head_count (u32),
               image_mean, image_std (f32 arrays, from the folder's processor settings), spatial_merge_size
               (u32), attention.layer_norm_epsilon (f32: the *text* config's rms_norm_eps, as the converter
               writes it), is_deepstack_layers (bool array, one per block; all false for Qwen3.5)}
    tensors    model.visual.X -> (PyTorch shapes; GGUF stores ne reversed)
                 patch_embed.proj.weight [D, C, 2, P, P]  -> v.patch_embd.weight   = [:, :, 0] [D, C, P, P]
                                                             v.patch_embd.weight.1 = [:, :, 1] [D, C, P, P]
                 patch_embed.proj.bias                    -> v.patch_embd.bias
                 pos_embed.weight [N, D]                  -> v.position_embd.weight
                 blocks.i.norm1 / norm2 (.weight, .bias)  -> v.blk.i.ln1 / ln2
                 blocks.i.attn.qkv / attn.proj            -> v.blk.i.attn_qkv (fused, not split) / attn_out
                 blocks.i.mlp.linear_fc1 / linear_fc2     -> v.blk.i.ffn_up / ffn_down
                 merger.norm                              -> v.post_ln
                 merger.linear_fc1 / linear_fc2           -> mm.0 / mm.2
               no transform of any value (no 1 + w, no transposes); the temporal size must be 2
    dtypes     every 1-D tensor, v.position_embd.weight and the patch embedding (both slices) F32, except that
               an F16 file keeps the patch embedding F16; the other 2-D weights in --type (BF16 and Q8_0 through
               gguf.quants.quantize; a row length that is not whole Q8_0 blocks falls back to F16, as the
               converter does). Values are first widened to f32 (exact for a bf16 folder).

``convert(..., mutate=f)`` lets tests edit the {name: (array, ggml type)} and {key: (value, GGUFValueType)}
dicts before writing (bad files).
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V

import make_gguf

OUTTYPES = {"f32": Q.F32, "f16": Q.F16, "bf16": Q.BF16, "q8_0": Q.Q8_0}
FILE_TYPE = {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7}  # llama_ftype: ALL_F32, MOSTLY_F16, MOSTLY_BF16, MOSTLY_Q8_0

BLOCK_NAMES = {"norm1": "ln1", "norm2": "ln2", "attn.qkv": "attn_qkv", "attn.proj": "attn_out",
               "mlp.linear_fc1": "ffn_up", "mlp.linear_fc2": "ffn_down"}
MERGER_NAMES = {"norm": "v.post_ln", "linear_fc1": "mm.0", "linear_fc2": "mm.2"}


def read_vision(model_dir: pathlib.Path) -> Dict[str, np.ndarray]:
    """The folder's model.visual.* tensors as float32 arrays (bf16 and f16 widened exactly)."""
    import torch
    from safetensors import safe_open

    files = [model_dir / "model.safetensors"]
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        files = sorted({model_dir / f for f in json.loads(index.read_text())["weight_map"].values()})
    out: Dict[str, np.ndarray] = {}
    for f in files:
        with safe_open(str(f), "pt") as st:
            for name in st.keys():
                if name.startswith("model.visual."):
                    out[name[len("model.visual."):]] = st.get_tensor(name).to(torch.float32).numpy()
    if not out:
        raise ValueError(f"{model_dir}: no model.visual.* tensors (not a release folder with a vision tower)")
    return out


def image_settings(model_dir: pathlib.Path) -> Dict[str, Any]:
    """image_mean / image_std as the converter reads them: preprocessor_config.json, then the image_processor
    object of processor_config.json over it."""
    cfg: Dict[str, Any] = {}
    pre = model_dir / "preprocessor_config.json"
    if pre.is_file():
        cfg.update(json.loads(pre.read_text()))
    proc = model_dir / "processor_config.json"
    if proc.is_file():
        p = json.loads(proc.read_text())
        cfg.update(p)
        cfg.update(p.get("image_processor", {}))
    if "image_mean" not in cfg or "image_std" not in cfg:
        raise ValueError(f"{model_dir}: no image_mean / image_std in preprocessor_config.json or processor_config.json")
    return cfg


def gguf_name(name: str) -> str:
    """The projector's name of a model.visual.* tensor (without the prefix), but the patch weight."""
    if name == "patch_embed.proj.bias":
        return "v.patch_embd.bias"
    if name == "pos_embed.weight":
        return "v.position_embd.weight"
    parts = name.split(".")
    if parts[0] == "blocks":
        stem, suffix = ".".join(parts[2:-1]), parts[-1]
        return f"v.blk.{parts[1]}.{BLOCK_NAMES[stem]}.{suffix}"
    if parts[0] == "merger":
        return f"{MERGER_NAMES[parts[1]]}.{parts[2]}"
    raise ValueError(f"model.visual.{name}: no projector name for it")


def ggml_type(name: str, x: np.ndarray, outtype: str) -> Q:
    """The type the converter stores `name` in (MmprojModel.tensor_force_quant, then prepare_tensors' rules)."""
    if ".patch_embd.weight" in name:
        return Q.F16 if outtype == "f16" else Q.F32
    if x.ndim <= 1 or name == "v.position_embd.weight" or not name.endswith(".weight"):
        return Q.F32
    return OUTTYPES[outtype]


def encode(x: np.ndarray, qt: Q) -> Tuple[np.ndarray, Q]:
    """(data for GGUFWriter.add_tensor, type written); Q8_0 rows that are not whole blocks fall back to F16."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if qt == Q.F32:
        return x, Q.F32
    if qt == Q.F16:
        return x.astype(np.float16), Q.F16
    try:
        return gguf.quants.quantize(x, qt), qt
    except gguf.QuantError:
        return x.astype(np.float16), Q.F16


def convert(model_dir: pathlib.Path, out: pathlib.Path, outtype: str = "f16",
            mutate: Optional[Callable[[Dict[str, Tuple[np.ndarray, Q]], Dict[str, Tuple[Any, V]]], None]] = None
            ) -> Dict[str, Q]:
    """Writes `out`; returns {tensor name: ggml type written}."""
    model_dir, out = pathlib.Path(model_dir), pathlib.Path(out)
    if outtype not in OUTTYPES:
        raise ValueError(f"--type {outtype!r}: expected one of {sorted(OUTTYPES)}")
    cfg = json.loads((model_dir / "config.json").read_text())
    vis = cfg.get("vision_config")
    if not vis:
        raise ValueError(f"{model_dir}/config.json: no vision_config")
    text = cfg.get("text_config", cfg)
    hf = read_vision(model_dir)

    tensors: Dict[str, Tuple[np.ndarray, Q]] = {}
    for name, x in hf.items():
        if name == "patch_embed.proj.weight":
            if x.ndim != 5 or x.shape[2] != 2:
                raise ValueError(f"patch_embed.proj.weight {x.shape}: the converter needs temporal_patch_size 2")
            for g, sl in (("v.patch_embd.weight", x[:, :, 0]), ("v.patch_embd.weight.1", x[:, :, 1])):
                tensors[g] = encode(sl, ggml_type(g, sl, outtype))
            continue
        g = gguf_name(name)
        tensors[g] = encode(x, ggml_type(g, x, outtype))

    patch = int(vis.get("patch_size", 16))
    n_pos = int(vis.get("num_position_embeddings", 2304))
    depth = int(vis["depth"])
    ip = image_settings(model_dir)
    deepstack = [False] * depth
    for i in vis.get("deepstack_visual_indexes", []):
        deepstack[i] = True
    md: Dict[str, Tuple[Any, V]] = {
        "general.type": ("mmproj", V.STRING),
        "general.name": (model_dir.name, V.STRING),
        "general.file_type": (FILE_TYPE[outtype], V.UINT32),
        "clip.has_vision_encoder": (True, V.BOOL),
        "clip.vision.projection_dim": (int(text["hidden_size"]), V.UINT32),
        "clip.vision.image_size": (int(math.sqrt(n_pos) * patch), V.UINT32),
        "clip.vision.patch_size": (patch, V.UINT32),
        "clip.vision.embedding_length": (int(vis["hidden_size"]), V.UINT32),
        "clip.vision.feed_forward_length": (int(vis["intermediate_size"]), V.UINT32),
        "clip.vision.block_count": (depth, V.UINT32),
        "clip.vision.attention.head_count": (int(vis["num_heads"]), V.UINT32),
        "clip.vision.image_mean": ([float(v) for v in ip["image_mean"]], V.ARRAY),
        "clip.vision.image_std": ([float(v) for v in ip["image_std"]], V.ARRAY),
        "clip.projector_type": ("qwen3vl_merger", V.STRING),
        "clip.use_gelu": (True, V.BOOL),
        "clip.vision.spatial_merge_size": (int(vis.get("spatial_merge_size", 2)), V.UINT32),
        "clip.vision.attention.layer_norm_epsilon": (float(text.get("rms_norm_eps", 1e-6)), V.FLOAT32),
        "clip.vision.is_deepstack_layers": (deepstack, V.ARRAY),
        "general.quantization_version": (2, V.UINT32),
    }
    if mutate is not None:
        mutate(tensors, md)

    return make_gguf.write_gguf(out, "clip", md, tensors)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, type=pathlib.Path, help="Clef release folder (with a vision tower)")
    ap.add_argument("--out", required=True, type=pathlib.Path, help="projector GGUF to write (mmproj-NAME-TYPE.gguf)")
    ap.add_argument("--type", "--outtype", dest="outtype", default="f16", type=str.lower, choices=sorted(OUTTYPES),
                    help="ggml type of the 2-D weights (default f16, the converter's default)")
    args = ap.parse_args()
    types = convert(args.model, args.out, args.outtype)
    counts: Dict[str, int] = {}
    for qt in types.values():
        counts[qt.name] = counts.get(qt.name, 0) + 1
    print(f"{args.out}: {len(types)} tensors ({', '.join(f'{n} {k}' for k, n in sorted(counts.items()))})",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
