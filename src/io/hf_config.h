// SPDX-License-Identifier: MIT
// Typed views of the JSON configuration files of a Clef release folder:
//   config.json (Qwen3.5, composite `text_config` + `vision_config` form or flat text-only form),
//   joint_head_config.json, preprocessor_config.json.
// Defaults are the ones transformers' Qwen3_5*Config classes use (transformers 5.x,
// configuration_qwen3_5.py); see docs/MODEL.md §1 for the meaning of each field.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace clef {

/// Kind of one decoder layer (docs/MODEL.md §1.2).
enum class LayerType { kLinearAttention, kFullAttention };
const char* layer_type_name(LayerType t) noexcept;

/// Qwen3.5 text backbone configuration (`text_config`, class Qwen3_5TextConfig).
struct TextConfig {
  std::int64_t vocab_size = 248320;
  std::int64_t hidden_size = 4096;         ///< H
  std::int64_t intermediate_size = 12288;  ///< SwiGLU width I
  std::int64_t num_hidden_layers = 32;     ///< L
  std::int64_t num_attention_heads = 16;   ///< full-attention query heads nh
  std::int64_t num_key_value_heads = 4;    ///< nkv (GQA)
  std::int64_t head_dim = 256;             ///< hd
  double rms_norm_eps = 1e-6;
  std::int64_t linear_num_key_heads = 16;    ///< Gated DeltaNet q/k heads Hk
  std::int64_t linear_num_value_heads = 32;  ///< Gated DeltaNet v heads Hv
  std::int64_t linear_key_head_dim = 128;    ///< dk
  std::int64_t linear_value_head_dim = 128;  ///< dv
  std::int64_t linear_conv_kernel_dim = 4;   ///< causal conv width K
  std::vector<LayerType> layer_types;        ///< size L; from `layer_types` or the interval rule
  double rope_theta = 10000.0;               ///< rope_parameters.rope_theta (HF default; Qwen3.5 ships 1e7)
  double partial_rotary_factor = 0.25;
  std::array<std::int64_t, 3> mrope_section = {11, 11, 10};
  bool mrope_interleaved = true;
  std::int64_t max_position_embeddings = 32768;

  std::int64_t rotary_dim() const noexcept;  ///< head_dim * partial_rotary_factor
  std::int64_t gdn_key_dim() const noexcept { return linear_num_key_heads * linear_key_head_dim; }
  std::int64_t gdn_value_dim() const noexcept { return linear_num_value_heads * linear_value_head_dim; }
  std::int64_t gdn_conv_dim() const noexcept { return 2 * gdn_key_dim() + gdn_value_dim(); }
  std::int64_t count(LayerType t) const noexcept;
};

/// Qwen3.5 vision tower configuration (`vision_config`, class Qwen3_5VisionConfig).
struct VisionConfig {
  std::int64_t depth = 27;
  std::int64_t hidden_size = 1152;  ///< D
  std::int64_t intermediate_size = 4304;
  std::int64_t num_heads = 16;
  std::int64_t in_channels = 3;
  std::int64_t patch_size = 16;
  std::int64_t spatial_merge_size = 2;
  std::int64_t temporal_patch_size = 2;
  std::int64_t out_hidden_size = 3584;
  std::int64_t num_position_embeddings = 2304;
  double rope_theta = 10000.0;
  std::int64_t patch_dim() const noexcept {  ///< in_channels * temporal * patch^2 (1536)
    return in_channels * temporal_patch_size * patch_size * patch_size;
  }
};

/// The whole config.json.
struct ModelConfig {
  std::string model_type;  ///< "qwen3_5" (composite) or "qwen3_5_text" (flat)
  std::vector<std::string> architectures;
  bool composite = true;  ///< text_config + vision_config form
  TextConfig text;
  std::optional<VisionConfig> vision;  ///< present in the composite form
  bool tie_word_embeddings = false;    ///< composite: the top-level field governs (as in HF)
  std::int64_t image_token_id = 248056;
  std::int64_t video_token_id = 248057;
  std::int64_t vision_start_token_id = 248053;
  std::int64_t vision_end_token_id = 248054;
};

/// Parses config.json. `label` names the file in messages. Throws ModelLoadError for malformed
/// or inconsistent values (naming the JSON path) and Unsupported for valid options this engine
/// does not implement (unknown model_type, MoE, non-default RoPE, attention bias, ...).
ModelConfig parse_model_config(const nlohmann::json& j, const std::string& label = "config.json");

/// joint_head_config.json (docs/PROTOCOL.md §4.1).
struct JointHeadConfig {
  std::int64_t hidden_size = 0;     ///< backbone width H the head reads
  std::int64_t width = 0;           ///< W
  std::int64_t routing_layers = 0;  ///< R evidence-routing layers
  std::int64_t layers = 0;          ///< L field-decoder layers
  std::int64_t heads = 0;           ///< attention heads (head dim W / heads)
  std::int64_t feedforward = 0;     ///< F
  double dropout = 0.0;             ///< accepted, unused at inference
};

/// Parses joint_head_config.json; every field but `dropout` is required and unknown fields are
/// rejected (the reference constructs its module with these keyword arguments).
JointHeadConfig parse_joint_head_config(const nlohmann::json& j, const std::string& label = "joint_head_config.json");

/// preprocessor_config.json (Qwen2VLImageProcessor fields, docs/MODEL.md §6.1).
struct PreprocessorConfig {
  std::string image_processor_type;
  bool do_convert_rgb = true, do_resize = true, do_rescale = true, do_normalize = true;
  std::int64_t resample = 3;  ///< PIL BICUBIC
  double rescale_factor = 1.0 / 255.0;
  std::array<double, 3> image_mean = {0.5, 0.5, 0.5};
  std::array<double, 3> image_std = {0.5, 0.5, 0.5};
  std::int64_t min_pixels = 65536;     ///< size.shortest_edge (or min_pixels)
  std::int64_t max_pixels = 16777216;  ///< size.longest_edge (or max_pixels)
  std::int64_t patch_size = 16;
  std::int64_t merge_size = 2;
  std::int64_t temporal_patch_size = 2;
};

/// Parses preprocessor_config.json, or the `image_processor` object of processor_config.json
/// (the same fields). Throws ModelLoadError naming the field.
PreprocessorConfig parse_preprocessor_config(const nlohmann::json& j,
                                             const std::string& label = "preprocessor_config.json");

/// The first setting (JSON field name: "do_convert_rgb", ..., "image_mean", "min_pixels" for
/// size.shortest_edge, "max_pixels" for size.longest_edge, ...) on which `a` and `b` differ, or
/// nullopt when every setting that changes pixels or token counts agrees. The processor type name
/// is not compared (transformers names one image processor by backend-specific class names).
std::optional<std::string> preprocessor_config_difference(const PreprocessorConfig& a, const PreprocessorConfig& b);

}  // namespace clef
