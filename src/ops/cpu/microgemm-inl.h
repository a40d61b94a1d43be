// SPDX-License-Identifier: MIT
// Small row-major GEMMs for the in-cache products of the GDN chunk and the attention blocks
// (shapes like 64 x 128 x 128), one copy per SIMD target (Highway multi-target "-inl" header).
// Internal to src/ops/cpu; large GEMMs go to ops/gemm.h.
//
// fp32: C[m, n] = (accumulate ? C : 0) + alpha * A[m, k] · B[k, n], all row-major with leading
// dimensions lda, ldb, ldc. small_gemm_at takes A transposed in memory (stored [k, m], element
// (r, p) at a[p * lda + r]), for products like Kᵀ V or Vᵀ P without an explicit transpose.
// Register tiles of up to 6 rows x 4 vectors on AVX-512 (6 x 64: 24 accumulators, 4 B vectors and
// one broadcast in 32 registers) and 6 x 2 vectors on AVX2 (6 x 16: 12 + 2 + 1 in 16), masked
// column tails; bf16 tiles are 6 x 64 (6 x 4 vectors).
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

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "ops/cpu/vmath-inl.h"

HWY_BEFORE_NAMESPACE();
namespace clef::ops::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// Leading dimension (floats) for a scratch matrix of n columns that the small GEMMs read in column
/// panels down its rows (a B operand) or write in row tiles (C): whole 64-byte lines, an odd number of
/// them, so that consecutive rows fall on different L1 sets. At 128 columns (512-byte rows) an AVX2
/// panel's rows (16 columns, one line each) all fell on 8 of a 64-set L1 and evicted one another on
/// every pass (docs/PERFORMANCE.md, "Attention and the delta rule" under the Zen 3 tables: 2-11% on the
/// products that read such panels). Changes where values live, never what is computed.
HWY_INLINE std::int64_t odd_lines_ld(std::int64_t n) {
  const std::int64_t lines = (n + 15) / 16;
  return 16 * (lines % 2 == 0 ? lines + 1 : lines);
}

/// Vectors per column panel: 4 where the register file has 32 vectors (AVX-512: 6 x 4
/// accumulators + 4 B vectors + 1 broadcast = 29), 2 where it has 16 (AVX2: 6 x 2 + 2 + 1 = 15).
constexpr int kPanelVectors = HWY_MAX_BYTES >= 64 ? 4 : 2;

#if (HWY_TARGET & (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128)) != 0
/// The write-back of one accumulator vector of micro_tile (the sizeless-vector form below): the
/// operations of the array form's write-back, in its order.
template <class M>
HWY_INLINE void store_tile_vector(VF acc, VF al, M mv, std::size_t count, float* cr, const float* cs, bool accumulate) {
  const DF d;
  VF x;
  if (cs != nullptr) {
    const VF old = hn::Mul(LoadTail(mv, d, cr, count), LoadTail(mv, d, cs, count));
    x = hn::MulAdd(acc, al, old);
  } else {
    x = hn::Mul(acc, al);
    if (accumulate) x = hn::Add(x, LoadTail(mv, d, cr, count));
  }
  StoreTail(x, mv, d, cr, count);
}

/// micro_tile on SVE: its vectors are sizeless types (the ACLE's svfloat32_t), which cannot be
/// array elements, so the tile (at most 6 rows x 2 vectors: kPanelVectors is 2 at 128 and 256
/// bits) is held in named accumulators. Per element the same operations in the same order as the
/// array form below.
template <int MR, int NV, bool TA>
HWY_INLINE void micro_tile(std::int64_t k, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                           std::int64_t ldc, std::int64_t ncols, float alpha, bool accumulate, const float* cscale) {
  static_assert(MR >= 1 && MR <= 6 && NV >= 1 && NV <= 2, "a sizeless-vector tile is at most 6 x 2 vectors");
  const DF d;
  const std::int64_t N = lanes();
  const std::int64_t last = ncols - (NV - 1) * N;  // lanes of the last vector, 1..N
  const auto tail = static_cast<std::size_t>(last);
  const auto ml = hn::FirstN(d, tail);
  const bool full = last == N;
  VF c00 = hn::Zero(d), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  VF c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (std::int64_t p = 0; p < k; ++p) {
    const float* bp = b + p * ldb;
    const VF b0 = NV > 1 || full ? hn::LoadU(d, bp) : LoadTail(ml, d, bp, tail);
    const VF b1 = NV == 1 ? b0 : full ? hn::LoadU(d, bp + N) : LoadTail(ml, d, bp + N, tail);
#define CLEF_TILE_ROW(r)                                            \
  if constexpr (r < MR) {                                           \
    const VF av = hn::Set(d, TA ? a[p * lda + r] : a[r * lda + p]); \
    c##r##0 = hn::MulAdd(av, b0, c##r##0);                          \
    if constexpr (NV > 1) c##r##1 = hn::MulAdd(av, b1, c##r##1);    \
  }
    CLEF_TILE_ROW(0)
    CLEF_TILE_ROW(1)
    CLEF_TILE_ROW(2)
    CLEF_TILE_ROW(3)
    CLEF_TILE_ROW(4)
    CLEF_TILE_ROW(5)
#undef CLEF_TILE_ROW
  }
  const VF al = hn::Set(d, alpha);
  const auto all = hn::FirstN(d, static_cast<std::size_t>(N));
  const auto cs = [&](std::int64_t v) { return cscale == nullptr ? nullptr : cscale + v * N; };
#define CLEF_TILE_STORE(r)                                                                     \
  if constexpr (r < MR) {                                                                      \
    float* cr = c + r * ldc;                                                                   \
    if constexpr (NV > 1) {                                                                    \
      store_tile_vector(c##r##0, al, all, static_cast<std::size_t>(N), cr, cs(0), accumulate); \
      store_tile_vector(c##r##1, al, ml, tail, cr + N, cs(1), accumulate);                     \
    } else {                                                                                   \
      store_tile_vector(c##r##0, al, ml, tail, cr, cs(0), accumulate);                         \
    }                                                                                          \
  }
  CLEF_TILE_STORE(0)
  CLEF_TILE_STORE(1)
  CLEF_TILE_STORE(2)
  CLEF_TILE_STORE(3)
  CLEF_TILE_STORE(4)
  CLEF_TILE_STORE(5)
#undef CLEF_TILE_STORE
}
#else
/// One register tile: C rows [0, MR) x columns [0, NV lanes) (the last vector masked to `ncols`,
/// (NV - 1) lanes < ncols <= NV lanes). The loops over r and v unroll at compile time, so the
/// accumulators stay in registers. Each element's sum runs over p in order with one FMA per
/// step, whatever the tile shape (the panel width does not change a result bit).
template <int MR, int NV, bool TA>
HWY_INLINE void micro_tile(std::int64_t k, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                           std::int64_t ldc, std::int64_t ncols, float alpha, bool accumulate, const float* cscale) {
  const DF d;
  const std::int64_t N = lanes();
  const std::int64_t last = ncols - (NV - 1) * N;  // lanes of the last vector, 1..N
  const auto tail = static_cast<std::size_t>(last);
  const auto ml = hn::FirstN(d, tail);
  const bool full = last == N;
  VF acc[static_cast<std::size_t>(MR)][static_cast<std::size_t>(NV)];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = hn::Zero(d);
  }
  // The k loop twice: whole vectors of B only, or a masked last vector. One loop deciding per step
  // kept the mask live beside 12 accumulators, 2 B vectors and a broadcast on AVX2, and GCC 12
  // spilled an accumulator to the stack (a store-to-load chain every step: the 6 x 2 tile of
  // small_gemm_at ran about 1.6x slower). Same operations, same order.
  const auto step = [&](std::int64_t p, const VF* bv) {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const VF av = hn::Set(d, TA ? a[p * lda + r] : a[r * lda + p]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = hn::MulAdd(av, bv[v], acc[r][v]);
    }
  };
  if (full) {
    for (std::int64_t p = 0; p < k; ++p) {
      const float* bp = b + p * ldb;
      VF bv[static_cast<std::size_t>(NV)];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) bv[v] = hn::LoadU(d, bp + v * N);
      step(p, bv);
    }
  } else {
    for (std::int64_t p = 0; p < k; ++p) {
      const float* bp = b + p * ldb;
      VF bv[static_cast<std::size_t>(NV)];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) bv[v] = v + 1 < NV ? hn::LoadU(d, bp + v * N) : LoadTail(ml, d, bp + v * N, tail);
      step(p, bv);
    }
  }
  const VF al = hn::Set(d, alpha);
  const auto all = hn::FirstN(d, static_cast<std::size_t>(N));
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    float* cr = c + r * ldc;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const auto mv = v + 1 < NV ? all : ml;
      const std::size_t count = v + 1 < NV ? static_cast<std::size_t>(N) : tail;
      // Whole vectors move with plain loads and stores (masked ones cost several times more on
      // some x86 cores, and every C row of the delta rule's and attention's products passes here).
      const bool whole = v + 1 < NV || full;
      const auto load = [&](const float* p) { return whole ? hn::LoadU(d, p) : LoadTail(mv, d, p, count); };
      VF x;
      if (cscale != nullptr) {
        // acc * alpha + round(C * cscale): written as one MulAdd so that the compiler's FMA
        // contraction cannot fuse the C * cscale product instead (with alpha = 1 these are the bits
        // of rescaling C in its own pass and then adding the product).
        const VF old = hn::Mul(load(cr + v * N), load(cscale + v * N));
        x = hn::MulAdd(acc[r][v], al, old);
      } else {
        x = hn::Mul(acc[r][v], al);
        if (accumulate) x = hn::Add(x, load(cr + v * N));
      }
      if (whole) hn::StoreU(x, d, cr + v * N);
      else StoreTail(x, mv, d, cr + v * N, count);
    }
  }
}
#endif  // sizeless vectors

/// Rows [0, m) of one column panel of nc <= NV lanes columns: 6-row tiles, then one tile of the
/// m % 6 remaining rows.
template <int NV, bool TA>
HWY_INLINE void micro_panel(std::int64_t m, std::int64_t k, const float* a, std::int64_t lda, const float* b,
                            std::int64_t ldb, float* c, std::int64_t ldc, std::int64_t nc, float alpha, bool accumulate,
                            const float* cscale) {
  const std::int64_t rstep = TA ? 1 : lda;  // row offset r of A: TA ? a + r : a + r * lda
  std::int64_t i = 0;
  for (; i + 6 <= m; i += 6)
    micro_tile<6, NV, TA>(k, a + i * rstep, lda, b, ldb, c + i * ldc, ldc, nc, alpha, accumulate, cscale);
  const float* ai = a + i * rstep;
  float* ci = c + i * ldc;
  switch (m - i) {
    case 5: micro_tile<5, NV, TA>(k, ai, lda, b, ldb, ci, ldc, nc, alpha, accumulate, cscale); break;
    case 4: micro_tile<4, NV, TA>(k, ai, lda, b, ldb, ci, ldc, nc, alpha, accumulate, cscale); break;
    case 3: micro_tile<3, NV, TA>(k, ai, lda, b, ldb, ci, ldc, nc, alpha, accumulate, cscale); break;
    case 2: micro_tile<2, NV, TA>(k, ai, lda, b, ldb, ci, ldc, nc, alpha, accumulate, cscale); break;
    case 1: micro_tile<1, NV, TA>(k, ai, lda, b, ldb, ci, ldc, nc, alpha, accumulate, cscale); break;
    default: break;
  }
}

/// Shared driver of small_gemm / small_gemm_at: 6-row register tiles, kPanelVectors-vector column
/// panels, the last panel as wide as the columns left.
template <bool TA>
HWY_INLINE void small_gemm_impl(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
                                const float* b, std::int64_t ldb, float* c, std::int64_t ldc, float alpha,
                                bool accumulate, const float* cscale) {
#if HWY_TARGET == HWY_SCALAR
  // The baseline level: plain loops. (GCC 12 unrolls the 1-lane register tile below for this
  // target with a load of the next k row ahead of the loop test, reading 8 bytes past A when k is
  // odd; valgrind found it. The vector targets are clean under valgrind and ASan.)
  for (std::int64_t i = 0; i < m; ++i) {
    float* cr = c + i * ldc;
    for (std::int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (std::int64_t p = 0; p < k; ++p) acc += (TA ? a[p * lda + i] : a[i * lda + p]) * b[p * ldb + j];
      cr[j] = accumulate ? alpha * acc + (cscale != nullptr ? cr[j] * cscale[j] : cr[j]) : alpha * acc;
    }
  }
  return;
#else
  const std::int64_t N = lanes();
  const std::int64_t panel = kPanelVectors * N;
  auto cs = [cscale](std::int64_t j) { return cscale == nullptr ? nullptr : cscale + j; };
  for (std::int64_t j = 0; j < n; j += panel) {
    const std::int64_t nc = n - j < panel ? n - j : panel;
    const std::int64_t nv = (nc + N - 1) / N;
    if constexpr (kPanelVectors == 4) {
      if (nv == 4) {
        micro_panel<4, TA>(m, k, a, lda, b + j, ldb, c + j, ldc, nc, alpha, accumulate, cs(j));
        continue;
      }
      if (nv == 3) {
        micro_panel<3, TA>(m, k, a, lda, b + j, ldb, c + j, ldc, nc, alpha, accumulate, cs(j));
        continue;
      }
    }
    if (nv == 2) micro_panel<2, TA>(m, k, a, lda, b + j, ldb, c + j, ldc, nc, alpha, accumulate, cs(j));
    else micro_panel<1, TA>(m, k, a, lda, b + j, ldb, c + j, ldc, nc, alpha, accumulate, cs(j));
  }
#endif
}

/// C = (accumulate ? C : 0) + alpha * A · B (see the file comment). m, n, k >= 0.
HWY_INLINE void small_gemm(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
                           const float* b, std::int64_t ldb, float* c, std::int64_t ldc, float alpha = 1.0f,
                           bool accumulate = false) {
  small_gemm_impl<false>(m, n, k, a, lda, b, ldb, c, ldc, alpha, accumulate, nullptr);
}

/// C = (accumulate ? C : 0) + alpha * Aᵀ · B with A stored [k, m] (leading dim lda >= m).
HWY_INLINE void small_gemm_at(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
                              const float* b, std::int64_t ldb, float* c, std::int64_t ldc, float alpha = 1.0f,
                              bool accumulate = false) {
  small_gemm_impl<true>(m, n, k, a, lda, b, ldb, c, ldc, alpha, accumulate, nullptr);
}

/// C[r, c] = (Aᵀ · B)[r, c] + C[r, c] * cscale[c], A stored [k, m]: the product added to C rescaled
/// per column in the same pass (the online softmax's correction of the attention output), so C
/// is read and written once. The rescaled C is rounded before the add: the bits are those of
/// scaling C in a separate pass and then calling small_gemm_at with accumulate.
HWY_INLINE void small_gemm_at_rescaled(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
                                       const float* b, std::int64_t ldb, float* c, std::int64_t ldc,
                                       const float* cscale) {
  small_gemm_impl<true>(m, n, k, a, lda, b, ldb, c, ldc, 1.0f, true, cscale);
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

/// The bits of one vector as another vector type of the same size (no instruction once optimized).
/// Not std::bit_cast: GCC 12 with UBSan at -O0 (the sanitizer builds) instruments a bit_cast of
/// vector types as a load from a bogus address and reports it misaligned.
template <class To, class From>
CLEF_BF16_ATTR inline To vec_bits(From x) {
  static_assert(sizeof(To) == sizeof(From));
  To r;
  std::memcpy(&r, &x, sizeof r);
  return r;
}

/// Mask of the first n (< 16) lanes.
inline __mmask16 tail_mask16(std::int64_t n) { return static_cast<__mmask16>((1u << static_cast<unsigned>(n)) - 1u); }

/// One register tile: C rows [0, MR) x columns [0, 16 NV) (the last vector masked to `ncols`,
/// 16 (NV - 1) < ncols <= 16 NV). MR x NV accumulators + NV B vectors + one broadcast stay in the
/// 32 zmm registers (MR = 6, NV = 4: 29), so the loop body is loads and vdpbf16ps only; the
/// loops over r and v are unrolled at compile time (an array indexed by a runtime-dependent
/// condition is what made GCC spill the accumulators to the stack).
template <int MR, int NV, bool TA>
CLEF_BF16_ATTR inline void bf16_tile(std::int64_t kp, const std::uint32_t* a, std::int64_t lda, const std::uint32_t* b,
                                     std::int64_t ldb, float* c, std::int64_t ldc, std::int64_t ncols, bool accumulate,
                                     const float* cscale) {
  __mmask16 mk[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    const std::int64_t rem = ncols - 16 * v;
    mk[v] = rem >= 16 ? kAll16 : tail_mask16(rem);
  }
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (std::int64_t p = 0; p < kp; ++p) {
    __m512bh bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      bv[v] = vec_bits<__m512bh>(v + 1 < NV ? _mm512_loadu_si512(b + p * ldb + 16 * v)
                                            : _mm512_maskz_loadu_epi32(mk[v], b + p * ldb + 16 * v));
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const std::uint32_t w = TA ? a[p * lda + r] : a[r * lda + p];
      const __m512bh av = vec_bits<__m512bh>(_mm512_set1_epi32(static_cast<int>(w)));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    float* cr = c + r * ldc;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      __m512 x = acc[r][v];
      if (accumulate) {
        __m512 old = _mm512_maskz_loadu_ps(mk[v], cr + 16 * v);
        // The explicit-rounding forms are builtins the compiler does not contract into an FMA, so
        // C * cscale is rounded before the add (the bits of a separate rescaling pass).
        if (cscale != nullptr)
          old = _mm512_mul_round_ps(old, _mm512_maskz_loadu_ps(mk[v], cscale + 16 * v),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        x = _mm512_add_ps(x, old);
      }
      _mm512_mask_storeu_ps(cr + 16 * v, mk[v], x);
    }
  }
}

/// Rows [0, m) of one column panel of nc <= 64 columns (NV = ceil(nc / 16) vectors): 6-row tiles,
/// then one tile of the m % 6 remaining rows.
template <int NV, bool TA>
CLEF_BF16_ATTR inline void bf16_panel(std::int64_t m, std::int64_t kp, const std::uint32_t* a, std::int64_t lda,
                                      const std::uint32_t* b, std::int64_t ldb, float* c, std::int64_t ldc,
                                      std::int64_t nc, bool accumulate, const float* cscale) {
  const std::int64_t rstep = TA ? 1 : lda;
  std::int64_t i = 0;
  for (; i + 6 <= m; i += 6)
    bf16_tile<6, NV, TA>(kp, a + i * rstep, lda, b, ldb, c + i * ldc, ldc, nc, accumulate, cscale);
  const std::uint32_t* ai = a + i * rstep;
  float* ci = c + i * ldc;
  switch (m - i) {
    case 5: bf16_tile<5, NV, TA>(kp, ai, lda, b, ldb, ci, ldc, nc, accumulate, cscale); break;
    case 4: bf16_tile<4, NV, TA>(kp, ai, lda, b, ldb, ci, ldc, nc, accumulate, cscale); break;
    case 3: bf16_tile<3, NV, TA>(kp, ai, lda, b, ldb, ci, ldc, nc, accumulate, cscale); break;
    case 2: bf16_tile<2, NV, TA>(kp, ai, lda, b, ldb, ci, ldc, nc, accumulate, cscale); break;
    case 1: bf16_tile<1, NV, TA>(kp, ai, lda, b, ldb, ci, ldc, nc, accumulate, cscale); break;
    default: break;
  }
}

/// Shared driver of bf16_gemm / bf16_gemm_at: 64-column panels (6 x 64 register tiles), the last
/// panel as wide as the columns left.
template <bool TA>
CLEF_BF16_ATTR inline void bf16_gemm_impl(std::int64_t m, std::int64_t n, std::int64_t kp, const std::uint32_t* a,
                                          std::int64_t lda, const std::uint32_t* b, std::int64_t ldb, float* c,
                                          std::int64_t ldc, bool accumulate, const float* cscale) {
  for (std::int64_t j = 0; j < n; j += 64) {
    const std::int64_t nc = n - j < 64 ? n - j : 64;
    const float* cs = cscale == nullptr ? nullptr : cscale + j;
    switch ((nc + 15) / 16) {
      case 4: bf16_panel<4, TA>(m, kp, a, lda, b + j, ldb, c + j, ldc, nc, accumulate, cs); break;
      case 3: bf16_panel<3, TA>(m, kp, a, lda, b + j, ldb, c + j, ldc, nc, accumulate, cs); break;
      case 2: bf16_panel<2, TA>(m, kp, a, lda, b + j, ldb, c + j, ldc, nc, accumulate, cs); break;
      default: bf16_panel<1, TA>(m, kp, a, lda, b + j, ldb, c + j, ldc, nc, accumulate, cs); break;
    }
  }
}

CLEF_BF16_ATTR inline void bf16_gemm(std::int64_t m, std::int64_t n, std::int64_t kp, const std::uint32_t* a,
                                     std::int64_t lda, const std::uint32_t* b, std::int64_t ldb, float* c,
                                     std::int64_t ldc, bool accumulate) {
  bf16_gemm_impl<false>(m, n, kp, a, lda, b, ldb, c, ldc, accumulate, nullptr);
}

CLEF_BF16_ATTR inline void bf16_gemm_at(std::int64_t m, std::int64_t n, std::int64_t kp, const std::uint32_t* a,
                                        std::int64_t lda, const std::uint32_t* b, std::int64_t ldb, float* c,
                                        std::int64_t ldc, bool accumulate) {
  bf16_gemm_impl<true>(m, n, kp, a, lda, b, ldb, c, ldc, accumulate, nullptr);
}

/// bf16_gemm_at adding into C rescaled per column: C[r, c] = C[r, c] * cscale[c] + product (the
/// rescaled C rounded before the add, as a separate scaling pass would).
CLEF_BF16_ATTR inline void bf16_gemm_at_rescaled(std::int64_t m, std::int64_t n, std::int64_t kp,
                                                 const std::uint32_t* a, std::int64_t lda, const std::uint32_t* b,
                                                 std::int64_t ldb, float* c, std::int64_t ldc, const float* cscale) {
  bf16_gemm_impl<true>(m, n, kp, a, lda, b, ldb, c, ldc, true, cscale);
}

/// bf16 bits of 16 floats by `vcvtneps2bf16`: round to nearest even, as core/dtype.h f32_to_bf16 for
/// normal values, zeros, infinities and NaN; a subnormal input becomes +-0 (f32_to_bf16 rounds it: those
/// within half a bf16 ulp of the smallest normal become it). Where the consumer is `vdpbf16ps`, which
/// reads bf16 subnormals as zero, only that band differs.
CLEF_BF16_ATTR inline __m256i to_bf16_16(__m512 x) { return vec_bits<__m256i>(_mm512_cvtneps_pbh(x)); }

/// f32_to_bf16 (core/dtype.h) of 16 floats in integer arithmetic, subnormals included, as u32 lanes
/// (upper half zero): (u + 0x7fff + lsb) >> 16, a NaN kept a quiet NaN.
CLEF_BF16_ATTR inline __m512i bf16_bits_16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_or_epi32(rounded, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
}

/// The bf16 bits of 16 floats as u32 lanes: bf16_bits_16 (f32_to_bf16 exactly) when kExact, else
/// `vcvtneps2bf16` (to_bf16_16).
template <bool kExact>
CLEF_BF16_ATTR inline __m512i bf16_lanes(__m512 x) {
  if constexpr (kExact) return bf16_bits_16(x);
  else return _mm512_maskz_cvtepu16_epi32(kAll16, to_bf16_16(x));
}

/// Packs two rows into bf16 pair words: out[i] = bf16(lo[i]) | bf16(hi[i]) << 16, n elements; the
/// rounding is f32_to_bf16's exactly when kExact (subnormals too), else `vcvtneps2bf16`'s (to_bf16_16).
template <bool kExact = false>
CLEF_BF16_ATTR inline void pack_pairs(const float* lo, const float* hi, std::int64_t n, std::uint32_t* out) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i l = bf16_lanes<kExact>(_mm512_loadu_ps(lo + i));
    const __m512i h = bf16_lanes<kExact>(_mm512_loadu_ps(hi + i));
    _mm512_storeu_si512(out + i, _mm512_or_si512(l, _mm512_maskz_slli_epi32(kAll16, h, 16)));
  }
  if (i < n) {
    const __mmask16 k = tail_mask16(n - i);
    const __m512i l = bf16_lanes<kExact>(_mm512_maskz_loadu_ps(k, lo + i));
    const __m512i h = bf16_lanes<kExact>(_mm512_maskz_loadu_ps(k, hi + i));
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
