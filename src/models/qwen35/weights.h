// SPDX-License-Identifier: MIT
// Qwen3.5 checkpoint layout: which tensor names fill which fields, with the shape each must have
// (docs/MODEL.md §8.1). Binding is strict: a missing or mis-shaped tensor is named with the
// expected and actual shape, and a tensor nobody uses is an error, except the MTP block
// (`mtp.*`) which clef deliberately ignores.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "io/hf_config.h"
#include "io/weight_store.h"

namespace clef::qwen35 {

/// Gated DeltaNet mixer of one layer (`linear_attn.*`, docs/MODEL.md §4.1).
struct LinearAttentionWeights {
  WeightView in_proj_qkv;  ///< [conv_dim, H]
  WeightView in_proj_z;    ///< [Hv*dv, H]
  WeightView in_proj_b;    ///< [Hv, H]
  WeightView in_proj_a;    ///< [Hv, H]
  WeightView conv1d;       ///< [conv_dim, 1, K] (GGUF: [conv_dim, K], same bytes)
  WeightView dt_bias;      ///< [Hv]
  WeightView a_log;        ///< [Hv] A_log (GGUF: A = -exp(A_log), stored == kNegExp)
  WeightView norm;         ///< [dv] gated RMSNorm weight, used directly (no +1)
  WeightView out_proj;     ///< [H, Hv*dv]
  /// V heads in llama.cpp's tiled order (GGUF with Hk != Hv; nn::GdnConfig::v_heads_tiled).
  bool v_heads_tiled = false;
};

/// Gated full attention of one layer (`self_attn.*`, docs/MODEL.md §3).
struct FullAttentionWeights {
  WeightView q_proj;  ///< [2*nh*hd, H], per head [q | gate]
  WeightView k_proj;  ///< [nkv*hd, H]
  WeightView v_proj;  ///< [nkv*hd, H]
  WeightView o_proj;  ///< [H, nh*hd]
  WeightView q_norm;  ///< [hd] offset RMSNorm (1 + w; GGUF stores 1 + w, stored == kOnePlus)
  WeightView k_norm;  ///< [hd] offset RMSNorm (1 + w; GGUF stores 1 + w, stored == kOnePlus)
};

/// One decoder layer.
struct DecoderLayerWeights {
  LayerType type = LayerType::kLinearAttention;
  WeightView input_layernorm;           ///< [H] offset RMSNorm
  WeightView post_attention_layernorm;  ///< [H] offset RMSNorm
  WeightView gate_proj, up_proj;        ///< [I, H]
  WeightView down_proj;                 ///< [H, I]
  std::optional<LinearAttentionWeights> linear_attn;
  std::optional<FullAttentionWeights> self_attn;
};

/// The text backbone.
struct TextWeights {
  WeightView embed_tokens;  ///< [V, H]
  std::vector<DecoderLayerWeights> layers;
  WeightView norm;     ///< [H] final offset RMSNorm
  WeightView lm_head;  ///< [V, H]: lm_head.weight, or embed_tokens when tied
  bool tied = false;
  std::string prefix;  ///< "model.language_model." or "model."
};

struct VisionBlockWeights {
  WeightView norm1_weight, norm1_bias, norm2_weight, norm2_bias;  ///< [D]
  WeightView qkv_weight;                                          ///< [3D, D]
  WeightView qkv_bias;                                            ///< [3D]
  WeightView proj_weight;                                         ///< [D, D]
  WeightView proj_bias;                                           ///< [D]
  WeightView fc1_weight;                                          ///< [Iv, D]
  WeightView fc1_bias;                                            ///< [Iv]
  WeightView fc2_weight;                                          ///< [D, Iv]
  WeightView fc2_bias;                                            ///< [D]
};

/// The vision tower (`model.visual.*`, docs/MODEL.md §6).
struct VisionWeights {
  WeightView patch_embed_weight;  ///< [D, C, T, P, P]
  WeightView patch_embed_bias;    ///< [D]
  WeightView pos_embed;           ///< [num_position_embeddings, D]
  std::vector<VisionBlockWeights> blocks;
  WeightView merger_norm_weight, merger_norm_bias;  ///< [D]
  WeightView merger_fc1_weight;                     ///< [4D, 4D]
  WeightView merger_fc1_bias;                       ///< [4D]
  WeightView merger_fc2_weight;                     ///< [out_hidden, 4D]
  WeightView merger_fc2_bias;                       ///< [out_hidden]
};

/// All backbone weights of a Qwen3.5 checkpoint.
struct ModelWeights {
  TextWeights text;
  std::optional<VisionWeights> vision;
  std::size_t ignored_tensors = 0;  ///< e.g. the MTP block
};

/// Binds every tensor of `store` to the fields above, checking shapes against `cfg`, then
/// requires that nothing is left over (mtp.* is ignored). Throws ModelLoadError.
ModelWeights bind_model_weights(WeightStore& store, const ModelConfig& cfg);

/// The same for a GGUF file as llama.cpp's convert_hf_to_gguf.py writes a Qwen3.5 text model
/// (architecture "qwen35"): token_embd, output_norm, blk.N.{attn_norm, post_attention_norm,
/// ffn_gate/up/down; GDN layers attn_qkv, attn_gate (z), ssm_beta (b), ssm_alpha (a), ssm_conv1d
/// [conv_dim, K], ssm_dt.bias, ssm_a (A = -exp(A_log)), ssm_norm, ssm_out; attention layers
/// attn_q (per head [q | gate], as in the folder), attn_k, attn_v, attn_output, attn_q_norm,
/// attn_k_norm}, shapes in PyTorch order. Offset norms are stored as 1 + w (StoredAs::kOnePlus),
/// ssm_a as A (kNegExp); with Hk != Hv the V heads are in tiled order (v_heads_tiled). No
/// lm_head (the converter ties output to token_embd when the model is tied; a GGUF with
/// output.weight binds it as lm_head), no vision tower (llama.cpp writes it to a separate mmproj
/// file). Nothing may be left over except the MTP blocks blk.L .. blk.L+n-1 that
/// ARCH.nextn_predict_layers = n declares (ignored, like the folder's mtp.*). Throws
/// ModelLoadError naming the tensor.
ModelWeights bind_gguf_model_weights(WeightStore& store, const ModelConfig& cfg);

}  // namespace clef::qwen35
