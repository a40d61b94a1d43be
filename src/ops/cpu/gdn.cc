// Optimized gated delta rule: the chunked form of architecture.md §4.6 with chunk C = 64,
// parallel over value heads. Per chunk and head (S = state entering the chunk, [dk, dv]):
//   G_i = cumsum(g),  Γ_ij = exp(G_i - G_j) (j <= i)
//   A_ij = β_i (k_i·k_j) Γ_ij (j < i);  (I + A) U = β V and (I + A) W = β e^G K, solved by
//   forward substitution (no explicit inverse)
//   V' = U - W S;   O = (e^G Q) S + P V' with P_ij = (q_i·k_j) Γ_ij (j <= i)
//   S <- e^{G_last} S + Σ_i e^{G_last - G_i} k_i ⊗ v'_i
// All products go through cpu::small_gemm on thread-local [C, *] buffers that stay in L1/L2.
// A chunk shorter than C (the tail of a call) runs with its own length: the zero padding of the
// HF reference changes nothing in exact arithmetic.
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/cpu/microgemm.h"
#include "ops/cpu/vmath.h"
#include "ops/ops.h"

namespace clef::ops {
namespace {

constexpr std::int64_t kChunk = 64;

struct ChunkScratch {
  std::vector<float> q, k, kt, v, u, w, vp, a, p, tmp, o, ktd;
  std::vector<float> beta, g_cum, eg;
  void ensure(std::int64_t dk, std::int64_t dv) {
    auto sz = [](std::int64_t n) { return static_cast<std::size_t>(n); };
    q.resize(sz(kChunk * dk));
    k.resize(sz(kChunk * dk));
    kt.resize(sz(dk * kChunk));
    ktd.resize(sz(dk * kChunk));
    v.resize(sz(kChunk * dv));
    u.resize(sz(kChunk * dv));
    w.resize(sz(kChunk * dk));
    vp.resize(sz(kChunk * dv));
    o.resize(sz(kChunk * dv));
    a.resize(sz(kChunk * kChunk));
    p.resize(sz(kChunk * kChunk));
    tmp.resize(sz(kChunk));
    beta.resize(sz(kChunk));
    g_cum.resize(sz(kChunk));
    eg.resize(sz(kChunk));
  }
};

/// One chunk of C <= kChunk tokens for value head h (k-head kh).
void run_chunk(const GdnDims& d, std::int64_t c0, std::int64_t C, std::int64_t h, std::int64_t kh,
               const float* q, const float* k, std::int64_t qk_stride, const float* v,
               std::int64_t v_stride, const float* g, const float* beta, float* S, float* o,
               ChunkScratch& s) {
  const std::int64_t dk = d.dk, dv = d.dv;
  float* Q = s.q.data();
  float* K = s.k.data();
  float* Kt = s.kt.data();
  float* V = s.v.data();
  float* G = s.g_cum.data();
  float* eG = s.eg.data();
  float* B = s.beta.data();
  // Gather this chunk's rows: Q, K [C, dk] (q pre-scaled by e^G below), V [C, dv], Kt [dk, C].
  float run = 0.0f;
  for (std::int64_t i = 0; i < C; ++i) {
    const float* qi = q + (c0 + i) * qk_stride + kh * dk;
    const float* ki = k + (c0 + i) * qk_stride + kh * dk;
    const float* vi = v + (c0 + i) * v_stride + h * dv;
    for (std::int64_t e = 0; e < dk; ++e) {
      Q[i * dk + e] = qi[e];
      K[i * dk + e] = ki[e];
    }
    for (std::int64_t e = 0; e < dv; ++e) V[i * dv + e] = vi[e];
    run += g[(c0 + i) * d.hv + h];
    G[i] = run;
    B[i] = beta[(c0 + i) * d.hv + h];
  }
  cpu::exp_n(G, eG, C);
  cpu::transpose(C, dk, K, dk, Kt, C);

  // A = K Kᵀ, P = Q Kᵀ (full [C, C]; only the lower parts are used).
  float* A = s.a.data();
  float* P = s.p.data();
  cpu::small_gemm(C, C, dk, K, dk, Kt, C, A, C);
  cpu::small_gemm(C, C, dk, Q, dk, Kt, C, P, C);
  float* tmp = s.tmp.data();
  for (std::int64_t i = 0; i < C; ++i) {
    // Γ_ij = exp(G_i - G_j) for j <= i
    for (std::int64_t j = 0; j <= i; ++j) tmp[j] = G[i] - G[j];
    cpu::exp_n(tmp, tmp, i + 1);
    float* ai = A + i * C;
    float* pi = P + i * C;
    for (std::int64_t j = 0; j < i; ++j) ai[j] = B[i] * ai[j] * tmp[j];
    for (std::int64_t j = 0; j <= i; ++j) pi[j] *= tmp[j];
  }

  // Forward substitution: U_i = β_i V_i - Σ_{j<i} A_ij U_j ;  W_i = β_i e^{G_i} K_i - Σ A_ij W_j.
  float* U = s.u.data();
  float* W = s.w.data();
  for (std::int64_t i = 0; i < C; ++i) {
    float* ui = U + i * dv;
    float* wi = W + i * dk;
    const float bi = B[i], bei = B[i] * eG[i];
    for (std::int64_t e = 0; e < dv; ++e) ui[e] = bi * V[i * dv + e];
    for (std::int64_t e = 0; e < dk; ++e) wi[e] = bei * K[i * dk + e];
    const float* ai = A + i * C;
    for (std::int64_t j = 0; j < i; ++j) {
      cpu::axpy(dv, -ai[j], U + j * dv, ui);
      cpu::axpy(dk, -ai[j], W + j * dk, wi);
    }
  }

  // V' = U - W S
  float* Vp = s.vp.data();
  for (std::int64_t i = 0; i < C * dv; ++i) Vp[i] = U[i];
  cpu::small_gemm(C, dv, dk, W, dk, S, dv, Vp, dv, -1.0f, true);

  // O = (e^G ⊙ Q) S + P V'
  for (std::int64_t i = 0; i < C; ++i) {
    for (std::int64_t e = 0; e < dk; ++e) Q[i * dk + e] *= eG[i];
  }
  float* O = s.o.data();
  cpu::small_gemm(C, dv, dk, Q, dk, S, dv, O, dv);
  // P is lower triangular: row block i only needs columns <= i; the full product is cheap.
  for (std::int64_t i = 0; i < C; ++i) {
    for (std::int64_t j = i + 1; j < C; ++j) P[i * C + j] = 0.0f;
  }
  cpu::small_gemm(C, dv, C, P, C, Vp, dv, O, dv, 1.0f, true);
  for (std::int64_t i = 0; i < C; ++i) {
    float* oi = o + ((c0 + i) * d.hv + h) * dv;
    for (std::int64_t e = 0; e < dv; ++e) oi[e] = O[i * dv + e];
  }

  // S <- e^{G_last} S + (Kt ⊙ e^{G_last - G}) V'
  const float gl = G[C - 1];
  for (std::int64_t i = 0; i < C; ++i) tmp[i] = gl - G[i];
  cpu::exp_n(tmp, tmp, C);
  float* Ktd = s.ktd.data();
  for (std::int64_t e = 0; e < dk; ++e) {
    for (std::int64_t i = 0; i < C; ++i) Ktd[e * C + i] = Kt[e * C + i] * tmp[i];
  }
  const float egl = eG[C - 1];
  for (std::int64_t e = 0; e < dk * dv; ++e) S[e] *= egl;
  cpu::small_gemm(dk, dv, C, Ktd, C, Vp, dv, S, dv, 1.0f, true);
}

}  // namespace

void gated_delta_rule(const GdnDims& d, std::int64_t t, const float* q, const float* k,
                      std::int64_t qk_stride, const float* v, std::int64_t v_stride, const float* g,
                      const float* beta, float* state, float* o) {
  if (d.hk <= 0 || d.hv <= 0 || d.dk <= 0 || d.dv <= 0 || d.hv % d.hk != 0) {
    throw InvalidArgument("gated_delta_rule: bad dims Hk=" + std::to_string(d.hk) + " Hv=" +
                          std::to_string(d.hv));
  }
  if (t <= 0) return;
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

}  // namespace clef::ops
