// SPDX-License-Identifier: MIT
#include "io/hf_config.h"

#include <cmath>

#include "core/error.h"
#include "core/json_reader.h"

namespace clef {

const char* layer_type_name(LayerType t) noexcept {
  return t == LayerType::kFullAttention ? "full_attention" : "linear_attention";
}

std::int64_t TextConfig::rotary_dim() const noexcept {
  return static_cast<std::int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
}

std::int64_t TextConfig::count(LayerType t) const noexcept {
  std::int64_t n = 0;
  for (auto x : layer_types) n += (x == t);
  return n;
}

namespace {

constexpr std::int64_t kMaxDim = std::int64_t{1} << 20;
constexpr std::int64_t kMaxVocab = std::int64_t{1} << 24;

[[noreturn]] void unsupported(const JsonObjectReader& r, std::string_view key, const std::string& msg) {
  throw Unsupported(r.file() + ": " + r.path_of(key) + ": " + msg);
}

void parse_rope(const JsonObjectReader& r, TextConfig& t) {
  // transformers 5 writes rope_parameters; 4.x wrote rope_theta / partial_rotary_factor /
  // rope_scaling at the top level of the text config. Accept both.
  std::optional<JsonObjectReader> rp = r.get_object("rope_parameters");
  if (!rp) rp = r.get_object("rope_scaling");
  t.rope_theta = r.get_number("rope_theta", t.rope_theta);
  t.partial_rotary_factor = r.get_number("partial_rotary_factor", t.partial_rotary_factor);
  if (rp) {
    const std::string type = rp->has("rope_type") ? rp->get_string("rope_type") : rp->get_string("type", "default");
    if (type != "default" && type != "mrope") {
      unsupported(*rp, "rope_type", "RoPE type \"" + type + "\" is not supported (only \"default\")");
    }
    t.rope_theta = rp->get_number("rope_theta", t.rope_theta);
    t.partial_rotary_factor = rp->get_number("partial_rotary_factor", t.partial_rotary_factor);
    auto sec = rp->get_int_list("mrope_section", {t.mrope_section[0], t.mrope_section[1], t.mrope_section[2]});
    if (sec.size() != 3) rp->fail("mrope_section", "expected 3 entries (t, h, w), got " + std::to_string(sec.size()));
    for (std::size_t i = 0; i < 3; ++i) {
      if (sec[i] < 0 || sec[i] > 4096) rp->fail("mrope_section", "entries must be in [0, 4096]");
      t.mrope_section[i] = sec[i];
    }
    t.mrope_interleaved = rp->get_bool("mrope_interleaved", t.mrope_interleaved);
    if (!t.mrope_interleaved) {
      unsupported(*rp, "mrope_interleaved", "sectioned (non-interleaved) M-RoPE is not Qwen3.5's layout");
    }
  }
  if (!(t.rope_theta > 0.0)) r.fail("rope_theta", "must be positive");
  if (!(t.partial_rotary_factor > 0.0 && t.partial_rotary_factor <= 1.0)) {
    r.fail("partial_rotary_factor", "must be in (0, 1]");
  }
  const double rd = static_cast<double>(t.head_dim) * t.partial_rotary_factor;
  if (rd != std::floor(rd) || static_cast<std::int64_t>(rd) % 2 != 0) {
    r.fail("partial_rotary_factor", "head_dim x partial_rotary_factor must be an even integer");
  }
  if (t.mrope_section[0] + t.mrope_section[1] + t.mrope_section[2] != t.rotary_dim() / 2) {
    r.fail("rope_parameters", "mrope_section must sum to rotary_dim / 2 = " + std::to_string(t.rotary_dim() / 2));
  }
}

TextConfig parse_text_config(const JsonObjectReader& r) {
  TextConfig t;
  const std::string mt = r.get_string("model_type", "qwen3_5_text");
  if (mt != "qwen3_5_text" && mt != "qwen3_5") {
    unsupported(r, "model_type", "unsupported text model type \"" + mt + "\" (expected qwen3_5_text)");
  }
  t.vocab_size = r.get_int_in("vocab_size", t.vocab_size, 1, kMaxVocab);
  t.hidden_size = r.get_int_in("hidden_size", t.hidden_size, 1, kMaxDim);
  t.intermediate_size = r.get_int_in("intermediate_size", t.intermediate_size, 1, kMaxDim);
  t.num_hidden_layers = r.get_int_in("num_hidden_layers", t.num_hidden_layers, 1, 1024);
  t.num_attention_heads = r.get_int_in("num_attention_heads", t.num_attention_heads, 1, 4096);
  t.num_key_value_heads = r.get_int_in("num_key_value_heads", t.num_key_value_heads, 1, 4096);
  t.head_dim = r.get_int_in("head_dim", t.head_dim, 2, 4096);
  t.rms_norm_eps = r.get_number("rms_norm_eps", t.rms_norm_eps);
  if (!(t.rms_norm_eps > 0.0)) r.fail("rms_norm_eps", "must be positive");
  t.linear_num_key_heads = r.get_int_in("linear_num_key_heads", t.linear_num_key_heads, 1, 4096);
  t.linear_num_value_heads = r.get_int_in("linear_num_value_heads", t.linear_num_value_heads, 1, 4096);
  t.linear_key_head_dim = r.get_int_in("linear_key_head_dim", t.linear_key_head_dim, 1, 4096);
  t.linear_value_head_dim = r.get_int_in("linear_value_head_dim", t.linear_value_head_dim, 1, 4096);
  t.linear_conv_kernel_dim = r.get_int_in("linear_conv_kernel_dim", t.linear_conv_kernel_dim, 1, 64);
  t.max_position_embeddings =
      r.get_int_in("max_position_embeddings", t.max_position_embeddings, 1, std::int64_t{1} << 40);

  if (t.num_attention_heads % t.num_key_value_heads != 0) {
    r.fail("num_key_value_heads", "num_attention_heads (" + std::to_string(t.num_attention_heads) +
                                      ") must be a multiple of num_key_value_heads");
  }
  if (t.linear_num_value_heads % t.linear_num_key_heads != 0) {
    r.fail("linear_num_value_heads",
           "must be a multiple of linear_num_key_heads (" + std::to_string(t.linear_num_key_heads) + ")");
  }
  const std::string act = r.get_string("hidden_act", "silu");
  if (act != "silu") unsupported(r, "hidden_act", "activation \"" + act + "\" is not supported (only silu)");
  if (r.get_bool("attention_bias", false)) unsupported(r, "attention_bias", "attention biases are not supported");
  if (r.has("attn_output_gate") && !r.get_bool("attn_output_gate", true)) {
    unsupported(r, "attn_output_gate", "Qwen3.5 attention without the output gate is not supported");
  }
  if (r.get_int("num_experts", 0) > 0) unsupported(r, "num_experts", "mixture-of-experts models are not supported");
  (void)r.raw("mtp_num_hidden_layers");  // the MTP block exists in checkpoints; clef ignores it

  if (r.has("layer_types")) {
    const auto names = r.get_string_list("layer_types");
    if (static_cast<std::int64_t>(names.size()) != t.num_hidden_layers) {
      r.fail("layer_types", "has " + std::to_string(names.size()) + " entries but num_hidden_layers is " +
                                std::to_string(t.num_hidden_layers));
    }
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (names[i] == "linear_attention") {
        t.layer_types.push_back(LayerType::kLinearAttention);
      } else if (names[i] == "full_attention") {
        t.layer_types.push_back(LayerType::kFullAttention);
      } else {
        throw ModelLoadError(r.file() + ": " + r.path_of("layer_types") + "[" + std::to_string(i) +
                             "]: unknown layer type \"" + names[i] +
                             "\" (expected linear_attention or full_attention)");
      }
    }
  } else {
    const std::int64_t interval = r.get_int_in("full_attention_interval", 4, 1, 1024);
    for (std::int64_t i = 0; i < t.num_hidden_layers; ++i) {
      t.layer_types.push_back((i + 1) % interval == 0 ? LayerType::kFullAttention : LayerType::kLinearAttention);
    }
  }
  parse_rope(r, t);
  return t;
}

VisionConfig parse_vision_config(const JsonObjectReader& r) {
  VisionConfig v;
  const std::string mt = r.get_string("model_type", "qwen3_5_vision");
  if (mt != "qwen3_5_vision" && mt != "qwen3_5") {
    unsupported(r, "model_type", "unsupported vision model type \"" + mt + "\" (expected qwen3_5_vision)");
  }
  v.depth = r.get_int_in("depth", v.depth, 0, 1024);
  v.hidden_size = r.get_int_in("hidden_size", v.hidden_size, 1, kMaxDim);
  v.intermediate_size = r.get_int_in("intermediate_size", v.intermediate_size, 1, kMaxDim);
  v.num_heads = r.get_int_in("num_heads", v.num_heads, 1, 4096);
  v.in_channels = r.get_int_in("in_channels", v.in_channels, 1, 16);
  v.patch_size = r.get_int_in("patch_size", v.patch_size, 1, 1024);
  v.spatial_merge_size = r.get_int_in("spatial_merge_size", v.spatial_merge_size, 1, 16);
  v.temporal_patch_size = r.get_int_in("temporal_patch_size", v.temporal_patch_size, 1, 16);
  v.out_hidden_size = r.get_int_in("out_hidden_size", v.out_hidden_size, 1, kMaxDim);
  v.num_position_embeddings = r.get_int_in("num_position_embeddings", v.num_position_embeddings, 1, kMaxDim);
  if (v.hidden_size % v.num_heads != 0) r.fail("num_heads", "hidden_size must be a multiple of num_heads");
  const auto side = static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(v.num_position_embeddings))));
  if (side * side != v.num_position_embeddings) {
    r.fail("num_position_embeddings", "must be a square (the learned grid is side x side)");
  }
  const std::string act = r.get_string("hidden_act", "gelu_pytorch_tanh");
  if (act != "gelu_pytorch_tanh") {
    unsupported(r, "hidden_act", "vision activation \"" + act + "\" is not supported (only gelu_pytorch_tanh)");
  }
  if (r.has("deepstack_visual_indexes") && !r.get_int_list("deepstack_visual_indexes", {}).empty()) {
    unsupported(r, "deepstack_visual_indexes", "deepstack vision features are not part of Qwen3.5");
  }
  if (auto rp = r.get_object("rope_parameters")) {
    const std::string type = rp->get_string("rope_type", "axial");
    if (type != "axial" && type != "default") unsupported(*rp, "rope_type", "vision RoPE type \"" + type + "\"");
    v.rope_theta = rp->get_number("rope_theta", v.rope_theta);
  }
  return v;
}

}  // namespace

ModelConfig parse_model_config(const nlohmann::json& j, const std::string& label) {
  JsonObjectReader r(j, label, "");
  ModelConfig c;
  c.model_type = r.get_string("model_type");
  if (r.has("architectures")) c.architectures = r.get_string_list("architectures");
  if (c.model_type == "qwen3_5") {
    c.composite = true;
    auto tc = r.get_object("text_config");
    if (!tc) r.fail("text_config", "required for model_type qwen3_5");
    c.text = parse_text_config(*tc);
    if (auto vc = r.get_object("vision_config")) c.vision = parse_vision_config(*vc);
    c.tie_word_embeddings = r.get_bool("tie_word_embeddings", false);
    c.image_token_id = r.get_int_in("image_token_id", c.image_token_id, 0, kMaxVocab);
    c.video_token_id = r.get_int_in("video_token_id", c.video_token_id, 0, kMaxVocab);
    c.vision_start_token_id = r.get_int_in("vision_start_token_id", c.vision_start_token_id, 0, kMaxVocab);
    c.vision_end_token_id = r.get_int_in("vision_end_token_id", c.vision_end_token_id, 0, kMaxVocab);
  } else if (c.model_type == "qwen3_5_text") {
    c.composite = false;
    c.text = parse_text_config(r);
    c.tie_word_embeddings = r.get_bool("tie_word_embeddings", false);
  } else if (c.model_type == "qwen3_5_moe" || c.model_type == "qwen3_5_moe_text") {
    unsupported(r, "model_type", "Qwen3.5 mixture-of-experts models are not supported");
  } else {
    unsupported(r, "model_type",
                "unsupported model type \"" + c.model_type + "\" (clef.cpp reads qwen3_5 and qwen3_5_text)");
  }
  for (auto id : {c.image_token_id, c.video_token_id, c.vision_start_token_id, c.vision_end_token_id}) {
    if (c.composite && id >= c.text.vocab_size) {
      r.fail("image_token_id", "special token id " + std::to_string(id) + " is outside the vocabulary (" +
                                   std::to_string(c.text.vocab_size) + ")");
    }
  }
  return c;
}

JointHeadConfig parse_joint_head_config(const nlohmann::json& j, const std::string& label) {
  JsonObjectReader r(j, label, "");
  JointHeadConfig h;
  h.hidden_size = r.get_int_in("hidden_size", 1, kMaxDim);
  h.width = r.get_int_in("width", 1, kMaxDim);
  h.routing_layers = r.get_int_in("routing_layers", 0, 1024);
  h.layers = r.get_int_in("layers", 0, 1024);
  h.heads = r.get_int_in("heads", 1, 4096);
  h.feedforward = r.get_int_in("feedforward", 1, kMaxDim);
  h.dropout = r.get_number("dropout", 0.0);
  if (h.dropout < 0.0 || h.dropout >= 1.0) r.fail("dropout", "must be in [0, 1)");
  r.reject_unknown_keys();
  if (h.width % h.heads != 0) r.fail("heads", "width (" + std::to_string(h.width) + ") must be a multiple of heads");
  return h;
}

std::optional<std::string> preprocessor_config_difference(const PreprocessorConfig& a, const PreprocessorConfig& b) {
  if (a.do_convert_rgb != b.do_convert_rgb) return "do_convert_rgb";
  if (a.do_resize != b.do_resize) return "do_resize";
  if (a.do_rescale != b.do_rescale) return "do_rescale";
  if (a.do_normalize != b.do_normalize) return "do_normalize";
  if (a.resample != b.resample) return "resample";
  if (a.rescale_factor != b.rescale_factor) return "rescale_factor";
  if (a.image_mean != b.image_mean) return "image_mean";
  if (a.image_std != b.image_std) return "image_std";
  if (a.min_pixels != b.min_pixels) return "min_pixels (size.shortest_edge)";
  if (a.max_pixels != b.max_pixels) return "max_pixels (size.longest_edge)";
  if (a.patch_size != b.patch_size) return "patch_size";
  if (a.merge_size != b.merge_size) return "merge_size";
  if (a.temporal_patch_size != b.temporal_patch_size) return "temporal_patch_size";
  return std::nullopt;
}

PreprocessorConfig parse_preprocessor_config(const nlohmann::json& j, const std::string& label) {
  JsonObjectReader r(j, label, "");
  r.set_null_is_absent(true);  // processor configs write unset options as null
  PreprocessorConfig p;
  p.image_processor_type = r.get_string("image_processor_type", "");
  p.do_convert_rgb = r.get_bool("do_convert_rgb", p.do_convert_rgb);
  p.do_resize = r.get_bool("do_resize", p.do_resize);
  p.do_rescale = r.get_bool("do_rescale", p.do_rescale);
  p.do_normalize = r.get_bool("do_normalize", p.do_normalize);
  p.resample = r.get_int_in("resample", p.resample, 0, 5);
  p.rescale_factor = r.get_number("rescale_factor", p.rescale_factor);
  auto three = [&](std::string_view key, std::array<double, 3> def) {
    auto v = r.get_number_list(key, {def[0], def[1], def[2]});
    if (v.size() != 3) r.fail(key, "expected 3 values (R, G, B)");
    return std::array<double, 3>{v[0], v[1], v[2]};
  };
  p.image_mean = three("image_mean", p.image_mean);
  p.image_std = three("image_std", p.image_std);
  for (double s : p.image_std) {
    if (!(s > 0.0)) r.fail("image_std", "must be positive");
  }
  if (auto size = r.get_object("size")) {
    size->set_null_is_absent(true);
    p.min_pixels = size->get_int_in("shortest_edge", p.min_pixels, 1, std::int64_t{1} << 40);
    p.max_pixels = size->get_int_in("longest_edge", p.max_pixels, 1, std::int64_t{1} << 40);
  }
  p.min_pixels = r.get_int_in("min_pixels", p.min_pixels, 1, std::int64_t{1} << 40);
  p.max_pixels = r.get_int_in("max_pixels", p.max_pixels, 1, std::int64_t{1} << 40);
  if (p.min_pixels > p.max_pixels) r.fail("min_pixels", "is larger than max_pixels");
  p.patch_size = r.get_int_in("patch_size", p.patch_size, 1, 1024);
  p.merge_size = r.get_int_in("merge_size", p.merge_size, 1, 16);
  p.temporal_patch_size = r.get_int_in("temporal_patch_size", p.temporal_patch_size, 1, 16);
  return p;
}

}  // namespace clef
