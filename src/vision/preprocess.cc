// SPDX-License-Identifier: MIT
// Compiled with -ffp-contract=off (src/vision/CMakeLists.txt): the coefficient arithmetic must round
// after every operation, as Pillow's and NumPy's do, or a pixel can land one level off.
#include "vision/preprocess.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "core/error.h"
#include "decision/request_error.h"

namespace clef {
namespace {

constexpr int kPrecisionBits = 22;  // Pillow Resample.c: 32 - 8 (pixel) - 2 (headroom)

// Cubic convolution kernel with a = -0.5 (Keys), evaluated with the same operation order as the
// reference so the double results agree to the last bit.
double cubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// Fixed-point weights of one axis: output o reads `count[o]` inputs from `first[o]` with weights
// k[o * ksize + j].
struct AxisWeights {
  std::size_t ksize = 0;
  std::vector<std::uint32_t> first;
  std::vector<std::uint32_t> count;
  std::vector<std::int32_t> k;
  int precision = 22;  ///< fractional bits of k
};

// Pillow: int32 weights with 22 fractional bits. torchvision (kInt16Weights): int16 weights with the
// most fractional bits (at most 22) for which the largest weight of the axis, rounded, stays below
// 2^15; the accumulator then starts at half of that unit and is shifted by it.
AxisWeights axis_weights(std::uint32_t in_size, std::uint32_t out_size, bool int16_weights = false) {
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = 2.0 * filterscale;  // bicubic support 2, widened when downscaling
  const double inv_filterscale = 1.0 / filterscale;
  AxisWeights w;
  w.ksize = static_cast<std::size_t>(std::ceil(support)) * 2 + 1;
  w.first.resize(out_size);
  w.count.resize(out_size);
  w.k.assign(static_cast<std::size_t>(out_size) * w.ksize, 0);
  std::vector<double> norm(static_cast<std::size_t>(out_size) * w.ksize, 0.0);
  double max_weight = 0.0;
  for (std::uint32_t o = 0; o < out_size; ++o) {
    const double center = (o + 0.5) * scale;
    int lo = static_cast<int>(center - support + 0.5);
    if (lo < 0) lo = 0;
    int hi = static_cast<int>(center + support + 0.5);
    if (hi > static_cast<int>(in_size)) hi = static_cast<int>(in_size);
    const int n = hi - lo;
    double* tmp = norm.data() + std::size_t{o} * w.ksize;
    double total = 0.0;
    for (int j = 0; j < n; ++j) {
      const double v = cubic((static_cast<double>(j + lo) - center + 0.5) * inv_filterscale);
      tmp[j] = v;
      total += v;
    }
    for (int j = 0; j < n; ++j) {
      if (total != 0.0) tmp[j] /= total;
      max_weight = std::max(max_weight, tmp[j]);
    }
    w.first[o] = static_cast<std::uint32_t>(lo);
    w.count[o] = static_cast<std::uint32_t>(n > 0 ? n : 0);
  }
  w.precision = kPrecisionBits;
  if (int16_weights) {
    int bits = 0;
    while (bits < kPrecisionBits &&
           static_cast<std::int64_t>(0.5 + max_weight * static_cast<double>(std::int64_t{1} << (bits + 1))) <
               (1 << 15)) {
      ++bits;
    }
    w.precision = bits;
  }
  const double unit = static_cast<double>(std::int64_t{1} << w.precision);
  for (std::size_t i = 0; i < norm.size(); ++i) {
    const double scaled = norm[i] * unit;
    w.k[i] = norm[i] < 0 ? static_cast<std::int32_t>(-0.5 + scaled) : static_cast<std::int32_t>(0.5 + scaled);
  }
  return w;
}

inline std::uint8_t clip8(std::int32_t acc, int precision) {
  const std::int32_t v = acc >> precision;  // arithmetic shift (C++20)
  return static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

}  // namespace

std::pair<std::uint64_t, std::uint64_t> smart_resize(std::uint64_t height, std::uint64_t width, std::uint64_t factor,
                                                     std::uint64_t min_pixels, std::uint64_t max_pixels) {
  if (height == 0 || width == 0 || factor == 0) throw InvalidArgument("smart_resize: zero height, width or factor");
  const double h = static_cast<double>(height);
  const double w = static_cast<double>(width);
  const double f = static_cast<double>(factor);
  if (std::max(h, w) / std::min(h, w) > 200.0) {
    throw InvalidArgument("absolute aspect ratio must be at most 200, got " +
                          std::to_string(std::max(h, w) / std::min(h, w)));
  }
  // Python round(): half to even, which nearbyint does in the default rounding mode.
  double h_bar = std::nearbyint(h / f) * f;
  double w_bar = std::nearbyint(w / f) * f;
  if (h_bar * w_bar > static_cast<double>(max_pixels)) {
    const double beta = std::sqrt(static_cast<double>(height * width) / static_cast<double>(max_pixels));
    h_bar = std::max(f, std::floor(h / beta / f) * f);
    w_bar = std::max(f, std::floor(w / beta / f) * f);
  } else if (h_bar * w_bar < static_cast<double>(min_pixels)) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / static_cast<double>(height * width));
    h_bar = std::ceil(h * beta / f) * f;
    w_bar = std::ceil(w * beta / f) * f;
  }
  return {static_cast<std::uint64_t>(h_bar), static_cast<std::uint64_t>(w_bar)};
}

namespace {

// One horizontal pass: rows [row_lo, row_hi) of `src`, each resampled to hw.first.size() columns.
RgbImage horizontal_pass(const RgbImage& src, const AxisWeights& hw, std::uint32_t row_lo, std::uint32_t row_hi) {
  RgbImage out;
  out.width = static_cast<std::uint32_t>(hw.first.size());
  out.height = row_hi - row_lo;
  out.pixels.resize(std::size_t{out.width} * out.height * 3);
  for (std::uint32_t y = 0; y < out.height; ++y) {
    const std::uint8_t* row = src.pixels.data() + std::size_t{y + row_lo} * src.width * 3;
    std::uint8_t* dst = out.pixels.data() + std::size_t{y} * out.width * 3;
    for (std::uint32_t x = 0; x < out.width; ++x) {
      const std::int32_t* k = hw.k.data() + std::size_t{x} * hw.ksize;
      const std::uint8_t* s = row + std::size_t{hw.first[x]} * 3;
      const std::int32_t half = hw.precision > 0 ? std::int32_t{1} << (hw.precision - 1) : 0;
      std::int32_t acc[3] = {half, half, half};
      for (std::uint32_t j = 0; j < hw.count[x]; ++j) {
        acc[0] += s[3 * j] * k[j];
        acc[1] += s[3 * j + 1] * k[j];
        acc[2] += s[3 * j + 2] * k[j];
      }
      dst[3 * x] = clip8(acc[0], hw.precision);
      dst[3 * x + 1] = clip8(acc[1], hw.precision);
      dst[3 * x + 2] = clip8(acc[2], hw.precision);
    }
  }
  return out;
}

// One vertical pass over every column of `src`, whose row 0 is source row `row_offset`.
RgbImage vertical_pass(const RgbImage& src, const AxisWeights& vw, std::uint32_t row_offset) {
  const std::size_t stride = std::size_t{src.width} * 3;
  RgbImage out;
  out.width = src.width;
  out.height = static_cast<std::uint32_t>(vw.first.size());
  out.pixels.resize(stride * out.height);
  for (std::uint32_t y = 0; y < out.height; ++y) {
    const std::int32_t* k = vw.k.data() + std::size_t{y} * vw.ksize;
    const std::uint8_t* base = src.pixels.data() + std::size_t{vw.first[y] - row_offset} * stride;
    std::uint8_t* dst = out.pixels.data() + std::size_t{y} * stride;
    for (std::size_t c = 0; c < stride; ++c) {
      std::int32_t acc = vw.precision > 0 ? std::int32_t{1} << (vw.precision - 1) : 0;
      for (std::uint32_t j = 0; j < vw.count[y]; ++j) acc += base[std::size_t{j} * stride + c] * k[j];
      dst[c] = clip8(acc, vw.precision);
    }
  }
  return out;
}

}  // namespace

RgbImage resize_bicubic(const RgbImage& image, std::uint32_t width, std::uint32_t height, ResizePassOrder order) {
  if (image.width == 0 || image.height == 0 || width == 0 || height == 0) {
    throw InvalidArgument("resize_bicubic: zero-sized image or target");
  }
  const bool horizontal = width != image.width;
  const bool vertical = height != image.height;
  if (!horizontal && !vertical) return image;
  const bool tv = order == ResizePassOrder::kTorchvision;
  if (!vertical) return horizontal_pass(image, axis_weights(image.width, width, tv), 0, image.height);
  const AxisWeights vw = axis_weights(image.height, height, tv);
  if (!horizontal) return vertical_pass(image, vw, 0);
  const AxisWeights hw = axis_weights(image.width, width, tv);
  // Pass order (Pillow 13): the vertical pass runs first when the height shrinks by more than twice
  // as many pixels as the width does, otherwise the horizontal one. The uint8 intermediate makes
  // the order visible in the result. Measured against Pillow 13.0.0 (docs/VISION.md).
  const std::int64_t dh = std::int64_t{image.height} - height, dw = std::int64_t{image.width} - width;
  if (order == ResizePassOrder::kPillow13 && dh > 0 && dh > 2 * dw)
    return horizontal_pass(vertical_pass(image, vw, 0), hw, 0, height);
  // Horizontal first, only on the source rows the vertical pass reads.
  const std::uint32_t row_lo = vw.first.front();
  const std::uint32_t row_hi = vw.first.back() + vw.count.back();
  return vertical_pass(horizontal_pass(image, hw, row_lo, row_hi), vw, row_lo);
}

ImageGrid image_grid_for_size(std::uint32_t width, std::uint32_t height, std::size_t index,
                              const VisionPreprocessConfig& config) {
  const std::uint64_t p = config.patch_size, m = config.merge_size;
  if (p == 0 || m == 0 || config.temporal_patch_size == 0) {
    throw InvalidArgument("vision preprocess: patch, merge and temporal sizes must be positive");
  }
  if (width == 0 || height == 0) throw InvalidArgument("vision preprocess: zero-sized image");
  const std::uint64_t factor = p * m;
  std::uint64_t th = 0, tw = 0;
  if (config.fixed_side != 0) {
    if (config.fixed_side % factor != 0) {
      throw InvalidArgument("vision preprocess: fixed side " + std::to_string(config.fixed_side) +
                            " is not a multiple of " + std::to_string(factor));
    }
    th = tw = config.fixed_side;
  } else {
    try {
      std::tie(th, tw) = smart_resize(height, width, factor, config.min_pixels, config.max_pixels);
    } catch (const InvalidArgument&) {
      throw RequestError(RequestErrorCode::kImageAspectRatio, JsonPath().key("images").index(index),
                         "image is " + std::to_string(width) + "x" + std::to_string(height) +
                             "; the longer side may be at most 200 times the shorter");
    }
  }
  if (th == 0 || tw == 0 || th > 0xFFFFFFFFu || tw > 0xFFFFFFFFu) {
    throw InvalidArgument("vision preprocess: target size out of range");
  }
  return ImageGrid{1, static_cast<std::int64_t>(th / p), static_cast<std::int64_t>(tw / p)};
}

VisionInput preprocess_image(const RgbImage& image, std::size_t index, const VisionPreprocessConfig& config) {
  if (image.pixels.size() != std::size_t{image.width} * image.height * 3) {
    throw InvalidArgument("vision preprocess: the pixel buffer does not match the image size");
  }
  const ImageGrid grid = image_grid_for_size(image.width, image.height, index, config);
  const std::uint64_t p = config.patch_size, m = config.merge_size, tp = config.temporal_patch_size;
  const std::uint64_t th = static_cast<std::uint64_t>(grid.h) * p, tw = static_cast<std::uint64_t>(grid.w) * p;
  const bool tv = config.backend == ImageBackend::kTorchvision;
  const RgbImage resized = resize_bicubic(image, static_cast<std::uint32_t>(tw), static_cast<std::uint32_t>(th),
                                          tv ? ResizePassOrder::kTorchvision : config.pass_order);

  // Rescale and normalize, per channel, through a 256-entry table.
  // kPil: float32(double(v) * factor), then (x - mean) / std in float32 (transformers' rescale and
  // normalize on arrays). kTorchvision: transformers fuses both: mean and std become float32
  // tensors multiplied (in float32) by 1 / factor, then (float32(v) - mean') / std' in float32.
  std::array<std::array<float, 256>, 3> lut{};
  const float inv_factor = static_cast<float>(1.0 / config.rescale_factor);
  for (std::size_t c = 0; c < 3; ++c) {
    const float mean_f = config.image_mean[c] * inv_factor, std_f = config.image_std[c] * inv_factor;
    for (int v = 0; v < 256; ++v) {
      if (tv) {
        lut[c][static_cast<std::size_t>(v)] = (static_cast<float>(v) - mean_f) / std_f;
      } else {
        const float x = static_cast<float>(static_cast<double>(v) * config.rescale_factor);
        lut[c][static_cast<std::size_t>(v)] = (x - config.image_mean[c]) / config.image_std[c];
      }
    }
  }

  const std::uint64_t gh = th / p, gw = tw / p;
  VisionInput out;
  out.grid = grid;
  out.rows = static_cast<std::int64_t>(gh * gw);
  out.cols = static_cast<std::int64_t>(3 * tp * p * p);
  out.num_tokens = static_cast<std::int64_t>((gh / m) * (gw / m));
  out.pixel_values.resize(static_cast<std::size_t>(out.rows) * static_cast<std::size_t>(out.cols));
  const std::size_t cols = static_cast<std::size_t>(out.cols);
  const std::size_t img_stride = std::size_t{resized.width} * 3;
  std::size_t row = 0;
  // Rows: merge blocks in row-major order, then the m x m patches of a block row-major
  // (docs/MODEL.md §6.2).
  for (std::uint64_t br = 0; br < gh / m; ++br) {
    for (std::uint64_t bc = 0; bc < gw / m; ++bc) {
      for (std::uint64_t r = 0; r < m; ++r) {
        for (std::uint64_t c = 0; c < m; ++c, ++row) {
          const std::uint64_t prow = br * m + r, pcol = bc * m + c;
          float* dst = out.pixel_values.data() + row * cols;
          for (std::size_t ch = 0; ch < 3; ++ch) {
            for (std::uint64_t t = 0; t < tp; ++t) {
              float* plane = dst + (ch * tp + t) * p * p;
              for (std::uint64_t py = 0; py < p; ++py) {
                const std::uint8_t* src = resized.pixels.data() + (prow * p + py) * img_stride + pcol * p * 3 + ch;
                for (std::uint64_t px = 0; px < p; ++px) plane[py * p + px] = lut[ch][src[px * 3]];
              }
            }
          }
        }
      }
    }
  }
  return out;
}

}  // namespace clef
