// SPDX-License-Identifier: MIT
// Vision tower (models/qwen35/vision_tower.h) on the C++ `make-model` tiny release. Parity with
// transformers is tests/reference/test_vision_tower.py; here the structural properties:
// images in one call are independent (attention per frame), a t = 2 clip equals two t = 1
// images, the resampled position table is the table itself at a 48 x 48 grid and its corners
// at 2 x 2, bf16 stays close to fp32, and bad input gets a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "models/qwen35/vision_tower.h"
#include "ops/parallel.h"
#include "runtime/release.h"
#include "test_util.h"
#include "clef_tools/make_model.h"

namespace clef {
namespace {

using qwen35::ImageGrid;
using qwen35::VisionTower;

class VisionTowerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    MakeModelOptions o;
    o.out_dir = dir_->str() + "/tiny";
    o.seed = 7;
    make_model(o);
    rel_ = new ReleaseFolder(open_release(o.out_dir));
  }
  static void TearDownTestSuite() {
    delete rel_;
    delete dir_;
  }
  static VisionTower tower(ops::Precision p = ops::Precision::kF32) {
    return VisionTower(*rel_->config.vision, *rel_->model.vision, {p});
  }
  static std::vector<float> pixels(std::int64_t rows, std::int64_t dim, std::uint32_t seed) {
    std::mt19937 g(seed);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    std::vector<float> v(static_cast<std::size_t>(rows * dim));
    for (float& x : v) x = d(g);
    return v;
  }
  static double max_abs(const std::vector<float>& v) {
    double m = 0;
    for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
    return m;
  }
  static double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double m = 0;
    for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
      m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
    }
    return m;
  }
  static test::TempDir* dir_;
  static ReleaseFolder* rel_;
};
test::TempDir* VisionTowerTest::dir_ = nullptr;
ReleaseFolder* VisionTowerTest::rel_ = nullptr;

TEST_F(VisionTowerTest, ImagesInOneCallAreIndependent) {
  const VisionTower t = tower();
  const std::int64_t K = t.patch_dim();
  const ImageGrid a{1, 4, 6}, b{1, 8, 2};
  const auto pa = pixels(a.patches(), K, 1), pb = pixels(b.patches(), K, 2);
  std::vector<float> both(pa);
  both.insert(both.end(), pb.begin(), pb.end());
  const ImageGrid ab[2] = {a, b};
  const auto out = t.forward(both.data(), a.patches() + b.patches(), ab);
  auto oa = t.forward(pa.data(), a.patches(), std::span(&a, 1));
  const auto ob = t.forward(pb.data(), b.patches(), std::span(&b, 1));
  ASSERT_EQ(out.size(), static_cast<std::size_t>((6 + 4) * t.out_hidden_size()));
  oa.insert(oa.end(), ob.begin(), ob.end());
  EXPECT_LE(max_diff(out, oa), 1e-5 * max_abs(oa));
}

TEST_F(VisionTowerTest, ClipFramesEqualSeparateImages) {
  const VisionTower t = tower();
  const ImageGrid clip{2, 4, 4}, frame{1, 4, 4};
  const auto px = pixels(clip.patches(), t.patch_dim(), 3);
  const auto oc = t.forward(px.data(), clip.patches(), std::span(&clip, 1));
  const ImageGrid two[2] = {frame, frame};
  const auto of = t.forward(px.data(), clip.patches(), two);
  EXPECT_EQ(t.merged_tokens(clip), 8);
  EXPECT_LE(max_diff(oc, of), 1e-6 * max_abs(of));
}

TEST_F(VisionTowerTest, PositionEmbeddingsResampleTheTable) {
  const VisionTower t = tower();
  const std::int64_t D = t.hidden_size();
  const std::vector<float> table = rel_->model.vision->pos_embed.to_f32();
  // 48 x 48 patches: align_corners sampling hits every table entry exactly.
  std::vector<float> pe;
  t.position_embeddings({1, 48, 48}, pe);
  ASSERT_EQ(pe.size(), table.size());
  for (std::int64_t k = 0; k < 48 * 48; ++k) {
    // patch k in merge-block order -> (row, col)
    const std::int64_t blk = k / 4, row = (blk / 24) * 2 + (k / 2) % 2, col = (blk % 24) * 2 + k % 2;
    for (std::int64_t e = 0; e < D; ++e) {
      ASSERT_EQ(pe[static_cast<std::size_t>(k * D + e)], table[static_cast<std::size_t>((row * 48 + col) * D + e)])
          << "patch " << k;
    }
  }
  // 2 x 2 patches: the four corners of the table.
  pe.clear();
  t.position_embeddings({1, 2, 2}, pe);
  const std::int64_t corner[4] = {0, 47, 47 * 48, 48 * 48 - 1};
  for (int k = 0; k < 4; ++k) {
    for (std::int64_t e = 0; e < D; ++e) {
      ASSERT_EQ(pe[static_cast<std::size_t>(k * D + e)], table[static_cast<std::size_t>(corner[k] * D + e)]);
    }
  }
}

TEST_F(VisionTowerTest, Bf16StaysCloseToFp32) {
  const VisionTower f = tower(), b = tower(ops::Precision::kBF16);
  const ImageGrid g{1, 8, 8};
  const auto px = pixels(g.patches(), f.patch_dim(), 4);
  const auto of = f.forward(px.data(), g.patches(), std::span(&g, 1));
  const auto ob = b.forward(px.data(), g.patches(), std::span(&g, 1));
  EXPECT_LE(max_diff(of, ob), 5e-2 * max_abs(of));
  EXPECT_GT(max_diff(of, ob), 0.0);  // the bf16 path is really taken
}

TEST_F(VisionTowerTest, BadInputIsRefusedWithAClearError) {
  const VisionTower t = tower();
  const std::int64_t K = t.patch_dim();
  auto px = pixels(16, K, 5);
  const ImageGrid ok{1, 4, 4}, odd{1, 3, 4}, zero{0, 4, 4};
  std::string m = test::error_of<InvalidArgument>([&] { t.forward(px.data(), 16, std::span(&odd, 1)); });
  EXPECT_NE(m.find("image 0: grid (t, h, w) = (1, 3, 4)"), std::string::npos) << m;
  test::error_of<InvalidArgument>([&] { t.forward(px.data(), 16, std::span(&zero, 1)); });
  test::error_of<InvalidArgument>([&] { t.forward(px.data(), 16, std::span<const ImageGrid>()); });
  m = test::error_of<InvalidArgument>([&] { t.forward(px.data(), 15, std::span(&ok, 1)); });
  EXPECT_NE(m.find("15 patch rows but the grids need 16"), std::string::npos) << m;
  px[static_cast<std::size_t>(5 * K + 3)] = std::numeric_limits<float>::quiet_NaN();
  m = test::error_of<InvalidArgument>([&] { t.forward(px.data(), 16, std::span(&ok, 1)); });
  EXPECT_NE(m.find("row 5 column 3 is not finite"), std::string::npos) << m;
}

}  // namespace
}  // namespace clef
