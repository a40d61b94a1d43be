// SPDX-License-Identifier: MIT
// dtype conversions against the compiler's own IEEE conversions (_Float16) and exact identities.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/quant_blocks.h"
#include "core/error.h"
#include "core/quant_blocks.h"

namespace clef {
namespace {

// The compiler's IEEE half type: GCC 12 has _Float16 in C++ on x86-64 but not on aarch64, where
// the ACLE's __fp16 is the same IEEE binary16 format (with the hardware's conversions).
#if defined(__aarch64__)
using Half = __fp16;
#else
using Half = _Float16;
#endif

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(DType, NamesRoundTrip) {
  for (auto n : {"F32", "BF16", "F16", "I64", "BOOL", "F8_E4M3"}) {
    auto t = dtype_from_name(n);
    ASSERT_TRUE(t.has_value()) << n;
    EXPECT_EQ(dtype_name(*t), n);
  }
  EXPECT_FALSE(dtype_from_name("FP32").has_value());
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF64), 8u);
}

// Every one of the 65,536 half bit patterns converts exactly as the hardware/compiler does.
TEST(DType, F16ToF32ExhaustiveAgainstCompiler) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto hb = static_cast<std::uint16_t>(h);
    Half ref;
    std::memcpy(&ref, &hb, 2);
    const float want = static_cast<float>(ref);
    const float got = f16_to_f32(hb);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(bits(got), bits(want)) << "half bits " << h;
    }
  }
}

// float -> half rounding (nearest even, subnormals, overflow) against the compiler on random
// floats spanning every exponent, plus the boundaries.
TEST(DType, F32ToF16AgainstCompiler) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> any;
  std::vector<float> cases = {0.0f,
                              -0.0f,
                              65504.0f,
                              65519.99f,
                              65520.0f,
                              1e-8f,
                              2.9802322e-8f,
                              5.96e-8f,
                              6.1035156e-5f,
                              6.1e-5f,
                              std::numeric_limits<float>::infinity()};
  for (int i = 0; i < 200000; ++i) {
    std::uint32_t u = any(rng);
    float f;
    std::memcpy(&f, &u, 4);
    if (!std::isnan(f)) cases.push_back(f);
  }
  for (float f : cases) {
    const Half ref = static_cast<Half>(f);
    std::uint16_t want;
    std::memcpy(&want, &ref, 2);
    ASSERT_EQ(f32_to_f16(f), want) << "float " << f;
  }
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, Bf16RoundsToNearestEven) {
  // Every bf16 value converts to float and back unchanged.
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto v = static_cast<std::uint16_t>(b);
    const float f = bf16_to_f32(v);
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_bf16(f), v) << b;
    }
  }
  // Ties go to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f), f32_to_bf16(1.0f));
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-7f + 0x1p-8f), f32_to_bf16(1.0f + 0x1p-6f));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, ConvertRejectsIntegers) {
  std::byte buf[8]{};
  float out[2];
  EXPECT_THROW(convert_to_f32(DType::kI32, buf, 2, out), Unsupported);
}

TEST(DType, FindNonFiniteFloats) {
  // Every element is looked at: a NaN or infinity anywhere is found at its index, the first one wins.
  for (const std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{2048}, std::size_t{5000}}) {
    for (const std::size_t at : {std::size_t{0}, n / 2, n - 1}) {
      std::vector<float> f(n, 1.5f);
      f[at] = std::numeric_limits<float>::quiet_NaN();
      auto r = find_non_finite(DType::kF32, std::as_bytes(std::span<const float>(f)));
      ASSERT_TRUE(r.has_value());
      EXPECT_EQ(r->element, at);
      EXPECT_TRUE(r->nan);
      f[at] = -std::numeric_limits<float>::infinity();
      r = find_non_finite(DType::kF32, std::as_bytes(std::span<const float>(f)));
      ASSERT_TRUE(r.has_value());
      EXPECT_FALSE(r->nan);
      f[at] = std::numeric_limits<float>::max();  // finite extremes pass
      EXPECT_FALSE(find_non_finite(DType::kF32, std::as_bytes(std::span<const float>(f))).has_value());
      std::vector<std::uint16_t> h(n, 0x3C00);  // fp16 1.0
      h[at] = 0x7BFF;                           // largest finite fp16
      EXPECT_FALSE(find_non_finite(DType::kF16, std::as_bytes(std::span<const std::uint16_t>(h))).has_value());
      h[at] = 0xFC00;  // -inf
      r = find_non_finite(DType::kF16, std::as_bytes(std::span<const std::uint16_t>(h)));
      ASSERT_TRUE(r.has_value());
      EXPECT_EQ(r->element, at);
      EXPECT_FALSE(r->nan);
      std::vector<std::uint16_t> b(n, 0x3F80);  // bf16 1.0
      b[at] = 0x7F7F;                           // largest finite bf16
      EXPECT_FALSE(find_non_finite(DType::kBF16, std::as_bytes(std::span<const std::uint16_t>(b))).has_value());
      b[at] = 0x7FC1;  // NaN
      r = find_non_finite(DType::kBF16, std::as_bytes(std::span<const std::uint16_t>(b)));
      ASSERT_TRUE(r.has_value());
      EXPECT_EQ(r->element, at);
      EXPECT_TRUE(r->nan);
    }
  }
}

TEST(DType, FindNonFiniteBlockScales) {
  // Block types: only the fp16 scale fields decide; a non-finite one is found and named, and the
  // same blocks dequantize to a non-finite value (so the check is exact, not a heuristic). Quant
  // bytes that happen to look like 0x7C00 are not scales and pass.
  struct Case {
    DType t;
    int offset;
    const char* field;
  };
  const Case cases[] = {{DType::kQ8_0, 0, "d"},   {DType::kQ4_0, 0, "d"},    {DType::kQ4_1, 2, "m"},
                        {DType::kQ5_0, 0, "d"},   {DType::kQ5_1, 0, "d"},    {DType::kQ2_K, 82, "dmin"},
                        {DType::kQ3_K, 108, "d"}, {DType::kQ4_K, 2, "dmin"}, {DType::kQ5_K, 0, "d"},
                        {DType::kQ6_K, 208, "d"}};
  for (const Case& c : cases) {
    std::uint64_t be = 0, bb = 0;
    ASSERT_TRUE(dtype_block(c.t, be, bb));
    std::vector<std::byte> blocks(static_cast<std::size_t>(bb) * 3, std::byte{0x7C});  // every byte 0x7C
    // finite scales: every fp16 field of every block is 0x3C00 (1.0) — set all plausible fields
    for (std::size_t k = 0; k < 3; ++k) {
      for (const int off : {0, 2, 80, 82, 108, 208}) {
        if (static_cast<std::uint64_t>(off) + 2 <= bb) {
          blocks[k * static_cast<std::size_t>(bb) + static_cast<std::size_t>(off)] = std::byte{0x00};
          blocks[k * static_cast<std::size_t>(bb) + static_cast<std::size_t>(off) + 1] = std::byte{0x3C};
        }
      }
    }
    std::vector<float> y(static_cast<std::size_t>(be) * 3);
    EXPECT_FALSE(find_non_finite(c.t, blocks).has_value()) << dtype_name(c.t);
    dequantize_blocks(c.t, blocks.data(), y.size(), y.data());
    for (const float v : y) ASSERT_TRUE(std::isfinite(v)) << dtype_name(c.t);
    // block 2's field becomes +inf
    const std::size_t at = 2 * static_cast<std::size_t>(bb) + static_cast<std::size_t>(c.offset);
    blocks[at] = std::byte{0x00};
    blocks[at + 1] = std::byte{0x7C};
    const auto r = find_non_finite(c.t, blocks);
    ASSERT_TRUE(r.has_value()) << dtype_name(c.t);
    EXPECT_EQ(r->element, static_cast<std::uint64_t>(2 * be));
    EXPECT_STREQ(r->field, c.field);
    EXPECT_FALSE(r->nan);
    dequantize_blocks(c.t, blocks.data(), y.size(), y.data());
    bool any = false;
    for (std::size_t i = static_cast<std::size_t>(2 * be); i < y.size(); ++i) any = any || !std::isfinite(y[i]);
    EXPECT_TRUE(any) << dtype_name(c.t);
  }
  EXPECT_FALSE(find_non_finite(DType::kI32, std::vector<std::byte>(64, std::byte{0xFF})).has_value());
}

}  // namespace
}  // namespace clef
