// SPDX-License-Identifier: MIT
// Driver for the live image tests (tests/reference/test_vision_preprocess.py): runs the vision
// decoding and preprocessing of src/vision on images and writes what the Python reference
// (Pillow + transformers' Qwen2VLImageProcessorPil) computes, for comparison.
//
//   clef_image_driver [options] decode|preprocess LIST OUT_DIR
//
// LIST holds one image per line: a data URL (default) or, with --paths, a path to the raw file.
// Lines are one request's `images` array (decode_image_urls, with its count/total limits), or with
// --each independent single-image requests (line i is checked as images.i, limits per line).
// For image i it writes OUT_DIR/rgb_<i>.npy ([h, w, 3] float32 of the decoded RGB8, mode decode) or
// OUT_DIR/pixel_values_<i>.npy ([rows, 1536] float32, mode preprocess), and prints one JSON line
// per image: {"index", "ok": true, "width", "height", "grid": [t, h, w], "tokens"} or
// {"index", "ok": false, "code", "path", "message"}. Exit status 0 unless the driver itself fails.
//
// Options: --alpha composite|drop, --min-pixels N, --max-pixels N, --fixed-side N,
//          --max-images N, --max-bytes N (per image), --max-total-bytes N, --max-image-pixels N,
//          --horizontal-first (Pillow <= 12 pass order),
//          --backend pil|torchvision (default pil: transformers' PIL processor on PIL images;
//          torchvision: alpha dropped, EXIF orientation applied, torchvision resize and normalize),
//          --resize-list FILE (mode decode: line i of FILE is "W H"; image i is then resized to
//          W x H with resize_bicubic before it is written).
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "decision/request_error.h"
#include "io/npy.h"
#include "vision/image.h"
#include "vision/preprocess.h"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw clef::IoError(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_rgb(const std::string& path, const clef::RgbImage& img) {
  std::vector<float> v(img.pixels.begin(), img.pixels.end());
  clef::write_npy(path, {img.height, img.width, 3}, v.data());
}

int usage() {
  std::cerr
      << "usage: clef_image_driver [--paths] [--each] [--alpha composite|drop] [--min-pixels N] [--max-pixels N]\n"
         "       [--fixed-side N] [--max-images N] [--max-bytes N] [--max-total-bytes N] [--max-image-pixels N]\n"
         "       decode|preprocess LIST OUT_DIR\n";
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  clef::ImageLimits limits;
  // Default: the PIL processor on PIL images (the oracle of test_vision_preprocess.py);
  // --backend torchvision: what the reference does with a request (test_vision_torchvision.py).
  clef::ImageDecodeOptions decode_options;
  decode_options.alpha = clef::AlphaMode::kCompositeOnWhite;
  decode_options.apply_exif_orientation = false;
  clef::VisionPreprocessConfig config;
  config.backend = clef::ImageBackend::kPil;
  bool paths = false, each = false;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> resize_to;
  std::vector<std::string> positional;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw clef::InvalidArgument(a + " needs a value");
        return argv[++i];
      };
      if (a == "--paths") paths = true;
      else if (a == "--each") each = true;
      else if (a == "--alpha") {
        const std::string v = next();
        if (v == "composite") decode_options.alpha = clef::AlphaMode::kCompositeOnWhite;
        else if (v == "drop") decode_options.alpha = clef::AlphaMode::kDrop;
        else return usage();
      } else if (a == "--min-pixels") config.min_pixels = std::stoull(next());
      else if (a == "--max-pixels") config.max_pixels = std::stoull(next());
      else if (a == "--horizontal-first") config.pass_order = clef::ResizePassOrder::kHorizontalFirst;
      else if (a == "--backend") {
        const std::string v = next();
        if (v == "torchvision") {
          config.backend = clef::ImageBackend::kTorchvision;
          decode_options.alpha = clef::AlphaMode::kDrop;
          decode_options.apply_exif_orientation = true;
        } else if (v != "pil") {
          return usage();
        }
      } else if (a == "--fixed-side") config.fixed_side = static_cast<std::uint32_t>(std::stoul(next()));
      else if (a == "--max-images") limits.max_images = std::stoull(next());
      else if (a == "--max-bytes") limits.max_encoded_bytes_per_image = std::stoull(next());
      else if (a == "--max-total-bytes") limits.max_encoded_bytes_total = std::stoull(next());
      else if (a == "--max-image-pixels") limits.max_pixels_per_image = std::stoull(next());
      else if (a == "--resize-list") {
        std::istringstream in(read_file(next()));
        for (std::uint32_t w = 0, h = 0; in >> w >> h;) resize_to.emplace_back(w, h);
      } else if (!a.empty() && a[0] == '-') return usage();
      else positional.push_back(a);
    }
    if (positional.size() != 3 || (positional[0] != "decode" && positional[0] != "preprocess")) return usage();
    const bool preprocess = positional[0] == "preprocess";
    const std::string out_dir = positional[2];

    std::vector<std::string> lines;
    {
      std::istringstream in(read_file(positional[1]));
      for (std::string line; std::getline(in, line);) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        lines.push_back(line);
      }
    }
    std::vector<std::string> payloads;
    for (const auto& l : lines) payloads.push_back(paths ? read_file(l) : l);

    auto emit_ok = [&](std::size_t i, const clef::RgbImage& img) {
      nlohmann::json j = {{"index", i}, {"ok", true}, {"width", img.width}, {"height", img.height}};
      if (!preprocess) {
        if (i < resize_to.size()) {
          write_rgb(out_dir + "/rgb_" + std::to_string(i) + ".npy",
                    clef::resize_bicubic(img, resize_to[i].first, resize_to[i].second,
                                         config.backend == clef::ImageBackend::kTorchvision
                                             ? clef::ResizePassOrder::kTorchvision
                                             : config.pass_order));
        } else {
          write_rgb(out_dir + "/rgb_" + std::to_string(i) + ".npy", img);
        }
      } else {
        const clef::VisionInput v = clef::preprocess_image(img, i, config);
        clef::write_npy(out_dir + "/pixel_values_" + std::to_string(i) + ".npy", {v.rows, v.cols},
                        v.pixel_values.data());
        j["grid"] = {v.grid.t, v.grid.h, v.grid.w};
        j["tokens"] = v.num_tokens;
      }
      std::cout << j.dump() << "\n";
    };
    auto emit_error = [&](std::size_t i, const clef::RequestError& e) {
      nlohmann::json j = {
          {"index", i}, {"ok", false}, {"code", e.code_name()}, {"path", e.path().str()}, {"message", e.message()}};
      std::cout << j.dump() << "\n";
    };

    if (each) {
      for (std::size_t i = 0; i < payloads.size(); ++i) {
        try {
          const clef::RgbImage img = paths ? clef::decode_image_bytes(payloads[i], i, limits, decode_options)
                                           : clef::decode_image_url(payloads[i], i, limits, decode_options);
          emit_ok(i, img);
        } catch (const clef::RequestError& e) {
          emit_error(i, e);
        }
      }
    } else {
      try {
        std::vector<clef::RgbImage> images;
        if (paths) {
          for (std::size_t i = 0; i < payloads.size(); ++i) {
            images.push_back(clef::decode_image_bytes(payloads[i], i, limits, decode_options));
          }
        } else {
          std::vector<std::string_view> urls(payloads.begin(), payloads.end());
          images = clef::decode_image_urls(urls, limits, decode_options);
        }
        for (std::size_t i = 0; i < images.size(); ++i) emit_ok(i, images[i]);
      } catch (const clef::RequestError& e) {
        emit_error(e.path().segments().size() > 1 ? std::get<std::size_t>(e.path().segments()[1]) : 0, e);
      }
    }
    return 0;
  } catch (const clef::RequestError& e) {
    std::cerr << "clef_image_driver: " << e.code_name() << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "clef_image_driver: " << e.what() << "\n";
    return 1;
  }
}
