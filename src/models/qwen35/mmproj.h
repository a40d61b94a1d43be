// SPDX-License-Identifier: MIT
// The Qwen3.5 vision tower from a projector GGUF ("mmproj"), as llama.cpp's
// `convert_hf_to_gguf.py --mmproj` writes it for a Qwen3_5ForConditionalGeneration checkpoint
// (projector type "qwen3vl_merger"; facts read from llama.cpp 3f545becc conversion/qwen3vl.py,
// conversion/base.py, gguf-py constants.py / tensor_mapping.py and tools/mtmd/clip.cpp, nothing
// copied; docs/GGUF.md "The projector file"). The result is the VisionConfig and VisionWeights
// that a release folder's config.json vision_config and model.visual.* tensors give, so
// VisionTower runs it unchanged.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "io/gguf.h"
#include "io/hf_config.h"
#include "io/weight_store.h"
#include "models/qwen35/weights.h"

namespace clef::qwen35 {

/// What a projector GGUF says about itself.
struct MmprojInfo {
  std::string projector_type;         ///< clip.projector_type ("qwen3vl_merger")
  std::string name;                   ///< general.name ("" when absent)
  std::int64_t file_type = -1;        ///< general.file_type (llama_ftype: 0 F32, 1 F16, 32 BF16, 7 Q8_0), -1 absent
  VisionConfig vision;                ///< the tower's shape (see mmproj_info)
  std::array<float, 3> image_mean{};  ///< clip.vision.image_mean
  std::array<float, 3> image_std{};   ///< clip.vision.image_std
  /// clip.vision.attention.layer_norm_epsilon as stored, or -1 when absent. The converter writes the
  /// *text* config's rms_norm_eps there; the tower's LayerNorms use 1e-6 (docs/MODEL.md §6.6) whatever
  /// it says, as the folder does.
  double layer_norm_eps = -1;
};

/// Reads and checks the metadata of a projector GGUF (`g`) for a backbone of width
/// `text_hidden_size`. Requires: general.architecture "clip"; general.type "mmproj" when present;
/// clip.projector_type (or clip.vision.projector_type) "qwen3vl_merger"; clip.has_vision_encoder
/// true; clip.use_gelu not false and clip.use_silu not true; no true entry in
/// clip.vision.is_deepstack_layers (Qwen3.5 has no deepstack features); positive
/// clip.vision.{embedding_length, feed_forward_length, block_count, attention.head_count,
/// patch_size, projection_dim}; clip.vision.projection_dim == `text_hidden_size`; image_mean and
/// image_std arrays of 3 numbers (std > 0).
/// The VisionConfig: hidden_size = embedding_length, intermediate_size = feed_forward_length,
/// depth = block_count, num_heads = attention.head_count, patch_size, spatial_merge_size
/// (clip.vision.spatial_merge_size, 2 when absent as in llama.cpp), out_hidden_size =
/// projection_dim, temporal_patch_size 2 (the two slices v.patch_embd.weight / .weight.1),
/// in_channels = the channel dim of v.patch_embd.weight, num_position_embeddings = the rows of
/// v.position_embd.weight (a square; clip.vision.image_size, the converter's side x patch_size, is
/// not read), rope_theta 10000 (not stored; Qwen3.5's vision rotary base). Throws ModelLoadError
/// naming the file and the key or tensor, and for a file that is not a projector (architecture
/// other than "clip", e.g. the model GGUF); Unsupported for another projector type or deepstack
/// layers.
MmprojInfo mmproj_info(const GgufFile& g, std::int64_t text_hidden_size);

/// Binds the projector's tensors (store `s` made by WeightStore::open_gguf on the file) to the
/// tower's fields, strictly (every tensor used; a missing or mis-shaped one is named with the expected
/// PyTorch-order shape). Names (D = hidden_size, I = intermediate_size, M = D·merge², O = out_hidden_size):
///   v.patch_embd.weight, v.patch_embd.weight.1 [D, C, P, P] -> patch_embed.proj.weight [D, C, 2, P, P]
///       (the two temporal slices interleaved back, fp32, owned by `s`); v.patch_embd.bias [D]
///   v.position_embd.weight [N, D]; v.blk.i.{ln1, ln2} [D] (.weight, .bias) -> blocks.i.norm1 / norm2
///   v.blk.i.attn_qkv [3D, D] + [3D], attn_out [D, D] + [D], ffn_up [I, D] + [I], ffn_down [D, I] + [D]
///       -> attn.qkv, attn.proj, mlp.linear_fc1, mlp.linear_fc2
///   v.post_ln [D] -> merger.norm; mm.0 [M, M] + [M] -> merger.linear_fc1; mm.2 [O, M] + [O] -> merger.linear_fc2
/// Values are used as stored (no transform). F32, BF16 and F16 tensors are zero-copy views; a tensor in a
/// ggml block type (Q8_0, ...) is dequantized to fp32 (core/quant_blocks.h) into `s` at load, so the
/// tower's fp32 / bf16 GEMMs run on the dequantized values (memory: 4 bytes per such parameter).
VisionWeights bind_mmproj_weights(WeightStore& s, const VisionConfig& v);

}  // namespace clef::qwen35
