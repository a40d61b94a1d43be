// SPDX-License-Identifier: MIT
// Test driver: runs the C++ joint schema head on hidden states from a file, for the live parity
// test against the Python reference head (tests/reference/test_head_parity.py).
//   clef_head_driver MODEL_DIR CHUNK RECORD_DIR...
// Each RECORD_DIR holds hidden.npy [T, H] f32, input_ids.npy [T] and spans.json (the reference
// toolkit's spans file: {"questions": [{"type_id", "span": [a, b], "options": [{"span": [s, e]}]}]});
// the logits are written to RECORD_DIR/cpp_CHUNK.npy. Rows are fed CHUNK at a time (0: all at once).
// The model is loaded once for all records.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/joint_head/joint_head.h"
#include "io/npy.h"
#include "runtime/release.h"

namespace {

void run_record(const clef::ReleaseFolder& r, const clef::JointHead& head, const std::string& dir, std::int64_t chunk) {
  const clef::NpyArray hidden = clef::read_npy(dir + "/hidden.npy");
  const clef::NpyArray ids = clef::read_npy(dir + "/input_ids.npy");
  std::ifstream sf(dir + "/spans.json");
  const nlohmann::json spans = nlohmann::json::parse(sf);
  std::vector<clef::HeadQuestion> qs;
  for (const auto& q : spans.at("questions")) {
    clef::HeadQuestion hq;
    hq.type_id = q.at("type_id").get<int>();
    hq.span = {q.at("span")[0].get<std::int64_t>(), q.at("span")[1].get<std::int64_t>()};
    for (const auto& o : q.at("options")) {
      hq.options.push_back({o.at("span")[0].get<std::int64_t>(), o.at("span")[1].get<std::int64_t>()});
    }
    qs.push_back(std::move(hq));
  }
  const std::vector<std::int32_t> input_ids(ids.i64.begin(), ids.i64.end());
  const auto T = static_cast<std::int64_t>(input_ids.size());
  const std::int64_t H = r.head_config.hidden_size;
  if (hidden.shape.size() != 2 || hidden.shape[0] != T || hidden.shape[1] != H) {
    throw clef::InvalidArgument(dir + "/hidden.npy must be [T, H] = [" + std::to_string(T) + ", " + std::to_string(H) +
                                "]");
  }
  const std::int64_t step = chunk > 0 ? chunk : T;
  clef::JointHeadRecord rec(head, std::move(qs), input_ids);
  for (std::int64_t t = 0; t < T; t += step) {
    const std::int64_t n = std::min(step, T - t);
    rec.feed(std::span<const float>(hidden.f32.data() + t * H, static_cast<std::size_t>(n * H)));
  }
  const std::vector<float> logits = rec.logits();
  clef::write_npy(dir + "/cpp_" + std::to_string(chunk) + ".npy", {static_cast<std::int64_t>(logits.size())},
                  logits.data());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: clef_head_driver MODEL_DIR CHUNK RECORD_DIR...\n";
    return 2;
  }
  try {
    const clef::ReleaseFolder r = clef::open_release(argv[1]);
    const std::int64_t chunk = std::stoll(argv[2]);
    const clef::JointHead head(r.head, r.head_config, r.model.text.lm_head);
    for (int i = 3; i < argc; ++i) run_record(r, head, argv[i], chunk);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "clef_head_driver: " << e.what() << "\n";
    return 1;
  }
}
