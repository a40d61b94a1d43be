// SPDX-License-Identifier: MIT
// The joint head's ops (ops/head_ops.h) at every SIMD level: each kernel equals its scalar oracle
// bit for bit (the summation order is the contract), whatever the thread count, and each oracle is
// within rounding of the formula evaluated in double (ops::ref of the vision ops, or a plain double
// loop), so the two cannot agree on a wrong answer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "isa_levels.h"
#include "ops/head_ops.h"
#include "ops/ops.h"
#include "ops/parallel.h"
#include "ops/vision_ops.h"

namespace clef {
namespace {

class HeadOpsAtLevel : public test::AtIsaLevel {};

using Vec = std::vector<float>;

Vec uniform(std::mt19937& g, std::int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  Vec v(static_cast<std::size_t>(n));
  for (float& x : v) x = d(g);
  return v;
}

bool same_bits(const Vec& a, const Vec& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// max |got - want| / (atol + rtol |want|); <= 1 passes.
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

TEST_P(HeadOpsAtLevel, Dot16MatchesOracleBitForBitAndTheExactDot) {
  std::mt19937 g(11);
  for (std::int64_t n = 0; n <= 70; ++n) {
    const Vec a = uniform(g, n, -2.0f, 2.0f), b = uniform(g, n, -2.0f, 2.0f);
    const float got = ops::dot16(a.data(), b.data(), n), want = ops::ref::dot16(a.data(), b.data(), n);
    EXPECT_EQ(0, std::memcmp(&got, &want, sizeof got)) << "n " << n;
    double exact = 0.0, mag = 0.0;
    for (std::int64_t i = 0; i < n; ++i) {
      exact +=
          static_cast<double>(a[static_cast<std::size_t>(i)]) * static_cast<double>(b[static_cast<std::size_t>(i)]);
      mag += std::fabs(static_cast<double>(a[static_cast<std::size_t>(i)]) *
                       static_cast<double>(b[static_cast<std::size_t>(i)]));
    }
    // A sum of n fp32 products in any order is within about 2 n u Σ|a_i b_i| of the exact one.
    EXPECT_LE(std::fabs(static_cast<double>(want) - exact), 2.0 * static_cast<double>(n + 1) * 0x1p-24 * mag + 1e-30)
        << n;
  }
}

TEST_P(HeadOpsAtLevel, LinearDot16MatchesOracleBitForBit) {
  std::mt19937 g(12);
  for (const std::int64_t in : {1, 15, 16, 17, 48, 101}) {
    for (const std::int64_t out : {1, 3, 4, 9}) {
      for (const std::int64_t rows : {1, 3, 4, 7, 65}) {
        const Vec x = uniform(g, rows * in, -1.0f, 1.0f), w = uniform(g, out * in, -0.5f, 0.5f);
        const Vec b = uniform(g, out, -0.5f, 0.5f);
        for (const float* bias : {static_cast<const float*>(nullptr), b.data()}) {
          Vec got(static_cast<std::size_t>(rows * out)), want(got.size());
          ops::linear_dot16(x.data(), rows, in, w.data(), out, bias, got.data());
          ops::ref::linear_dot16(x.data(), rows, in, w.data(), out, bias, want.data());
          EXPECT_TRUE(same_bits(want, got)) << rows << "x" << in << " -> " << out << (bias ? " +b" : "");
          Vec exact(want.size());
          for (std::int64_t r = 0; r < rows; ++r) {
            for (std::int64_t o = 0; o < out; ++o) {
              double s = bias ? static_cast<double>(bias[o]) : 0.0;
              for (std::int64_t i = 0; i < in; ++i) {
                s += static_cast<double>(x[static_cast<std::size_t>(r * in + i)]) *
                     static_cast<double>(w[static_cast<std::size_t>(o * in + i)]);
              }
              exact[static_cast<std::size_t>(r * out + o)] = static_cast<float>(s);
            }
          }
          EXPECT_LE(worst(exact, want, 2e-6 * std::sqrt(static_cast<double>(in)), 1e-5), 1.0);
        }
      }
    }
  }
}

TEST_P(HeadOpsAtLevel, LinearDot16IsTheSameOnEveryThreadCount) {
  // Large enough for the parallel panels (rows > 64, rows·out·in >= 2^22) with ragged tiles.
  std::mt19937 g(13);
  const std::int64_t rows = 131, in = 161, out = 203;
  const Vec x = uniform(g, rows * in, -1.0f, 1.0f), w = uniform(g, out * in, -0.5f, 0.5f),
            b = uniform(g, out, -1.0f, 1.0f);
  Vec want(static_cast<std::size_t>(rows * out));
  ops::ref::linear_dot16(x.data(), rows, in, w.data(), out, b.data(), want.data());
  for (const int threads : {1, 2, 3}) {
    ops::set_num_threads(threads);
    Vec got(want.size());
    ops::linear_dot16(x.data(), rows, in, w.data(), out, b.data(), got.data());
    EXPECT_TRUE(same_bits(want, got)) << "threads " << threads;
  }
  ops::set_num_threads(0);
}

TEST_P(HeadOpsAtLevel, LayerNormF64StatsMatchesOracleBitForBitAndTheFormula) {
  std::mt19937 g(14);
  for (const std::int64_t n : {1, 7, 64, 257}) {
    const std::int64_t rows = 300;  // rows · n crosses the parallel threshold for n = 257
    const Vec x = uniform(g, rows * n, -3.0f, 5.0f), w = uniform(g, n, 0.5f, 1.5f), b = uniform(g, n, -0.5f, 0.5f);
    Vec got(x.size()), want(x.size()), formula(x.size());
    ops::layer_norm_f64stats(x.data(), rows, n, w.data(), b.data(), 1e-5f, got.data());
    ops::ref::layer_norm_f64stats(x.data(), rows, n, w.data(), b.data(), 1e-5f, want.data());
    ops::ref::layer_norm(x.data(), rows, n, w.data(), b.data(), 1e-5f, formula.data());
    EXPECT_TRUE(same_bits(want, got)) << "n " << n;
    EXPECT_LE(worst(formula, want, 1e-6, 2e-6), 1.0) << "n " << n;
    Vec in_place = x;  // y may alias x
    ops::layer_norm_f64stats(in_place.data(), rows, n, w.data(), b.data(), 1e-5f, in_place.data());
    EXPECT_TRUE(same_bits(want, in_place)) << "n " << n;
  }
}

TEST_P(HeadOpsAtLevel, L2NormalizeF64MatchesOracleAndTheFormula) {
  std::mt19937 g(15);
  for (const std::int64_t n : {1, 5, 64, 1000}) {
    const Vec x = uniform(g, n, -2.0f, 2.0f);
    Vec got(x.size()), want(x.size());
    ops::l2_normalize_f64(x.data(), n, got.data());
    ops::ref::l2_normalize_f64(x.data(), n, want.data());
    EXPECT_TRUE(same_bits(want, got)) << "n " << n;
    double s = 0.0;
    for (const float v : want) s += static_cast<double>(v) * static_cast<double>(v);
    EXPECT_NEAR(s, 1.0, 1e-6) << "n " << n;
  }
  const Vec zero(9, 0.0f);
  Vec out(9, 1.0f);
  ops::l2_normalize_f64(zero.data(), 9, out.data());  // ‖x‖ clamped at 1e-12: zeros stay zeros
  EXPECT_TRUE(same_bits(zero, out));
}

TEST_P(HeadOpsAtLevel, AttentionRunsEqualsThePlainLoopBitForBit) {
  // Sizes that cross the query block (16) and the key block (128) with ragged tails, runs split at
  // rows that are not block boundaries, and 1-3 threads.
  const std::int64_t W = 64, heads = 4, nq = 37, nk = 301;
  std::mt19937 g(16);
  const Vec q = uniform(g, nq * W, -4.0f, 4.0f), k = uniform(g, nk * W, -4.0f, 4.0f),
            v = uniform(g, nk * W, -4.0f, 4.0f);
  Vec want(q.size());
  ops::ref::attention_runs(q.data(), nq, W, heads, k.data(), v.data(), nk, want.data());
  for (const std::int64_t cut : {std::int64_t{0}, std::int64_t{1}, std::int64_t{130}, nk - 1}) {
    std::vector<ops::KvRun> runs;
    if (cut > 0) runs.push_back({k.data(), v.data(), cut});
    runs.push_back({k.data() + cut * W, v.data() + cut * W, nk - cut});
    for (const int threads : {1, 2, 3}) {
      ops::set_num_threads(threads);
      Vec got(q.size(), 7.0f);  // fully written
      ops::attention_runs(q.data(), nq, W, heads, runs, got.data());
      EXPECT_TRUE(same_bits(want, got)) << "cut " << cut << " threads " << threads;
    }
  }
  ops::set_num_threads(0);
}

TEST_P(HeadOpsAtLevel, AttentionRunsOracleIsAttention) {
  // nq == nk with one kv head per head: the double-precision bidirectional attention of the vision
  // ops ([t, nh, hd] is the [t, W] layout) computes the same formula.
  const std::int64_t W = 48, heads = 3, t = 29;
  std::mt19937 g(17);
  const Vec q = uniform(g, t * W, -2.0f, 2.0f), k = uniform(g, t * W, -2.0f, 2.0f), v = uniform(g, t * W, -2.0f, 2.0f);
  Vec got(q.size()), formula(q.size());
  ops::ref::attention_runs(q.data(), t, W, heads, k.data(), v.data(), t, got.data());
  ops::ref::attention_full(ops::AttentionDims{heads, heads, W / heads}, t, q.data(), k.data(), v.data(),
                           formula.data());
  EXPECT_LE(worst(formula, got, 2e-6, 2e-5), 1.0);
}

CLEF_INSTANTIATE_AT_ISA_LEVELS(HeadOpsAtLevel);

}  // namespace
}  // namespace clef
