// Optimized gated delta rule: the chunked form of docs/MODEL.md §4.6 with chunk C = 64,
// parallel over value heads (each head walks its chunks in order). Per chunk and head, with S the
// state entering the chunk ([dk, dv], fp32) and local index i = 0..C-1:
//   G_i = cumsum(g),  Γ_ij = exp(G_i - G_j) (j <= i)
//   A_ij = β_i (k_i·k_j) Γ_ij (j < i),  Tinv = (I + A)^-1   (unit lower triangular, C x C)
//   V' = Tinv (β V - (β e^G K) S)       (= U - W S of §4.6: U = Tinv βV, W = Tinv β e^G K)
//   O  = (e^G Q) S + P V'  with P_ij = (q_i·k_j) Γ_ij (j <= i)
//   S <- e^{G_last} S + Σ_i e^{G_last - G_i} k_i ⊗ v'_i
// Every product is a cpu::small_gemm on [C, *] buffers that stay in L1/L2; q, k, v and o are
// read / written in place through their row strides (no gathers). The triangular products
// (K Kᵀ, Q Kᵀ, Tinv X, P V') only touch the blocks on or below the diagonal. Building Tinv costs
// C³/6 multiply-adds, replacing the C²·(dk+dv)/2 of a forward substitution on U and W.
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
#include "ops/cpu/vmath-inl.h"
#include "ops/isa.h"
#include "ops/ops.h"

HWY_BEFORE_NAMESPACE();
namespace clef::ops {
namespace HWY_NAMESPACE {
namespace cpu = ::clef::ops::cpu::HWY_NAMESPACE;
namespace {

constexpr std::int64_t kChunk = 64;
constexpr std::int64_t kRowBlock = 12;  // rows per triangular block (two 6-row register tiles)

struct ChunkScratch {
  std::vector<float> kt, ktd, kb, qs, x, vp, a, p, tinv;
  std::vector<float> beta, g_cum, eg, tmp;
  void ensure(std::int64_t dk, std::int64_t dv) {
    auto sz = [](std::int64_t n) { return static_cast<std::size_t>(n); };
    kt.resize(sz(dk * kChunk));
    ktd.resize(sz(dk * kChunk));
    kb.resize(sz(kChunk * dk));
    qs.resize(sz(kChunk * dk));
    x.resize(sz(kChunk * dv));
    vp.resize(sz(kChunk * dv));
    a.resize(sz(kChunk * kChunk));
    p.resize(sz(kChunk * kChunk));
    tinv.resize(sz(kChunk * kChunk));
    tmp.resize(sz(kChunk));
    beta.resize(sz(kChunk));
    g_cum.resize(sz(kChunk));
    eg.resize(sz(kChunk));
  }
};

/// y[0..n) = s * x[0..n)
inline void scale_copy(std::int64_t n, float s, const float* __restrict x, float* __restrict y) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = s * x[i];
}

/// One chunk of C <= kChunk tokens for value head h (k-head kh).
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
  float run = 0.0f;
  for (std::int64_t i = 0; i < C; ++i) {
    run += g[(c0 + i) * d.hv + h];
    G[i] = run;
    B[i] = beta[(c0 + i) * d.hv + h];
  }
  cpu::exp_n(G, eG, C);

  // Kt [dk, C]; A = K Kᵀ, P = Q Kᵀ on and below the diagonal blocks.
  float* Kt = s.kt.data();
  cpu::transpose(C, dk, K, qk_stride, Kt, C);
  float* A = s.a.data();
  float* P = s.p.data();
  for (std::int64_t i0 = 0; i0 < C; i0 += kRowBlock) {
    const std::int64_t rows = std::min(kRowBlock, C - i0);
    const std::int64_t cols = i0 + rows;
    cpu::small_gemm(rows, cols, dk, K + i0 * qk_stride, qk_stride, Kt, C, A + i0 * C, C);
    cpu::small_gemm(rows, cols, dk, Q + i0 * qk_stride, qk_stride, Kt, C, P + i0 * C, C);
  }
  // Decay mask: A_ij = β_i A_ij Γ_ij (j < i), P_ij = P_ij Γ_ij (j <= i), P_ij = 0 above.
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
  // Tinv = (I + A)^-1 row by row: T_i = e_i - Σ_{j<i} A_ij T_j (T_j is zero beyond column j).
  float* T = s.tinv.data();
  for (std::int64_t i = 0; i < C; ++i) {
    float* ti = T + i * C;
    for (std::int64_t c = 0; c < C; ++c) ti[c] = 0.0f;
    ti[i] = 1.0f;
    const float* ai = A + i * C;
    for (std::int64_t j = 0; j < i; ++j) cpu::axpy(j + 1, -ai[j], T + j * C, ti);
  }

  // X = β V - (β e^G K) S;  V' = Tinv X (lower triangular blocks).
  float* X = s.x.data();
  float* Kb = s.kb.data();
  for (std::int64_t i = 0; i < C; ++i) {
    scale_copy(dv, B[i], V + i * v_stride, X + i * dv);
    scale_copy(dk, B[i] * eG[i], K + i * qk_stride, Kb + i * dk);
  }
  cpu::small_gemm(C, dv, dk, Kb, dk, S, dv, X, dv, -1.0f, true);
  float* Vp = s.vp.data();
  for (std::int64_t i0 = 0; i0 < C; i0 += kRowBlock) {
    const std::int64_t rows = std::min(kRowBlock, C - i0);
    cpu::small_gemm(rows, dv, i0 + rows, T + i0 * C, C, X, dv, Vp + i0 * dv, dv);
  }

  // O = (e^G Q) S + P V', written straight into o.
  float* Qs = s.qs.data();
  for (std::int64_t i = 0; i < C; ++i) scale_copy(dk, eG[i], Q + i * qk_stride, Qs + i * dk);
  cpu::small_gemm(C, dv, dk, Qs, dk, S, dv, O, ldo);
  for (std::int64_t i0 = 0; i0 < C; i0 += kRowBlock) {
    const std::int64_t rows = std::min(kRowBlock, C - i0);
    cpu::small_gemm(rows, dv, i0 + rows, P + i0 * C, C, Vp, dv, O + i0 * ldo, ldo, 1.0f, true);
  }

  // S <- e^{G_last} S + (Kt ⊙ e^{G_last - G}) V'
  const float gl = G[C - 1];
  for (std::int64_t i = 0; i < C; ++i) tmp[i] = gl - G[i];
  cpu::exp_n(tmp, tmp, C);
  float* Ktd = s.ktd.data();
  for (std::int64_t e = 0; e < dk; ++e) {
    const float* src = Kt + e * C;
    float* dst = Ktd + e * C;
    for (std::int64_t i = 0; i < C; ++i) dst[i] = src[i] * tmp[i];
  }
  const float egl = eG[C - 1];
  const std::int64_t sn = dk * dv;
  for (std::int64_t e = 0; e < sn; ++e) S[e] *= egl;
  cpu::small_gemm(dk, dv, C, Ktd, C, Vp, dv, S, dv, 1.0f, true);
}

}  // namespace

void GatedDeltaRuleImpl(const GdnDims& d, std::int64_t t, const float* q, const float* k, std::int64_t qk_stride,
                        const float* v, std::int64_t v_stride, const float* g, const float* beta, float* state,
                        float* o) {
  const std::int64_t r = d.hv / d.hk;
#pragma omp parallel
  {
    thread_local ChunkScratch scratch;
    scratch.ensure(d.dk, d.dv);
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t h = 0; h < d.hv; ++h) {
      float* S = state + h * d.dk * d.dv;
      for (std::int64_t c0 = 0; c0 < t; c0 += kChunk) {
        const std::int64_t C = std::min(kChunk, t - c0);
        run_chunk(d, c0, C, h, h / r, q, k, qk_stride, v, v_stride, g, beta, S, o, scratch);
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

void gated_delta_rule(const GdnDims& d, std::int64_t t, const float* q, const float* k, std::int64_t qk_stride,
                      const float* v, std::int64_t v_stride, const float* g, const float* beta, float* state,
                      float* o) {
  if (d.hk <= 0 || d.hv <= 0 || d.dk <= 0 || d.dv <= 0 || d.hv % d.hk != 0) {
    throw InvalidArgument("gated_delta_rule: bad dims Hk=" + std::to_string(d.hk) + " Hv=" + std::to_string(d.hv));
  }
  if (t <= 0) return;
  CLEF_DISPATCH(GatedDeltaRuleImpl)(d, t, q, k, qk_stride, v, v_stride, g, beta, state, o);
}
}  // namespace clef::ops
#endif  // HWY_ONCE
