// SPDX-License-Identifier: MIT
#include "models/qwen35/mmproj.h"

#include <algorithm>
#include <cmath>
#include <variant>

#include "core/dtype.h"
#include "core/error.h"
#include "core/paths.h"

namespace clef::qwen35 {
namespace {

using Shape = std::vector<std::int64_t>;

constexpr const char* kProjectorType = "qwen3vl_merger";

[[noreturn]] void bad(const GgufFile& g, const std::string& key, const std::string& msg) { g.metadata_error(key, msg); }

std::int64_t positive(const GgufFile& g, const std::string& key) { return g.get_positive_int(key); }

/// A bool key's value, or `fallback` when absent. ModelLoadError when it is not a bool.
bool get_bool(const GgufFile& g, const std::string& key, bool fallback) {
  const GgufValue* v = g.find_value(key);
  if (v == nullptr) return fallback;
  if (v->type != GgufValueType::kBool) bad(g, key, "is not a bool");
  return std::get<bool>(v->scalar);
}

double number(const GgufFile& g, const std::string& key, const GgufValue& v) {
  if (const auto* d = std::get_if<double>(&v.scalar)) return *d;
  if (const auto* u = std::get_if<std::uint64_t>(&v.scalar)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<std::int64_t>(&v.scalar)) return static_cast<double>(*i);
  bad(g, key, "holds a non-number");
}

std::array<float, 3> three_floats(const GgufFile& g, const std::string& key) {
  const std::vector<GgufValue>& a = g.get_array(key);
  if (a.size() != 3) bad(g, key, "must hold 3 numbers (R, G, B), holds " + std::to_string(a.size()));
  std::array<float, 3> out{};
  for (std::size_t i = 0; i < 3; ++i) {
    const double d = number(g, key, a[i]);
    if (!std::isfinite(d)) bad(g, key, "element " + std::to_string(i) + " is not finite");
    out[i] = static_cast<float>(d);
  }
  return out;
}

/// A tensor as the tower consumes it: float types as they are (zero-copy), block types dequantized
/// to fp32 into `s` under "NAME (fp32)".
WeightView take_float(WeightStore& s, const std::string& name, const Shape& shape) {
  const WeightView w = s.take_dequantizable(name, shape);
  if (is_weight_float(w.dtype())) return w;
  const std::string owned = name + " (fp32)";
  s.add_owned_f32(owned, shape, w.to_f32(), *w.file);
  return s.take(owned, shape);
}

}  // namespace

MmprojInfo mmproj_info(const GgufFile& g, std::int64_t text_hidden_size) {
  MmprojInfo info;
  const std::string& arch = g.get_string("general.architecture");
  if (arch != "clip") {
    // Not a projector at all (most likely the model GGUF given twice): the wrong file, not an
    // unsupported one, so the model-file exit code (3), as for a --mmproj that is a folder.
    throw ModelLoadError(g.label() + ": general.architecture is \"" + printable(arch) +
                         "\"; a projector (mmproj) file has \"clip\" (is this the model GGUF? pass it with --model)");
  }
  if (const GgufValue* t = g.find_value("general.type"); t != nullptr) {
    if (t->type != GgufValueType::kString || std::get<std::string>(t->scalar) != "mmproj") {
      bad(g, "general.type", "must be \"mmproj\" in a projector file");
    }
  }
  if (const GgufValue* n = g.find_value("general.name"); n != nullptr && n->type == GgufValueType::kString) {
    info.name = std::get<std::string>(n->scalar);
  }
  if (g.find_value("general.file_type") != nullptr) info.file_type = g.get_int("general.file_type");
  // Single-modality files name the type in clip.projector_type; mixed ones (vision + audio) per
  // modality in clip.vision.projector_type.
  const std::string type_key =
      g.find_value("clip.projector_type") != nullptr ? "clip.projector_type" : "clip.vision.projector_type";
  if (g.find_value(type_key) == nullptr) {
    throw ModelLoadError(g.label() + ": metadata \"clip.projector_type\" is missing (not a llama.cpp projector file)");
  }
  info.projector_type = g.get_string(type_key);
  if (info.projector_type != kProjectorType) {
    throw Unsupported(g.label() + ": projector type \"" + printable(info.projector_type) + "\" (" + type_key +
                      ") is not supported: clef reads the Qwen3.5 vision tower, projector type \"" + kProjectorType +
                      "\"");
  }
  if (!get_bool(g, "clip.has_vision_encoder", false)) {
    bad(g, "clip.has_vision_encoder", "must be true (this projector has no vision encoder)");
  }
  if (!get_bool(g, "clip.use_gelu", true) || get_bool(g, "clip.use_silu", false)) {
    throw Unsupported(g.label() +
                      ": the vision MLP activation is not GELU (clip.use_gelu / clip.use_silu); the "
                      "Qwen3.5 tower uses gelu_pytorch_tanh");
  }
  if (const GgufValue* ds = g.find_value("clip.vision.is_deepstack_layers"); ds != nullptr) {
    for (std::size_t i = 0; i < ds->elements.size(); ++i) {
      const GgufValue& e = ds->elements[i];
      if (e.type == GgufValueType::kBool && std::get<bool>(e.scalar)) {
        throw Unsupported(g.label() + ": metadata \"clip.vision.is_deepstack_layers\": block " + std::to_string(i) +
                          " feeds deepstack features (Qwen3-VL); the Qwen3.5 tower has none");
      }
    }
  }
  VisionConfig& v = info.vision;
  v.hidden_size = positive(g, "clip.vision.embedding_length");
  v.intermediate_size = positive(g, "clip.vision.feed_forward_length");
  v.depth = positive(g, "clip.vision.block_count");
  v.num_heads = positive(g, "clip.vision.attention.head_count");
  v.patch_size = positive(g, "clip.vision.patch_size");
  v.spatial_merge_size =
      g.find_value("clip.vision.spatial_merge_size") != nullptr ? positive(g, "clip.vision.spatial_merge_size") : 2;
  v.out_hidden_size = positive(g, "clip.vision.projection_dim");
  v.temporal_patch_size = 2;
  v.rope_theta = 10000.0;
  if (v.out_hidden_size != text_hidden_size) {
    bad(g, "clip.vision.projection_dim",
        std::to_string(v.out_hidden_size) + " does not match the model's hidden size " +
            std::to_string(text_hidden_size) + " (a projector made for another model)");
  }
  if (v.hidden_size % v.num_heads != 0) {
    bad(g, "clip.vision.attention.head_count",
        "the embedding length " + std::to_string(v.hidden_size) + " is not a multiple of " +
            std::to_string(v.num_heads) + " heads");
  }
  if (v.depth > 1024) bad(g, "clip.vision.block_count", "at most 1024, got " + std::to_string(v.depth));
  if (v.spatial_merge_size > 16) bad(g, "clip.vision.spatial_merge_size", "at most 16");
  info.image_mean = three_floats(g, "clip.vision.image_mean");
  info.image_std = three_floats(g, "clip.vision.image_std");
  for (float s : info.image_std) {
    if (!(s > 0)) bad(g, "clip.vision.image_std", "every element must be > 0");
  }
  if (g.find_value("clip.vision.attention.layer_norm_epsilon") != nullptr) {
    info.layer_norm_eps = g.get_float("clip.vision.attention.layer_norm_epsilon");
  }

  // Shapes the metadata does not carry: channels and the position grid.
  const GgufTensorInfo& patch =
      g.need_tensor("v.patch_embd.weight", 4, "a Qwen3.5 projector has it");  // ne [P, P, C, D]
  if (patch.ne[0] != v.patch_size || patch.ne[1] != v.patch_size || patch.ne[3] != v.hidden_size) {
    throw ModelLoadError(g.label() + ": tensor v.patch_embd.weight has shape " + shape_to_string(patch.torch_shape()) +
                         ", expected [" + std::to_string(v.hidden_size) + ", C, " + std::to_string(v.patch_size) +
                         ", " + std::to_string(v.patch_size) + "] (clip.vision.embedding_length, patch_size)");
  }
  v.in_channels = patch.ne[2];
  if (v.in_channels > 16) throw ModelLoadError(g.label() + ": tensor v.patch_embd.weight has more than 16 channels");
  const GgufTensorInfo& pos = g.need_tensor("v.position_embd.weight", 2, "a Qwen3.5 projector has it");  // ne [D, N]
  v.num_position_embeddings = pos.ne[1];
  const auto side = static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(v.num_position_embeddings))));
  if (side * side != v.num_position_embeddings) {
    throw ModelLoadError(g.label() + ": tensor v.position_embd.weight has " +
                         std::to_string(v.num_position_embeddings) + " rows, not a square grid");
  }
  return info;
}

VisionWeights bind_mmproj_weights(WeightStore& s, const VisionConfig& v) {
  const std::int64_t d = v.hidden_size, c = v.in_channels, p = v.patch_size, inter = v.intermediate_size;
  VisionWeights w;
  // The Conv3d weight [D, C, 2, P, P], written as its two temporal slices [D, C, P, P]: interleave
  // them back per (d, c) so the tower sees the folder's layout.
  {
    const WeightView t0 = s.take_dequantizable("v.patch_embd.weight", {d, c, p, p});
    const WeightView t1 = s.take_dequantizable("v.patch_embd.weight.1", {d, c, p, p});
    const std::vector<float> a = t0.to_f32(), b = t1.to_f32();
    const auto plane = static_cast<std::size_t>(p * p);
    std::vector<float> both(2 * a.size());
    for (std::size_t dc = 0; dc < static_cast<std::size_t>(d * c); ++dc) {
      std::copy_n(a.begin() + static_cast<std::ptrdiff_t>(dc * plane), plane,
                  both.begin() + static_cast<std::ptrdiff_t>(2 * dc * plane));
      std::copy_n(b.begin() + static_cast<std::ptrdiff_t>(dc * plane), plane,
                  both.begin() + static_cast<std::ptrdiff_t>((2 * dc + 1) * plane));
    }
    const Shape shape{d, c, 2, p, p};
    s.add_owned_f32("v.patch_embd.weight + .weight.1 (fp32)", shape, std::move(both), *t0.file);
    w.patch_embed_weight = s.take("v.patch_embd.weight + .weight.1 (fp32)", shape);
  }
  w.patch_embed_bias = take_float(s, "v.patch_embd.bias", {d});
  w.pos_embed = take_float(s, "v.position_embd.weight", {v.num_position_embeddings, d});
  for (std::int64_t i = 0; i < v.depth; ++i) {
    const std::string q = "v.blk." + std::to_string(i) + ".";
    VisionBlockWeights blk;
    blk.norm1_weight = take_float(s, q + "ln1.weight", {d});
    blk.norm1_bias = take_float(s, q + "ln1.bias", {d});
    blk.norm2_weight = take_float(s, q + "ln2.weight", {d});
    blk.norm2_bias = take_float(s, q + "ln2.bias", {d});
    blk.qkv_weight = take_float(s, q + "attn_qkv.weight", {3 * d, d});
    blk.qkv_bias = take_float(s, q + "attn_qkv.bias", {3 * d});
    blk.proj_weight = take_float(s, q + "attn_out.weight", {d, d});
    blk.proj_bias = take_float(s, q + "attn_out.bias", {d});
    blk.fc1_weight = take_float(s, q + "ffn_up.weight", {inter, d});
    blk.fc1_bias = take_float(s, q + "ffn_up.bias", {inter});
    blk.fc2_weight = take_float(s, q + "ffn_down.weight", {d, inter});
    blk.fc2_bias = take_float(s, q + "ffn_down.bias", {d});
    w.blocks.push_back(blk);
  }
  const std::int64_t m = d * v.spatial_merge_size * v.spatial_merge_size;
  w.merger_norm_weight = take_float(s, "v.post_ln.weight", {d});
  w.merger_norm_bias = take_float(s, "v.post_ln.bias", {d});
  w.merger_fc1_weight = take_float(s, "mm.0.weight", {m, m});
  w.merger_fc1_bias = take_float(s, "mm.0.bias", {m});
  w.merger_fc2_weight = take_float(s, "mm.2.weight", {v.out_hidden_size, m});
  w.merger_fc2_bias = take_float(s, "mm.2.bias", {v.out_hidden_size});
  s.require_all_consumed("Qwen3.5 projector (mmproj)");
  return w;
}

}  // namespace clef::qwen35
