// SPDX-License-Identifier: MIT
// M-RoPE positions (models/qwen35/mrope_positions.h). The live comparison with transformers'
// get_rope_index is tests/reference/test_vision_tower.py; here: the seed-000 rope-shift form
// equals the get_rope_index form for one image after the 36-token Clef prefix (docs/MODEL.md
// §7.4, for many merged grids), text-only sequences, and the error paths.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "models/qwen35/mrope_positions.h"
#include "test_util.h"

namespace clef {
namespace {

using qwen35::ImageGrid;

constexpr std::int32_t kPad = 248056, kStart = 248053, kEnd = 248054;

/// Clef's encode_record layout: 36 prefix ids, <|vision_start|>, N pads, <|vision_end|>, '\n',
/// then `tail` more text ids.
std::vector<std::int32_t> clef_ids(std::int64_t n_pads, std::int64_t tail) {
  std::vector<std::int32_t> ids;
  for (int i = 0; i < 36; ++i) ids.push_back(100 + i);
  ids.push_back(kStart);
  for (std::int64_t k = 0; k < n_pads; ++k) ids.push_back(kPad);
  ids.push_back(kEnd);
  ids.push_back(198);
  for (std::int64_t i = 0; i < tail; ++i) ids.push_back(static_cast<std::int32_t>(1000 + i));
  return ids;
}

TEST(MropePositions, SeedShiftFormEqualsGetRopeIndex) {
  const std::vector<std::pair<std::int64_t, std::int64_t>> merged = {{8, 8}, {14, 14}, {3, 7},   {10, 2}, {1, 5},
                                                                     {5, 1}, {1, 1},   {32, 24}, {2, 64}};
  for (const auto& [H, W] : merged) {
    for (std::int64_t tail : {0, 1, 57}) {
      const auto ids = clef_ids(H * W, tail);
      const ImageGrid g{1, 2 * H, 2 * W};
      const auto want = qwen35::mrope_positions(ids, kPad, std::span(&g, 1), 2);
      const auto in = qwen35::rope_shift_inputs(H, W);
      EXPECT_EQ(in.rope_shift_start, 37 + H * W);
      EXPECT_EQ(in.rope_shift_amount, H * W - std::max(H, W));
      const auto got = qwen35::rope_shift_positions(static_cast<std::int64_t>(ids.size()), in);
      EXPECT_EQ(got.pos, want.pos) << H << "x" << W << " tail " << tail;
      EXPECT_EQ(got.rope_delta, want.rope_delta) << H << "x" << W;
      EXPECT_EQ(want.rope_delta, std::max(H, W) - H * W);
    }
  }
}

TEST(MropePositions, TextOnlyIsTheIndexOnEveryStream) {
  const auto ids = clef_ids(0, 20);  // vision_start/end with no pads are text
  const auto p = qwen35::mrope_positions(ids, kPad, {}, 2);
  const auto T = static_cast<std::int64_t>(ids.size());
  for (int s = 0; s < 3; ++s) {
    for (std::int64_t i = 0; i < T; ++i) EXPECT_EQ(p.pos[static_cast<std::size_t>(s * T + i)], i);
  }
  EXPECT_EQ(p.rope_delta, 0);
  const auto shifted = qwen35::rope_shift_positions(T, qwen35::rope_shift_inputs(0, 0));
  EXPECT_EQ(shifted.pos, p.pos);
  EXPECT_EQ(qwen35::rope_shift_inputs(0, 0).rope_shift_start, std::int64_t{1} << 30);
}

TEST(MropePositions, RejectsMismatchedImages) {
  const ImageGrid g{1, 4, 4};  // 4 merged tokens
  const auto ids = clef_ids(5, 3);
  std::string msg = test::error_of<InvalidArgument>([&] { qwen35::mrope_positions(ids, kPad, std::span(&g, 1), 2); });
  EXPECT_NE(msg.find("image 0 at token 37 has 5 pad tokens, its grid needs 4"), std::string::npos) << msg;
  msg = test::error_of<InvalidArgument>([&] { qwen35::mrope_positions(clef_ids(4, 0), kPad, {}, 2); });
  EXPECT_NE(msg.find("only 0 image grid(s)"), std::string::npos) << msg;
  const ImageGrid two[2] = {g, g};
  msg = test::error_of<InvalidArgument>([&] { qwen35::mrope_positions(clef_ids(4, 0), kPad, two, 2); });
  EXPECT_NE(msg.find("2 image grid(s) given but the ids hold 1"), std::string::npos) << msg;
  const ImageGrid odd{1, 3, 4};
  msg = test::error_of<InvalidArgument>([&] { qwen35::mrope_positions(clef_ids(6, 0), kPad, std::span(&odd, 1), 2); });
  EXPECT_NE(msg.find("merge size"), std::string::npos) << msg;
  msg = test::error_of<InvalidArgument>([&] { qwen35::rope_shift_positions(40, qwen35::rope_shift_inputs(2, 2)); });
  EXPECT_NE(msg.find("does not fit"), std::string::npos) << msg;
  test::error_of<InvalidArgument>([&] { qwen35::rope_shift_inputs(0, 3); });
}

}  // namespace
}  // namespace clef
