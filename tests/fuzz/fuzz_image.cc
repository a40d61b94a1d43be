// SPDX-License-Identifier: MIT
// libFuzzer target: image decoding (src/vision) must accept or refuse any byte string with a
// RequestError, never crash, hang, read out of bounds (ASan/UBSan watch) or throw anything else; an
// accepted image must have a pixel buffer matching its size and preprocess without error (small
// pixel caps keep each input fast; the code paths are the same as with the defaults).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "decision/request_error.h"
#include "vision/image.h"
#include "vision/preprocess.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  clef::ImageLimits limits;
  limits.max_pixels_per_image = 1u << 16;
  limits.max_side = 4096;
  clef::VisionPreprocessConfig config;
  config.min_pixels = 1024;
  config.max_pixels = 1u << 14;
  for (const auto alpha : {clef::AlphaMode::kCompositeOnWhite, clef::AlphaMode::kDrop}) {
    try {
      const clef::RgbImage img = clef::decode_image_bytes(bytes, 0, limits, {alpha});
      if (img.width == 0 || img.height == 0 || img.pixels.size() != std::size_t{img.width} * img.height * 3) {
        __builtin_trap();
      }
      const clef::VisionInput v = clef::preprocess_image(img, 0, config);
      if (v.pixel_values.size() != static_cast<std::size_t>(v.rows * v.cols)) __builtin_trap();
    } catch (const clef::RequestError&) {
      // refused: fine
    }
  }
  return 0;
}
