// dtype conversions against the compiler's own IEEE conversions (_Float16) and exact identities.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/dtype.h"
#include "core/error.h"

namespace clef {
namespace {

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
    _Float16 ref;
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
    const _Float16 ref = static_cast<_Float16>(f);
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

}  // namespace
}  // namespace clef
