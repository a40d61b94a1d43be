// SPDX-License-Identifier: MIT
// Optimized CPU kernels of the vision tower's LayerNorm, bias add and GELUs (contracts in
// ops/vision_ops.h). attention_full lives with the causal kernel in cpu/attention.cc. Compiled
// once per SIMD target (Highway foreach_target, ops/isa.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cpu/vision_ops.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>

#include "ops/cpu/vmath-inl.h"
#include "ops/isa.h"
#include "ops/parallel.h"
#include "ops/vision_ops.h"

HWY_BEFORE_NAMESPACE();
namespace clef::ops {
namespace HWY_NAMESPACE {
namespace cpu = ::clef::ops::cpu::HWY_NAMESPACE;
namespace hn = hwy::HWY_NAMESPACE;

/// tanh-GELU of one value, the formula PyTorch's scalar path evaluates.
inline float gelu_tanh1(float x) {
  constexpr float kBeta = 0.7978845608028654f;  // sqrt(2/pi)
  constexpr float kKappa = 0.044715f;
  const float inner = kBeta * (x + kKappa * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(inner));
}

/// tanh-GELU per lane: 0.5 x (1 + tanh(u)) = x * sigmoid(2u), with the ~1-2 ulp Exp of
/// vmath-inl.h (so the result is within a few ulp of the scalar formula).
HWY_INLINE cpu::VF gelu_tanh_v(cpu::DF d, cpu::VF x) {
  const cpu::VF x3 = hn::Mul(hn::Mul(x, x), x);
  const cpu::VF inner = hn::Mul(hn::Set(d, 0.7978845608028654f), hn::MulAdd(hn::Set(d, 0.044715f), x3, x));
  return hn::Mul(x, cpu::Sigmoid(d, hn::Add(inner, inner)));
}

void LayerNormImpl(const float* x, std::int64_t rows, std::int64_t n, const float* w, const float* b, float eps,
                   float* y) {
#pragma omp parallel for schedule(static) if (rows * n >= kParallelMin)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    float s = 0.0f;
    for (std::int64_t j = 0; j < n; ++j) s += xr[j];
    const float mean = s / static_cast<float>(n);
    float ss = 0.0f;
    for (std::int64_t j = 0; j < n; ++j) {
      const float c = xr[j] - mean;
      ss += c * c;
    }
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
    for (std::int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - mean) * inv * w[j] + b[j];
  }
}

void AddBiasImpl(float* y, std::int64_t rows, std::int64_t n, const float* b) {
#pragma omp parallel for schedule(static) if (rows * n >= kParallelMin)
  for (std::int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * n;
    for (std::int64_t j = 0; j < n; ++j) yr[j] += b[j];
  }
}

void GeluTanhImpl(const float* x, std::int64_t n, float* y) {
  constexpr std::int64_t kBlock = 4096;
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    std::int64_t i = blk * kBlock;
    const std::int64_t end = std::min(n, i + kBlock);
    const cpu::DF d;
    const std::int64_t N = cpu::lanes();
    if (N == 1) {  // scalar target: the formula itself
      for (; i < end; ++i) y[i] = gelu_tanh1(x[i]);
    }
    for (; i + N <= end; i += N) hn::StoreU(gelu_tanh_v(d, hn::LoadU(d, x + i)), d, y + i);
    if (i < end) {
      const auto t = static_cast<std::size_t>(end - i);
      const auto k = hn::FirstN(d, t);
      cpu::StoreTail(gelu_tanh_v(d, cpu::LoadTail(k, d, x + i, t)), k, d, y + i, t);
    }
  }
}

void GeluErfImpl(const float* x, std::int64_t n, float* y) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (std::int64_t i = 0; i < n; ++i) {
    y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace clef::ops
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace clef::ops {
HWY_EXPORT(LayerNormImpl);
HWY_EXPORT(AddBiasImpl);
HWY_EXPORT(GeluTanhImpl);
HWY_EXPORT(GeluErfImpl);

void layer_norm(const float* x, std::int64_t rows, std::int64_t n, const float* w, const float* b, float eps,
                float* y) {
  CLEF_DISPATCH(LayerNormImpl)(x, rows, n, w, b, eps, y);
}
void add_bias(float* y, std::int64_t rows, std::int64_t n, const float* b) {
  CLEF_DISPATCH(AddBiasImpl)(y, rows, n, b);
}
void gelu_tanh(const float* x, std::int64_t n, float* y) { CLEF_DISPATCH(GeluTanhImpl)(x, n, y); }
void gelu_erf(const float* x, std::int64_t n, float* y) { CLEF_DISPATCH(GeluErfImpl)(x, n, y); }
}  // namespace clef::ops
#endif  // HWY_ONCE
