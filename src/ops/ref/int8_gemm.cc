// SPDX-License-Identifier: MIT
// Scalar oracle of the int8 (Q8_0) linear layer: ops/int8_gemm.h gives the expression.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "ops/int8_gemm.h"

namespace clef::ops::ref {

std::uint16_t quantize_q8_0_block(const float* x, std::int64_t count, std::int8_t* q32) {
  // gguf-py quants.py Q8_0.quantize_blocks, in fp32 like numpy on a float32 array:
  //   d = max|x| / 127; id = 0 if d == 0 else 1 / d; q = np_roundf(x * id); scale = float16(d)
  // np_roundf(v) = sign(v) * (floor|v| + floor(2 (|v| - floor|v|))): round half away from zero.
  float amax = 0.0f;
  for (std::int64_t i = 0; i < count; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d == 0.0f ? 0.0f : 1.0f / d;
  for (std::int64_t i = 0; i < kInt8Block; ++i) {
    if (i >= count) {
      q32[i] = 0;
      continue;
    }
    const float v = x[i] * id;
    const float a = std::fabs(v);
    const float fl = std::floor(a);
    const float b = fl + std::floor(2.0f * (a - fl));
    q32[i] = static_cast<std::int8_t>(v < 0.0f ? -b : b);
  }
  return f32_to_f16(d);
}

float quantize_activation_block(const float* x, std::int64_t count, std::int8_t* q32) {
  float amax = 0.0f;
  bool finite = true;
  for (std::int64_t i = 0; i < count; ++i) {
    finite = finite && std::isfinite(x[i]);
    amax = std::max(amax, std::fabs(x[i]));
  }
  if (!finite) {  // no number to quantize: the block's products become NaN, never silently 0
    std::memset(q32, 0, kInt8Block);
    return std::numeric_limits<float>::quiet_NaN();
  }
  const float d = amax / 127.0f;
  const float id = d == 0.0f ? 0.0f : 1.0f / d;
  for (std::int64_t i = 0; i < kInt8Block; ++i) {
    float v = i < count ? std::nearbyint(x[i] * id) : 0.0f;
    v = std::min(127.0f, std::max(-127.0f, v));
    q32[i] = static_cast<std::int8_t>(v);
  }
  return d;
}

void int8_linear(const float* x, std::int64_t m, const Int8Weight& w, float* y, bool accumulate) {
  if (!w.valid() || m <= 0) throw InvalidArgument("int8_linear: empty weight or m <= 0");
  const std::int64_t n = w.n(), k = w.k(), nb = w.blocks();
  std::vector<std::int8_t> qa(static_cast<std::size_t>(nb * kInt8Block));
  std::vector<float> da(static_cast<std::size_t>(nb));
  for (std::int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * k;
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::int64_t c0 = b * kInt8Block;
      da[static_cast<std::size_t>(b)] =
          quantize_activation_block(xr + c0, std::min(kInt8Block, k - c0), qa.data() + c0);
    }
    for (std::int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (std::int64_t b = 0; b < nb; ++b) {
        std::int32_t dot = 0;
        for (std::int64_t i = 0; i < kInt8Block; ++i) {
          const std::int64_t kk = b * kInt8Block + i;
          dot += static_cast<std::int32_t>(qa[static_cast<std::size_t>(kk)]) * w.q_at(j, kk);
        }
        const float scale = f16_to_f32(w.d_at(j, b)) * da[static_cast<std::size_t>(b)];
        acc = std::fma(static_cast<float>(dot), scale, acc);
      }
      float& out = y[r * n + j];
      out = accumulate ? out + acc : acc;
    }
  }
}

}  // namespace clef::ops::ref
