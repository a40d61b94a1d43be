// SPDX-License-Identifier: MIT
#include "models/joint_head/weights.h"

namespace clef {
namespace {

LayerNormWeights take_ln(WeightStore& s, const std::string& name, std::int64_t n) {
  return {s.take(name + ".weight", {n}), s.take(name + ".bias", {n})};
}

MultiheadAttentionWeights take_mha(WeightStore& s, const std::string& name, std::int64_t w) {
  return {s.take(name + ".in_proj_weight", {3 * w, w}), s.take(name + ".in_proj_bias", {3 * w}),
          s.take(name + ".out_proj.weight", {w, w}), s.take(name + ".out_proj.bias", {w})};
}

}  // namespace

JointHeadWeights bind_joint_head_weights(WeightStore& s, const JointHeadConfig& c) {
  const std::int64_t h = c.hidden_size, w = c.width, f = c.feedforward;
  JointHeadWeights j;
  j.hidden_norm = take_ln(s, "hidden_norm", h);
  j.memory_projection = s.take("memory_projection.weight", {w, h});
  j.question_projection = s.take("question_projection.weight", {w, h});
  j.option_question_projection = s.take("option_question_projection.weight", {w, h});
  j.global_projection = s.take("global_projection.weight", {w, h});
  j.option_context_projection = s.take("option_context_projection.weight", {w, h});
  j.option_lexical_projection = s.take("option_lexical_projection.weight", {w, h});
  j.type_embedding = s.take("type_embedding.weight", {3, w});
  for (std::int64_t i = 0; i < c.routing_layers; ++i) {
    const std::string p = "evidence_layers." + std::to_string(i) + ".";
    RoutingLayerWeights r;
    r.query_norm = take_ln(s, p + "query_norm", w);
    r.memory_norm = take_ln(s, p + "memory_norm", w);
    r.attention = take_mha(s, p + "attention", w);
    r.feedforward_norm = take_ln(s, p + "feedforward_norm", w);
    r.ff1_weight = s.take(p + "feedforward.0.weight", {f, w});
    r.ff1_bias = s.take(p + "feedforward.0.bias", {f});
    r.ff2_weight = s.take(p + "feedforward.3.weight", {w, f});
    r.ff2_bias = s.take(p + "feedforward.3.bias", {w});
    j.routing.push_back(r);
  }
  j.option_summary_norm = take_ln(s, "option_summary_norm", w);
  for (std::int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    FieldLayerWeights L;
    L.self_attn = take_mha(s, p + "self_attn", w);
    L.cross_attn = take_mha(s, p + "multihead_attn", w);
    L.linear1_weight = s.take(p + "linear1.weight", {f, w});
    L.linear1_bias = s.take(p + "linear1.bias", {f});
    L.linear2_weight = s.take(p + "linear2.weight", {w, f});
    L.linear2_bias = s.take(p + "linear2.bias", {w});
    L.norm1 = take_ln(s, p + "norm1", w);
    L.norm2 = take_ln(s, p + "norm2", w);
    L.norm3 = take_ln(s, p + "norm3", w);
    j.field_layers.push_back(L);
  }
  j.field_norm = take_ln(s, "field_norm", w);
  j.option_norm = take_ln(s, "option_norm", w);
  j.scorer1_weight = s.take("residual_scorer.0.weight", {w, 4 * w});
  j.scorer1_bias = s.take("residual_scorer.0.bias", {w});
  j.scorer2_weight = s.take("residual_scorer.3.weight", {1, w});
  j.scorer2_bias = s.take("residual_scorer.3.bias", {1});
  if (s.contains("decision.scales")) {
    j.scales = s.take("decision.scales", {3});
  } else {
    j.prior_logit_scale = s.take("prior_logit_scale", {});
    j.joint_logit_scale = s.take("joint_logit_scale", {});
    j.residual_gate = s.take("residual_gate", {});
  }
  s.require_all_consumed("joint_schema_head");
  return j;
}

std::int64_t joint_head_parameter_count(const JointHeadConfig& c) noexcept {
  const std::int64_t h = c.hidden_size, w = c.width, f = c.feedforward;
  const std::int64_t mha = 3 * w * w + 3 * w + w * w + w;
  const std::int64_t ln = 2 * w;
  const std::int64_t routing = 3 * ln + mha + (f * w + f) + (w * f + w);
  const std::int64_t field = 2 * mha + (f * w + f) + (w * f + w) + 3 * ln;
  return 2 * h + 6 * w * h + 3 * w + c.routing_layers * routing + ln + c.layers * field + 2 * ln + (4 * w * w + w) +
         (w + 1) + 3;
}

}  // namespace clef
