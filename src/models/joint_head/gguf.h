// SPDX-License-Identifier: MIT
// The Clef joint schema head inside a "clef"-layout GGUF (llama.cpp's Clef conversion; docs/GGUF.md
// "The clef layout"): its configuration from the clef.decision.* metadata and the tensor shapes,
// and its tensors dequantized to fp32 and renamed back to joint_head.safetensors' names, so that
// bind_joint_head_weights binds them exactly as a release folder's head.
#pragma once

#include <memory>

#include "io/gguf.h"
#include "io/hf_config.h"
#include "io/weight_store.h"

namespace clef {

/// The head configuration of a clef-layout GGUF: routing_layers = clef.decision.routing_block_count,
/// layers = clef.decision.block_count, heads = clef.decision.head_count (integers >= 1; routing >= 0),
/// width W = rows of decision.proj_memory.weight (ggml ne[1]), feedforward F = rows of
/// dec.blk.0.ffn_up.weight (ne[1]), hidden_size =
/// `hidden_size` (the backbone's; must equal decision.proj_memory.weight ne[0]).
/// clef.attention.layer_norm_epsilon must be 1e-5 when present (the head's LayerNorm eps, which
/// clef's head uses; the key may be absent in files of the converter's earlier variant).
/// The values then pass parse_joint_head_config's checks (W % heads == 0, ...).
/// Throws ModelLoadError naming the key or tensor.
JointHeadConfig joint_head_config_from_gguf(const GgufFile& g, std::int64_t hidden_size);

/// Takes every head tensor of the GGUF store `gguf` (WeightStore::take_dequantizable: any of F32,
/// F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K), dequantizes it to fp32 and returns them in a
/// new store under joint_head.safetensors' names with PyTorch shapes (ggml ne reversed):
///   decision.hidden_norm.{weight,bias} [H]          -> hidden_norm.*
///   decision.proj_X.weight [W, H]                   -> X_projection.weight (X: memory, question,
///                                                      option_question, global, option_context, option_lexical)
///   token_types.weight [3, W]                       -> type_embedding.weight
///   dec.blk.i (i < R): cross_attn_norm, cross_attn_norm_kv, ffn_norm [W] (.weight/.bias)
///                                                   -> evidence_layers.i.{query_norm, memory_norm, feedforward_norm}
///     cross_attn_{q,k,v}.{weight [W, W], bias [W]}  -> evidence_layers.i.attention.in_proj_{weight [3W, W], bias [3W]}
///                                                      (rows q | k | v concatenated back)
///     cross_attn_o, ffn_up [F, W] + [F], ffn_down [W, F] + [W]
///                                                   -> attention.out_proj, feedforward.0, feedforward.3
///   dec.blk.(R + j): attn_norm, cross_attn_norm, ffn_norm -> layers.j.norm1, norm2, norm3;
///     attn_{q,k,v} / attn_o -> self_attn.in_proj_* / out_proj; cross_attn_{q,k,v} / cross_attn_o ->
///     multihead_attn.in_proj_* / out_proj; ffn_up / ffn_down -> linear1 / linear2
///   decision.{option_summary_norm, field_norm, option_norm} -> the same names without the prefix
///   decision.scorer.{weight [W, 4W], bias [W]}      -> residual_scorer.0.*
///   decision.scorer_out.weight [1, W] or [W], bias [1] -> residual_scorer.3.{weight [1, W], bias}
///   decision.scales [3] (already transformed)       -> decision.scales (bind_joint_head_weights)
/// The head norms are plain LayerNorm w and b (no 1 + w). Throws ModelLoadError naming a missing
/// or mis-shaped tensor.
std::unique_ptr<WeightStore> gguf_joint_head_store(WeightStore& gguf, const JointHeadConfig& cfg);

}  // namespace clef
