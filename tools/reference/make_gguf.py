#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write a GGUF file from a Clef release folder the way llama.cpp writes one, with PyPI ``gguf`` (the
writer llama.cpp itself uses), in either of the two layouts clef reads:

    --layout qwen35  convert_hf_to_gguf.py's Qwen3.5 text model (architecture "qwen35"): the backbone
                     only; the release's joint_head.safetensors + joint_head_config.json go beside it
                     (bartowski's files).
    --layout clef    llama.cpp's Clef conversion (conversion/clef.py, architecture "clef"): the same
                     backbone under "clef." keys, no MTP, plus the head inside (ggml-org's files).

Needs the reference toolkit's virtual environment, the full tier of the set-up: PyPI gguf, numpy,
safetensors and PyTorch (torch computes A = -exp(A_log) and the bf16 rounding as the converter does).
`bash scripts/setup.sh --dev` makes it (.venv/, ~5 GB; tools/reference/README.md); run this file with
.venv/bin/python. The main tier (scripts/quickstart.sh) installs no Python.

Usage:
    .venv/bin/python tools/reference/make_gguf.py --model DIR --out FILE.gguf [--layout qwen35|clef]
        [--type f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|q2_k|q3_k|q4_k|q5_k|q6_k|q4_k_m|q5_k_m]

What it writes (facts read from llama.cpp 3f545becc conversion/qwen.py, conversion/clef.py,
gguf-py/gguf/constants.py and tensor_mapping.py, collected in docs/GGUF.md; no code copied):
    metadata   general.architecture ARCH ("qwen35" or "clef"), general.name, general.file_type,
               general.quantization_version 2, ARCH.{block_count, context_length, embedding_length,
               feed_forward_length, attention.head_count, attention.head_count_kv, attention.key_length,
               attention.value_length, attention.layer_norm_rms_epsilon (f32), rope.freq_base (f32),
               rope.dimension_count, rope.dimension_sections [t, h, w, 0] (i32), ssm.conv_kernel,
               ssm.state_size (= dk), ssm.group_count (= Hk), ssm.time_step_rank (= Hv), ssm.inner_size
               (= Hv*dv), full_attention_interval}; tokenizer.ggml.{model "gpt2", pre "qwen2" or "qwen35"
               (the split regex tokenizer.json names: "qwen2" for the clef-flash release's file), tokens
               (padded with [PADn] to vocab_size), token_type (1 normal, 3 control = special added token or
               one shaped <|...|>, 4 user defined = other added token, 5 unused = padding), merges ("a b"),
               eos_token_id, padding_token_id, add_bos_token false}
               clef layout also: clef.decision.type "clef", clef.decision.{routing_block_count,
               block_count, head_count} (u32), clef.attention.layer_norm_epsilon 1e-5 (f32),
               tokenizer.chat_template.systemone (a placeholder text: clef builds the prompt itself)
    tensors    token_embd, output_norm, (output when untied), blk.N.{attn_norm, post_attention_norm,
               ffn_gate/up/down; attn_qkv, attn_gate (in_proj_z), ssm_beta (in_proj_b), ssm_alpha
               (in_proj_a), ssm_conv1d [C, K], ssm_dt.bias, ssm_a, ssm_norm, ssm_out; attn_q (per head
               [q | gate], unchanged), attn_k, attn_v, attn_output, attn_q_norm, attn_k_norm}
               clef layout also the head: decision.hidden_norm, decision.proj_*, token_types,
               dec.blk.N.* (routing blocks first; in_proj split in q/k/v), decision.{option_summary_norm,
               field_norm, option_norm, scorer, scorer_out}, decision.scales [3] =
               [exp(min(p, ln 100)), exp(min(j, ln 100)), sigmoid(g)] (float64, then f32)
    transforms offset RMSNorm weights (all but the GDN gated norm) stored as fp32(1 + w); A_log stored as
               A = -exp(A_log) computed by torch in fp32 (as the converter does; for a few inputs one ulp
               from expf, which clef undoes for bf16 A_log: docs/GGUF.md "Bit-identical answers");
               conv1d squeezed; with Hk != Hv the V heads reordered from grouped to tiled order in the
               qkv V rows, z rows, a/b rows, A, dt_bias, conv V channels and out_proj columns
    dtypes     1-D tensors, ssm_conv1d and token_types F32; the other 2-D tensors in --type (q4_0..q8_0
               through gguf.quants.quantize, K-quants through tools/reference/kquants.py; a row length that
               is not whole blocks falls back to F16, as llama.cpp's converter does); --type q4_k_m /
               q5_k_m: llama-quantize's per-tensor mix (mixed_type), its fallbacks for partial blocks
    dropped    model.visual.* (llama.cpp writes the vision tower to a separate mmproj file), mtp.* (as
               --no-mtp), lm_head.weight when tied

The folder's random_weights.json (when it has one) is copied beside the GGUF, where clef reads it, so the
answers name a random-weight model as such. A --model that is not a release folder is one error line, exit 2.

For tests, ``convert(..., mutate=f)`` lets f(tensors, metadata) edit the {name: (array, ggml type)} and
{key: (value, GGUFValueType)} dicts before writing.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import functools
import json
import math
import pathlib
import shutil
import sys
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V

import kquants

OUTTYPES = {"f32": Q.F32, "f16": Q.F16, "bf16": Q.BF16, "q8_0": Q.Q8_0, "q4_0": Q.Q4_0, "q4_1": Q.Q4_1,
            "q5_0": Q.Q5_0, "q5_1": Q.Q5_1, "q2_k": Q.Q2_K, "q3_k": Q.Q3_K, "q4_k": Q.Q4_K, "q5_k": Q.Q5_K,
            "q6_k": Q.Q6_K}
# llama_ftype values (ALL_F32, MOSTLY_F16, ...; the K-quant ones name the _M mixes' base type)
FILE_TYPE = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9, "q2_k": 10, "q3_k": 12,
             "q4_k": 15, "q5_k": 17, "q6_k": 18, "bf16": 32}
LAYOUTS = ("qwen35", "clef")
# The _M mixes of llama-quantize (llama.cpp src/llama-quant.cpp, dense models): the base K-quant for
# every 2-D weight, with more bits where that file's rules put them (mixed_type below).
MIXES = {"q4_k_m": Q.Q4_K, "q5_k_m": Q.Q5_K}
FILE_TYPE.update({"q4_k_m": 15, "q5_k_m": 17})
# What llama-quantize writes when a row is not whole 256-element blocks (its fallback per K-quant).
K_FALLBACK = {Q.Q4_K: Q.Q5_0, Q.Q5_K: Q.Q5_1, Q.Q6_K: Q.Q8_0, Q.Q2_K: Q.Q4_0, Q.Q3_K: Q.Q4_0}


def more_bits(i: int, n: int) -> bool:
    """llama-quantize's choice of the layers that get more bits: the first and last eighth, and every
    third layer between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def mixed_type(g: str, mix: str, n_layers: int, tied: bool) -> Q:
    """The type llama-quantize gives backbone tensor `g` in `mix` (q4_k_m / q5_k_m), as its Q4_K_M and
    Q5_K_M files of a Qwen3.5 folder hold them: output.weight Q6_K (token_embd.weight when the output
    is tied to it); each layer's V projection (attn_v in attention layers, the fused attn_qkv in Gated
    DeltaNet layers) and ffn_down Q6_K in the layers more_bits picks; everything else the base type."""
    base = MIXES[mix]
    if g == "output.weight" or (g == "token_embd.weight" and tied):
        return Q.Q6_K
    if g.endswith(("attn_v.weight", "attn_qkv.weight", "ffn_down.weight")) and more_bits(int(g.split(".")[1]),
                                                                                          n_layers):
        return Q.Q6_K
    return base

GDN = {"in_proj_qkv.weight": "attn_qkv.weight", "in_proj_z.weight": "attn_gate.weight",
       "in_proj_b.weight": "ssm_beta.weight", "in_proj_a.weight": "ssm_alpha.weight",
       "conv1d.weight": "ssm_conv1d.weight", "dt_bias": "ssm_dt.bias", "A_log": "ssm_a",
       "norm.weight": "ssm_norm.weight", "out_proj.weight": "ssm_out.weight"}
ATTN = {"q_proj.weight": "attn_q.weight", "k_proj.weight": "attn_k.weight", "v_proj.weight": "attn_v.weight",
        "o_proj.weight": "attn_output.weight", "q_norm.weight": "attn_q_norm.weight",
        "k_norm.weight": "attn_k_norm.weight"}
LAYER = {"input_layernorm.weight": "attn_norm.weight",
         "post_attention_layernorm.weight": "post_attention_norm.weight",
         "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
         "mlp.down_proj.weight": "ffn_down.weight"}


def gguf_name(hf: str, prefix: str) -> Optional[str]:
    """GGUF name of a checkpoint tensor; None for tensors llama.cpp's text GGUF leaves out."""
    if hf.startswith("model.visual.") or hf.startswith("mtp."):
        return None
    if hf == "lm_head.weight":
        return "output.weight"
    if not hf.startswith(prefix):
        raise ValueError(f"unexpected tensor {hf}")
    rest = hf[len(prefix):]
    if rest == "embed_tokens.weight":
        return "token_embd.weight"
    if rest == "norm.weight":
        return "output_norm.weight"
    parts = rest.split(".", 2)
    if parts[0] != "layers":
        raise ValueError(f"unexpected tensor {hf}")
    blk, tail = f"blk.{int(parts[1])}.", parts[2]
    if tail in LAYER:
        return blk + LAYER[tail]
    if tail.startswith("linear_attn.") and tail[len("linear_attn."):] in GDN:
        return blk + GDN[tail[len("linear_attn."):]]
    if tail.startswith("self_attn.") and tail[len("self_attn."):] in ATTN:
        return blk + ATTN[tail[len("self_attn."):]]
    raise ValueError(f"unexpected tensor {hf}")


def tiled(x: np.ndarray, axis: int, hk: int, hv: int, width: int) -> np.ndarray:
    """Reorders Hv blocks of `width` along `axis` from grouped (k-head major) to tiled order."""
    r = hv // hk
    shape = list(x.shape)
    x = x.reshape(shape[:axis] + [hk, r, width] + shape[axis + 1:])
    x = np.swapaxes(x, axis, axis + 1)
    return np.ascontiguousarray(x).reshape(shape)


def bf16_bits_to_f32(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    import torch

    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


class FolderTensors:
    """The folder's tensors by name, read one at a time when asked (a flash-sized folder does not fit
    in memory twice): BF16 as uint16 bits, F32 as float32, F16 as float16."""

    def __init__(self, files: list):
        from safetensors import safe_open

        self._where: Dict[str, pathlib.Path] = {}
        for f in files:
            with safe_open(str(f), "pt") as st:
                for name in st.keys():
                    self._where[name] = f

    def keys(self):
        return self._where.keys()

    def __contains__(self, name: object) -> bool:
        return name in self._where

    def __getitem__(self, name: str) -> np.ndarray:
        import torch
        from safetensors import safe_open

        with safe_open(str(self._where[name]), "pt") as st:
            t = st.get_tensor(name)
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(np.uint16)
        if t.dtype in (torch.float32, torch.float16):
            return t.numpy()
        raise ValueError(f"{name}: dtype {t.dtype} not supported")


def read_folder(model_dir: pathlib.Path) -> Tuple[Dict[str, Any], FolderTensors]:
    """config.json and the folder's tensors (FolderTensors: read when asked)."""
    cfg = json.loads((model_dir / "config.json").read_text())
    files = [model_dir / "model.safetensors"]
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        files = sorted({model_dir / f for f in json.loads(index.read_text())["weight_map"].values()})
    return cfg, FolderTensors(files)


def as_f32(x: np.ndarray) -> np.ndarray:
    return bf16_bits_to_f32(x) if x.dtype == np.uint16 else x.astype(np.float32)


def _pre_name(tj: Dict[str, Any]) -> str:
    """tokenizer.ggml.pre for the split regex tokenizer.json names: "qwen2" for Qwen2's (the clef-flash
    release's file), "qwen35" for Qwen3.5's own (docs/TOKENIZER.md "Which split regex")."""
    from clef_ref.tokenizer_build import QWEN2_SPLIT_REGEX, QWEN35_SPLIT_REGEX

    found = json.dumps(tj.get("pre_tokenizer"), ensure_ascii=False)
    for name, regex in (("qwen2", QWEN2_SPLIT_REGEX), ("qwen35", QWEN35_SPLIT_REGEX)):
        if json.dumps(regex, ensure_ascii=False)[1:-1] in found:
            return name
    raise ValueError("tokenizer.json: its split regex is neither Qwen2's nor Qwen3.5's")


def tokenizer_metadata(model_dir: pathlib.Path, vocab_size: int) -> Dict[str, Tuple[Any, V]]:
    """tokenizer.ggml.* from tokenizer.json + tokenizer_config.json. The arrays are tuples shared by every
    call on the same files (unchanged size, mtime and inode), so a caller that edits one copies it first
    (`list(tokens)`), and _Writer packs each only once per process."""
    stamp = tuple((st.st_ino, st.st_size, st.st_mtime_ns) for st in
                  ((model_dir / n).stat() for n in ("tokenizer.json", "tokenizer_config.json")))
    return dict(_tokenizer_metadata(str(model_dir.resolve()), vocab_size, stamp))


@functools.lru_cache(maxsize=4)
def _tokenizer_metadata(model_dir: str, vocab_size: int, stamp: tuple) -> Tuple[Tuple[str, Tuple[Any, V]], ...]:
    """tokenizer_metadata's items, read once per (folder, vocab size, file stamp); arrays as tuples."""
    md = _read_tokenizer_metadata(pathlib.Path(model_dir), vocab_size)
    return tuple((k, (tuple(v) if vt == V.ARRAY else v, vt)) for k, (v, vt) in md.items())


def _read_tokenizer_metadata(model_dir: pathlib.Path, vocab_size: int) -> Dict[str, Tuple[Any, V]]:
    tj = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    tc = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    vocab = tj["model"]["vocab"]
    added: Dict[int, Tuple[str, bool]] = {}
    for a in tj.get("added_tokens", []):
        added[a["id"]] = (a["content"], bool(a.get("special", False)))
    for k, a in tc.get("added_tokens_decoder", {}).items():
        added[int(k)] = (a["content"], bool(a.get("special", False)))
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]
    types = [5] * vocab_size
    for t, i in vocab.items():
        tokens[i], types[i] = t, 1
    for i, (content, special) in added.items():
        # control: special, or shaped like <|...|> (llama.cpp marks those control whatever the flag says)
        looks_special = content.startswith("<|") and content.endswith("|>")
        tokens[i], types[i] = content, 3 if special or looks_special else 4
    merges = [m if isinstance(m, str) else f"{m[0]} {m[1]}" for m in tj["model"]["merges"]]
    ids = {c: i for i, (c, _) in added.items()}
    md: Dict[str, Tuple[Any, V]] = {
        "tokenizer.ggml.model": ("gpt2", V.STRING),
        "tokenizer.ggml.pre": (_pre_name(tj), V.STRING),
        "tokenizer.ggml.tokens": (tokens, V.ARRAY),
        "tokenizer.ggml.token_type": (types, V.ARRAY),
        "tokenizer.ggml.merges": (merges, V.ARRAY),
    }
    if tc.get("eos_token") in ids:
        md["tokenizer.ggml.eos_token_id"] = (ids[tc["eos_token"]], V.UINT32)
    if tc.get("pad_token") in ids:
        md["tokenizer.ggml.padding_token_id"] = (ids[tc["pad_token"]], V.UINT32)
    md["tokenizer.ggml.add_bos_token"] = (False, V.BOOL)
    return md


def encode(x: np.ndarray, target: Q, k_fallback: bool = False) -> Tuple[np.ndarray, Q]:
    """A 2-D tensor (float32, float16 or bf16 bits) as ggml type `target`: (data for GGUFWriter, type
    written). Rows that are not whole blocks of a quantized type fall back to F16 (as llama.cpp's
    converter), or with k_fallback a K-quant to K_FALLBACK's type (as llama-quantize)."""
    if target == Q.F32:
        return as_f32(x), Q.F32
    if target == Q.BF16:
        return (x if x.dtype == np.uint16 else f32_to_bf16_bits(as_f32(x))), Q.BF16
    if target == Q.F16:
        return as_f32(x).astype(np.float16), Q.F16
    if target in kquants.TYPES:
        if x.shape[-1] % kquants.QK != 0:
            if k_fallback:
                return encode(x, K_FALLBACK[target])
            return as_f32(x).astype(np.float16), Q.F16
        return kquants.quantize(as_f32(x), target), target
    try:
        return gguf.quants.quantize(as_f32(x), target), target
    except gguf.QuantError:
        return as_f32(x).astype(np.float16), Q.F16


ROW_CHUNK_ELEMENTS = 1 << 24  # encode large tensors this many elements at a time (rows are independent)
SPILL_FOLDER_BYTES = 2 << 30  # folders larger than this keep their encoded tensors in a scratch file


class Spill:
    """Encoded tensors kept in a scratch file instead of memory (np.memmap views), for folders too
    large to hold twice. The file is unlinked as soon as it is open, so it goes away with the last view
    even if the conversion fails."""

    def __init__(self, path: pathlib.Path):
        self.f = open(path, "wb+")
        path.unlink()
        self.offset = 0

    def store(self, parts: list) -> np.ndarray:
        """The row-chunk arrays `parts` (same dtype and trailing shape) as one memmap [rows, ...]."""
        rows = sum(a.shape[0] for a in parts)
        shape = (rows, *parts[0].shape[1:])
        start = -(-self.offset // 64) * 64
        self.f.seek(start)
        for a in parts:
            self.f.write(np.ascontiguousarray(a).tobytes())
        self.f.flush()
        self.offset = start + rows * int(np.prod(shape[1:], dtype=np.int64)) * parts[0].dtype.itemsize
        return np.memmap(self.f, dtype=parts[0].dtype, mode="r", offset=start, shape=shape)


def encode_chunked(x: np.ndarray, target: Q, k_fallback: bool, spill: Optional[Spill]) -> Tuple[np.ndarray, Q]:
    """encode(), row chunks at a time when the tensor is large (every type here quantizes rows on their
    own, so the bytes are the same), and into `spill` when given."""
    if spill is None and x.size <= ROW_CHUNK_ELEMENTS:
        return encode(x, target, k_fallback)
    rows = max(1, ROW_CHUNK_ELEMENTS // max(1, int(np.prod(x.shape[1:], dtype=np.int64))))
    parts, qt = [], None
    for r0 in range(0, x.shape[0], rows):
        data, qt = encode(x[r0:r0 + rows], target, k_fallback)
        parts.append(data)
    if spill is not None:
        return spill.store(parts), qt
    return np.concatenate(parts, axis=0), qt


def read_head(model_dir: pathlib.Path) -> Dict[str, np.ndarray]:
    """joint_head.safetensors as float32 arrays."""
    import torch
    from safetensors import safe_open

    out: Dict[str, np.ndarray] = {}
    with safe_open(str(model_dir / "joint_head.safetensors"), "pt") as st:
        for name in st.keys():
            out[name] = st.get_tensor(name).float().numpy()
    return out


HEAD_NAMES = {"hidden_norm": "decision.hidden_norm", "option_summary_norm": "decision.option_summary_norm",
              "field_norm": "decision.field_norm", "option_norm": "decision.option_norm",
              "residual_scorer.0": "decision.scorer", "residual_scorer.3": "decision.scorer_out",
              "type_embedding": "token_types"}
ROUTING = {"query_norm": "cross_attn_norm", "memory_norm": "cross_attn_norm_kv", "attention": "cross_attn_",
           "feedforward_norm": "ffn_norm", "feedforward.0": "ffn_up", "feedforward.3": "ffn_down"}
FIELD = {"norm1": "attn_norm", "norm2": "cross_attn_norm", "norm3": "ffn_norm", "self_attn": "attn_",
         "multihead_attn": "cross_attn_", "linear1": "ffn_up", "linear2": "ffn_down"}


def head_tensors(head: Dict[str, np.ndarray], routing: int) -> Dict[str, np.ndarray]:
    """The head as llama.cpp's Clef converter names it: {gguf name: float32 array (PyTorch shape)}."""
    out: Dict[str, np.ndarray] = {}
    scalars = {}
    for name, x in head.items():
        if x.ndim == 0:
            scalars[name] = float(x)
            continue
        base, _, leaf = name.rpartition(".")
        if base.endswith("_projection"):
            out[f"decision.proj_{base[:-len('_projection')]}.{leaf}"] = x
            continue
        if base in HEAD_NAMES:
            out[f"{HEAD_NAMES[base]}.{leaf}"] = x
            continue
        parts = name.split(".")
        table, blk = (ROUTING, int(parts[1])) if parts[0] == "evidence_layers" else (FIELD, int(parts[1]) + routing)
        rest = ".".join(parts[2:])
        for key, g in table.items():
            if rest.startswith(key + "."):
                leaf = rest[len(key) + 1:]
                p = f"dec.blk.{blk}.{g}"
                if leaf in ("in_proj_weight", "in_proj_bias"):
                    for part, chunk in zip("qkv", np.split(x, 3, axis=0)):
                        out[f"{p}{part}.{leaf[len('in_proj_'):]}"] = chunk
                elif leaf.startswith("out_proj."):
                    out[f"{p}o.{leaf[len('out_proj.'):]}"] = x
                else:
                    out[f"{p}.{leaf}"] = x
                break
        else:
            raise ValueError(f"unexpected head tensor {name}")
    gate = scalars["residual_gate"]
    out["decision.scales"] = np.array([math.exp(min(scalars["prior_logit_scale"], math.log(100.0))),
                                       math.exp(min(scalars["joint_logit_scale"], math.log(100.0))),
                                       1.0 / (1.0 + math.exp(-gate))], dtype=np.float32)
    return out


class _Writer(gguf.GGUFWriter):
    """gguf-py's writer, packing each large metadata tuple once per process. gguf-py packs an array item by
    item in Python: the tokenizer's 248,320 tokens, their types and its merges took 10-18 s per file on a
    2-core Zen 1, and a test session writes dozens of files with the very same tuples
    (tokenizer_metadata). The bytes are gguf-py's own, made by its first call; a list, or a tuple
    made anew, is packed as gguf-py always does."""

    _packed: Dict[Tuple[int, bool, Any], Tuple[tuple, bytes]] = {}

    def _pack_val(self, val: Any, vtype: V, add_vtype: bool, sub_type: Optional[V] = None) -> bytes:
        if vtype != V.ARRAY or not isinstance(val, tuple) or len(val) < 4096:
            return super()._pack_val(val, vtype, add_vtype, sub_type)
        key = (id(val), add_vtype, sub_type)
        hit = _Writer._packed.get(key)
        if hit is None or hit[0] is not val:  # the tuple is held, so its id is not reused while cached
            hit = (val, super()._pack_val(val, vtype, add_vtype, sub_type))
            _Writer._packed[key] = hit
        return hit[1]


def write_gguf(out: pathlib.Path, arch: str, md: Dict[str, Tuple[Any, V]],
               tensors: Dict[str, Tuple[np.ndarray, Q]]) -> Dict[str, Q]:
    """Writes `out` with general.architecture `arch`, the metadata {key: (value, GGUFValueType)} (arrays:
    *dimension_sections as INT32, the rest as gguf infers) and the tensors {name: (data, ggml type)} in
    order; returns {name: ggml type written}."""
    w = _Writer(str(out), arch)
    for key, (val, vt) in md.items():
        if vt == V.ARRAY:
            if key.endswith("dimension_sections"):
                w.add_key_value(key, val, V.ARRAY, sub_type=V.INT32)
            else:
                w.add_array(key, val)
        else:
            w.add_key_value(key, val, vt)
    for name, (arr, qt) in tensors.items():
        w.add_tensor(name, arr, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {n: qt for n, (_, qt) in tensors.items()}


def neg_exp(a_log: np.ndarray, how: str) -> np.ndarray:
    """-exp(a_log) in fp32, float32 in and out; how = "torch" (torch.exp) or "expf" (libm's expf)."""
    import torch

    if how == "torch":
        return (-torch.exp(torch.from_numpy(np.ascontiguousarray(a_log)))).numpy()
    if how != "expf":
        raise ValueError(f"a_exp {how!r}: expected 'torch' or 'expf'")
    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    libm.expf.restype, libm.expf.argtypes = ctypes.c_float, [ctypes.c_float]
    return np.array([-libm.expf(float(v)) for v in a_log.reshape(-1)], dtype=np.float32).reshape(a_log.shape)


def convert(model_dir: pathlib.Path, out: pathlib.Path, outtype: str = "bf16",
            mutate: Optional[Callable[[Dict[str, Tuple[np.ndarray, Q]], Dict[str, Tuple[Any, V]]], None]] = None,
            arch: Optional[str] = None, layout: str = "qwen35", scorer_out_1d: bool = False,
            head_type: Optional[str] = None, a_exp: str = "torch",
            written: Optional[Dict[str, Tuple[np.ndarray, Q]]] = None) -> Dict[str, Q]:
    """Writes `out`; returns {gguf tensor name: ggml type written}, and fills `written` when given with
    {name: (the array handed to gguf-py's writer, ggml type)}: a quantized tensor's blocks as uint8
    [rows, bytes per row], as gguf-py's reader would give them back, without its reader's item-by-item
    decoding of the tokenizer metadata (~40 s a file on a 2-core Zen 1). `arch` overrides
    general.architecture (tests of refused files); `scorer_out_1d` stores decision.scorer_out.weight
    1-D [W] (F32), as some converters do; `head_type` gives the head's 2-D tensors another type.
    `a_exp` is the exp behind ssm_a = -exp(A_log): "torch" (torch's fp32 exp, as llama.cpp's converter)
    or "expf" (the C library's, which is what clef computes from a folder's A_log: for tests that
    compare every other transform bit for bit on folders whose A_log is fp32)."""
    import torch

    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}: expected one of {LAYOUTS}")
    arch = arch or layout
    model_dir, out = pathlib.Path(model_dir), pathlib.Path(out)
    cfg, hf = read_folder(model_dir)
    text = cfg.get("text_config", cfg)
    prefix = "model.language_model." if "model.language_model.embed_tokens.weight" in hf else "model."
    L = text["num_hidden_layers"]
    hk, hv = text["linear_num_key_heads"], text["linear_num_value_heads"]
    dk, dv = text["linear_key_head_dim"], text["linear_value_head_dim"]
    interval = text.get("full_attention_interval", 4)
    want = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(L)]
    if text.get("layer_types", want) != want:
        raise ValueError("layer_types do not follow full_attention_interval; GGUF cannot describe them")
    rope = text.get("rope_parameters", {})
    head_dim = text["head_dim"]
    tied = cfg.get("tie_word_embeddings", text.get("tie_word_embeddings", False))

    folder_bytes = sum(f.stat().st_size for f in model_dir.glob("*.safetensors"))
    spill = Spill(out.with_name(out.name + ".encoding")) if folder_bytes > SPILL_FOLDER_BYTES else None

    tensors: Dict[str, Tuple[np.ndarray, Q]] = {}
    mix = outtype if outtype in MIXES else None
    target = MIXES[mix] if mix else OUTTYPES[outtype]
    for name in list(hf.keys()):
        g = gguf_name(name, prefix)
        if g is None or (g == "output.weight" and tied):
            continue
        x = hf[name]
        if g.endswith("ssm_conv1d.weight"):
            x = x.reshape(x.shape[0], x.shape[-1])
        if hk != hv and ".linear_attn." in name:
            key_dim = hk * dk
            if g.endswith("attn_qkv.weight") or g.endswith("ssm_conv1d.weight"):
                x = np.concatenate([x[: 2 * key_dim], tiled(x[2 * key_dim:], 0, hk, hv, dv)], axis=0)
            elif g.endswith("attn_gate.weight"):
                x = tiled(x, 0, hk, hv, dv)
            elif g.endswith(("ssm_beta.weight", "ssm_alpha.weight", "ssm_a", "ssm_dt.bias")):
                x = tiled(x, 0, hk, hv, 1)
            elif g.endswith("ssm_out.weight"):
                x = tiled(x, 1, hk, hv, dv)
        if g.endswith("ssm_a"):
            x = neg_exp(as_f32(x), a_exp)
        elif g.endswith("norm.weight") and not g.endswith("ssm_norm.weight"):
            x = as_f32(x) + np.float32(1.0)
        if x.ndim == 1 or g.endswith("ssm_conv1d.weight"):
            tensors[g] = (as_f32(x), Q.F32)
        elif mix:
            tensors[g] = encode_chunked(x, mixed_type(g, mix, L, tied), True, spill)
        else:
            tensors[g] = encode_chunked(x, target, False, spill)
        del x
    if layout == "clef":
        head_target = OUTTYPES[head_type] if head_type else target
        for g, x in head_tensors(read_head(model_dir), json.loads((model_dir / "joint_head_config.json").read_text())
                                 ["routing_layers"]).items():
            if g == "decision.scorer_out.weight" and scorer_out_1d:
                x = x.reshape(-1)
            if x.ndim == 1 or g == "token_types.weight":
                tensors[g] = (as_f32(x), Q.F32)
            else:
                tensors[g] = encode(x, head_target, k_fallback=bool(mix))

    a = arch + "."
    sec = list(rope.get("mrope_section", [11, 11, 10]))
    md: Dict[str, Tuple[Any, V]] = {
        "general.type": ("model", V.STRING),
        "general.name": (model_dir.name, V.STRING),
        a + "block_count": (L, V.UINT32),
        a + "context_length": (text.get("max_position_embeddings", 262144), V.UINT32),
        a + "embedding_length": (text["hidden_size"], V.UINT32),
        a + "feed_forward_length": (text["intermediate_size"], V.UINT32),
        a + "attention.head_count": (text["num_attention_heads"], V.UINT32),
        a + "attention.head_count_kv": (text["num_key_value_heads"], V.UINT32),
        a + "rope.dimension_sections": (sec + [0] * (4 - len(sec)), V.ARRAY),
        a + "rope.freq_base": (float(rope.get("rope_theta", 10000.0)), V.FLOAT32),
        a + "attention.layer_norm_rms_epsilon": (float(text.get("rms_norm_eps", 1e-6)), V.FLOAT32),
        a + "attention.key_length": (head_dim, V.UINT32),
        a + "attention.value_length": (head_dim, V.UINT32),
        "general.file_type": (FILE_TYPE[outtype], V.UINT32),
        a + "ssm.conv_kernel": (text["linear_conv_kernel_dim"], V.UINT32),
        a + "ssm.state_size": (dk, V.UINT32),
        a + "ssm.group_count": (hk, V.UINT32),
        a + "ssm.time_step_rank": (hv, V.UINT32),
        a + "ssm.inner_size": (hv * dv, V.UINT32),
        a + "full_attention_interval": (interval, V.UINT32),
        a + "rope.dimension_count": (int(head_dim * rope.get("partial_rotary_factor", 0.25)), V.UINT32),
        "general.quantization_version": (2, V.UINT32),
    }
    if layout == "clef":
        hc = json.loads((model_dir / "joint_head_config.json").read_text())
        md.update({
            "clef.decision.type": ("clef", V.STRING),
            "clef.decision.routing_block_count": (hc["routing_layers"], V.UINT32),
            "clef.decision.block_count": (hc["layers"], V.UINT32),
            "clef.decision.head_count": (hc["heads"], V.UINT32),
            "clef.attention.layer_norm_epsilon": (1e-5, V.FLOAT32),
            "tokenizer.chat_template.systemone": ("(the Clef prompt template; clef renders prompts itself)", V.STRING),
        })
    md.update(tokenizer_metadata(model_dir, text["vocab_size"]))
    if mutate is not None:
        mutate(tensors, md)

    types = write_gguf(out, arch, md, tensors)
    copy_random_weights(model_dir, out)
    if written is not None:
        written.update(tensors)
    return types


def copy_random_weights(model_dir: pathlib.Path, out: pathlib.Path) -> None:
    """The folder's random_weights.json beside the GGUF, where clef looks for it (as beside a folder's
    weights): answers from a random-weight GGUF then say so, as the folder's do. Nothing when the
    folder has none."""
    src, dst = model_dir / "random_weights.json", out.parent / "random_weights.json"
    if src.is_file() and not (dst.exists() and dst.samefile(src)):
        shutil.copyfile(src, dst)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, type=pathlib.Path, help="Clef release folder")
    ap.add_argument("--out", required=True, type=pathlib.Path, help="GGUF file to write")
    ap.add_argument("--type", "--outtype", dest="outtype", default="bf16", type=str.lower, choices=sorted(OUTTYPES) + sorted(MIXES),
                    help="ggml type of the 2-D tensors (default bf16)")
    ap.add_argument("--layout", default="qwen35", choices=LAYOUTS,
                    help="qwen35: backbone only, head files beside it; clef: the head inside (default qwen35)")
    args = ap.parse_args()
    # Bad paths are one line and exit 2 (as argparse's usage errors), not a traceback.
    problem = None
    if not args.model.is_dir():
        problem = f"--model {args.model}: " + ("not a directory" if args.model.exists() else "no such directory")
    elif not (args.model / "config.json").is_file():
        problem = f"--model {args.model}: no config.json in it"
    elif not args.out.parent.is_dir():
        problem = f"--out {args.out}: the folder {args.out.parent} does not exist"
    if problem:
        print(f"make_gguf.py: error: {problem} (--model takes a Clef release folder, --out a GGUF file to write)",
              file=sys.stderr)
        return 2
    types = convert(args.model, args.out, args.outtype, layout=args.layout)
    print(f"wrote {args.out} ({len(types)} tensors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
