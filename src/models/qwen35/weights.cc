// SPDX-License-Identifier: MIT
#include "models/qwen35/weights.h"

#include "core/error.h"

namespace clef::qwen35 {
namespace {

using Shape = std::vector<std::int64_t>;

VisionWeights bind_vision(WeightStore& s, const VisionConfig& v) {
  const std::string p = "model.visual.";
  const std::int64_t d = v.hidden_size;
  VisionWeights w;
  w.patch_embed_weight =
      s.take(p + "patch_embed.proj.weight", {d, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size});
  w.patch_embed_bias = s.take(p + "patch_embed.proj.bias", {d});
  w.pos_embed = s.take(p + "pos_embed.weight", {v.num_position_embeddings, d});
  for (std::int64_t b = 0; b < v.depth; ++b) {
    const std::string q = p + "blocks." + std::to_string(b) + ".";
    VisionBlockWeights blk;
    blk.norm1_weight = s.take(q + "norm1.weight", {d});
    blk.norm1_bias = s.take(q + "norm1.bias", {d});
    blk.norm2_weight = s.take(q + "norm2.weight", {d});
    blk.norm2_bias = s.take(q + "norm2.bias", {d});
    blk.qkv_weight = s.take(q + "attn.qkv.weight", {3 * d, d});
    blk.qkv_bias = s.take(q + "attn.qkv.bias", {3 * d});
    blk.proj_weight = s.take(q + "attn.proj.weight", {d, d});
    blk.proj_bias = s.take(q + "attn.proj.bias", {d});
    blk.fc1_weight = s.take(q + "mlp.linear_fc1.weight", {v.intermediate_size, d});
    blk.fc1_bias = s.take(q + "mlp.linear_fc1.bias", {v.intermediate_size});
    blk.fc2_weight = s.take(q + "mlp.linear_fc2.weight", {d, v.intermediate_size});
    blk.fc2_bias = s.take(q + "mlp.linear_fc2.bias", {d});
    w.blocks.push_back(blk);
  }
  const std::int64_t m = d * v.spatial_merge_size * v.spatial_merge_size;
  w.merger_norm_weight = s.take(p + "merger.norm.weight", {d});
  w.merger_norm_bias = s.take(p + "merger.norm.bias", {d});
  w.merger_fc1_weight = s.take(p + "merger.linear_fc1.weight", {m, m});
  w.merger_fc1_bias = s.take(p + "merger.linear_fc1.bias", {m});
  w.merger_fc2_weight = s.take(p + "merger.linear_fc2.weight", {v.out_hidden_size, m});
  w.merger_fc2_bias = s.take(p + "merger.linear_fc2.bias", {v.out_hidden_size});
  return w;
}

}  // namespace

ModelWeights bind_model_weights(WeightStore& s, const ModelConfig& cfg) {
  const TextConfig& t = cfg.text;
  ModelWeights mw;
  TextWeights& w = mw.text;
  // Composite checkpoints (Qwen3_5ForConditionalGeneration) use model.language_model.; text-only
  // ones (Qwen3_5ForCausalLM) use model.. Decide by where the embedding table is.
  // Composite configs always use the composite prefix; a flat config may come with either.
  w.prefix =
      (cfg.composite || s.contains("model.language_model.embed_tokens.weight")) ? "model.language_model." : "model.";
  const std::string& p = w.prefix;
  const std::int64_t h = t.hidden_size, inter = t.intermediate_size;
  w.embed_tokens = s.take(p + "embed_tokens.weight", {t.vocab_size, h});
  for (std::int64_t i = 0; i < t.num_hidden_layers; ++i) {
    const std::string q = p + "layers." + std::to_string(i) + ".";
    DecoderLayerWeights L;
    L.type = t.layer_types[static_cast<std::size_t>(i)];
    L.input_layernorm = s.take(q + "input_layernorm.weight", {h});
    L.post_attention_layernorm = s.take(q + "post_attention_layernorm.weight", {h});
    L.gate_proj = s.take(q + "mlp.gate_proj.weight", {inter, h});
    L.up_proj = s.take(q + "mlp.up_proj.weight", {inter, h});
    L.down_proj = s.take(q + "mlp.down_proj.weight", {h, inter});
    if (L.type == LayerType::kLinearAttention) {
      const std::string a = q + "linear_attn.";
      const std::int64_t hv = t.linear_num_value_heads;
      LinearAttentionWeights g;
      g.in_proj_qkv = s.take(a + "in_proj_qkv.weight", {t.gdn_conv_dim(), h});
      g.in_proj_z = s.take(a + "in_proj_z.weight", {t.gdn_value_dim(), h});
      g.in_proj_b = s.take(a + "in_proj_b.weight", {hv, h});
      g.in_proj_a = s.take(a + "in_proj_a.weight", {hv, h});
      g.conv1d = s.take(a + "conv1d.weight", {t.gdn_conv_dim(), 1, t.linear_conv_kernel_dim});
      g.dt_bias = s.take(a + "dt_bias", {hv});
      g.a_log = s.take(a + "A_log", {hv});
      g.norm = s.take(a + "norm.weight", {t.linear_value_head_dim});
      g.out_proj = s.take(a + "out_proj.weight", {h, t.gdn_value_dim()});
      L.linear_attn = g;
    } else {
      const std::string a = q + "self_attn.";
      const std::int64_t nh = t.num_attention_heads, nkv = t.num_key_value_heads, hd = t.head_dim;
      FullAttentionWeights f;
      f.q_proj = s.take(a + "q_proj.weight", {2 * nh * hd, h});
      f.k_proj = s.take(a + "k_proj.weight", {nkv * hd, h});
      f.v_proj = s.take(a + "v_proj.weight", {nkv * hd, h});
      f.o_proj = s.take(a + "o_proj.weight", {h, nh * hd});
      f.q_norm = s.take(a + "q_norm.weight", {hd});
      f.k_norm = s.take(a + "k_norm.weight", {hd});
      L.self_attn = f;
    }
    w.layers.push_back(std::move(L));
  }
  w.norm = s.take(p + "norm.weight", {h});
  w.tied = cfg.tie_word_embeddings;
  if (w.tied) {
    w.lm_head = w.embed_tokens;
    // Some exporters still write the tied copy; it must then be identical in shape.
    if (s.contains("lm_head.weight")) (void)s.take("lm_head.weight", {t.vocab_size, h});
  } else {
    if (!s.contains("lm_head.weight")) {
      throw ModelLoadError(s.label() + ": missing tensor lm_head.weight (expected shape [" +
                           std::to_string(t.vocab_size) + ", " + std::to_string(h) +
                           "]); config.json says tie_word_embeddings is false");
    }
    w.lm_head = s.take("lm_head.weight", {t.vocab_size, h});
  }
  if (cfg.vision) mw.vision = bind_vision(s, *cfg.vision);
  mw.ignored_tensors = s.ignore_prefix("mtp.");
  s.require_all_consumed("qwen3_5");
  return mw;
}

ModelWeights bind_gguf_model_weights(WeightStore& s, const ModelConfig& cfg) {
  const TextConfig& t = cfg.text;
  ModelWeights mw;
  TextWeights& w = mw.text;
  w.prefix = "";  // GGUF names carry no prefix
  const std::int64_t h = t.hidden_size, inter = t.intermediate_size;
  auto one_plus = [](WeightView v) {
    v.stored = StoredAs::kOnePlus;
    return v;
  };
  w.embed_tokens = s.take("token_embd.weight", {t.vocab_size, h});
  const bool tiled = t.linear_num_key_heads != t.linear_num_value_heads;
  for (std::int64_t i = 0; i < t.num_hidden_layers; ++i) {
    const std::string q = "blk." + std::to_string(i) + ".";
    DecoderLayerWeights L;
    L.type = t.layer_types[static_cast<std::size_t>(i)];
    L.input_layernorm = one_plus(s.take(q + "attn_norm.weight", {h}));
    L.post_attention_layernorm = one_plus(s.take(q + "post_attention_norm.weight", {h}));
    L.gate_proj = s.take(q + "ffn_gate.weight", {inter, h});
    L.up_proj = s.take(q + "ffn_up.weight", {inter, h});
    L.down_proj = s.take(q + "ffn_down.weight", {h, inter});
    if (L.type == LayerType::kLinearAttention) {
      const std::int64_t hv = t.linear_num_value_heads;
      LinearAttentionWeights g;
      g.in_proj_qkv = s.take(q + "attn_qkv.weight", {t.gdn_conv_dim(), h});
      g.in_proj_z = s.take(q + "attn_gate.weight", {t.gdn_value_dim(), h});
      g.in_proj_b = s.take(q + "ssm_beta.weight", {hv, h});
      g.in_proj_a = s.take(q + "ssm_alpha.weight", {hv, h});
      g.conv1d = s.take(q + "ssm_conv1d.weight", {t.gdn_conv_dim(), t.linear_conv_kernel_dim});
      g.dt_bias = s.take(q + "ssm_dt.bias", {hv});
      g.a_log = s.take(q + "ssm_a", {hv});
      g.a_log.stored = StoredAs::kNegExp;
      g.norm = s.take(q + "ssm_norm.weight", {t.linear_value_head_dim});
      g.out_proj = s.take(q + "ssm_out.weight", {h, t.gdn_value_dim()});
      g.v_heads_tiled = tiled;
      L.linear_attn = g;
    } else {
      const std::int64_t nh = t.num_attention_heads, nkv = t.num_key_value_heads, hd = t.head_dim;
      FullAttentionWeights f;
      f.q_proj = s.take(q + "attn_q.weight", {2 * nh * hd, h});
      f.k_proj = s.take(q + "attn_k.weight", {nkv * hd, h});
      f.v_proj = s.take(q + "attn_v.weight", {nkv * hd, h});
      f.o_proj = s.take(q + "attn_output.weight", {h, nh * hd});
      f.q_norm = one_plus(s.take(q + "attn_q_norm.weight", {hd}));
      f.k_norm = one_plus(s.take(q + "attn_k_norm.weight", {hd}));
      L.self_attn = f;
    }
    w.layers.push_back(std::move(L));
  }
  w.norm = one_plus(s.take("output_norm.weight", {h}));
  // llama.cpp writes output.weight only for untied models; without it the output table is the
  // embedding table, as in the tied folder.
  w.tied = !s.contains("output.weight");
  // Only the head reads the output table (option-span rows, converted row by row), so any block
  // type is accepted (a K-quant file's output.weight is Q6_K).
  w.lm_head = w.tied ? w.embed_tokens : s.take_dequantizable("output.weight", {t.vocab_size, h});
  // The MTP blocks (blk.L .. blk.L+nextn-1, ARCH.nextn_predict_layers), ignored like the folder's mtp.*.
  std::int64_t nextn = 0;
  if (const GgufFile* g = s.gguf()) {
    const std::string key = g->get_string("general.architecture") + ".nextn_predict_layers";
    if (g->find_value(key) != nullptr) nextn = g->get_int(key);
  }
  for (std::int64_t i = t.num_hidden_layers; i < t.num_hidden_layers + nextn; ++i) {
    mw.ignored_tensors += s.ignore_prefix("blk." + std::to_string(i) + ".");
  }
  s.require_all_consumed("qwen35 (GGUF)");
  return mw;
}

}  // namespace clef::qwen35
