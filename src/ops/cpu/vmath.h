// Vectorized transcendental helpers for the CPU kernels (internal to src/ops/cpu).
//
// exp: Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2, degree-6 Taylor polynomial
// (truncation error < 1.3e-7 relative, i.e. ~1-2 ulp), scaled by 2^n with vscalefps. Built with
// AVX-512F intrinsics when the compiler targets it, else scalar std::exp. The ops tests compare
// every kernel that uses these against the std::exp references.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace clef::ops::cpu {

#if defined(__AVX512F__)
// GCC 12 reports a false -Wmaybe-uninitialized inside the unmasked forms of max/min/
// roundscale/scalef (they start from _mm512_undefined_ps); the full-mask forms below are the
// same instructions without that noise.
constexpr __mmask16 kAll16 = 0xFFFF;

/// e^x for 16 lanes (inputs clamped to [-104, 88.7]: below underflows to 0, above is inf-free).
inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-104.0f), hi = _mm512_set1_ps(88.7f);
  x = _mm512_mask_max_ps(lo, kAll16, x, lo);
  x = _mm512_mask_min_ps(hi, kAll16, x, hi);
  const __m512 xl = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
  const __m512 n = _mm512_mask_roundscale_ps(xl, kAll16, xl, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_mask_scalef_ps(p, kAll16, p, n);
}

/// 1 / (1 + e^-x) for 16 lanes.
inline __m512 sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

/// Mask of the first n (< 16) lanes.
inline __mmask16 tail_mask(std::int64_t n) {
  return static_cast<__mmask16>((1u << static_cast<unsigned>(n)) - 1u);
}
#endif

/// Scalar sigmoid, as PyTorch computes it: 1 / (1 + exp(-x)).
inline float sigmoid1(float x) { return 1.0f / (1.0f + std::exp(-x)); }

/// y[i] = sigmoid(x[i]) * m[i] (m == nullptr: y = sigmoid(x)); y may alias x or m.
inline void sigmoid_times(const float* x, const float* m, float* y, std::int64_t n) {
  std::int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    __m512 s = sigmoid16(_mm512_loadu_ps(x + i));
    if (m != nullptr) s = _mm512_mul_ps(s, _mm512_loadu_ps(m + i));
    _mm512_storeu_ps(y + i, s);
  }
  if (i < n) {
    const __mmask16 k = tail_mask(n - i);
    __m512 s = sigmoid16(_mm512_maskz_loadu_ps(k, x + i));
    if (m != nullptr) s = _mm512_mul_ps(s, _mm512_maskz_loadu_ps(k, m + i));
    _mm512_mask_storeu_ps(y + i, k, s);
  }
#else
  for (; i < n; ++i) y[i] = sigmoid1(x[i]) * (m != nullptr ? m[i] : 1.0f);
#endif
}

/// y[i] = silu(x[i]) * m[i] (m == nullptr: y = silu(x)); silu(x) = x * sigmoid(x). y may alias.
inline void silu_times(const float* x, const float* m, float* y, std::int64_t n) {
  std::int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    __m512 s = _mm512_mul_ps(v, sigmoid16(v));
    if (m != nullptr) s = _mm512_mul_ps(s, _mm512_loadu_ps(m + i));
    _mm512_storeu_ps(y + i, s);
  }
  if (i < n) {
    const __mmask16 k = tail_mask(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
    __m512 s = _mm512_mul_ps(v, sigmoid16(v));
    if (m != nullptr) s = _mm512_mul_ps(s, _mm512_maskz_loadu_ps(k, m + i));
    _mm512_mask_storeu_ps(y + i, k, s);
  }
#else
  for (; i < n; ++i) y[i] = x[i] * sigmoid1(x[i]) * (m != nullptr ? m[i] : 1.0f);
#endif
}

/// y[i] = exp(x[i]) (y may alias x).
inline void exp_n(const float* x, float* y, std::int64_t n) {
  std::int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 k = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, k, exp16(_mm512_maskz_loadu_ps(k, x + i)));
  }
#else
  for (; i < n; ++i) y[i] = std::exp(x[i]);
#endif
}

/// Sum of squares of n floats, 16 independent partial sums (vectorizable without fast-math).
inline float sum_squares(const float* x, std::int64_t n) {
  float acc[16] = {};
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) acc[j] += x[i + j] * x[i + j];
  }
  for (; i < n; ++i) acc[0] += x[i] * x[i];
  float s = 0.0f;
  for (int j = 0; j < 16; ++j) s += acc[j];
  return s;
}

}  // namespace clef::ops::cpu
