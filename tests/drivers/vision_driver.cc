// SPDX-License-Identifier: MIT
// clef_vision_driver: runs the Qwen3.5 vision tower or the M-RoPE position functions for the
// live pytest comparisons (tests/reference/test_vision_tower.py) and the benchmark
// (bench/bench_vision_tower.py).
//
//   clef_vision_driver tower --model DIR --pixels PIXELS.npy --grids GRIDS.npy [--out OUT.npy]
//                            [--precision fp32|bf16] [--threads N] [--repeat N] [--mmproj FILE]
//       --model may be a GGUF model with its projector file as --mmproj (runtime/release.h).
//       PIXELS [num_patches, C*T*P*P] float32, GRIDS [n_images, 3] int64 (t, h, w) in patches;
//       OUT [merged_tokens, out_hidden_size] float32. Prints one JSON line
//       {"rows", "cols", "seconds" (best of --repeat), "precision", "threads"}.
//   clef_vision_driver positions --ids IDS.npy [--grids GRIDS.npy] --image-token ID [--merge M]
//       IDS [T] int64. Prints {"pos": [[t...], [h...], [w...]], "rope_delta": d}.
//   clef_vision_driver shift --tokens T --merged H W [--first-pad P]
//       The seed-000 rope-shift form (docs/MODEL.md §7.4); prints the same JSON plus
//       "rope_shift_start" and "rope_shift_amount".
// Exit codes: 0 ok, 2 bad arguments, others per core/error.h.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/npy.h"
#include "models/qwen35/mrope_positions.h"
#include "models/qwen35/vision_tower.h"
#include "ops/parallel.h"
#include "runtime/release.h"

namespace clef {
namespace {

struct Args {
  std::string mode, model, pixels, grids, ids, out, mmproj, precision = "fp32";
  int threads = 1, repeat = 1;
  std::int64_t image_token = 248056, merge = 2, tokens = 0, mh = 0, mw = 0, first_pad = 37;
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "clef_vision_driver: " << why << "\n";
  std::exit(2);
}

std::int64_t to_int(const std::string& s, const std::string& flag) {
  try {
    std::size_t used = 0;
    const long long v = std::stoll(s, &used);
    if (used != s.size()) throw std::invalid_argument(s);
    return v;
  } catch (const std::exception&) {
    usage(flag + " needs an integer, got '" + s + "'");
  }
}

Args parse(int argc, char** argv) {
  if (argc < 2) usage("usage: clef_vision_driver tower|positions|shift [flags]");
  Args a;
  a.mode = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string f = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(f + " needs a value");
      return argv[++i];
    };
    if (f == "--model") a.model = next();
    else if (f == "--mmproj") a.mmproj = next();
    else if (f == "--pixels") a.pixels = next();
    else if (f == "--grids") a.grids = next();
    else if (f == "--ids") a.ids = next();
    else if (f == "--out") a.out = next();
    else if (f == "--precision") a.precision = next();
    else if (f == "--threads") a.threads = static_cast<int>(to_int(next(), f));
    else if (f == "--repeat") a.repeat = static_cast<int>(to_int(next(), f));
    else if (f == "--image-token") a.image_token = to_int(next(), f);
    else if (f == "--merge") a.merge = to_int(next(), f);
    else if (f == "--tokens") a.tokens = to_int(next(), f);
    else if (f == "--first-pad") a.first_pad = to_int(next(), f);
    else if (f == "--merged") {
      a.mh = to_int(next(), f);
      a.mw = to_int(next(), f);
    } else usage("unknown flag " + f);
  }
  return a;
}

std::vector<qwen35::ImageGrid> read_grids(const std::string& path) {
  std::vector<qwen35::ImageGrid> g;
  if (path.empty()) return g;
  const NpyArray a = read_npy(path);
  if (a.shape.size() != 2 || a.shape[1] != 3 || a.is_float()) {
    throw InvalidArgument(path + ": grids must be an int64 [n, 3] array");
  }
  for (std::int64_t i = 0; i < a.shape[0]; ++i) {
    const auto at = [&](int j) { return a.i64[static_cast<std::size_t>(3 * i + j)]; };
    g.push_back({at(0), at(1), at(2)});
  }
  return g;
}

nlohmann::json positions_json(const qwen35::MropePositions& p) {
  nlohmann::json rows = nlohmann::json::array();
  for (int s = 0; s < 3; ++s) {
    rows.push_back(std::vector<std::int32_t>(p.pos.begin() + s * p.tokens, p.pos.begin() + (s + 1) * p.tokens));
  }
  return {{"pos", rows}, {"rope_delta", p.rope_delta}};
}

int run(const Args& a) {
  ops::set_num_threads(a.threads);
  if (a.mode == "tower") {
    if (a.model.empty() || a.pixels.empty() || a.grids.empty()) usage("tower needs --model, --pixels, --grids");
    const auto prec = ops::precision_from_name(a.precision);
    if (!prec) usage("--precision must be fp32 or bf16");
    OpenReleaseOptions ro;
    ro.mmproj = a.mmproj;
    const ReleaseFolder rel = open_release(a.model, ro);
    if (!rel.config.vision || !rel.model.vision) throw ModelLoadError(a.model + ": no vision tower");
    const qwen35::VisionTower tower(*rel.config.vision, *rel.model.vision, {*prec});
    const NpyArray px = read_npy(a.pixels);
    if (px.shape.size() != 2 || px.shape[1] != tower.patch_dim() || !px.is_float()) {
      throw InvalidArgument(a.pixels + ": pixel_values must be float32 [n, " + std::to_string(tower.patch_dim()) + "]");
    }
    const std::vector<qwen35::ImageGrid> grids = read_grids(a.grids);
    std::int64_t rows = 0;
    for (const auto& g : grids) rows += tower.merged_tokens(g);
    std::vector<float> out(static_cast<std::size_t>(std::max<std::int64_t>(rows, 0) * tower.out_hidden_size()));
    qwen35::VisionActivations s;
    double best = 1e30;
    for (int r = 0; r < std::max(1, a.repeat); ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      tower.forward(px.f32.data(), px.shape[0], grids, out.data(), s);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    if (!a.out.empty()) write_npy(a.out, {rows, tower.out_hidden_size()}, out.data());
    std::cout << nlohmann::json{{"rows", rows},
                                {"cols", tower.out_hidden_size()},
                                {"seconds", best},
                                {"precision", ops::precision_name(*prec)},
                                {"threads", ops::num_threads()}}
                     .dump()
              << "\n";
    return 0;
  }
  if (a.mode == "positions") {
    if (a.ids.empty()) usage("positions needs --ids");
    const NpyArray ids = read_npy(a.ids);
    if (ids.shape.size() != 1 || ids.is_float()) throw InvalidArgument(a.ids + ": ids must be an int64 [T] array");
    std::vector<std::int32_t> v;
    for (std::int64_t x : ids.i64) {
      if (x < 0 || x > 0x7fffffff) throw InvalidArgument(a.ids + ": token id " + std::to_string(x) + " out of range");
      v.push_back(static_cast<std::int32_t>(x));
    }
    const auto grids = read_grids(a.grids);
    const auto p = qwen35::mrope_positions(v, static_cast<std::int32_t>(a.image_token), grids, a.merge);
    std::cout << positions_json(p).dump() << "\n";
    return 0;
  }
  if (a.mode == "shift") {
    const auto in = qwen35::rope_shift_inputs(a.mh, a.mw, a.first_pad);
    const auto p = qwen35::rope_shift_positions(a.tokens, in);
    nlohmann::json j = positions_json(p);
    j["rope_shift_start"] = in.rope_shift_start;
    j["rope_shift_amount"] = in.rope_shift_amount;
    std::cout << j.dump() << "\n";
    return 0;
  }
  usage("unknown mode '" + a.mode + "'");
}

}  // namespace
}  // namespace clef

int main(int argc, char** argv) {
  const clef::Args a = clef::parse(argc, argv);
  try {
    return clef::run(a);
  } catch (const clef::Error& e) {
    std::cerr << "clef_vision_driver: " << e.what() << "\n";
    return clef::exit_code_for(e.kind());
  } catch (const std::exception& e) {
    std::cerr << "clef_vision_driver: " << e.what() << "\n";
    return 1;
  }
}
