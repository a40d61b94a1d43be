// SPDX-License-Identifier: MIT
// Optimized gated delta rule: the chunked form of docs/MODEL.md §4.6 with chunk C = 64,
// chunks in order, the heads of each chunk split over the threads (each thread keeps its heads, so a
// head's chunks run in order on one thread). Per chunk and head, with S the
// state entering the chunk ([dk, dv], fp32) and local index i = 0..C-1:
//   G_i = cumsum(g),  Γ_ij = exp(G_i - G_j) (j <= i)
//   A_ij = β_i (k_i·k_j) Γ_ij (j < i),  Tinv = (I + A)^-1   (unit lower triangular, C x C)
//   V' = Tinv (β V - (β e^G K) S)       (= U - W S of §4.6: U = Tinv βV, W = Tinv β e^G K)
//   O  = (e^G Q) S + P V'  with P_ij = (q_i·k_j) Γ_ij (j <= i)
//   S <- e^{G_last} S + Σ_i e^{G_last - G_i} k_i ⊗ v'_i
// Every product is a cpu::small_gemm (cpu::bf16_gemm on bf16 pair words at avx512bf16) on [C, *]
// buffers that stay in L1/L2; q, k, v and o are read / written in place through their row strides
// (no gathers). The triangular products (K Kᵀ, Q Kᵀ, Tinv X, P V') only touch the blocks on or below
// the diagonal. Building Tinv costs C³/6 multiply-adds, replacing the C²·(dk+dv)/2 of a forward
// substitution on U and W.
// A chunk shorter than C (the tail of a call) runs with its own length: the zero padding of the
// HF reference changes nothing in exact arithmetic.
// Compiled once per SIMD target (Highway foreach_target; level chosen at run time, ops/isa.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cpu/gdn.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/cpu/microgemm-inl.h"
#if HWY_ARCH_X86
#include "ops/cpu/transpose_x86.h"
#endif
#include "ops/cpu/vmath-inl.h"
#include "ops/isa.h"
#include "ops/ops.h"

HWY_BEFORE_NAMESPACE();
namespace clef::ops {
namespace HWY_NAMESPACE {
namespace cpu = ::clef::ops::cpu::HWY_NAMESPACE;
#if HWY_ARCH_X86
namespace cpu_x86 = ::clef::ops::cpu;  // transpose_x86.h
#endif
namespace {

constexpr std::int64_t kChunk = kGdnChunk;
constexpr std::int64_t kRowBlock = 12;  // rows per triangular block (two 6-row register tiles)

struct ChunkScratch {
  std::vector<float> kt, kd, kb, qs, x, vp, a, p, tinv;
  std::vector<float> beta, g_cum, eg, tmp, cs;
  // bf16 mode: the operands rounded to bf16 (emulated levels: kr, qr, ktr, sr as floats) or as
  // pair words (avx512bf16: the rest), sized for the largest.
  std::vector<float> kr, qr, ktr, sr;
  std::vector<std::uint32_t> w_ktp, w_k, w_sp, w_kb, w_qs, w_t, w_x, w_p, w_vp, w_kd;
  void ensure_bf16(std::int64_t dk, std::int64_t dv) {
    auto sz = [](std::int64_t n) { return static_cast<std::size_t>(n); };
    for (auto* b : {&kr, &qr}) b->resize(sz(kChunk * dk));
    ktr.resize(sz(dk * cpu::odd_lines_ld(kChunk)));
    sr.resize(sz(dk * dv));
    for (auto* b : {&w_ktp, &w_k, &w_kb, &w_qs, &w_kd}) b->resize(sz(kChunk * dk / 2 + kChunk));
    w_sp.resize(sz(dk * dv / 2 + dv));
    for (auto* b : {&w_t, &w_p}) b->resize(sz(kChunk * kChunk / 2));
    for (auto* b : {&w_x, &w_vp}) b->resize(sz(kChunk / 2 * dv));
  }
  void ensure(std::int64_t dk, std::int64_t dv) {
    auto sz = [](std::int64_t n) { return static_cast<std::size_t>(n); };
    kt.resize(sz(dk * cpu::odd_lines_ld(kChunk)));
    kd.resize(sz(dk * kChunk));
    kb.resize(sz(kChunk * dk));
    qs.resize(sz(kChunk * dk));
    x.resize(sz(kChunk * cpu::odd_lines_ld(dv)));
    vp.resize(sz(kChunk * cpu::odd_lines_ld(dv)));
    a.resize(sz(kChunk * kChunk));
    p.resize(sz(kChunk * kChunk));
    tinv.resize(sz(kChunk * kChunk));
    tmp.resize(sz(kChunk));
    beta.resize(sz(kChunk));
    g_cum.resize(sz(kChunk));
    eg.resize(sz(kChunk));
    cs.resize(sz(dv));
  }
};

/// y[0..n) = s * x[0..n)
inline void scale_copy(std::int64_t n, float s, const float* __restrict x, float* __restrict y) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = s * x[i];
}

/// The state update's decays: out[i] = e^{G_last - G_i}, i < C.
inline void decays_to_last(std::int64_t C, const float* G, float* out) {
  const float gl = G[C - 1];
  for (std::int64_t i = 0; i < C; ++i) out[i] = gl - G[i];
  cpu::exp_n(out, out, C);
}

/// The state update's decayed K rows: Kd [C, dk] row i = e^{G_last - G_i} K_i (K rows qk_stride
/// apart); tmp (C floats) holds the decays.
inline void decayed_k_rows(std::int64_t C, std::int64_t dk, const float* G, const float* K, std::int64_t qk_stride,
                           float* tmp, float* Kd) {
  decays_to_last(C, G, tmp);
  for (std::int64_t i = 0; i < C; ++i) scale_copy(dk, tmp[i], K + i * qk_stride, Kd + i * dk);
}

/// dst [cols, rows] (row stride ldd) = src [rows, cols] (row stride lds) transposed: cpu::transpose,
/// in 8 x 8 blocks of registers on the x86 levels from AVX2 up (the scalar loop stores one float
/// per cache line of dst).
inline void transpose_rows(std::int64_t rows, std::int64_t cols, const float* src, std::int64_t lds, float* dst,
                           std::int64_t ldd) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  const std::int64_t r8 = rows / 8 * 8, c8 = cols / 8 * 8;
  for (std::int64_t r0 = 0; r0 < r8; r0 += 8) {
    for (std::int64_t c0 = 0; c0 < c8; c0 += 8) {
      __m256 v[8];
      for (int l = 0; l < 8; ++l) v[l] = _mm256_loadu_ps(src + (r0 + l) * lds + c0);
      cpu_x86::transpose8x8(v);
      for (int l = 0; l < 8; ++l) _mm256_storeu_ps(dst + (c0 + l) * ldd + r0, v[l]);
    }
    cpu::transpose(8, cols - c8, src + r0 * lds + c8, lds, dst + c8 * ldd + r0, ldd);
  }
  cpu::transpose(rows - r8, cols, src + r8 * lds, lds, dst + r8, ldd);
#else
  cpu::transpose(rows, cols, src, lds, dst, ldd);
#endif
}

/// The chunk's gates for value head h: G = cumsum(g) over tokens [c0, c0 + C), eG = e^G, B = β.
inline void chunk_gates(const GdnDims& d, std::int64_t c0, std::int64_t C, std::int64_t h, const float* g,
                        const float* beta, float* G, float* eG, float* B) {
  float run = 0.0f;
  for (std::int64_t i = 0; i < C; ++i) {
    run += g[(c0 + i) * d.hv + h];
    G[i] = run;
    B[i] = beta[(c0 + i) * d.hv + h];
  }
  cpu::exp_n(G, eG, C);
}

/// T = (I + A)^-1 of the unit lower-triangular I + A (A [C, C], row stride C, only j < i read) into
/// T [C, kChunk] (row stride kChunk; columns >= C zero), row by row T_i = e_i - Σ_{j<i} A_ij T_j.
/// Row i is built in registers, four vectors of columns at a time; T_j is zero beyond column j,
/// so a column block starting at c0 takes j = c0 .. i-1 only. Per element the same operations in
/// the same order as the plain form (a product, then a sum, j ascending): the skipped and the
/// zero-column terms add ±0 to +0, which changes no bit.
inline void invert_unit_lower(std::int64_t C, const float* A, float* T) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const auto N = static_cast<std::int64_t>(hn::Lanes(df));
  const std::int64_t W = 4 * N;  // columns per register block
  const V zero = hn::Zero(df);
  for (std::int64_t i = 0; i < C; ++i) {
    float* ti = T + i * kChunk;
    const float* ai = A + i * C;
    std::int64_t c0 = 0;
    for (; c0 <= i && c0 < kChunk; c0 += W) {
      // Four named accumulators, not an array: SVE's vectors are sizeless types, which cannot be
      // array elements (docs/ARM64.md).
      V acc0 = zero, acc1 = zero, acc2 = zero, acc3 = zero;
      for (std::int64_t j = c0; j < i; ++j) {
        const V s = hn::Set(df, -ai[j]);
        const float* tj = T + j * kChunk + c0;
        acc0 = hn::Add(acc0, hn::Mul(s, hn::LoadU(df, tj)));
        acc1 = hn::Add(acc1, hn::Mul(s, hn::LoadU(df, tj + N)));
        acc2 = hn::Add(acc2, hn::Mul(s, hn::LoadU(df, tj + 2 * N)));
        acc3 = hn::Add(acc3, hn::Mul(s, hn::LoadU(df, tj + 3 * N)));
      }
      hn::StoreU(acc0, df, ti + c0);
      hn::StoreU(acc1, df, ti + c0 + N);
      hn::StoreU(acc2, df, ti + c0 + 2 * N);
      hn::StoreU(acc3, df, ti + c0 + 3 * N);
    }
    ti[i] += 1.0f;  // e_i: the diagonal entry had only +0 added
    for (; c0 < kChunk; c0 += W) {
      for (int v = 0; v < 4; ++v) hn::StoreU(zero, df, ti + c0 + v * N);
    }
  }
}

/// Decay masks on A = K Kᵀ and P = Q Kᵀ ([C, C], row stride C): A_ij = β_i A_ij Γ_ij (j < i),
/// P_ij = P_ij Γ_ij (j <= i), P_ij = 0 above; then T = (I + A)^-1 ([C, kChunk], invert_unit_lower).
/// tmp holds C floats.
inline void mask_and_invert(std::int64_t C, const float* G, const float* B, float* tmp, float* A, float* P, float* T) {
  for (std::int64_t i = 0; i < C; ++i) {
    const float gi = G[i];
    for (std::int64_t j = 0; j <= i; ++j) tmp[j] = gi - G[j];
    cpu::exp_n(tmp, tmp, i + 1);
    float* ai = A + i * C;
    float* pi = P + i * C;
    const float bi = B[i];
    for (std::int64_t j = 0; j < i; ++j) ai[j] = bi * ai[j] * tmp[j];
    for (std::int64_t j = 0; j <= i; ++j) pi[j] *= tmp[j];
    for (std::int64_t j = i + 1; j < C; ++j) pi[j] = 0.0f;
  }
  invert_unit_lower(C, A, T);
}

/// One chunk of C <= kChunk tokens for value head h (k-head kh). kRound: the bf16 mode on levels
/// without a bf16 dot product: every product's operands are rounded to bf16 values first (the
/// state S, K, Q only in copies), then multiplied by the fp32 kernels, as run_chunk_bf16 does.
template <bool kRound>
void run_chunk(const GdnDims& d, std::int64_t c0, std::int64_t C, std::int64_t h, std::int64_t kh, const float* q,
               const float* k, std::int64_t qk_stride, const float* v, std::int64_t v_stride, const float* g,
               const float* beta, float* S, float* o, ChunkScratch& s) {
  const std::int64_t dk = d.dk, dv = d.dv;
  const std::int64_t ldo = d.hv * dv;
  const float* Q = q + c0 * qk_stride + kh * dk;  // [C, dk], rows qk_stride apart
  const float* K = k + c0 * qk_stride + kh * dk;
  const float* V = v + c0 * v_stride + h * dv;  // [C, dv], rows v_stride apart
  float* O = o + c0 * ldo + h * dv;             // [C, dv], rows ldo apart
  float* G = s.g_cum.data();
  float* eG = s.eg.data();
  float* B = s.beta.data();
  float* tmp = s.tmp.data();
  chunk_gates(d, c0, C, h, g, beta, G, eG, B);

  // Kt [dk, C]; A = K Kᵀ, P = Q Kᵀ on and below the diagonal blocks. Kt and X, V' [C, dv] are B
  // operands read in column panels down their rows: row strides of an odd number of cache lines
  // (cpu::odd_lines_ld; at 64 and 128 floats an AVX2 panel's rows fell on few L1 sets: the op 1.7-7.5%
  // faster in isolation at T = 512-1,024, same bits).
  float* Kt = s.kt.data();
  const std::int64_t ldkt = cpu::odd_lines_ld(C), ldx = cpu::odd_lines_ld(dv);
  transpose_rows(C, dk, K, qk_stride, Kt, ldkt);
  float* A = s.a.data();
  float* P = s.p.data();
  const float* Ka = K;  // the operands of A and P
  const float* Qa = Q;
  const float* Kta = Kt;
  std::int64_t lda = qk_stride;
  if constexpr (kRound) {
    for (std::int64_t i = 0; i < C; ++i) {
      cpu::round_to_bf16(K + i * qk_stride, dk, s.kr.data() + i * dk);
      cpu::round_to_bf16(Q + i * qk_stride, dk, s.qr.data() + i * dk);
    }
    cpu::round_to_bf16(Kt, dk * ldkt, s.ktr.data());
    Ka = s.kr.data();
    Qa = s.qr.data();
    Kta = s.ktr.data();
    lda = dk;
  }
  for (std::int64_t i0 = 0; i0 < C; i0 += kRowBlock) {
    const std::int64_t rows = std::min(kRowBlock, C - i0);
    const std::int64_t cols = i0 + rows;
    cpu::small_gemm(rows, cols, dk, Ka + i0 * lda, lda, Kta, ldkt, A + i0 * C, C);
    cpu::small_gemm(rows, cols, dk, Qa + i0 * lda, lda, Kta, ldkt, P + i0 * C, C);
  }
  float* T = s.tinv.data();
  mask_and_invert(C, G, B, tmp, A, P, T);

  // X = β V - (β e^G K) S;  V' = Tinv X (lower triangular blocks).
  float* X = s.x.data();
  float* Kb = s.kb.data();
  for (std::int64_t i = 0; i < C; ++i) {
    scale_copy(dv, B[i], V + i * v_stride, X + i * ldx);
    scale_copy(dk, B[i] * eG[i], K + i * qk_stride, Kb + i * dk);
  }
  const float* Sa = S;  // S as a product operand
  if constexpr (kRound) {
    cpu::round_to_bf16(Kb, C * dk, Kb);
    cpu::round_to_bf16(S, dk * dv, s.sr.data());
    Sa = s.sr.data();
  }
  cpu::small_gemm(C, dv, dk, Kb, dk, Sa, dv, X, ldx, -1.0f, true);
  if constexpr (kRound) {
    cpu::round_to_bf16(X, C * ldx, X);
    cpu::round_to_bf16(T, C * kChunk, T);
  }
  float* Vp = s.vp.data();
  for (std::int64_t i0 = 0; i0 < C; i0 += kRowBlock) {
    const std::int64_t rows = std::min(kRowBlock, C - i0);
    cpu::small_gemm(rows, dv, i0 + rows, T + i0 * kChunk, kChunk, X, ldx, Vp + i0 * ldx, ldx);
  }

  // O = (e^G Q) S + P V', written straight into o.
  float* Qs = s.qs.data();
  for (std::int64_t i = 0; i < C; ++i) scale_copy(dk, eG[i], Q + i * qk_stride, Qs + i * dk);
  if constexpr (kRound) {
    cpu::round_to_bf16(Qs, C * dk, Qs);
    cpu::round_to_bf16(P, C * C, P);
    cpu::round_to_bf16(Vp, C * ldx, Vp);
  }
  cpu::small_gemm(C, dv, dk, Qs, dk, Sa, dv, O, ldo);
  for (std::int64_t i0 = 0; i0 < C; i0 += kRowBlock) {
    const std::int64_t rows = std::min(kRowBlock, C - i0);
    cpu::small_gemm(rows, dv, i0 + rows, P + i0 * C, C, Vp, ldx, O + i0 * ldo, ldo, 1.0f, true);
  }

  // S <- e^{G_last} S + (K ⊙ e^{G_last - G})ᵀ V': the decayed K rows ([C, dk]) as the transposed
  // operand, S rescaled by e^{G_last} as the product is added (small_gemm_at_rescaled: the bits of
  // rescaling S in its own pass first).
  float* Kd = s.kd.data();
  decayed_k_rows(C, dk, G, K, qk_stride, tmp, Kd);
  const float egl = eG[C - 1];
  if constexpr (kRound) cpu::round_to_bf16(Kd, C * dk, Kd);
  float* cs = s.cs.data();
  std::fill(cs, cs + dv, egl);
  cpu::small_gemm_at_rescaled(dk, dv, C, Kd, dk, Vp, ldx, S, dv, cs);
}

#if defined(CLEF_HAVE_BF16_DOT)
/// Rows of `src` ([rows, n], rows lds floats apart) as bf16 pair words along the row: dst [rows,
/// ldw] words, word (r, p) = bf16 src[r][2p] | bf16 src[r][2p + 1] << 16, a missing odd element 0.
CLEF_BF16_ATTR inline void row_pairs(const float* src, std::int64_t rows, std::int64_t n, std::int64_t lds,
                                     std::uint32_t* dst, std::int64_t ldw) {
  for (std::int64_t r = 0; r < rows; ++r) {
    cpu::to_bf16_n(src + r * lds, n, dst + r * ldw);
    if (n % 2 != 0) dst[r * ldw + n / 2] &= 0xFFFFu;
  }
}

/// row_pairs of the rows scaled first: dst row r ([rows, n / 2] words, ldw apart) = the pair words of
/// scale[r] * src row r ([rows, n], lds apart; n even), each product rounded to fp32 before its bf16
/// rounding: the bits of scale_copy into a buffer and row_pairs of that, without the buffer's pass.
/// n odd would leave the last word's upper half unwritten (row_pairs zeroes it): the caller's dk is even.
CLEF_BF16_ATTR inline void scaled_row_pairs(const float* src, std::int64_t rows, std::int64_t n, std::int64_t lds,
                                            const float* scale, std::uint32_t* dst, std::int64_t ldw) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const __m512 sv = _mm512_set1_ps(scale[r]);
    const float* x = src + r * lds;
    auto* out = reinterpret_cast<char*>(dst + r * ldw);
    std::int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * i),
                          cpu::to_bf16_16(_mm512_mul_ps(sv, _mm512_loadu_ps(x + i))));
    }
    if (i < n) {
      const __mmask16 km = cpu::tail_mask16(n - i);
      _mm256_mask_storeu_epi16(out + 2 * i, km, cpu::to_bf16_16(_mm512_mul_ps(sv, _mm512_maskz_loadu_ps(km, x + i))));
    }
  }
}

/// Pairs of rows of `src` ([rows, n], lds apart) as words: dst [ceil(rows / 2), n] (ldd words
/// apart), word (p, c) = bf16 src[2p][c] | bf16 src[2p + 1][c] << 16, a missing odd row 0.
CLEF_BF16_ATTR inline void col_pairs(const float* src, std::int64_t rows, std::int64_t n, std::int64_t lds,
                                     const float* zeros, std::uint32_t* dst, std::int64_t ldd) {
  for (std::int64_t p = 0; 2 * p < rows; ++p) {
    const float* lo = src + 2 * p * lds;
    cpu::pack_pairs(lo, 2 * p + 1 < rows ? lo + lds : zeros, n, dst + p * ldd);
  }
}

/// col_pairs of the rows scaled first: word (p, c) of dst ([ceil(rows / 2), n], ldd apart) pairs
/// bf16(scale[2p] * src[2p][c]) with bf16(scale[2p + 1] * src[2p + 1][c]) << 16 (a missing odd row 0);
/// the bits of scale_copy into a buffer and col_pairs of that.
CLEF_BF16_ATTR inline void scaled_col_pairs(const float* src, std::int64_t rows, std::int64_t n, std::int64_t lds,
                                            const float* scale, std::uint32_t* dst, std::int64_t ldd) {
  for (std::int64_t p = 0; 2 * p < rows; ++p) {
    const float* lo = src + 2 * p * lds;
    const bool has_hi = 2 * p + 1 < rows;
    const __m512 sl = _mm512_set1_ps(scale[2 * p]);
    const __m512 sh = _mm512_set1_ps(has_hi ? scale[2 * p + 1] : 0.0f);
    std::uint32_t* out = dst + p * ldd;
    for (std::int64_t i = 0; i < n; i += 16) {
      const __mmask16 km = n - i >= 16 ? cpu::kAll16 : cpu::tail_mask16(n - i);
      const __m512i l = cpu::bf16_lanes<false>(_mm512_mul_ps(sl, _mm512_maskz_loadu_ps(km, lo + i)));
      const __m512i h = has_hi ? cpu::bf16_lanes<false>(_mm512_mul_ps(sh, _mm512_maskz_loadu_ps(km, lo + lds + i)))
                               : _mm512_setzero_si512();
      _mm512_mask_storeu_epi32(out + i, km, _mm512_or_si512(l, _mm512_slli_epi32(h, 16)));
    }
  }
}

/// dst [cols, rows] = src [rows, cols] (32-bit words, dense rows) transposed: the pair words of K
/// as Kᵀ's. 8 x 8 blocks in registers (cpu_x86::transpose8x8 moves the words as floats: bits only),
/// the edges word by word (the plain loop stored one word per cache line of dst).
CLEF_BF16_ATTR inline void transpose_words(std::int64_t rows, std::int64_t cols, const std::uint32_t* src,
                                           std::uint32_t* dst) {
  const std::int64_t r8 = rows / 8 * 8, c8 = cols / 8 * 8;
  for (std::int64_t r0 = 0; r0 < r8; r0 += 8) {
    for (std::int64_t c0 = 0; c0 < c8; c0 += 8) {
      __m256 v[8];
      for (int l = 0; l < 8; ++l) {
        v[l] = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + (r0 + l) * cols + c0)));
      }
      cpu_x86::transpose8x8(v);
      for (int l = 0; l < 8; ++l) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (c0 + l) * rows + r0), _mm256_castps_si256(v[l]));
      }
    }
  }
  for (std::int64_t j = 0; j < rows; ++j) {
    for (std::int64_t p = j < r8 ? c8 : 0; p < cols; ++p) dst[p * rows + j] = src[j * cols + p];
  }
}

/// run_chunk<true> on vdpbf16ps: the same bf16-rounded operands as pair words, fp32 sums; the
/// decay masks, (I + A)^-1 and the state S itself stay fp32.
CLEF_BF16_ATTR void run_chunk_bf16(const GdnDims& d, std::int64_t c0, std::int64_t C, std::int64_t h, std::int64_t kh,
                                   const float* q, const float* k, std::int64_t qk_stride, const float* v,
                                   std::int64_t v_stride, const float* g, const float* beta, float* S, float* o,
                                   ChunkScratch& s, const float* zeros) {
  const std::int64_t dk = d.dk, dv = d.dv, dk2 = dk / 2, Cw = (C + 1) / 2;
  const std::int64_t ldo = d.hv * dv;
  const float* Q = q + c0 * qk_stride + kh * dk;
  const float* K = k + c0 * qk_stride + kh * dk;
  const float* V = v + c0 * v_stride + h * dv;
  float* O = o + c0 * ldo + h * dv;
  float* G = s.g_cum.data();
  float* eG = s.eg.data();
  float* B = s.beta.data();
  float* tmp = s.tmp.data();
  chunk_gates(d, c0, C, h, g, beta, G, eG, B);

  // A = K Kᵀ, P = Q Kᵀ: K and Q rows as pair words along dk ([C, dk/2]) times Kᵀ as pair words
  // ([dk/2, C]: the transpose of K's words, 32-bit moves within L1).
  std::uint32_t* ktp = s.w_ktp.data();
  std::uint32_t* kw = s.w_k.data();
  std::uint32_t* qw = s.w_qs.data();  // reused for e^G Q below, after P
  row_pairs(K, C, dk, qk_stride, kw, dk2);
  row_pairs(Q, C, dk, qk_stride, qw, dk2);
  transpose_words(C, dk2, kw, ktp);
  float* A = s.a.data();
  float* P = s.p.data();
  for (std::int64_t i0 = 0; i0 < C; i0 += kRowBlock) {
    const std::int64_t rows = std::min(kRowBlock, C - i0);
    const std::int64_t cols = i0 + rows;
    cpu::bf16_gemm(rows, cols, dk2, kw + i0 * dk2, dk2, ktp, C, A + i0 * C, C, false);
    cpu::bf16_gemm(rows, cols, dk2, qw + i0 * dk2, dk2, ktp, C, P + i0 * C, C, false);
  }
  float* T = s.tinv.data();
  mask_and_invert(C, G, B, tmp, A, P, T);

  // X = β V - (β e^G K) S (the product's A operand negated: exact), V' = Tinv X.
  float* X = s.x.data();
  for (std::int64_t i = 0; i < C; ++i) {
    scale_copy(dv, B[i], V + i * v_stride, X + i * dv);
    tmp[i] = -(B[i] * eG[i]);
  }
  std::uint32_t* sp = s.w_sp.data();
  col_pairs(S, dk, dv, dv, zeros, sp, dv);
  std::uint32_t* kbw = s.w_kb.data();
  scaled_row_pairs(K, C, dk, qk_stride, tmp, kbw, dk2);
  cpu::bf16_gemm(C, dv, dk2, kbw, dk2, sp, dv, X, dv, true);
  std::uint32_t* tw = s.w_t.data();
  std::uint32_t* xp = s.w_x.data();
  row_pairs(T, C, C, kChunk, tw, Cw);
  col_pairs(X, C, dv, dv, zeros, xp, dv);
  float* Vp = s.vp.data();
  for (std::int64_t i0 = 0; i0 < C; i0 += kRowBlock) {
    const std::int64_t rows = std::min(kRowBlock, C - i0);
    cpu::bf16_gemm(rows, dv, (i0 + rows + 1) / 2, tw + i0 * Cw, Cw, xp, dv, Vp + i0 * dv, dv, false);
  }

  // O = (e^G Q) S + P V'.
  std::uint32_t* qsw = s.w_qs.data();
  scaled_row_pairs(Q, C, dk, qk_stride, eG, qsw, dk2);
  cpu::bf16_gemm(C, dv, dk2, qsw, dk2, sp, dv, O, ldo, false);
  std::uint32_t* pw = s.w_p.data();
  std::uint32_t* vpp = s.w_vp.data();
  row_pairs(P, C, C, C, pw, Cw);
  col_pairs(Vp, C, dv, dv, zeros, vpp, dv);
  for (std::int64_t i0 = 0; i0 < C; i0 += kRowBlock) {
    const std::int64_t rows = std::min(kRowBlock, C - i0);
    cpu::bf16_gemm(rows, dv, (i0 + rows + 1) / 2, pw + i0 * Cw, Cw, vpp, dv, O + i0 * ldo, ldo, true);
  }

  // S <- e^{G_last} S + (K ⊙ e^{G_last - G})ᵀ V': the decayed K rows as pair words along the
  // chunk ([ceil(C/2), dk]), the transposed operand of bf16_gemm_at; S rescaled by e^{G_last} as the
  // product is added (bf16_gemm_at_rescaled: the bits of rescaling S in its own pass first).
  decays_to_last(C, G, tmp);
  std::uint32_t* kdw = s.w_kd.data();
  scaled_col_pairs(K, C, dk, qk_stride, tmp, kdw, dk);
  float* cs = s.cs.data();
  std::fill(cs, cs + dv, eG[C - 1]);
  cpu::bf16_gemm_at_rescaled(dk, dv, Cw, kdw, dk, vpp, dv, S, dv, cs);
}
#endif  // CLEF_HAVE_BF16_DOT

}  // namespace

void GatedDeltaRuleImpl(const GdnDims& d, std::int64_t t, const float* q, const float* k, std::int64_t qk_stride,
                        const float* v, std::int64_t v_stride, const float* g, const float* beta, float* state,
                        float* o) {
  const std::int64_t r = d.hv / d.hk;
#pragma omp parallel
  {
    thread_local ChunkScratch scratch;
    scratch.ensure(d.dk, d.dv);
    // Chunks outside, heads inside: the model's q, k, v rows are thousands of floats long and a
    // head reads 128 of each, so a head's walk down all T rows touches a new page per row and
    // chunk; taking every head of one chunk in turn reuses the chunk's pages and lines (the op
    // 4-9% faster at T = 1,024, docs/PERFORMANCE.md). schedule(static) gives each thread the same
    // heads in every chunk (OpenMP: equal trip counts, same team), so a head's chunks run in order
    // on one thread and no barrier is needed between chunks.
    for (std::int64_t c0 = 0; c0 < t; c0 += kChunk) {
      const std::int64_t C = std::min(kChunk, t - c0);
#pragma omp for schedule(static) nowait
      for (std::int64_t h = 0; h < d.hv; ++h) {
        run_chunk<false>(d, c0, C, h, h / r, q, k, qk_stride, v, v_stride, g, beta, state + h * d.dk * d.dv, o,
                         scratch);
      }
    }
  }
}

void GatedDeltaRuleBf16Impl(const GdnDims& d, std::int64_t t, const float* q, const float* k, std::int64_t qk_stride,
                            const float* v, std::int64_t v_stride, const float* g, const float* beta, float* state,
                            float* o) {
  const std::int64_t r = d.hv / d.hk;
#pragma omp parallel
  {
    thread_local ChunkScratch scratch;
    scratch.ensure(d.dk, d.dv);
    scratch.ensure_bf16(d.dk, d.dv);
#if defined(CLEF_HAVE_BF16_DOT)
    thread_local std::vector<float> zeros;
    zeros.assign(static_cast<std::size_t>(std::max({d.dk, d.dv, kChunk})), 0.0f);
#endif
    for (std::int64_t c0 = 0; c0 < t; c0 += kChunk) {  // the loop order of GatedDeltaRuleImpl
      const std::int64_t C = std::min(kChunk, t - c0);
#pragma omp for schedule(static) nowait
      for (std::int64_t h = 0; h < d.hv; ++h) {
        float* S = state + h * d.dk * d.dv;
#if defined(CLEF_HAVE_BF16_DOT)
        if (d.dk % 2 == 0) {
          run_chunk_bf16(d, c0, C, h, h / r, q, k, qk_stride, v, v_stride, g, beta, S, o, scratch, zeros.data());
          continue;
        }
#endif
        run_chunk<true>(d, c0, C, h, h / r, q, k, qk_stride, v, v_stride, g, beta, S, o, scratch);
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace clef::ops
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace clef::ops {
HWY_EXPORT(GatedDeltaRuleImpl);
HWY_EXPORT(GatedDeltaRuleBf16Impl);

void gated_delta_rule(const GdnDims& d, std::int64_t t, const float* q, const float* k, std::int64_t qk_stride,
                      const float* v, std::int64_t v_stride, const float* g, const float* beta, float* state,
                      float* o) {
  if (d.hk <= 0 || d.hv <= 0 || d.dk <= 0 || d.dv <= 0 || d.hv % d.hk != 0) {
    throw InvalidArgument("gated_delta_rule: bad dims Hk=" + std::to_string(d.hk) + " Hv=" + std::to_string(d.hv));
  }
  if (t <= 0) return;
  CLEF_DISPATCH(GatedDeltaRuleImpl)(d, t, q, k, qk_stride, v, v_stride, g, beta, state, o);
}

void gated_delta_rule_bf16(const GdnDims& d, std::int64_t t, const float* q, const float* k, std::int64_t qk_stride,
                           const float* v, std::int64_t v_stride, const float* g, const float* beta, float* state,
                           float* o) {
  if (d.hk <= 0 || d.hv <= 0 || d.dk <= 0 || d.dv <= 0 || d.hv % d.hk != 0) {
    throw InvalidArgument("gated_delta_rule_bf16: bad dims Hk=" + std::to_string(d.hk) + " Hv=" + std::to_string(d.hv));
  }
  if (t <= 0) return;
  CLEF_DISPATCH(GatedDeltaRuleBf16Impl)(d, t, q, k, qk_stride, v, v_stride, g, beta, state, o);
}
}  // namespace clef::ops
#endif  // HWY_ONCE
