// SPDX-License-Identifier: MIT
#include "models/qwen35/text_model.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "nn/linear.h"
#include "ops/ops.h"
#include "ops/profile.h"

namespace clef::qwen35 {

TextModel::TextModel(const TextConfig& cfg, const TextWeights& w, const TextModelOptions& opt)
    : cfg_(cfg), opt_(opt), embed_(w.embed_tokens) {
  if (static_cast<std::int64_t>(w.layers.size()) != cfg.num_hidden_layers) {
    throw ModelLoadError("text model: " + std::to_string(w.layers.size()) + " bound layers, config says " +
                         std::to_string(cfg.num_hidden_layers));
  }
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  rope_.rotary_dim = cfg.rotary_dim();
  rope_.theta = cfg.rope_theta;
  for (int i = 0; i < 3; ++i) rope_.section[i] = cfg.mrope_section[static_cast<std::size_t>(i)];
  rope_.interleaved = cfg.mrope_interleaved;

  nn::GdnConfig& gc = gdn_cfg_;
  gc.hidden = cfg.hidden_size;
  gc.dims = {cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim};
  gc.conv_k = cfg.linear_conv_kernel_dim;
  gc.eps = eps;
  nn::AttentionConfig& ac = attn_cfg_;
  ac.hidden = cfg.hidden_size;
  ac.dims = {cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim};
  ac.rotary_dim = cfg.rotary_dim();
  ac.eps = eps;

  layers_.resize(w.layers.size());
  for (std::size_t i = 0; i < w.layers.size(); ++i) {
    const DecoderLayerWeights& lw = w.layers[i];
    Layer& L = layers_[i];
    const std::string name = w.prefix + "layers." + std::to_string(i);
    L.type = lw.type;
    L.input_norm = nn::offset_norm_f32(lw.input_layernorm, name + ".input_layernorm");
    L.post_norm = nn::offset_norm_f32(lw.post_attention_layernorm, name + ".post_attention_layernorm");
    if (lw.type == LayerType::kLinearAttention) {
      if (!lw.linear_attn) throw ModelLoadError(name + ": linear_attn weights missing");
      const LinearAttentionWeights& g = *lw.linear_attn;
      const nn::GdnWeights gw{g.in_proj_qkv, g.in_proj_z, g.in_proj_b, g.in_proj_a, g.conv1d,
                              g.dt_bias,     g.a_log,     g.norm,      g.out_proj};
      nn::GdnConfig lc = gc;
      lc.v_heads_tiled = g.v_heads_tiled;
      L.gdn = nn::GatedDeltaNet(lc, gw, opt.precision, name + ".linear_attn");
    } else {
      if (!lw.self_attn) throw ModelLoadError(name + ": self_attn weights missing");
      const FullAttentionWeights& a = *lw.self_attn;
      const nn::AttentionWeights aw{a.q_proj, a.k_proj, a.v_proj, a.o_proj, a.q_norm, a.k_norm};
      L.attn = nn::GatedAttention(ac, aw, opt.precision, name + ".self_attn");
    }
    L.mlp = nn::SwiGluMlp(lw.gate_proj, lw.up_proj, lw.down_proj, opt.precision, name + ".mlp");
  }
  final_norm_ = nn::offset_norm_f32(w.norm, w.prefix + "norm");
}

nn::ModelState TextModel::new_state() const {
  nn::ModelState st;
  st.layers.resize(layers_.size());
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i].type == LayerType::kLinearAttention) {
      st.layers[i].gdn = layers_[i].gdn.new_state();
    } else {
      st.layers[i].kv = layers_[i].attn.new_cache();
    }
  }
  return st;
}

TextActivations TextModel::activations(std::int64_t rows) const {
  if (rows < 1) throw InvalidArgument("text model: activations for " + std::to_string(rows) + " rows");
  TextActivations a;
  a.rows = rows;
  a.hidden.resize(static_cast<std::size_t>(rows * cfg_.hidden_size));
  a.normed.resize(a.hidden.size());
  a.rope.resize(static_cast<std::size_t>(2 * rows * (rope_.rotary_dim / 2)));
  a.gdn = nn::GdnActivations(gdn_cfg_, rows);
  a.attention = nn::AttentionActivations(attn_cfg_, rows);
  a.mlp = nn::MlpActivations(cfg_.intermediate_size, rows);
  return a;
}

std::size_t TextActivations::floats() const noexcept {
  return hidden.size() + normed.size() + rope.size() + gdn.floats() + attention.floats() + mlp.floats();
}

void TextModel::embed(std::span<const std::int32_t> ids, float* out) const {
  ops::embedding_gather(embed_.dtype(), embed_.bytes.data(), embed_.shape()[0], cfg_.hidden_size, ids, out);
}

void TextModel::forward_chunk(std::span<const std::int32_t> ids, std::span<const std::int32_t> positions,
                              nn::ModelState& st, float* out, TextActivations& act, const float* embeds) const {
  if (ids.empty()) return;
  const SequenceChunk one{ids, positions, &st, embeds};
  forward_batch(std::span<const SequenceChunk>(&one, 1), out, act);
}

void TextModel::forward_batch(std::span<const SequenceChunk> seqs, float* out, TextActivations& act,
                              const std::function<void()>& between_layers) const {
  std::int64_t m = 0;
  for (const SequenceChunk& s : seqs) {
    const auto n = static_cast<std::int64_t>(s.ids.size());
    if (n == 0 || s.state == nullptr) throw InvalidArgument("forward_batch: a sequence with no tokens or no state");
    if (s.state->layers.size() != layers_.size()) {
      throw InvalidArgument("forward_chunk: state belongs to another model");
    }
    if (!s.positions.empty() && static_cast<std::int64_t>(s.positions.size()) != 3 * n) {
      throw InvalidArgument("forward_chunk: positions must be [3, " + std::to_string(n) + "], got " +
                            std::to_string(s.positions.size()) + " values");
    }
    for (const SequenceChunk& t : seqs) {
      if (&t != &s && t.state == s.state) throw InvalidArgument("forward_batch: two sequences share one state");
    }
    m += n;
  }
  if (m > act.rows) {
    throw InvalidArgument("forward_chunk: " + std::to_string(m) + " tokens, activations for " +
                          std::to_string(act.rows));
  }
  const std::int64_t H = cfg_.hidden_size;
  float* h = act.hidden.data();
  // Rotary tables and input rows of every sequence, stacked (rows row0 .. row0 + n - 1 per sequence).
  const std::int64_t half = rope_.rotary_dim / 2;
  float* cos = act.rope.data();
  float* sin = cos + m * half;
  std::vector<std::int32_t> pos;
  std::vector<nn::RowRange> rows;
  std::int64_t row0 = 0;
  for (const SequenceChunk& s : seqs) {
    const auto n = static_cast<std::int64_t>(s.ids.size());
    const std::int32_t* pp = s.positions.data();
    if (s.positions.empty()) {
      pos.resize(static_cast<std::size_t>(3 * n));
      for (std::int64_t i = 0; i < n; ++i) {
        const auto p = static_cast<std::int32_t>(s.state->next_position + i);
        for (std::int64_t r = 0; r < 3; ++r) pos[static_cast<std::size_t>(r * n + i)] = p;
      }
      pp = pos.data();
    }
    ops::rope_tables(rope_, pp, n, cos + row0 * half, sin + row0 * half);
    if (s.embeds != nullptr) {
      std::copy(s.embeds, s.embeds + n * H, h + row0 * H);
    } else {
      ops::embedding_gather(embed_.dtype(), embed_.bytes.data(), embed_.shape()[0], H, s.ids, h + row0 * H);
    }
    rows.push_back({row0, n});
    row0 += n;
  }
  run_layers(seqs, rows, m, out, act, between_layers);
  for (const SequenceChunk& s : seqs) advance_state(s);
}

void TextModel::run_layers(std::span<const SequenceChunk> seqs, std::span<const nn::RowRange> rows, std::int64_t m,
                           float* out, TextActivations& act, const std::function<void()>& between_layers) const {
  const std::int64_t H = cfg_.hidden_size;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const std::int64_t half = rope_.rotary_dim / 2;
  float* h = act.hidden.data();
  float* a = act.normed.data();
  const float* cos = act.rope.data();
  const float* sin = cos + m * half;
  std::vector<nn::GdnSegment> gdn_segs(seqs.size());
  std::vector<nn::AttentionSegment> attn_segs(seqs.size());
  for (std::size_t li = 0; li < layers_.size(); ++li) {
    const Layer& L = layers_[li];
    {
      CLEF_PROF_SCOPE("rms_norm");
      ops::rms_norm_offset(h, m, H, L.input_norm.data(), eps, a);
    }
    if (L.type == LayerType::kLinearAttention) {
      for (std::size_t i = 0; i < seqs.size(); ++i)
        gdn_segs[i] = {rows[i].row0, rows[i].n, &seqs[i].state->layers[li].gdn};
      L.gdn.forward_batch(a, gdn_segs, h, act.gdn);
    } else {
      for (std::size_t i = 0; i < seqs.size(); ++i)
        attn_segs[i] = {rows[i].row0, rows[i].n, &seqs[i].state->layers[li].kv};
      L.attn.forward_batch(a, attn_segs, cos, sin, h, act.attention);
    }
    {
      CLEF_PROF_SCOPE("rms_norm");
      ops::rms_norm_offset(h, m, H, L.post_norm.data(), eps, a);
    }
    L.mlp.forward_batch(a, rows, h, act.mlp);
    if (between_layers && li + 1 < layers_.size()) between_layers();
  }
  ops::rms_norm_offset(h, m, H, final_norm_.data(), eps, out);
}

void TextModel::advance_state(const SequenceChunk& s) {
  const auto n = static_cast<std::int64_t>(s.ids.size());
  nn::ModelState& st = *s.state;
  st.n_tokens += n;
  if (s.positions.empty()) {
    st.next_position += n;
  } else {
    std::int32_t mx = 0;
    for (std::int32_t p : s.positions) mx = std::max(mx, p);
    st.next_position = std::max<std::int64_t>(st.next_position, static_cast<std::int64_t>(mx) + 1);
  }
}

}  // namespace clef::qwen35
