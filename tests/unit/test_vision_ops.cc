// SPDX-License-Identifier: MIT
// Vision tower ops (ops/vision_ops.h): each optimized kernel against its scalar reference on
// random inputs with odd shapes, plus the property that bidirectional attention of query i
// equals the causal kernel's answer for the last query (which sees every key).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "isa_levels.h"
#include "ops/ops.h"
#include "ops/parallel.h"
#include "ops/vision_ops.h"

namespace clef {
namespace {

class VisionOpsAtLevel : public test::AtIsaLevel {};

using Vec = std::vector<float>;

Vec uniform(std::mt19937& g, std::int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  Vec v(static_cast<std::size_t>(n));
  for (float& x : v) x = d(g);
  return v;
}

/// max |got - want| / (atol + rtol |want|) over all elements; <= 1 passes.
double worst(const Vec& want, const Vec& got, double atol, double rtol) {
  EXPECT_EQ(want.size(), got.size());
  double w = 0.0;
  for (std::size_t i = 0; i < want.size() && i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
    const double r = err / (atol + rtol * std::fabs(static_cast<double>(want[i])));
    w = std::max(w, std::isfinite(r) ? r : 1e30);
  }
  return w;
}

TEST_P(VisionOpsAtLevel, LayerNormMatchesReference) {
  std::mt19937 g(1);
  for (std::int64_t n : {1, 17, 32, 768, 1153}) {
    for (std::int64_t rows : {1, 5, 64}) {
      Vec x = uniform(g, rows * n, -3.0f, 5.0f), w = uniform(g, n, 0.5f, 1.5f), b = uniform(g, n, -0.1f, 0.1f);
      Vec want(x.size()), got(x.size());
      ops::ref::layer_norm(x.data(), rows, n, w.data(), b.data(), 1e-6f, want.data());
      ops::layer_norm(x.data(), rows, n, w.data(), b.data(), 1e-6f, got.data());
      EXPECT_LE(worst(want, got, 1e-5, 1e-4), 1.0) << "n=" << n << " rows=" << rows;
      // in place
      ops::layer_norm(x.data(), rows, n, w.data(), b.data(), 1e-6f, x.data());
      EXPECT_LE(worst(want, x, 1e-5, 1e-4), 1.0) << "in place n=" << n;
    }
  }
  // A constant row normalizes to the bias (variance 0, eps keeps it finite).
  Vec x(8, 3.0f), w(8, 2.0f), b(8, 0.25f), y(8);
  ops::layer_norm(x.data(), 1, 8, w.data(), b.data(), 1e-6f, y.data());
  for (float v : y) EXPECT_FLOAT_EQ(v, 0.25f);
}

TEST_P(VisionOpsAtLevel, GeluAndBiasMatchReference) {
  std::mt19937 g(2);
  for (std::int64_t n : {1, 15, 16, 17, 100000}) {
    Vec x = uniform(g, n, -12.0f, 12.0f);
    Vec want(x.size()), got(x.size());
    ops::ref::gelu_tanh(x.data(), n, want.data());
    ops::gelu_tanh(x.data(), n, got.data());
    EXPECT_LE(worst(want, got, 1e-6, 2e-6), 1.0) << "gelu_tanh n=" << n;
    ops::ref::gelu_erf(x.data(), n, want.data());
    ops::gelu_erf(x.data(), n, got.data());
    EXPECT_LE(worst(want, got, 1e-7, 1e-6), 1.0) << "gelu_erf n=" << n;
  }
  const std::int64_t rows = 7, n = 33;
  Vec y = uniform(g, rows * n, -1, 1), b = uniform(g, n, -1, 1), y2 = y;
  ops::add_bias(y.data(), rows, n, b.data());
  ops::ref::add_bias(y2.data(), rows, n, b.data());
  EXPECT_EQ(y, y2);
}

TEST_P(VisionOpsAtLevel, FullAttentionMatchesReference) {
  std::mt19937 g(3);
  ops::set_num_threads(2);
  for (std::int64_t t : {1, 4, 63, 64, 65, 200}) {
    for (const ops::AttentionDims d :
         {ops::AttentionDims{2, 2, 16}, ops::AttentionDims{3, 3, 72}, ops::AttentionDims{4, 2, 64}}) {
      const std::int64_t nq = t * d.nh * d.hd, nk = t * d.nkv * d.hd;
      Vec q = uniform(g, nq, -2, 2), k = uniform(g, nk, -2, 2), v = uniform(g, nk, -1, 1);
      Vec want(static_cast<std::size_t>(nq)), got(want.size()), got16(want.size());
      ops::ref::attention_full(d, t, q.data(), k.data(), v.data(), want.data());
      ops::attention_full(d, t, q.data(), k.data(), v.data(), got.data());
      ops::attention_full_bf16(d, t, q.data(), k.data(), v.data(), got16.data());
      const std::string tag = "t=" + std::to_string(t) + " nh=" + std::to_string(d.nh) + " hd=" + std::to_string(d.hd);
      EXPECT_LE(worst(want, got, 2e-6, 2e-5), 1.0) << tag;
      EXPECT_LE(worst(want, got16, 3e-2, 3e-2), 1.0) << "bf16 " << tag;
      // Last query: the causal kernel also sees every key.
      if (t > 1) {
        Vec causal(want.size());
        ops::ref::attention(d, t, t, q.data(), k.data(), v.data(), causal.data());
        const auto last = static_cast<std::ptrdiff_t>((t - 1) * d.nh * d.hd);
        Vec a(want.begin() + last, want.end()), c(causal.begin() + last, causal.end());
        EXPECT_LE(worst(c, a, 1e-6, 1e-6), 1.0) << tag;
        // ...and query 0 differs from its causal answer (it sees more than key 0).
        EXPECT_NE(want[0], causal[0]) << tag;
      }
    }
  }
  ops::set_num_threads(1);
}

CLEF_INSTANTIATE_AT_ISA_LEVELS(VisionOpsAtLevel);

}  // namespace
}  // namespace clef
