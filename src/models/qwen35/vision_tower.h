// SPDX-License-Identifier: MIT
// The Qwen3.5 vision tower (`model.visual`, class Qwen3_5VisionModel; docs/MODEL.md §6):
// patch embedding (the Conv3d as one GEMM), learned position embeddings bilinearly resampled
// from the num_position_embeddings grid, 2-D axial rotary, `depth` pre-norm ViT blocks with
// bidirectional attention inside each image frame, and the 2x2 patch merger. Input is the
// processor's pixel_values (merge-block-major rows, §6.2); output one row of out_hidden_size
// (= the text hidden size) per merged 2x2 block, ready to replace the <|image_pad|> embeddings
// (§6.9). Preprocessing (decode, resize, patchify) is not done here.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "io/hf_config.h"
#include "models/qwen35/weights.h"
#include "ops/gemm.h"

namespace clef::qwen35 {

/// One image (or video clip) in patches, the processor's `image_grid_thw` row: t frames of
/// h x w patches of patch_size pixels. h and w are multiples of spatial_merge_size.
struct ImageGrid {
  std::int64_t t = 1;
  std::int64_t h = 0;
  std::int64_t w = 0;
  std::int64_t patches() const noexcept { return t * h * w; }
};

struct VisionTowerOptions {
  /// kF32: fp32 GEMMs and attention (parity with an fp32 transformers run);
  /// kBF16: bf16-rounded GEMM operands and attention operands, fp32 accumulation and fp32
  /// everywhere else (LayerNorm, GELU, rotary, position embeddings), like the text backbone.
  ops::Precision precision = ops::Precision::kF32;
};

/// The activation buffers of VisionTower::forward for up to `patches` patch rows N (D the tower
/// width, I its MLP width); forward() regrows them for a larger call.
struct VisionActivations {
  std::int64_t patches = 0;    ///< capacity in patch rows
  std::vector<float> x;        ///< [N, D] residual stream
  std::vector<float> normed;   ///< [N, D] LayerNorm output
  std::vector<float> qkv;      ///< [N, 3D] qkv projection
  std::vector<float> q, k, v;  ///< [N, D] each, split from qkv
  std::vector<float> core;     ///< [N, D] attention output
  std::vector<float> mlp;      ///< [N, I] MLP hidden
  std::vector<float> merged;   ///< [N / m², m²·D] patch merger hidden

  std::size_t floats() const noexcept;
};

class VisionTower {
 public:
  /// Binds the tower to `w` (views into the release's mmapped files, which must outlive this
  /// object). The position table and the small vectors are copied to fp32. Throws
  /// ModelLoadError when a tensor is missing or mis-shaped for `cfg`, Unsupported when the
  /// head size is not a multiple of 4 (the axial rotary splits it in four) or the position
  /// table is not a square grid.
  VisionTower(const VisionConfig& cfg, const VisionWeights& w, const VisionTowerOptions& opt = {});

  /// Checks one grid: t >= 1, h and w positive multiples of spatial_merge_size, at most
  /// 2^20 patches per frame. Throws InvalidArgument naming `what` (e.g. "image 2").
  void check_grid(const ImageGrid& g, const std::string& what) const;

  /// Merged tokens (output rows) of one grid: t * (h / m) * (w / m).
  std::int64_t merged_tokens(const ImageGrid& g) const noexcept;

  /// Runs the tower on a batch of images.
  /// pixel_values [num_patches, patch_dim()] fp32 (num_patches = sum of grids[i].patches()),
  /// the images' rows back to back, each in the processor's order (frames, then merge blocks
  /// row-major, then the 2x2 patches of a block; within a row (channel, temporal, py, px)).
  /// out [sum merged_tokens(grids[i]), out_hidden_size()] fp32: image 0's merged tokens
  /// (row-major over its merged grid, frame-major), then image 1's, ...
  /// Attention is restricted to each frame of each image (HF cu_seqlens).
  /// Throws InvalidArgument on an empty or bad grid list, a num_patches mismatch, or a
  /// non-finite pixel value (naming the row).
  void forward(const float* pixel_values, std::int64_t num_patches, std::span<const ImageGrid> grids, float* out,
               VisionActivations& act) const;

  /// forward() into a new vector.
  std::vector<float> forward(const float* pixel_values, std::int64_t num_patches,
                             std::span<const ImageGrid> grids) const;

  const VisionConfig& config() const noexcept { return cfg_; }
  std::int64_t patch_dim() const noexcept { return cfg_.patch_dim(); }
  std::int64_t hidden_size() const noexcept { return cfg_.hidden_size; }
  std::int64_t out_hidden_size() const noexcept { return cfg_.out_hidden_size; }
  ops::Precision precision() const noexcept { return opt_.precision; }

  /// The bilinearly resampled position embeddings of one frame (§6.4) in the processor's
  /// merge-block-major patch order: [g.h * g.w, hidden_size()] fp32, appended to `out`.
  /// Arithmetic as transformers 5.x get_vision_interpolation_indices_and_weights
  /// (align_corners = True, fp32 coordinates and weights, 4-tap fp32 sum).
  void position_embeddings(const ImageGrid& g, std::vector<float>& out) const;

  /// Axial rotary tables of one frame (§6.5) in merge-block-major order: cos, sin
  /// [g.h * g.w, head_dim/2] each, laid out [row * phi_0..F-1 | col * phi_0..F-1] (F = head_dim/4),
  /// appended to `cos` / `sin`.
  void rotary_tables(const ImageGrid& g, std::vector<float>& cos, std::vector<float>& sin) const;

 private:
  struct Block {
    std::vector<float> norm1_w, norm1_b, norm2_w, norm2_b;
    ops::GemmWeight qkv, proj, fc1, fc2;
    std::vector<float> qkv_b, proj_b, fc1_b, fc2_b;
  };
  VisionConfig cfg_;
  VisionTowerOptions opt_;
  std::int64_t head_dim_ = 0;
  std::int64_t side_ = 0;  ///< position grid side (48)
  ops::GemmWeight patch_;
  std::vector<float> patch_b_;
  std::vector<float> pos_table_;  ///< [side*side, D]
  std::vector<float> inv_freq_;   ///< [head_dim/4]
  std::vector<Block> blocks_;
  std::vector<float> merger_norm_w_, merger_norm_b_;
  ops::GemmWeight merger_fc1_, merger_fc2_;
  std::vector<float> merger_fc1_b_, merger_fc2_b_;
};

}  // namespace clef::qwen35
