// Small row-major GEMM for the in-cache products of the GDN chunk and the attention blocks
// (shapes like 64 x 128 x 128), internal to src/ops/cpu. Large GEMMs go to ops/gemm.h.
//
// C[m, n] = (accumulate ? C : 0) + alpha * A[m, k] · B[k, n], all row-major with leading
// dimensions lda, ldb, ldc. small_gemm_at takes A transposed in memory (stored [k, m], element
// (r, p) at a[p * lda + r]), for products like Kᵀ V or Vᵀ P without an explicit transpose. AVX-512: register tiles of up to 6 rows x 32 columns (12 zmm
// accumulators), masked column tails; scalar fallback otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/cpu/vmath.h"

namespace clef::ops::cpu {

#if defined(__AVX512F__)
template <int MR, bool TA = false>
inline void micro_tile(std::int64_t k, const float* a, std::int64_t lda, const float* b,
                       std::int64_t ldb, float* c, std::int64_t ldc, std::int64_t ncols,
                       float alpha, bool accumulate) {
  const __mmask16 m0 = ncols >= 16 ? static_cast<__mmask16>(0xFFFF) : tail_mask(ncols);
  const __mmask16 m1 = ncols >= 32 ? static_cast<__mmask16>(0xFFFF)
                                   : (ncols > 16 ? tail_mask(ncols - 16) : static_cast<__mmask16>(0));
  __m512 c0[static_cast<std::size_t>(MR)], c1[static_cast<std::size_t>(MR)];
  for (int r = 0; r < MR; ++r) {
    c0[r] = _mm512_setzero_ps();
    c1[r] = _mm512_setzero_ps();
  }
  if (m1 != 0) {
    for (std::int64_t p = 0; p < k; ++p) {
      const __m512 b0 = _mm512_maskz_loadu_ps(m0, b + p * ldb);
      const __m512 b1 = _mm512_maskz_loadu_ps(m1, b + p * ldb + 16);
      for (int r = 0; r < MR; ++r) {
        const __m512 av = _mm512_set1_ps(TA ? a[p * lda + r] : a[r * lda + p]);
        c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
        c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
      }
    }
  } else {
    for (std::int64_t p = 0; p < k; ++p) {
      const __m512 b0 = _mm512_maskz_loadu_ps(m0, b + p * ldb);
      for (int r = 0; r < MR; ++r) {
        c0[r] = _mm512_fmadd_ps(_mm512_set1_ps(TA ? a[p * lda + r] : a[r * lda + p]), b0, c0[r]);
      }
    }
  }
  const __m512 al = _mm512_set1_ps(alpha);
  for (int r = 0; r < MR; ++r) {
    float* cr = c + r * ldc;
    __m512 v0 = _mm512_mul_ps(c0[r], al);
    if (accumulate) v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, cr));
    _mm512_mask_storeu_ps(cr, m0, v0);
    if (m1 != 0) {
      __m512 v1 = _mm512_mul_ps(c1[r], al);
      if (accumulate) v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, cr + 16));
      _mm512_mask_storeu_ps(cr + 16, m1, v1);
    }
  }
}
#endif

/// Shared driver of small_gemm / small_gemm_at: 6-row register tiles, 32-column panels.
template <bool TA>
inline void small_gemm_impl(std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
                            std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                            std::int64_t ldc, float alpha, bool accumulate) {
#if defined(__AVX512F__)
  // Row offset r of A: TA ? a + r : a + r * lda.
  const std::int64_t rstep = TA ? 1 : lda;
  for (std::int64_t j = 0; j < n; j += 32) {
    const std::int64_t nc = n - j < 32 ? n - j : 32;
    std::int64_t i = 0;
    for (; i + 6 <= m; i += 6) {
      micro_tile<6, TA>(k, a + i * rstep, lda, b + j, ldb, c + i * ldc + j, ldc, nc, alpha, accumulate);
    }
    const float* ai = a + i * rstep;
    float* ci = c + i * ldc + j;
    switch (m - i) {
      case 5: micro_tile<5, TA>(k, ai, lda, b + j, ldb, ci, ldc, nc, alpha, accumulate); break;
      case 4: micro_tile<4, TA>(k, ai, lda, b + j, ldb, ci, ldc, nc, alpha, accumulate); break;
      case 3: micro_tile<3, TA>(k, ai, lda, b + j, ldb, ci, ldc, nc, alpha, accumulate); break;
      case 2: micro_tile<2, TA>(k, ai, lda, b + j, ldb, ci, ldc, nc, alpha, accumulate); break;
      case 1: micro_tile<1, TA>(k, ai, lda, b + j, ldb, ci, ldc, nc, alpha, accumulate); break;
      default: break;
    }
  }
#else
  for (std::int64_t i = 0; i < m; ++i) {
    float* cr = c + i * ldc;
    for (std::int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (std::int64_t p = 0; p < k; ++p) acc += (TA ? a[p * lda + i] : a[i * lda + p]) * b[p * ldb + j];
      cr[j] = accumulate ? cr[j] + alpha * acc : alpha * acc;
    }
  }
#endif
}

/// C = (accumulate ? C : 0) + alpha * A · B (see the file comment). m, n, k >= 0.
inline void small_gemm(std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
                       std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                       std::int64_t ldc, float alpha = 1.0f, bool accumulate = false) {
  small_gemm_impl<false>(m, n, k, a, lda, b, ldb, c, ldc, alpha, accumulate);
}

/// C = (accumulate ? C : 0) + alpha * Aᵀ · B with A stored [k, m] (leading dim lda >= m).
inline void small_gemm_at(std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
                          std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                          std::int64_t ldc, float alpha = 1.0f, bool accumulate = false) {
  small_gemm_impl<true>(m, n, k, a, lda, b, ldb, c, ldc, alpha, accumulate);
}

/// y[0..n) += s * x[0..n) (vectorizable axpy).
inline void axpy(std::int64_t n, float s, const float* __restrict x, float* __restrict y) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += s * x[i];
}

/// Transposes src [rows, cols] (leading dim lds) into dst [cols, rows] (leading dim ldd).
inline void transpose(std::int64_t rows, std::int64_t cols, const float* src, std::int64_t lds,
                      float* dst, std::int64_t ldd) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
  }
}

}  // namespace clef::ops::cpu
