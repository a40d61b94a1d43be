// Small row-major GEMMs for the in-cache products of the GDN chunk and the attention blocks
// (shapes like 64 x 128 x 128), one copy per SIMD target (Highway multi-target "-inl" header).
// Internal to src/ops/cpu; large GEMMs go to ops/gemm.h.
//
// fp32: C[m, n] = (accumulate ? C : 0) + alpha * A[m, k] · B[k, n], all row-major with leading
// dimensions lda, ldb, ldc. small_gemm_at takes A transposed in memory (stored [k, m], element
// (r, p) at a[p * lda + r]), for products like Kᵀ V or Vᵀ P without an explicit transpose.
// Register tiles of up to 6 rows x 2 vectors (6 x 32 on AVX-512, 6 x 16 on AVX2: 12 accumulators,
// 2 B vectors and one broadcast fit either register file), masked column tails.
//
// bf16 (AVX3_DL target only, CLEF_HAVE_BF16_DOT): operands are 32-bit words each holding a bf16
// pair along the reduction dimension (low half = even k, high half = odd k); kp = pairs:
//   C[m, n] = (accumulate ? C : 0) + Σ_pp A2[r, pp] · B2[pp, c]   (vdpbf16ps, fp32 sums)
//   A2 word (r, pp) at a[r * lda + pp] (bf16_gemm) or a[pp * lda + r] (bf16_gemm_at)
//   B2 word (pp, c) at b[pp * ldb + c]
// These functions carry the avx512bf16 target attribute on top of the AVX3_DL target; the
// dispatcher (ops/isa.h, cpu/isa.cc) only selects AVX3_DL on CPUs that also report AVX512-BF16.

#if defined(CLEF_OPS_CPU_MICROGEMM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CLEF_OPS_CPU_MICROGEMM_INL_H_
#undef CLEF_OPS_CPU_MICROGEMM_INL_H_
#else
#define CLEF_OPS_CPU_MICROGEMM_INL_H_
#endif

#include <bit>
#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"
#include "ops/cpu/vmath-inl.h"

HWY_BEFORE_NAMESPACE();
namespace clef::ops::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <int MR, bool TA>
HWY_INLINE void micro_tile(std::int64_t k, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                           std::int64_t ldc, std::int64_t ncols, float alpha, bool accumulate) {
  const DF d;
  const std::int64_t N = lanes();
  const bool two = ncols > N;
  const auto m0 = hn::FirstN(d, static_cast<std::size_t>(ncols >= N ? N : ncols));
  const auto m1 = hn::FirstN(d, static_cast<std::size_t>(two ? (ncols >= 2 * N ? N : ncols - N) : 0));
  VF c0[static_cast<std::size_t>(MR)], c1[static_cast<std::size_t>(MR)];
  for (int r = 0; r < MR; ++r) {
    c0[r] = hn::Zero(d);
    c1[r] = hn::Zero(d);
  }
  const bool full = ncols >= 2 * N;
  if (two) {
    for (std::int64_t p = 0; p < k; ++p) {
      const float* bp = b + p * ldb;
      const VF b0 = hn::LoadU(d, bp);
      const VF b1 = full ? hn::LoadU(d, bp + N) : hn::MaskedLoad(m1, d, bp + N);
      for (int r = 0; r < MR; ++r) {
        const VF av = hn::Set(d, TA ? a[p * lda + r] : a[r * lda + p]);
        c0[r] = hn::MulAdd(av, b0, c0[r]);
        c1[r] = hn::MulAdd(av, b1, c1[r]);
      }
    }
  } else {
    for (std::int64_t p = 0; p < k; ++p) {
      const VF b0 = hn::MaskedLoad(m0, d, b + p * ldb);
      for (int r = 0; r < MR; ++r) {
        c0[r] = hn::MulAdd(hn::Set(d, TA ? a[p * lda + r] : a[r * lda + p]), b0, c0[r]);
      }
    }
  }
  const VF al = hn::Set(d, alpha);
  for (int r = 0; r < MR; ++r) {
    float* cr = c + r * ldc;
    VF v0 = hn::Mul(c0[r], al);
    if (accumulate) v0 = hn::Add(v0, hn::MaskedLoad(m0, d, cr));
    hn::BlendedStore(v0, m0, d, cr);
    if (two) {
      VF v1 = hn::Mul(c1[r], al);
      if (accumulate) v1 = hn::Add(v1, hn::MaskedLoad(m1, d, cr + N));
      hn::BlendedStore(v1, m1, d, cr + N);
    }
  }
}

/// Shared driver of small_gemm / small_gemm_at: 6-row register tiles, 2-vector column panels.
template <bool TA>
HWY_INLINE void small_gemm_impl(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
                                const float* b, std::int64_t ldb, float* c, std::int64_t ldc, float alpha,
                                bool accumulate) {
#if HWY_TARGET == HWY_SCALAR
  // The baseline level: plain loops. (GCC 12 unrolls the 1-lane register tile below for this
  // target with a load of the next k row ahead of the loop test, reading 8 bytes past A when k is
  // odd; valgrind found it. The vector targets are clean under valgrind and ASan.)
  for (std::int64_t i = 0; i < m; ++i) {
    float* cr = c + i * ldc;
    for (std::int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (std::int64_t p = 0; p < k; ++p) acc += (TA ? a[p * lda + i] : a[i * lda + p]) * b[p * ldb + j];
      cr[j] = accumulate ? cr[j] + alpha * acc : alpha * acc;
    }
  }
  return;
#endif
  const std::int64_t panel = 2 * lanes();
  const std::int64_t rstep = TA ? 1 : lda;  // row offset r of A: TA ? a + r : a + r * lda
  for (std::int64_t j = 0; j < n; j += panel) {
    const std::int64_t nc = n - j < panel ? n - j : panel;
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
}

/// C = (accumulate ? C : 0) + alpha * A · B (see the file comment). m, n, k >= 0.
HWY_INLINE void small_gemm(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
                           const float* b, std::int64_t ldb, float* c, std::int64_t ldc, float alpha = 1.0f,
                           bool accumulate = false) {
  small_gemm_impl<false>(m, n, k, a, lda, b, ldb, c, ldc, alpha, accumulate);
}

/// C = (accumulate ? C : 0) + alpha * Aᵀ · B with A stored [k, m] (leading dim lda >= m).
HWY_INLINE void small_gemm_at(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
                              const float* b, std::int64_t ldb, float* c, std::int64_t ldc, float alpha = 1.0f,
                              bool accumulate = false) {
  small_gemm_impl<true>(m, n, k, a, lda, b, ldb, c, ldc, alpha, accumulate);
}

/// y[0..n) += s * x[0..n) (vectorizable axpy).
HWY_INLINE void axpy(std::int64_t n, float s, const float* __restrict x, float* __restrict y) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += s * x[i];
}

/// Transposes src [rows, cols] (leading dim lds) into dst [cols, rows] (leading dim ldd).
HWY_INLINE void transpose(std::int64_t rows, std::int64_t cols, const float* src, std::int64_t lds, float* dst,
                          std::int64_t ldd) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
  }
}

#if HWY_TARGET == HWY_AVX3_DL
#define CLEF_HAVE_BF16_DOT 1
#define CLEF_BF16_ATTR __attribute__((target("avx512bf16")))

constexpr __mmask16 kAll16 = 0xFFFF;

/// Mask of the first n (< 16) lanes.
inline __mmask16 tail_mask16(std::int64_t n) { return static_cast<__mmask16>((1u << static_cast<unsigned>(n)) - 1u); }

template <int MR, bool TA>
CLEF_BF16_ATTR inline void bf16_tile(std::int64_t kp, const std::uint32_t* a, std::int64_t lda, const std::uint32_t* b,
                                     std::int64_t ldb, float* c, std::int64_t ldc, std::int64_t ncols,
                                     bool accumulate) {
  const __mmask16 m0 = ncols >= 16 ? kAll16 : tail_mask16(ncols);
  const __mmask16 m1 = ncols >= 32 ? kAll16 : (ncols > 16 ? tail_mask16(ncols - 16) : static_cast<__mmask16>(0));
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
CLEF_BF16_ATTR inline void bf16_gemm_impl(std::int64_t m, std::int64_t n, std::int64_t kp, const std::uint32_t* a,
                                          std::int64_t lda, const std::uint32_t* b, std::int64_t ldb, float* c,
                                          std::int64_t ldc, bool accumulate) {
  const std::int64_t rstep = TA ? 1 : lda;
  for (std::int64_t j = 0; j < n; j += 32) {
    const std::int64_t nc = n - j < 32 ? n - j : 32;
    std::int64_t i = 0;
    for (; i + 6 <= m; i += 6)
      bf16_tile<6, TA>(kp, a + i * rstep, lda, b + j, ldb, c + i * ldc + j, ldc, nc, accumulate);
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

CLEF_BF16_ATTR inline void bf16_gemm(std::int64_t m, std::int64_t n, std::int64_t kp, const std::uint32_t* a,
                                     std::int64_t lda, const std::uint32_t* b, std::int64_t ldb, float* c,
                                     std::int64_t ldc, bool accumulate) {
  bf16_gemm_impl<false>(m, n, kp, a, lda, b, ldb, c, ldc, accumulate);
}

CLEF_BF16_ATTR inline void bf16_gemm_at(std::int64_t m, std::int64_t n, std::int64_t kp, const std::uint32_t* a,
                                        std::int64_t lda, const std::uint32_t* b, std::int64_t ldb, float* c,
                                        std::int64_t ldc, bool accumulate) {
  bf16_gemm_impl<true>(m, n, kp, a, lda, b, ldb, c, ldc, accumulate);
}

/// bf16 bits (round to nearest even, like core/dtype.h f32_to_bf16 for finite values) of 16 floats.
CLEF_BF16_ATTR inline __m256i to_bf16_16(__m512 x) { return std::bit_cast<__m256i>(_mm512_cvtneps_pbh(x)); }

/// Packs two rows into bf16 pair words: out[i] = bf16(lo[i]) | bf16(hi[i]) << 16, n elements.
CLEF_BF16_ATTR inline void pack_pairs(const float* lo, const float* hi, std::int64_t n, std::uint32_t* out) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i l = _mm512_maskz_cvtepu16_epi32(kAll16, to_bf16_16(_mm512_loadu_ps(lo + i)));
    const __m512i h = _mm512_maskz_cvtepu16_epi32(kAll16, to_bf16_16(_mm512_loadu_ps(hi + i)));
    _mm512_storeu_si512(out + i, _mm512_or_si512(l, _mm512_maskz_slli_epi32(kAll16, h, 16)));
  }
  if (i < n) {
    const __mmask16 k = tail_mask16(n - i);
    const __m512i l = _mm512_maskz_cvtepu16_epi32(kAll16, to_bf16_16(_mm512_maskz_loadu_ps(k, lo + i)));
    const __m512i h = _mm512_maskz_cvtepu16_epi32(kAll16, to_bf16_16(_mm512_maskz_loadu_ps(k, hi + i)));
    _mm512_mask_storeu_epi32(out + i, k, _mm512_or_si512(l, _mm512_maskz_slli_epi32(kAll16, h, 16)));
  }
}

/// bf16 bits of n floats (row-major copy) written to `out` (2-byte units, any alignment).
CLEF_BF16_ATTR inline void to_bf16_n(const float* x, std::int64_t n, void* out) {
  auto* o = static_cast<char*>(out);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 2 * i), to_bf16_16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 k = tail_mask16(n - i);
    _mm256_mask_storeu_epi16(o + 2 * i, k, to_bf16_16(_mm512_maskz_loadu_ps(k, x + i)));
  }
}
#else
#undef CLEF_HAVE_BF16_DOT
#endif  // HWY_TARGET == HWY_AVX3_DL

}  // namespace HWY_NAMESPACE
}  // namespace clef::ops::cpu
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
