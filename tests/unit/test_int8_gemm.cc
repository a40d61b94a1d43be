// SPDX-License-Identifier: MIT
// int8 (Q8_0) linear layer: every kernel this CPU runs against the scalar oracle (bit-identical,
// odd shapes), quantization round-trip bounds, the int8 result against fp32 within the bound the
// quantization steps allow, Q8_0 repacking, GemmWeight plumbing and page dropping.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "ops/gemm.h"
#include "ops/int8_gemm.h"
#include "isa_levels.h"

// Index arithmetic on std::vector with int64 shapes throughout this file.
#pragma GCC diagnostic ignored "-Wsign-conversion"

namespace clef::ops {
namespace {

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

TEST(Int8, Q8_0BlockQuantizationRoundTrip) {
  // |w - d·q| ≤ d/2 with d the fp32 step; the stored fp16 scale adds |q|·|fp16(d) - d|.
  auto x = random_vec(32 * 200, 1, 0.05f);
  x[5] = 0.0f;
  for (int i = 64; i < 96; ++i) x[static_cast<std::size_t>(i)] = 0.0f;  // an all-zero block
  x[100] = -3.5f;                                                       // an outlier block
  std::int8_t q[32];
  for (std::size_t b = 0; b < x.size() / 32; ++b) {
    const float* xb = x.data() + b * 32;
    const std::uint16_t dh = ref::quantize_q8_0_block(xb, 32, q);
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f, dq = f16_to_f32(dh);
    bool hit127 = false;
    for (int i = 0; i < 32; ++i) {
      ASSERT_GE(q[i], -127);
      ASSERT_LE(q[i], 127);
      hit127 = hit127 || std::abs(q[i]) == 127;
      const float err = std::fabs(xb[i] - dq * static_cast<float>(q[i]));
      ASSERT_LE(err, d * 0.5f * (1 + 1e-5f) + std::fabs(static_cast<float>(q[i])) * std::fabs(dq - d) + 1e-12f)
          << "block " << b << " i " << i;
    }
    if (amax > 0.0f) {
      EXPECT_TRUE(hit127) << "block " << b << ": the largest |x| maps to ±127";
    } else {
      EXPECT_EQ(dh, 0u);
    }
  }
  // Round half away from zero (gguf-py's np_roundf), not to even: 2.5 steps -> 3, -2.5 -> -3.
  std::vector<float> h(32, 0.0f);
  h[0] = 127.0f;  // d = 1, id = 1
  h[1] = 2.5f;
  h[2] = -2.5f;
  h[3] = 0.5f;
  (void)ref::quantize_q8_0_block(h.data(), 32, q);
  EXPECT_EQ(q[1], 3);
  EXPECT_EQ(q[2], -3);
  EXPECT_EQ(q[3], 1);
  // Activations round to nearest even (cvtps / nearbyint): 2.5 -> 2.
  const float da = ref::quantize_activation_block(h.data(), 32, q);
  EXPECT_EQ(da, 1.0f);
  EXPECT_EQ(q[1], 2);
  EXPECT_EQ(q[2], -2);
  EXPECT_EQ(q[3], 0);
}

TEST(Int8, RepackedQ8_0EqualsQuantizedAtLoad) {
  const std::int64_t n = 37, k = 96;
  const auto w = random_vec(static_cast<std::size_t>(n * k), 2, 0.02f);
  std::vector<std::byte> blocks(static_cast<std::size_t>(n * k / 32 * kQ8_0BlockBytes));
  for (std::int64_t j = 0; j < n; ++j) {
    for (std::int64_t b = 0; b < k / 32; ++b) {
      std::byte* blk = blocks.data() + (j * (k / 32) + b) * kQ8_0BlockBytes;
      std::int8_t q[32];
      const std::uint16_t d = ref::quantize_q8_0_block(w.data() + j * k + b * 32, 32, q);
      std::memcpy(blk, &d, 2);
      std::memcpy(blk + 2, q, 32);
    }
  }
  const Int8Weight a = Int8Weight::quantize(DType::kF32, w.data(), n, k);
  const Int8Weight b = Int8Weight::from_q8_0(blocks.data() + 0, n, k);
  for (std::int64_t j = 0; j < n; ++j) {
    for (std::int64_t kk = 0; kk < k; ++kk) ASSERT_EQ(a.q_at(j, kk), b.q_at(j, kk));
    for (std::int64_t bb = 0; bb < k / 32; ++bb) ASSERT_EQ(a.d_at(j, bb), b.d_at(j, bb));
  }
  EXPECT_THROW((void)Int8Weight::from_q8_0(blocks.data(), n, 40), InvalidArgument);
  EXPECT_THROW((void)Int8Weight::quantize(DType::kI32, w.data(), n, k), Unsupported);
}

TEST(Int8, BF16AndF16SourcesQuantizeTheirValues) {
  const std::int64_t n = 5, k = 64;
  const auto w = random_vec(static_cast<std::size_t>(n * k), 3, 0.1f);
  std::vector<std::uint16_t> wb(w.size());
  std::vector<float> wbf(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    wb[i] = f32_to_bf16(w[i]);
    wbf[i] = bf16_to_f32(wb[i]);
  }
  const Int8Weight a = Int8Weight::quantize(DType::kBF16, wb.data(), n, k);
  const Int8Weight b = Int8Weight::quantize(DType::kF32, wbf.data(), n, k);
  for (std::int64_t j = 0; j < n; ++j)
    for (std::int64_t kk = 0; kk < k; ++kk) ASSERT_EQ(a.q_at(j, kk), b.q_at(j, kk));
}

/// Skips kernels above the level CLEF_ISA configured (CLEF_ISA=avx2 never runs AVX-512 code).
class Int8Kernels : public ::testing::TestWithParam<Int8Kernel> {
 protected:
  void SetUp() override {
#if defined(__aarch64__)
    const Int8Kernel k = GetParam();
    const IsaLevel need = k == Int8Kernel::kScalar    ? IsaLevel::kBaseline
                          : k == Int8Kernel::kNeon    ? IsaLevel::kNeon
                          : k == Int8Kernel::kNeonDot ? IsaLevel::kNeonDotprod
                                                      : IsaLevel::kNeonI8mm;
#else
    const Int8Kernel k = GetParam();
    const IsaLevel need = k == Int8Kernel::kScalar       ? IsaLevel::kBaseline
                          : k == Int8Kernel::kAvx512Vnni ? IsaLevel::kAvx512
                                                         : IsaLevel::kAvx2;
#endif
    if (need > configured_isa()) GTEST_SKIP() << "above CLEF_ISA=" << isa_name(configured_isa());
  }
};

TEST_P(Int8Kernels, BitIdenticalToScalarOracleOnOddShapes) {
  const Int8Kernel kernel = GetParam();
  std::uint32_t seed = 10;
  for (const std::int64_t m : {1, 2, 3, 4, 5, 7, 13, 40}) {
    for (const std::int64_t n : {1, 15, 16, 17, 33, 48, 70}) {
      for (const std::int64_t k : {32, 33, 64, 95, 256}) {
        const auto x = random_vec(static_cast<std::size_t>(m * k), ++seed, 1.0f);
        const auto w = random_vec(static_cast<std::size_t>(n * k), ++seed, 0.05f);
        const Int8Weight q = Int8Weight::quantize(DType::kF32, w.data(), n, k);
        for (const bool acc : {false, true}) {
          auto y0 = random_vec(static_cast<std::size_t>(m * n), ++seed, 0.5f);
          auto yr = y0, yk = y0;
          ref::int8_linear(x.data(), m, q, yr.data(), acc);
          int8_linear_with(kernel, x.data(), m, q, yk.data(), acc);
          for (std::size_t i = 0; i < yr.size(); ++i) {
            ASSERT_TRUE(same_bits(yr[i], yk[i])) << int8_kernel_name(kernel) << " m=" << m << " n=" << n << " k=" << k
                                                 << " acc=" << acc << " i=" << i << ": " << yr[i] << " vs " << yk[i];
          }
        }
      }
    }
  }
}

TEST_P(Int8Kernels, NonFiniteActivationsGiveNaNNotZero) {
  const std::int64_t m = 3, n = 20, k = 64;
  auto x = random_vec(static_cast<std::size_t>(m * k), 50);
  x[static_cast<std::size_t>(1 * k + 40)] = std::numeric_limits<float>::infinity();
  const auto w = random_vec(static_cast<std::size_t>(n * k), 51, 0.05f);
  const Int8Weight q = Int8Weight::quantize(DType::kF32, w.data(), n, k);
  std::vector<float> y(static_cast<std::size_t>(m * n));
  int8_linear_with(GetParam(), x.data(), m, q, y.data(), false);
  for (std::int64_t j = 0; j < n; ++j) {
    EXPECT_TRUE(std::isfinite(y[static_cast<std::size_t>(j)]));
    EXPECT_TRUE(std::isnan(y[static_cast<std::size_t>(n + j)])) << j;
  }
}

std::string kernel_param_name(const ::testing::TestParamInfo<Int8Kernel>& info) {
  std::string s = int8_kernel_name(info.param);
  std::replace(s.begin(), s.end(), '-', '_');  // "neon-dotprod" -> neon_dotprod (gtest names)
  return s;
}
INSTANTIATE_TEST_SUITE_P(Supported, Int8Kernels, ::testing::ValuesIn(int8_kernels_supported()), kernel_param_name);

TEST(Int8, CloseToFp32WithinTheQuantizationBound) {
  // |x·w − x̂·ŵ| ≤ Σ |x||w − ŵ| + Σ |x − x̂||ŵ|, with |x − x̂| ≤ da/2 per element; ŵ = dw·qw exactly.
  const std::int64_t m = 9, n = 40, k = 320;
  const auto x = random_vec(static_cast<std::size_t>(m * k), 60, 1.0f);
  const auto w = random_vec(static_cast<std::size_t>(n * k), 61, 0.05f);
  const Int8Weight q = Int8Weight::quantize(DType::kF32, w.data(), n, k);
  std::vector<float> y(static_cast<std::size_t>(m * n));
  int8_linear(x.data(), m, q, y.data(), false);
  for (std::int64_t r = 0; r < m; ++r) {
    std::vector<double> dx(static_cast<std::size_t>(k / 32));
    for (std::int64_t b = 0; b < k / 32; ++b) {
      double amax = 0;
      for (std::int64_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(double(x[r * k + b * 32 + i])));
      dx[static_cast<std::size_t>(b)] = amax / 127.0;
    }
    for (std::int64_t j = 0; j < n; ++j) {
      double exact = 0, bound = 0;
      for (std::int64_t kk = 0; kk < k; ++kk) {
        const double xv = x[r * k + kk], wv = w[j * k + kk], wq = q.value_at(j, kk);
        exact += xv * wv;
        bound += std::fabs(xv) * std::fabs(wv - wq) +
                 0.5 * dx[static_cast<std::size_t>(kk / 32)] * (1 + 1e-6) * std::fabs(wq);
      }
      bound += 1e-5 * std::fabs(exact) + 1e-6;  // fp32 rounding of the block sums
      EXPECT_LE(std::fabs(static_cast<double>(y[r * n + j]) - exact), bound) << r << "," << j;
    }
  }
}

TEST(Int8, GemmWeightRunsTheInt8PathAndDropsMappedPages) {
  const std::int64_t m = 6, n = 24, k = 1024;
  const auto w = random_vec(static_cast<std::size_t>(n * k), 70, 0.05f);
  std::vector<std::uint16_t> wb(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) wb[i] = f32_to_bf16(w[i]);
  const std::string path = ::testing::TempDir() + "int8_weight.bin";
  {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(wb.data()), static_cast<std::streamsize>(wb.size() * 2));
  }
  const MappedFile mf(path);
  const GemmWeight g(DType::kBF16, mf.bytes().data(), n, k, Precision::kInt8);
  ASSERT_NE(g.int8(), nullptr);
  EXPECT_EQ(g.owned_bytes(), g.int8()->bytes());
  const Int8Weight direct = Int8Weight::quantize(DType::kBF16, wb.data(), n, k);
  const auto x = random_vec(static_cast<std::size_t>(m * k), 71);
  std::vector<float> y1(static_cast<std::size_t>(m * n)), y2(y1.size());
  linear(x.data(), m, g, y1.data());
  int8_linear(x.data(), m, direct, y2.data(), false);
  for (std::size_t i = 0; i < y1.size(); ++i) ASSERT_TRUE(same_bits(y1[i], y2[i])) << i;
  // The mapped source is still readable after its pages were dropped (faulted back from the file).
  EXPECT_EQ(std::memcmp(mf.bytes().data(), wb.data(), wb.size() * 2), 0);
  EXPECT_GT(MappedFile::drop_pages(mf.bytes().data(), mf.size()), 0u);
  EXPECT_EQ(MappedFile::drop_pages(wb.data(), wb.size() * 2), 0u) << "heap memory is never advised";
  EXPECT_EQ(wb[0], f32_to_bf16(w[0]));
  // Q8_0 weights take the int8 path at every precision (a quantized file chooses its kernels).
  std::vector<std::byte> blocks(static_cast<std::size_t>(n * k / 32 * kQ8_0BlockBytes));
  for (const Precision p : {Precision::kF32, Precision::kBF16, Precision::kInt8}) {
    const GemmWeight q(DType::kQ8_0, blocks.data(), n, k, p);
    EXPECT_NE(q.int8(), nullptr) << precision_name(p);
  }
}

class Int8AtLevel : public test::AtIsaLevel {};

TEST_P(Int8AtLevel, ActiveKernelFollowsTheLevelAndMatchesTheOracle) {
  const Int8Kernel k = active_int8_kernel();
#if defined(__aarch64__)
  switch (GetParam()) {  // ops/int8_gemm.h active_int8_kernel
    case IsaLevel::kBaseline: EXPECT_EQ(k, Int8Kernel::kScalar); break;
    case IsaLevel::kNeon: EXPECT_EQ(k, Int8Kernel::kNeon); break;
    case IsaLevel::kNeonDotprod: EXPECT_EQ(k, Int8Kernel::kNeonDot); break;
    default: EXPECT_TRUE(k == Int8Kernel::kNeonI8mm || k == Int8Kernel::kNeonDot) << int8_kernel_name(k); break;
  }
#else
  if (GetParam() == IsaLevel::kBaseline) {
    EXPECT_EQ(k, Int8Kernel::kScalar);
  } else {
    EXPECT_NE(k, Int8Kernel::kScalar);
  }
  if (GetParam() == IsaLevel::kAvx2) {
    EXPECT_NE(k, Int8Kernel::kAvx512Vnni);
  }
#endif
  const std::int64_t m = 11, n = 50, k2 = 160;
  const auto x = random_vec(static_cast<std::size_t>(m * k2), 80);
  const auto w = random_vec(static_cast<std::size_t>(n * k2), 81, 0.05f);
  const Int8Weight q = Int8Weight::quantize(DType::kF32, w.data(), n, k2);
  std::vector<float> yr(static_cast<std::size_t>(m * n)), yk(yr.size());
  ref::int8_linear(x.data(), m, q, yr.data(), false);
  int8_linear(x.data(), m, q, yk.data(), false);
  for (std::size_t i = 0; i < yr.size(); ++i) ASSERT_TRUE(same_bits(yr[i], yk[i])) << i;
}

INSTANTIATE_TEST_SUITE_P(Levels, Int8AtLevel, ::testing::ValuesIn(test::isa_levels_to_test()), test::isa_param_name);

}  // namespace
}  // namespace clef::ops
