// Optimized CPU kernels of the vision tower's LayerNorm, bias add and GELUs (contracts in
// ops/vision_ops.h). attention_full lives with the causal kernel in cpu/attention.cc.
#include <algorithm>
#include <cmath>

#include "ops/cpu/vmath.h"
#include "ops/vision_ops.h"

namespace clef::ops {
namespace {

constexpr std::int64_t kParallelMin = 1 << 15;

/// tanh-GELU of one value, the formula PyTorch's scalar path evaluates.
inline float gelu_tanh1(float x) {
  constexpr float kBeta = 0.7978845608028654f;  // sqrt(2/pi)
  constexpr float kKappa = 0.044715f;
  const float inner = kBeta * (x + kKappa * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(inner));
}

#if defined(__AVX512F__)
/// tanh-GELU for 16 lanes: 0.5 x (1 + tanh(u)) = x * sigmoid(2u), with the ~1-2 ulp exp16 of
/// vmath.h (so the result is within a few ulp of the scalar formula).
inline __m512 gelu_tanh16(__m512 x) {
  const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
  const __m512 inner = _mm512_mul_ps(_mm512_set1_ps(0.7978845608028654f),
                                     _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), x3, x));
  return _mm512_mul_ps(x, cpu::sigmoid16(_mm512_add_ps(inner, inner)));
}
#endif

}  // namespace

void layer_norm(const float* x, std::int64_t rows, std::int64_t n, const float* w, const float* b,
                float eps, float* y) {
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

void add_bias(float* y, std::int64_t rows, std::int64_t n, const float* b) {
#pragma omp parallel for schedule(static) if (rows * n >= kParallelMin)
  for (std::int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * n;
    for (std::int64_t j = 0; j < n; ++j) yr[j] += b[j];
  }
}

void gelu_tanh(const float* x, std::int64_t n, float* y) {
  constexpr std::int64_t kBlock = 4096;
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    std::int64_t i = blk * kBlock;
    const std::int64_t end = std::min(n, i + kBlock);
#if defined(__AVX512F__)
    for (; i + 16 <= end; i += 16) _mm512_storeu_ps(y + i, gelu_tanh16(_mm512_loadu_ps(x + i)));
    if (i < end) {
      const __mmask16 k = cpu::tail_mask(end - i);
      _mm512_mask_storeu_ps(y + i, k, gelu_tanh16(_mm512_maskz_loadu_ps(k, x + i)));
    }
#else
    for (; i < end; ++i) y[i] = gelu_tanh1(x[i]);
#endif
  }
}

void gelu_erf(const float* x, std::int64_t n, float* y) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (std::int64_t i = 0; i < n; ++i) {
    y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
  }
}

}  // namespace clef::ops
