// SPDX-License-Identifier: MIT
// Tensors of joint_head.safetensors (docs/PROTOCOL.md §4.2), bound strictly (the reference loads
// them with strict=True): every tensor must be present with the shape implied by
// joint_head_config.json, and no other tensor may exist.
#pragma once

#include <vector>

#include "io/hf_config.h"
#include "io/weight_store.h"

namespace clef {

/// A LayerNorm's affine parameters, each [n].
struct LayerNormWeights {
  WeightView weight, bias;
};

/// PyTorch nn.MultiheadAttention: in_proj [3W, W] (rows Wq | Wk | Wv), in_proj_bias [3W],
/// out_proj [W, W] + [W].
struct MultiheadAttentionWeights {
  WeightView in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias;
};

/// Evidence-routing layer i < R (docs/PROTOCOL.md §4.4 step 7).
struct RoutingLayerWeights {
  LayerNormWeights query_norm, memory_norm, feedforward_norm;  ///< [W]
  MultiheadAttentionWeights attention;
  WeightView ff1_weight, ff1_bias;  ///< feedforward.0: [F, W], [F]
  WeightView ff2_weight, ff2_bias;  ///< feedforward.3: [W, F], [W]
};

/// Field-decoder layer j < L (TransformerDecoderLayer, norm_first, §4.4 step 11).
struct FieldLayerWeights {
  MultiheadAttentionWeights self_attn, cross_attn;  ///< self_attn, multihead_attn
  WeightView linear1_weight, linear1_bias;          ///< [F, W], [F]
  WeightView linear2_weight, linear2_bias;          ///< [W, F], [W]
  LayerNormWeights norm1, norm2, norm3;             ///< [W]
};

/// All tensors of the joint schema head.
struct JointHeadWeights {
  LayerNormWeights hidden_norm;  ///< [H]
  WeightView memory_projection, question_projection, option_question_projection, global_projection,
      option_context_projection, option_lexical_projection;  ///< each [W, H]
  WeightView type_embedding;                                 ///< [3, W] rows noul, choice, score
  std::vector<RoutingLayerWeights> routing;
  LayerNormWeights option_summary_norm;  ///< [W]
  std::vector<FieldLayerWeights> field_layers;
  LayerNormWeights field_norm, option_norm;                        ///< [W]
  WeightView scorer1_weight, scorer1_bias;                         ///< residual_scorer.0: [W, 4W], [W]
  WeightView scorer2_weight, scorer2_bias;                         ///< residual_scorer.3: [1, W], [1]
  WeightView prior_logit_scale, joint_logit_scale, residual_gate;  ///< 0-d scalars (shape [])
  /// A GGUF head's `decision.scales` [3] = [exp(min(p, ln 100)), exp(min(j, ln 100)), sigmoid(g)],
  /// already transformed (then the three scalars above are invalid); invalid for a folder's head.
  WeightView scales;
};

/// Binds joint_head.safetensors against `cfg`. A store holding `decision.scales` [3] (the head of a
/// clef-layout GGUF, models/joint_head/gguf.h) binds it instead of the three 0-d scalars.
/// Throws ModelLoadError naming the tensor.
JointHeadWeights bind_joint_head_weights(WeightStore& store, const JointHeadConfig& cfg);

/// Number of parameters the head has for `cfg` (121,762,820 for clef-flash's config).
std::int64_t joint_head_parameter_count(const JointHeadConfig& cfg) noexcept;

}  // namespace clef
