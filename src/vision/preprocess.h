// SPDX-License-Identifier: MIT
// Image preprocessing of the Qwen3.5 vision tower, bit-exact with transformers' Qwen2-VL image
// processor, PIL backend (`Qwen2VLImageProcessorPil`, transformers 5.24.0): smart resize, Pillow
// BICUBIC resampling, rescale + normalize, temporal duplication, merge-block-major patches
// (docs/MODEL.md §6.1, §6.2, Appendix B). See docs/VISION.md.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "vision/image.h"

namespace clef {

/// Order of the two resampling passes when both axes change size. The uint8 intermediate makes it
/// visible (up to ~20 levels on noisy images).
enum class ResizePassOrder : std::uint8_t {
  /// Pillow >= 13 (PR #9549): vertical first iff the height shrinks and in_h - out_h > 2 (in_w - out_w).
  kPillow13,
  /// Pillow <= 12 and docs/MODEL.md Appendix B: always horizontal first.
  kHorizontalFirst,
  /// torchvision 0.29 / torch 2.15 uint8 antialiased bicubic on the CPU (docs/VISION.md "The
  /// torchvision backend"): always horizontal first, and the weights are int16 with a per-axis
  /// precision (the most fractional bits, at most 22, that keep the largest weight below 2^15)
  /// instead of Pillow's fixed 22 bits in int32.
  kTorchvision,
};

/// Which transformers image-processor backend to reproduce (docs/VISION.md).
enum class ImageBackend : std::uint8_t {
  /// `Qwen2VLImageProcessor` (transformers' default, what AutoProcessor loads when torchvision is
  /// installed; Cloudflare's reference): torchvision resize (ResizePassOrder::kTorchvision) and
  /// the fused rescale + normalize (x - mean / rescale) / (std / rescale) in float32.
  kTorchvision,
  /// `Qwen2VLImageProcessorPil`: Pillow's bicubic (pass_order) and float32(x * rescale), then
  /// (x - mean) / std.
  kPil,
};

/// Processor parameters (docs/MODEL.md §6.1). Defaults are the clef-flash / Qwen3.5
/// preprocessor_config.json values; the clef-vision-0.8b student was trained with
/// min_pixels 16384 and max_pixels 200704 (docs/MODEL.md §14).
struct VisionPreprocessConfig {
  std::uint32_t patch_size = 16;          ///< p
  std::uint32_t merge_size = 2;           ///< m (spatial merge)
  std::uint32_t temporal_patch_size = 2;  ///< tp: the still frame is repeated tp times
  std::uint64_t min_pixels = 65536;       ///< size.shortest_edge (256^2)
  std::uint64_t max_pixels = 16777216;    ///< size.longest_edge (4096^2)
  double rescale_factor = 1.0 / 255.0;
  std::array<float, 3> image_mean = {0.5f, 0.5f, 0.5f};
  std::array<float, 3> image_std = {0.5f, 0.5f, 0.5f};
  /// 0: smart resize (keeps the aspect ratio). Otherwise the side of a square target
  /// (fixed_side x fixed_side, aspect NOT kept), e.g. 256 or 448 as in the Core AI towers of
  /// docs/MODEL.md §14; must be a multiple of patch_size * merge_size.
  std::uint32_t fixed_side = 0;
  /// The processor backend reproduced. Default: the reference's (torchvision).
  ImageBackend backend = ImageBackend::kTorchvision;
  /// With ImageBackend::kPil: the resampling pass order of the reference's Pillow (the installed
  /// reference is Pillow 13.0.0). Ignored with kTorchvision.
  ResizePassOrder pass_order = ResizePassOrder::kPillow13;
};

/// Patch grid of one image: (t, h, w) in patches, as the processor's `image_grid_thw` row.
struct ImageGrid {
  std::int64_t t = 1;
  std::int64_t h = 0;
  std::int64_t w = 0;
};

/// One preprocessed image.
struct VisionInput {
  /// [rows, cols] fp32 row-major, rows = grid.t * grid.h * grid.w patches in merge-block-major
  /// order, cols = 3 * tp * p * p (1536) ordered (channel, temporal, py, px) (§6.2). Values are
  /// (u8 - mean / rescale_factor) / (std / rescale_factor) in float32 (kTorchvision) or
  /// (float32(u8 * rescale_factor) - mean) / std (kPil), i.e. in [-1, 1] for the default config.
  std::vector<float> pixel_values;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  ImageGrid grid;
  /// Image tokens after the 2x2 merge: grid.t * (grid.h / m) * (grid.w / m).
  std::int64_t num_tokens = 0;
};

/// transformers' `smart_resize(height, width, factor, min_pixels, max_pixels)`: returns
/// (height', width'), both multiples of `factor`, with Python's round-half-to-even, two divisions
/// (`h / beta / factor`) and `max(factor, .)` on the downscale branch (docs/MODEL.md §6.1 step 2).
/// Throws InvalidArgument when max(h, w) / min(h, w) > 200 (the reference's ValueError) or a side
/// is 0.
std::pair<std::uint64_t, std::uint64_t> smart_resize(std::uint64_t height, std::uint64_t width, std::uint64_t factor,
                                                     std::uint64_t min_pixels, std::uint64_t max_pixels);

/// Pillow's `Image.resize((width, height), Image.BICUBIC)` of an RGB8 image, reimplemented from
/// docs/MODEL.md Appendix B: separable, horizontal pass first into a uint8 intermediate,
/// cubic a = -0.5 with support 2 * max(scale, 1), coefficients normalized in double and rounded to
/// 22-bit fixed point, int32 accumulation with rounding, clipped to 0..255. An axis whose size is
/// unchanged is not resampled; `order` picks which pass runs first when both do. Throws
/// InvalidArgument for a 0-sized input or output.
RgbImage resize_bicubic(const RgbImage& image, std::uint32_t width, std::uint32_t height,
                        ResizePassOrder order = ResizePassOrder::kPillow13);

/// The patch grid preprocess_image produces for a `width` x `height` image, without touching pixels
/// (for building the prompt: the image takes grid.h/m * grid.w/m `<|image_pad|>` tokens, §6.9).
/// Throws like preprocess_image (image_aspect_ratio at `images.<index>`, InvalidArgument).
ImageGrid image_grid_for_size(std::uint32_t width, std::uint32_t height, std::size_t index,
                              const VisionPreprocessConfig& config = {});

/// Preprocesses one decoded image (§6.1-6.2). `index` is its position in the request, for errors.
/// Throws RequestError image_aspect_ratio (`images.<index>`) when the smart resize refuses the
/// aspect ratio (> 200), InvalidArgument for an inconsistent config.
VisionInput preprocess_image(const RgbImage& image, std::size_t index, const VisionPreprocessConfig& config = {});

}  // namespace clef
