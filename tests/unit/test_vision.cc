// SPDX-License-Identifier: MIT
// Unit tests of src/vision (decoding and preprocessing). Pixel-exactness against
// Pillow/transformers is checked live by tests/reference/test_vision_preprocess.py; these cover the
// parts with published expected values (RFC 4648 vectors, the token counts quoted in docs/MODEL.md
// §6.1) and the error codes/paths.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "decision/request_error.h"
#include "vision/base64.h"
#include "vision/image.h"
#include "vision/preprocess.h"
#include "vision/request_images.h"
#include "decision/json_value.h"

namespace clef {
namespace {

std::string decoded(std::string_view text) {
  Base64Problem p;
  auto bytes = decode_base64_strict(text, &p);
  if (!bytes) return "ERR@" + std::to_string(p.offset);
  return std::string(bytes->begin(), bytes->end());
}

TEST(VisionBase64, Rfc4648Vectors) {
  EXPECT_EQ(decoded(""), "");
  EXPECT_EQ(decoded("Zg=="), "f");
  EXPECT_EQ(decoded("Zm8="), "fo");
  EXPECT_EQ(decoded("Zm9v"), "foo");
  EXPECT_EQ(decoded("Zm9vYg=="), "foob");
  EXPECT_EQ(decoded("Zm9vYmE="), "fooba");
  EXPECT_EQ(decoded("Zm9vYmFy"), "foobar");
}

TEST(VisionBase64, StrictRejectionsNameTheOffset) {
  EXPECT_EQ(decoded("Zm9v!mFy"), "ERR@4");   // bad character
  EXPECT_EQ(decoded("Zm9v YmFy"), "ERR@4");  // whitespace
  EXPECT_EQ(decoded("Zm9-"), "ERR@3");       // URL-safe alphabet
  EXPECT_EQ(decoded("Zg==Zm8="), "ERR@2");   // padding in the middle
  EXPECT_EQ(decoded("Zm9vYmF"), "ERR@7");    // length not a multiple of 4
  EXPECT_EQ(decoded("Zh=="), "ERR@1");       // non-canonical: unused bits set
  EXPECT_EQ(decoded("Z==="), "ERR@1");       // three '='
  EXPECT_EQ(decoded("===="), "ERR@0");
}

RequestError url_error(std::string_view url, const ImageLimits& limits = {}) {
  try {
    decode_image_url(url, 2, limits);
  } catch (const RequestError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << url;
  return RequestError(RequestErrorCode::kInvalidJson, JsonPath(), "none");
}

TEST(VisionDataUrl, RefusedFormsHaveCodesAndPaths) {
  EXPECT_STREQ(url_error("https://example.com/a.png").code_name(), "image_url_unsupported");
  EXPECT_STREQ(url_error("http://example.com/a.png").code_name(), "image_url_unsupported");
  EXPECT_STREQ(url_error("file:///etc/passwd").code_name(), "image_url_unsupported");
  EXPECT_STREQ(url_error("iVBORw0KGgo=").code_name(), "image_url_unsupported");  // bare base64
  EXPECT_STREQ(url_error("data:image/gif;base64,R0lGODlh").code_name(), "image_type_unsupported");
  EXPECT_STREQ(url_error("data:text/plain;base64,Zm9v").code_name(), "image_type_unsupported");
  EXPECT_STREQ(url_error("data:image/png,rawbytes").code_name(), "image_url_unsupported");
  EXPECT_STREQ(url_error("data:image/png;charset=x;base64,Zm9v").code_name(), "image_url_unsupported");
  EXPECT_STREQ(url_error("data:image/png;base64").code_name(), "image_url_unsupported");
  const RequestError bad = url_error("data:image/png;base64,Zm9v*mFy");
  EXPECT_STREQ(bad.code_name(), "invalid_base64");
  EXPECT_NE(bad.message().find("character 26"), std::string::npos) << bad.message();
  EXPECT_EQ(bad.path().str(), "images.2");
  EXPECT_STREQ(url_error("data:image/png;base64,").code_name(), "image_invalid");
  EXPECT_STREQ(url_error("DATA:IMAGE/PNG;BASE64,Zm9vYmFy").code_name(),
               "image_invalid");  // case-insensitive header, not a PNG
  ImageLimits small;
  small.max_encoded_bytes_per_image = 4;
  EXPECT_STREQ(url_error("data:image/png;base64,Zm9vYmFy", small).code_name(), "image_too_large");
}

TEST(VisionDataUrl, TooManyImagesNamesTheFirstExtra) {
  ImageLimits limits;
  limits.max_images = 2;
  const std::vector<std::string_view> urls = {"x", "y", "z"};
  try {
    decode_image_urls(urls, limits);
    FAIL() << "accepted 3 images";
  } catch (const RequestError& e) {
    EXPECT_STREQ(e.code_name(), "too_many_images");
    EXPECT_EQ(e.path().str(), "images.2");
  }
}

// docs/MODEL.md §6.1: 640x480 -> 300 tokens; 10x10 -> 64; 4096x4096 -> 16384 (mlx-decision tests).
TEST(VisionSmartResize, TokenCountsQuotedInTheSpec) {
  auto tokens = [](std::uint64_t h, std::uint64_t w) {
    const auto [rh, rw] = smart_resize(h, w, 32, 65536, 16777216);
    EXPECT_EQ(rh % 32, 0u);
    EXPECT_EQ(rw % 32, 0u);
    return (rh / 32) * (rw / 32);
  };
  EXPECT_EQ(tokens(480, 640), 300u);
  EXPECT_EQ(tokens(10, 10), 64u);
  EXPECT_EQ(tokens(4096, 4096), 16384u);
  EXPECT_THROW(smart_resize(1, 201, 32, 65536, 16777216), InvalidArgument);
  EXPECT_NO_THROW(smart_resize(1, 200, 32, 65536, 16777216));
}

TEST(VisionPreprocess, GridForSizeWithoutPixels) {
  // docs/MODEL.md §6.1: a 640x480 image gives 300 image tokens (grid 30 x 40 patches).
  const ImageGrid g = image_grid_for_size(640, 480, 0);
  EXPECT_EQ(g.t, 1);
  EXPECT_EQ(g.h, 30);
  EXPECT_EQ(g.w, 40);
  VisionPreprocessConfig fixed;
  fixed.fixed_side = 448;  // docs/MODEL.md §14: the 448 tower takes 14 x 14 merged tokens
  const ImageGrid f = image_grid_for_size(640, 480, 0, fixed);
  EXPECT_EQ(f.h / 2 * (f.w / 2), 196);
  fixed.fixed_side = 250;
  EXPECT_THROW(image_grid_for_size(640, 480, 0, fixed), InvalidArgument);
}

TEST(VisionPreprocess, MergeBlockMajorPatchOrder) {
  // A 64x64 image with no resampling (min/max pixels around 64*64): every pixel's value encodes
  // its (row, col) so that each pixel_values entry can be traced back (docs/MODEL.md §6.2).
  RgbImage img;
  img.width = img.height = 64;
  img.pixels.resize(64 * 64 * 3);
  for (std::uint32_t y = 0; y < 64; ++y) {
    for (std::uint32_t x = 0; x < 64; ++x) {
      img.pixels[(y * 64 + x) * 3 + 0] = static_cast<std::uint8_t>(y * 4 + x / 16);
      img.pixels[(y * 64 + x) * 3 + 1] = static_cast<std::uint8_t>(x);
      img.pixels[(y * 64 + x) * 3 + 2] = static_cast<std::uint8_t>(255 - x);
    }
  }
  VisionPreprocessConfig cfg;
  cfg.min_pixels = 1;
  cfg.max_pixels = 64 * 64;
  cfg.backend = ImageBackend::kPil;
  const VisionInput v = preprocess_image(img, 0, cfg);
  ASSERT_EQ(v.rows, 16);
  ASSERT_EQ(v.cols, 1536);
  EXPECT_EQ(v.grid.t, 1);
  EXPECT_EQ(v.grid.h, 4);
  EXPECT_EQ(v.grid.w, 4);
  EXPECT_EQ(v.num_tokens, 4);
  auto norm = [](int u8) { return (static_cast<float>(u8 * (1.0 / 255.0)) - 0.5f) / 0.5f; };
  for (std::int64_t row = 0; row < v.rows; ++row) {
    const std::int64_t block = row / 4, br = block / 2, bc = block % 2, r = (row % 4) / 2, c = row % 2;
    const std::int64_t prow = 2 * br + r, pcol = 2 * bc + c;
    for (int ch = 0; ch < 3; ++ch) {
      for (int t = 0; t < 2; ++t) {
        for (int py = 0; py < 16; ++py) {
          for (int px = 0; px < 16; ++px) {
            const std::int64_t y = prow * 16 + py, x = pcol * 16 + px;
            const float want = norm(img.pixels[static_cast<std::size_t>((y * 64 + x) * 3 + ch)]);
            const float got = v.pixel_values[static_cast<std::size_t>(row * 1536 + ch * 512 + t * 256 + py * 16 + px)];
            ASSERT_EQ(got, want) << "row " << row << " ch " << ch << " t " << t << " py " << py << " px " << px;
          }
        }
      }
    }
  }
}

TEST(VisionPreprocess, AspectRatioIsARequestError) {
  RgbImage img;
  img.width = 402;
  img.height = 2;
  img.pixels.assign(402 * 2 * 3, 7);
  try {
    preprocess_image(img, 3);
    FAIL() << "accepted aspect ratio 201";
  } catch (const RequestError& e) {
    EXPECT_STREQ(e.code_name(), "image_aspect_ratio");
    EXPECT_EQ(e.path().str(), "images.3");
  }
}

TEST(VisionResize, ConstantImageStaysConstant) {
  // Normalized weights sum to 1 in fixed point (up to rounding): a flat image resamples to itself.
  RgbImage img;
  img.width = 37;
  img.height = 23;
  img.pixels.assign(37 * 23 * 3, 200);
  for (auto [w, h] : {std::pair{64u, 64u}, std::pair{5u, 3u}, std::pair{37u, 96u}, std::pair{100u, 23u}}) {
    const RgbImage out = resize_bicubic(img, w, h);
    ASSERT_EQ(out.width, w);
    ASSERT_EQ(out.height, h);
    for (auto p : out.pixels) ASSERT_EQ(p, 200);
  }
}

// A 1x1 red RGB PNG as Pillow writes it, as a data URL. Its token count (64) is the spec's
// 10x10 -> 64 rule for tiny images (docs/MODEL.md §6.1), which holds for 1x1 as well.
constexpr const char* kOnePixelPng =
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/"
    "pLvAAAAAElFTkSuQmCC";

TEST(VisionRequestImages, ArrayOfDataUrls) {
  EXPECT_EQ(prepare_request_images(nullptr).inputs.size(), 0u);
  const JsonValue null_value = parse_json("null"), empty = parse_json("[]");
  EXPECT_EQ(prepare_request_images(&null_value).inputs.size(), 0u);
  EXPECT_EQ(prepare_request_images(&empty).inputs.size(), 0u);
  const JsonValue two = parse_json(std::string("[\"") + kOnePixelPng + "\",\"" + kOnePixelPng + "\"]");
  const RequestImages r = prepare_request_images(&two);
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(r.inputs[0].num_tokens, 64);
  EXPECT_EQ(r.total_tokens, 128);
  EXPECT_EQ(r.inputs[1].rows, 256);
}

TEST(VisionRequestImages, TypeErrorsHavePaths) {
  auto error_of = [](const char* text) {
    const JsonValue v = parse_json(text);
    try {
      prepare_request_images(&v);
    } catch (const RequestError& e) {
      return std::string(e.code_name()) + "@" + e.path().str();
    }
    return std::string("accepted");
  };
  EXPECT_EQ(error_of("{}"), "invalid_type@images");
  EXPECT_EQ(error_of("\"data:image/png;base64,AAAA\""), "invalid_type@images");
  EXPECT_EQ(error_of("[\"https://x/y.png\", 3]"), "invalid_type@images.1");
  EXPECT_EQ(error_of("[{\"content_type\":\"image/png\",\"base64\":\"AAAA\"}]"), "invalid_type@images.0");
  EXPECT_EQ(error_of("[\"https://x/y.png\"]"), "image_url_unsupported@images.0");
  EXPECT_EQ(error_of("[\"x\",\"x\",\"x\",\"x\",\"x\"]"), "too_many_images@images.4");
}

}  // namespace
}  // namespace clef
