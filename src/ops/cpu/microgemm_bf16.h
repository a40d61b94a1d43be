// bf16 small GEMM with fp32 accumulation (AVX512-BF16 vdpbf16ps), internal to src/ops/cpu; used
// by the bf16 attention path. Operands are 32-bit words each holding a bf16 pair along the
// reduction dimension k (low half = even k, high half = odd k); kp = number of pairs:
//   C[m, n] = (accumulate ? C : 0) + Σ_pp A2[r, pp] · B2[pp, c]   (pair dot products, fp32)
//   A2 word (r, pp) at a[r * lda + pp] (bf16_gemm) or a[pp * lda + r] (bf16_gemm_at)
//   B2 word (pp, c) at b[pp * ldb + c]
// Register tiles of 6 rows x 32 columns, masked column tails. Only built when the compiler
// targets AVX512-BF16 (CLEF_HAVE_BF16_GEMM); callers fall back to the fp32 kernels otherwise.
#pragma once

#include <bit>
#include <cstdint>

#include "ops/cpu/vmath.h"

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#define CLEF_HAVE_BF16_GEMM 1

namespace clef::ops::cpu {

template <int MR, bool TA>
inline void bf16_tile(std::int64_t kp, const std::uint32_t* a, std::int64_t lda, const std::uint32_t* b,
                      std::int64_t ldb, float* c, std::int64_t ldc, std::int64_t ncols, bool accumulate) {
  const __mmask16 m0 = ncols >= 16 ? static_cast<__mmask16>(0xFFFF) : tail_mask(ncols);
  const __mmask16 m1 = ncols >= 32 ? static_cast<__mmask16>(0xFFFF)
                                   : (ncols > 16 ? tail_mask(ncols - 16) : static_cast<__mmask16>(0));
  __m512 c0[static_cast<std::size_t>(MR)], c1[static_cast<std::size_t>(MR)];
  for (int r = 0; r < MR; ++r) {
    c0[r] = _mm512_setzero_ps();
    c1[r] = _mm512_setzero_ps();
  }
  for (std::int64_t p = 0; p < kp; ++p) {
    const __m512bh b0 = std::bit_cast<__m512bh>(_mm512_maskz_loadu_epi32(m0, b + p * ldb));
    const __m512bh b1 = std::bit_cast<__m512bh>(_mm512_maskz_loadu_epi32(m1, b + p * ldb + 16));
    for (int r = 0; r < MR; ++r) {
      const std::uint32_t w = TA ? a[p * lda + r] : a[r * lda + p];
      const __m512bh av = std::bit_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(w)));
      c0[r] = _mm512_dpbf16_ps(c0[r], av, b0);
      if (m1 != 0) c1[r] = _mm512_dpbf16_ps(c1[r], av, b1);
    }
  }
  for (int r = 0; r < MR; ++r) {
    float* cr = c + r * ldc;
    __m512 v0 = c0[r];
    if (accumulate) v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, cr));
    _mm512_mask_storeu_ps(cr, m0, v0);
    if (m1 != 0) {
      __m512 v1 = c1[r];
      if (accumulate) v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, cr + 16));
      _mm512_mask_storeu_ps(cr + 16, m1, v1);
    }
  }
}

template <bool TA>
inline void bf16_gemm_impl(std::int64_t m, std::int64_t n, std::int64_t kp, const std::uint32_t* a,
                           std::int64_t lda, const std::uint32_t* b, std::int64_t ldb, float* c,
                           std::int64_t ldc, bool accumulate) {
  const std::int64_t rstep = TA ? 1 : lda;
  for (std::int64_t j = 0; j < n; j += 32) {
    const std::int64_t nc = n - j < 32 ? n - j : 32;
    std::int64_t i = 0;
    for (; i + 6 <= m; i += 6) bf16_tile<6, TA>(kp, a + i * rstep, lda, b + j, ldb, c + i * ldc + j, ldc, nc, accumulate);
    const std::uint32_t* ai = a + i * rstep;
    float* ci = c + i * ldc + j;
    switch (m - i) {
      case 5: bf16_tile<5, TA>(kp, ai, lda, b + j, ldb, ci, ldc, nc, accumulate); break;
      case 4: bf16_tile<4, TA>(kp, ai, lda, b + j, ldb, ci, ldc, nc, accumulate); break;
      case 3: bf16_tile<3, TA>(kp, ai, lda, b + j, ldb, ci, ldc, nc, accumulate); break;
      case 2: bf16_tile<2, TA>(kp, ai, lda, b + j, ldb, ci, ldc, nc, accumulate); break;
      case 1: bf16_tile<1, TA>(kp, ai, lda, b + j, ldb, ci, ldc, nc, accumulate); break;
      default: break;
    }
  }
}

inline void bf16_gemm(std::int64_t m, std::int64_t n, std::int64_t kp, const std::uint32_t* a, std::int64_t lda,
                      const std::uint32_t* b, std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate) {
  bf16_gemm_impl<false>(m, n, kp, a, lda, b, ldb, c, ldc, accumulate);
}

inline void bf16_gemm_at(std::int64_t m, std::int64_t n, std::int64_t kp, const std::uint32_t* a,
                         std::int64_t lda, const std::uint32_t* b, std::int64_t ldb, float* c,
                         std::int64_t ldc, bool accumulate) {
  bf16_gemm_impl<true>(m, n, kp, a, lda, b, ldb, c, ldc, accumulate);
}

/// bf16 bits (round to nearest even, like core/dtype.h f32_to_bf16 for finite values) of 16 floats.
inline __m256i to_bf16_16(__m512 x) { return std::bit_cast<__m256i>(_mm512_cvtneps_pbh(x)); }

/// Packs two rows into bf16 pair words: out[i] = bf16(lo[i]) | bf16(hi[i]) << 16, n elements.
inline void pack_pairs(const float* lo, const float* hi, std::int64_t n, std::uint32_t* out) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i l = _mm512_maskz_cvtepu16_epi32(kAll16, to_bf16_16(_mm512_loadu_ps(lo + i)));
    const __m512i h = _mm512_maskz_cvtepu16_epi32(kAll16, to_bf16_16(_mm512_loadu_ps(hi + i)));
    _mm512_storeu_si512(out + i, _mm512_or_si512(l, _mm512_maskz_slli_epi32(kAll16, h, 16)));
  }
  if (i < n) {
    const __mmask16 k = tail_mask(n - i);
    const __m512i l = _mm512_maskz_cvtepu16_epi32(kAll16, to_bf16_16(_mm512_maskz_loadu_ps(k, lo + i)));
    const __m512i h = _mm512_maskz_cvtepu16_epi32(kAll16, to_bf16_16(_mm512_maskz_loadu_ps(k, hi + i)));
    _mm512_mask_storeu_epi32(out + i, k, _mm512_or_si512(l, _mm512_maskz_slli_epi32(kAll16, h, 16)));
  }
}

/// bf16 bits of n floats (row-major copy) written to `out` (2-byte units, any alignment).
inline void to_bf16_n(const float* x, std::int64_t n, void* out) {
  auto* o = static_cast<char*>(out);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 2 * i), to_bf16_16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 k = tail_mask(n - i);
    _mm256_mask_storeu_epi16(o + 2 * i, k, to_bf16_16(_mm512_maskz_loadu_ps(k, x + i)));
  }
}

}  // namespace clef::ops::cpu
#endif
