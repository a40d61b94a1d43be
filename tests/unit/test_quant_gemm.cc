// SPDX-License-Identifier: MIT
// Block-quantized linear layer (ops/quant_gemm.h): the repacked layout gives back every block's
// canonical parameters, every kernel this CPU runs equals the scalar oracle bit for bit (shapes with
// n not a multiple of the panel, m = 1, 2, 5, 7, 9, 64), the oracle is within the activation quantization
// bound of an fp64 dot product with the dequantized weights, and GemmWeight / linear() take the
// quantized path by themselves. The decoding itself is checked against gguf-py in
// tests/reference/test_quant_decode.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "isa_levels.h"
#include "ops/gemm.h"
#include "ops/int8_gemm.h"
#include "ops/quant_gemm.h"

#pragma GCC diagnostic ignored "-Wsign-conversion"

namespace clef::ops {
namespace {
// Named inside the anonymous namespace: the unity build (CLEF_UNITY_BUILD) compiles this file in one
// translation unit with test_int8_gemm.cc, which has helpers of the same names and signatures.
namespace quant_gemm_test {

constexpr QuantType kAllTypes[] = {QuantType::kQ4_K, QuantType::kQ5_K, QuantType::kQ6_K, QuantType::kQ4_0,
                                   QuantType::kQ4_1, QuantType::kQ5_0, QuantType::kQ5_1};

std::vector<float> random_vec(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

bool same_bits(float a, float b) {
  std::uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub;
}

/// n rows of k / elems random blocks of type t: random bytes everywhere, then sane fp16 scales
/// (|d| in [1e-4, 1e-2), dmin / m likewise; signs random where the format allows).
std::vector<std::byte> random_blocks(QuantType t, std::int64_t n, std::int64_t k, std::uint32_t seed) {
  const std::int64_t be = quant_block_elems(t), bb = quant_block_bytes(t);
  std::mt19937 rng(seed);
  std::vector<std::byte> out(static_cast<std::size_t>(n * k / be * bb));
  for (auto& b : out) b = static_cast<std::byte>(rng() & 0xFF);
  std::uniform_real_distribution<float> mag(1e-4f, 1e-2f);
  const auto put = [&](std::byte* p, bool any_sign) {
    float v = mag(rng);
    if (any_sign && (rng() & 1)) v = -v;
    const std::uint16_t h = f32_to_f16(v);
    std::memcpy(p, &h, 2);
  };
  for (std::int64_t i = 0; i < n * k / be; ++i) {
    std::byte* blk = out.data() + i * bb;
    switch (t) {
      case QuantType::kQ4_K:
      case QuantType::kQ5_K:
        put(blk, false);
        put(blk + 2, false);
        break;
      case QuantType::kQ6_K: put(blk + 208, true); break;
      case QuantType::kQ4_0:
      case QuantType::kQ5_0: put(blk, true); break;
      case QuantType::kQ4_1:
      case QuantType::kQ5_1:
        put(blk, false);
        put(blk + 2, true);
        break;
    }
  }
  return out;
}

std::int64_t k_for(QuantType t, int mult) { return quant_block_elems(t) * mult; }

TEST(Quant, RepackGivesBackEveryBlockValue) {
  for (const QuantType t : kAllTypes) {
    const std::int64_t n = 19, k = k_for(t, 3);
    const auto blocks = random_blocks(t, n, k, 7);
    const QuantWeight w = QuantWeight::from_blocks(t, blocks.data(), n, k);
    EXPECT_EQ(w.type(), t);
    EXPECT_EQ(w.panels(), 2);
    const std::int64_t be = quant_block_elems(t), bb = quant_block_bytes(t);
    // About the file's size: Q6_K and the legacy types exactly, Q4_K / Q5_K + 4 bytes per 256.
    const std::size_t file_bytes = static_cast<std::size_t>(32 * k / be * bb);
    EXPECT_LE(w.bytes(), file_bytes + static_cast<std::size_t>(32 * k / 256 * 4)) << quant_type_name(t);
    DecodedQuantBlock d;
    for (std::int64_t j = 0; j < n; ++j) {
      for (std::int64_t s = 0; s < k / be; ++s) {
        decode_quant_block(t, blocks.data() + (j * (k / be) + s) * bb, d);
        for (int e = 0; e < be; ++e) {
          const std::int64_t kk = s * be + e;
          ASSERT_EQ(w.q_at(j, kk / 32, e % 32), d.q[e]) << quant_type_name(t);
          ASSERT_TRUE(same_bits(w.value_at(j, kk), quant_block_value(d, e)))
              << quant_type_name(t) << " j=" << j << " kk=" << kk;
        }
      }
    }
  }
  EXPECT_THROW((void)QuantWeight::from_blocks(QuantType::kQ4_K, nullptr, 4, 128), InvalidArgument);
  EXPECT_THROW((void)QuantWeight::from_blocks(QuantType::kQ4_0, nullptr, 4, 48), InvalidArgument);
}

TEST(Quant, DecodedValueRanges) {
  // Q6_K values are q - 32 in [-32, 31], Q4_0 q - 8 in [-8, 7]; 6-bit K scales < 64.
  for (const QuantType t : kAllTypes) {
    const auto blocks = random_blocks(t, 1, quant_block_elems(t), 9);
    DecodedQuantBlock d;
    decode_quant_block(t, blocks.data(), d);
    const int top = t == QuantType::kQ6_K                                                       ? 63
                    : (t == QuantType::kQ5_K || t == QuantType::kQ5_0 || t == QuantType::kQ5_1) ? 31
                                                                                                : 15;
    for (int e = 0; e < quant_block_elems(t); ++e) ASSERT_LE(d.q[e], top);
    if (t == QuantType::kQ4_K || t == QuantType::kQ5_K) {
      for (int s = 0; s < 16; ++s) ASSERT_TRUE(d.sc[s] >= 0 && d.sc[s] < 64);
      for (int s = 0; s < 8; ++s) ASSERT_LT(d.mb[s], 64);
    }
  }
}

class QuantKernels : public ::testing::TestWithParam<QuantKernel> {
 protected:
  void SetUp() override {
#if defined(__aarch64__)
    const QuantKernel k = GetParam();
    const IsaLevel need = k == QuantKernel::kScalar    ? IsaLevel::kBaseline
                          : k == QuantKernel::kNeon    ? IsaLevel::kNeon
                          : k == QuantKernel::kNeonDot ? IsaLevel::kNeonDotprod
                                                       : IsaLevel::kNeonI8mm;
#else
    const QuantKernel k = GetParam();
    const IsaLevel need = k == QuantKernel::kScalar                                    ? IsaLevel::kBaseline
                          : k == QuantKernel::kAvx512 || k == QuantKernel::kAvx512Vnni ? IsaLevel::kAvx512
                                                                                       : IsaLevel::kAvx2;
#endif
    if (need > configured_isa()) GTEST_SKIP() << "above CLEF_ISA=" << isa_name(configured_isa());
  }
};

TEST_P(QuantKernels, BitIdenticalToScalarOracle) {
  const QuantKernel kernel = GetParam();
  std::uint32_t seed = 100;
  for (const QuantType t : kAllTypes) {
    for (const std::int64_t m : {1, 2, 5, 7, 9, 10, 11, 12, 13, 14, 15, 17, 18, 20, 23, 64}) {  // every tile height
      for (const std::int64_t n : {1, 17, 40}) {
        for (const int mult : {1, 2}) {
          const std::int64_t k =
              k_for(t, t == QuantType::kQ4_K || t == QuantType::kQ5_K || t == QuantType::kQ6_K ? mult : 3 * mult);
          const auto blocks = random_blocks(t, n, k, ++seed);
          const QuantWeight w = QuantWeight::from_blocks(t, blocks.data(), n, k);
          auto x = random_vec(static_cast<std::size_t>(m * k), ++seed);
          if (m == 7) {
            for (std::int64_t i = 0; i < 32; ++i) x[static_cast<std::size_t>(2 * k + i)] = 0.0f;  // an all-zero block
          }
          for (const bool acc : {false, true}) {
            const auto y0 = random_vec(static_cast<std::size_t>(m * n), ++seed);
            auto yr = y0, yk = y0;
            ref::quant_linear(x.data(), m, w, yr.data(), acc);
            quant_linear_with(kernel, x.data(), m, w, yk.data(), acc);
            for (std::size_t i = 0; i < yr.size(); ++i) {
              ASSERT_TRUE(same_bits(yr[i], yk[i]))
                  << quant_kernel_name(kernel) << " " << quant_type_name(t) << " m=" << m << " n=" << n << " k=" << k
                  << " acc=" << acc << " i=" << i << ": " << yr[i] << " vs " << yk[i];
            }
          }
        }
      }
    }
  }
}

TEST_P(QuantKernels, NonFiniteActivationsGiveNaN) {
  const std::int64_t m = 3, n = 20, k = 256;
  auto x = random_vec(static_cast<std::size_t>(m * k), 50);
  x[static_cast<std::size_t>(k + 40)] = std::numeric_limits<float>::infinity();
  const auto blocks = random_blocks(QuantType::kQ4_K, n, k, 51);
  const QuantWeight w = QuantWeight::from_blocks(QuantType::kQ4_K, blocks.data(), n, k);
  std::vector<float> y(static_cast<std::size_t>(m * n));
  quant_linear_with(GetParam(), x.data(), m, w, y.data(), false);
  for (std::int64_t j = 0; j < n; ++j) {
    EXPECT_TRUE(std::isfinite(y[static_cast<std::size_t>(j)]));
    EXPECT_TRUE(std::isnan(y[static_cast<std::size_t>(n + j)])) << j;
  }
}

std::string kernel_param_name(const ::testing::TestParamInfo<QuantKernel>& info) {
  std::string s = quant_kernel_name(info.param);
  std::replace(s.begin(), s.end(), '-', '_');  // gtest names
  return s;
}
INSTANTIATE_TEST_SUITE_P(Supported, QuantKernels, ::testing::ValuesIn(quant_kernels_supported()), kernel_param_name);

TEST(Quant, OracleWithinActivationQuantizationBound) {
  // The weights are exact (value_at); only x is quantized: |x − da·qa| ≤ da/2 per element, so
  // |y − Σ x·w| ≤ Σ_b da_b/2 · Σ_i |w_i| plus fp32 rounding of the block sums.
  for (const QuantType t : kAllTypes) {
    const std::int64_t m = 5, n = 21,
                       k = k_for(t, t == QuantType::kQ4_K || t == QuantType::kQ5_K || t == QuantType::kQ6_K ? 2 : 8);
    const auto blocks = random_blocks(t, n, k, 60);
    const QuantWeight w = QuantWeight::from_blocks(t, blocks.data(), n, k);
    const auto x = random_vec(static_cast<std::size_t>(m * k), 61);
    std::vector<float> y(static_cast<std::size_t>(m * n));
    ref::quant_linear(x.data(), m, w, y.data(), false);
    for (std::int64_t r = 0; r < m; ++r) {
      for (std::int64_t j = 0; j < n; ++j) {
        double exact = 0, bound = 0, mag = 0;
        for (std::int64_t b = 0; b < k / 32; ++b) {
          double amax = 0, wabs = 0;
          for (std::int64_t i = 0; i < 32; ++i) {
            const double xv = x[r * k + b * 32 + i], wv = w.value_at(j, b * 32 + i);
            amax = std::max(amax, std::fabs(xv));
            wabs += std::fabs(wv);
            exact += xv * wv;
            mag += std::fabs(xv * wv);
          }
          bound += 0.5 * (amax / 127.0) * (1 + 1e-6) * wabs;
        }
        bound += 1e-5 * mag + 1e-7;
        EXPECT_LE(std::fabs(static_cast<double>(y[r * n + j]) - exact), bound)
            << quant_type_name(t) << " " << r << "," << j;
      }
    }
  }
}

TEST(Quant, PrequantizedActivationsGiveTheSameBitsAndShareTheirSums) {
  // One quantization read by weights of different types (the half-block sums and the interleaved
  // rows filled by the first, reused by the next; a Q8_0 weight between them interleaves its own
  // layout into the same buffer), then a new x in the same buffers: all must follow it.
  const std::int64_t m = 9, n = 24, k = 512;
  const auto b4 = random_blocks(QuantType::kQ4_K, n, k, 90), b6 = random_blocks(QuantType::kQ6_K, n, k, 91);
  const QuantWeight w4 = QuantWeight::from_blocks(QuantType::kQ4_K, b4.data(), n, k);
  const QuantWeight w6 = QuantWeight::from_blocks(QuantType::kQ6_K, b6.data(), n, k);
  const auto wf = random_vec(static_cast<std::size_t>(n * k), 94);
  const Int8Weight w8 = Int8Weight::quantize(DType::kF32, wf.data(), n, k);
  Int8Activations act;
  for (const std::uint32_t seed : {92u, 93u}) {
    const auto x = random_vec(static_cast<std::size_t>(m * k), seed);
    quantize_activations(x.data(), m, k, act);
    for (const QuantWeight* w : {&w4, &w6, &w4}) {
      std::vector<float> ya(static_cast<std::size_t>(m * n)), yb(ya.size());
      quant_linear(x.data(), m, *w, ya.data(), false);
      quant_linear_quantized(act, *w, yb.data(), false);
      for (std::size_t i = 0; i < ya.size(); ++i) ASSERT_TRUE(same_bits(ya[i], yb[i])) << seed << " " << i;
      int8_linear(x.data(), m, w8, ya.data(), false);
      int8_linear_quantized(act, w8, yb.data(), false);
      for (std::size_t i = 0; i < ya.size(); ++i) ASSERT_TRUE(same_bits(ya[i], yb[i])) << seed << " Q8_0 " << i;
    }
  }
  const QuantWeight narrow = QuantWeight::from_blocks(QuantType::kQ4_K, b4.data(), n / 2, 256);
  std::vector<float> y(static_cast<std::size_t>(m * n));
  EXPECT_THROW(quant_linear_quantized(act, narrow, y.data(), false), InvalidArgument);
  // Activations of k = 500 fill the same 16 blocks as k = 512: still the wrong input for both weights.
  const auto x500 = random_vec(static_cast<std::size_t>(m * 500), 95);
  quantize_activations(x500.data(), m, 500, act);
  ASSERT_EQ(act.blocks, w4.blocks());
  EXPECT_THROW(quant_linear_quantized(act, w4, y.data(), false), InvalidArgument);
  EXPECT_THROW(int8_linear_quantized(act, w8, y.data(), false), InvalidArgument);
}

TEST(Quant, GemmWeightTakesTheQuantizedPathByItself) {
  const std::int64_t m = 3, n = 33, k = 512;
  const auto blocks = random_blocks(QuantType::kQ6_K, n, k, 70);
  const auto x = random_vec(static_cast<std::size_t>(m * k), 71);
  for (const Precision p : {Precision::kF32, Precision::kBF16, Precision::kInt8}) {
    const GemmWeight g(DType::kQ6_K, blocks.data(), n, k, p);
    ASSERT_NE(g.quant(), nullptr);
    EXPECT_EQ(g.owned_bytes(), g.quant()->bytes());
    std::vector<float> y1(static_cast<std::size_t>(m * n)), y2(y1.size());
    linear(x.data(), m, g, y1.data());
    ref::quant_linear(x.data(), m, *g.quant(), y2.data(), false);
    for (std::size_t i = 0; i < y1.size(); ++i) ASSERT_TRUE(same_bits(y1[i], y2[i])) << i;
  }
  EXPECT_THROW(GemmWeight(DType::kQ4_K, blocks.data(), n, 100, Precision::kF32), InvalidArgument);
}

class QuantAtLevel : public test::AtIsaLevel {};

TEST_P(QuantAtLevel, ActiveKernelFollowsTheLevelAndMatchesTheOracle) {
  const QuantKernel k = active_quant_kernel();
#if defined(__aarch64__)
  const auto have = quant_kernels_supported();
  const bool has_i8mm = std::find(have.begin(), have.end(), QuantKernel::kNeonI8mm) != have.end();
  const QuantKernel want = GetParam() == IsaLevel::kBaseline      ? QuantKernel::kScalar
                           : GetParam() == IsaLevel::kNeon        ? QuantKernel::kNeon
                           : GetParam() == IsaLevel::kNeonDotprod ? QuantKernel::kNeonDot
                           : has_i8mm                             ? QuantKernel::kNeonI8mm
                                                                  : QuantKernel::kNeonDot;
#else
  // VNNI where the CPU has it (AVX-VNNI only on CPUs whose best level is avx2).
  const auto have = quant_kernels_supported();
  const auto has = [&](QuantKernel q) { return std::find(have.begin(), have.end(), q) != have.end(); };
  const bool avxvnni = has(QuantKernel::kAvxVnni) && best_supported_isa() == IsaLevel::kAvx2;
  const QuantKernel want = GetParam() == IsaLevel::kBaseline ? QuantKernel::kScalar
                           : GetParam() == IsaLevel::kAvx2
                               ? (avxvnni ? QuantKernel::kAvxVnni : QuantKernel::kAvx2)
                               : (has(QuantKernel::kAvx512Vnni) ? QuantKernel::kAvx512Vnni : QuantKernel::kAvx512);
#endif
  EXPECT_EQ(k, want);
  for (const QuantType t : kAllTypes) {
    const std::int64_t m = 7, n = 50,
                       k2 = k_for(t, t == QuantType::kQ4_K || t == QuantType::kQ5_K || t == QuantType::kQ6_K ? 2 : 5);
    const auto blocks = random_blocks(t, n, k2, 80);
    const QuantWeight w = QuantWeight::from_blocks(t, blocks.data(), n, k2);
    const auto x = random_vec(static_cast<std::size_t>(m * k2), 81);
    std::vector<float> yr(static_cast<std::size_t>(m * n)), yk(yr.size());
    ref::quant_linear(x.data(), m, w, yr.data(), false);
    quant_linear(x.data(), m, w, yk.data(), false);
    for (std::size_t i = 0; i < yr.size(); ++i) ASSERT_TRUE(same_bits(yr[i], yk[i])) << quant_type_name(t) << " " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, QuantAtLevel, ::testing::ValuesIn(test::isa_levels_to_test()), test::isa_param_name);

}  // namespace quant_gemm_test
}  // namespace
}  // namespace clef::ops
