// SPDX-License-Identifier: MIT
#include "runtime/inspect.h"

#include <algorithm>

namespace clef {
namespace {

std::int64_t n(const WeightView& w) { return w.valid() ? static_cast<std::int64_t>(w.numel()) : 0; }

/// Bytes of the head's fp32 copy (a clef-layout GGUF's head, dequantized at load).
std::uint64_t head_f32_bytes(const ReleaseFolder& r) {
  std::uint64_t b = 0;
  for (const auto& [type, bytes] : r.head_weights->bytes_by_dtype()) b += bytes;
  return b;
}

std::int64_t layer_params(const qwen35::DecoderLayerWeights& L) {
  std::int64_t p =
      n(L.input_layernorm) + n(L.post_attention_layernorm) + n(L.gate_proj) + n(L.up_proj) + n(L.down_proj);
  if (L.linear_attn) {
    const auto& g = *L.linear_attn;
    p += n(g.in_proj_qkv) + n(g.in_proj_z) + n(g.in_proj_b) + n(g.in_proj_a) + n(g.conv1d) + n(g.dt_bias) + n(g.a_log) +
         n(g.norm) + n(g.out_proj);
  }
  if (L.self_attn) {
    const auto& a = *L.self_attn;
    p += n(a.q_proj) + n(a.k_proj) + n(a.v_proj) + n(a.o_proj) + n(a.q_norm) + n(a.k_norm);
  }
  return p;
}

std::int64_t mha_params(const MultiheadAttentionWeights& m) {
  return n(m.in_proj_weight) + n(m.in_proj_bias) + n(m.out_proj_weight) + n(m.out_proj_bias);
}
std::int64_t ln_params(const LayerNormWeights& l) { return n(l.weight) + n(l.bias); }

}  // namespace

ModelSummary summarize(const ReleaseFolder& r) {
  ModelSummary s;
  const auto& t = r.model.text;
  const auto& tc = r.config.text;
  std::int64_t gdn = 0, attn = 0, mlp = 0, norms = 0;
  for (const auto& L : t.layers) {
    const std::int64_t lp = layer_params(L);
    const std::int64_t lmlp = n(L.gate_proj) + n(L.up_proj) + n(L.down_proj);
    const std::int64_t lnorm = n(L.input_layernorm) + n(L.post_attention_layernorm);
    mlp += lmlp;
    norms += lnorm;
    if (L.type == LayerType::kLinearAttention) {
      gdn += lp - lmlp - lnorm;
      if (s.linear_layer_params == 0) s.linear_layer_params = lp;
    } else {
      attn += lp - lmlp - lnorm;
      if (s.full_layer_params == 0) s.full_layer_params = lp;
    }
  }
  s.text_blocks = {{"embed_tokens", n(t.embed_tokens)},
                   {"gated_deltanet mixers (" + std::to_string(tc.count(LayerType::kLinearAttention)) + " layers)",
                    gdn},
                   {"full_attention mixers (" + std::to_string(tc.count(LayerType::kFullAttention)) + " layers)", attn},
                   {"mlp (" + std::to_string(t.layers.size()) + " layers)", mlp},
                   {"layer norms", norms},
                   {"final norm", n(t.norm)}};
  if (!t.tied) s.text_blocks.emplace_back("lm_head (untied)", n(t.lm_head));
  for (const auto& [k, v] : s.text_blocks) s.text_params += v;

  if (r.model.vision) {
    const auto& v = *r.model.vision;
    std::int64_t blocks = 0;
    for (const auto& b : v.blocks) {
      blocks += n(b.norm1_weight) + n(b.norm1_bias) + n(b.norm2_weight) + n(b.norm2_bias) + n(b.qkv_weight) +
                n(b.qkv_bias) + n(b.proj_weight) + n(b.proj_bias) + n(b.fc1_weight) + n(b.fc1_bias) + n(b.fc2_weight) +
                n(b.fc2_bias);
    }
    s.vision_blocks = {{"patch_embed", n(v.patch_embed_weight) + n(v.patch_embed_bias)},
                       {"pos_embed", n(v.pos_embed)},
                       {"blocks (" + std::to_string(v.blocks.size()) + ")", blocks},
                       {"merger", n(v.merger_norm_weight) + n(v.merger_norm_bias) + n(v.merger_fc1_weight) +
                                      n(v.merger_fc1_bias) + n(v.merger_fc2_weight) + n(v.merger_fc2_bias)}};
    for (const auto& [k, x] : s.vision_blocks) s.vision_params += x;
  }

  const auto& h = r.head;
  std::int64_t routing = 0, field = 0;
  for (const auto& L : h.routing) {
    routing += ln_params(L.query_norm) + ln_params(L.memory_norm) + ln_params(L.feedforward_norm) +
               mha_params(L.attention) + n(L.ff1_weight) + n(L.ff1_bias) + n(L.ff2_weight) + n(L.ff2_bias);
  }
  for (const auto& L : h.field_layers) {
    field += mha_params(L.self_attn) + mha_params(L.cross_attn) + n(L.linear1_weight) + n(L.linear1_bias) +
             n(L.linear2_weight) + n(L.linear2_bias) + ln_params(L.norm1) + ln_params(L.norm2) + ln_params(L.norm3);
  }
  s.head_blocks = {{"hidden_norm", ln_params(h.hidden_norm)},
                   {"projections (6)", n(h.memory_projection) + n(h.question_projection) +
                                           n(h.option_question_projection) + n(h.global_projection) +
                                           n(h.option_context_projection) + n(h.option_lexical_projection)},
                   {"type_embedding", n(h.type_embedding)},
                   {"evidence routing (" + std::to_string(h.routing.size()) + " layers)", routing},
                   {"field decoder (" + std::to_string(h.field_layers.size()) + " layers)", field},
                   {"norms (summary, field, option)",
                    ln_params(h.option_summary_norm) + ln_params(h.field_norm) + ln_params(h.option_norm)},
                   {"residual scorer",
                    n(h.scorer1_weight) + n(h.scorer1_bias) + n(h.scorer2_weight) + n(h.scorer2_bias)},
                   {"scalars", n(h.prior_logit_scale) + n(h.joint_logit_scale) + n(h.residual_gate) + n(h.scales)}};
  for (const auto& [k, v] : s.head_blocks) s.head_params += v;

  for (const auto& [name, bytes] : r.weights->files()) s.weight_file_bytes += bytes;
  if (r.vision_weights) {  // the projector GGUF (--mmproj)
    for (const auto& [name, bytes] : r.vision_weights->files()) s.weight_file_bytes += bytes;
  }
  for (const auto& [name, bytes] : r.head_weights->files()) s.head_file_bytes += bytes;
  if (r.head_weights->files().empty()) s.head_file_bytes = head_f32_bytes(r);  // clef GGUF: the fp32 copy

  const auto u = [](std::int64_t x) { return static_cast<std::uint64_t>(x); };
  const std::uint64_t n_gdn = u(tc.count(LayerType::kLinearAttention));
  const std::uint64_t n_full = u(tc.count(LayerType::kFullAttention));
  s.state_fixed_bytes = 4 * n_gdn *
                        (u(tc.linear_num_value_heads * tc.linear_key_head_dim * tc.linear_value_head_dim) +
                         u((tc.linear_conv_kernel_dim - 1) * tc.gdn_conv_dim()));
  // KV cache (rotated K and V of every full-attention layer) + the final hidden row and the
  // head's projected memory row that the joint head reads for every position.
  s.state_bytes_per_token =
      4 * (n_full * 2 * u(tc.num_key_value_heads * tc.head_dim) + u(tc.hidden_size) + u(r.head_config.width));
  // Largest simultaneous fp32 activations per chunk token: the residual stream, the widest
  // projection output (q+gate, GDN qkv+z, or SwiGLU gate+up) and its input.
  const std::int64_t widest =
      std::max({2 * tc.num_attention_heads * tc.head_dim + 2 * tc.num_key_value_heads * tc.head_dim,
                tc.gdn_conv_dim() + tc.gdn_value_dim() + 2 * tc.linear_num_value_heads, 2 * tc.intermediate_size});
  s.activation_bytes_per_chunk_token = 4 * u(3 * tc.hidden_size + widest);
  return s;
}

}  // namespace clef
