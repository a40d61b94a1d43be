// SPDX-License-Identifier: MIT
// Scalar references of the gated delta rule (docs/MODEL.md §4.5, §4.6).
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/ops.h"

namespace clef::ops::ref {
namespace {

void check_dims(const GdnDims& d) {
  if (d.hk <= 0 || d.hv <= 0 || d.dk <= 0 || d.dv <= 0 || d.hv % d.hk != 0) {
    throw InvalidArgument("gated_delta_rule: bad dims Hk=" + std::to_string(d.hk) + " Hv=" + std::to_string(d.hv) +
                          " dk=" + std::to_string(d.dk) + " dv=" + std::to_string(d.dv));
  }
}

}  // namespace

void gated_delta_rule(const GdnDims& d, std::int64_t t, const float* q, const float* k, std::int64_t qk_stride,
                      const float* v, std::int64_t v_stride, const float* g, const float* beta, float* state,
                      float* o) {
  check_dims(d);
  const std::int64_t r = d.hv / d.hk;
  std::vector<double> m(static_cast<std::size_t>(d.dv));
  for (std::int64_t i = 0; i < t; ++i) {
    for (std::int64_t h = 0; h < d.hv; ++h) {
      const std::int64_t kh = h / r;  // grouped mapping kappa(h) = floor(h / r)
      const float* qi = q + i * qk_stride + kh * d.dk;
      const float* ki = k + i * qk_stride + kh * d.dk;
      const float* vi = v + i * v_stride + h * d.dv;
      float* S = state + h * d.dk * d.dv;  // S[a, b], a = key dim, b = value dim
      const float alpha = std::exp(g[i * d.hv + h]);
      const float b = beta[i * d.hv + h];
      // S <- alpha * S
      for (std::int64_t e = 0; e < d.dk * d.dv; ++e) S[e] *= alpha;
      // m = S^T k
      for (std::int64_t c = 0; c < d.dv; ++c) {
        double acc = 0.0;
        for (std::int64_t a = 0; a < d.dk; ++a)
          acc += static_cast<double>(S[a * d.dv + c]) * static_cast<double>(ki[a]);
        m[static_cast<std::size_t>(c)] = acc;
      }
      // delta = beta * (v - m);  S <- S + k (x) delta
      for (std::int64_t c = 0; c < d.dv; ++c) {
        const float delta = b * static_cast<float>(static_cast<double>(vi[c]) - m[static_cast<std::size_t>(c)]);
        for (std::int64_t a = 0; a < d.dk; ++a) S[a * d.dv + c] += ki[a] * delta;
      }
      // o = S^T q (updated state)
      float* oi = o + (i * d.hv + h) * d.dv;
      for (std::int64_t c = 0; c < d.dv; ++c) {
        double acc = 0.0;
        for (std::int64_t a = 0; a < d.dk; ++a)
          acc += static_cast<double>(S[a * d.dv + c]) * static_cast<double>(qi[a]);
        oi[c] = static_cast<float>(acc);
      }
    }
  }
}

void gated_delta_rule_chunked(const GdnDims& d, std::int64_t t, std::int64_t chunk, const float* q, const float* k,
                              std::int64_t qk_stride, const float* v, std::int64_t v_stride, const float* g,
                              const float* beta, float* state, float* o) {
  check_dims(d);
  if (chunk <= 0) throw InvalidArgument("gated_delta_rule_chunked: chunk must be positive");
  const std::int64_t r = d.hv / d.hk, dk = d.dk, dv = d.dv;
  auto idx = [](std::int64_t a, std::int64_t b, std::int64_t ld) { return static_cast<std::size_t>(a * ld + b); };
  for (std::int64_t h = 0; h < d.hv; ++h) {
    const std::int64_t kh = h / r;
    float* S = state + h * dk * dv;
    for (std::int64_t c0 = 0; c0 < t; c0 += chunk) {
      const std::int64_t C = std::min(chunk, t - c0);
      auto Q = [&](std::int64_t i, std::int64_t a) { return q[(c0 + i) * qk_stride + kh * dk + a]; };
      auto K = [&](std::int64_t i, std::int64_t a) { return k[(c0 + i) * qk_stride + kh * dk + a]; };
      auto V = [&](std::int64_t i, std::int64_t c) { return v[(c0 + i) * v_stride + h * dv + c]; };
      auto B = [&](std::int64_t i) { return beta[(c0 + i) * d.hv + h]; };
      // G_i = sum_{j<=i} g_j
      std::vector<float> G(static_cast<std::size_t>(C));
      float run = 0.0f;
      for (std::int64_t i = 0; i < C; ++i) {
        run += g[(c0 + i) * d.hv + h];
        G[static_cast<std::size_t>(i)] = run;
      }
      auto gamma = [&](std::int64_t i, std::int64_t j) {
        return std::exp(G[static_cast<std::size_t>(i)] - G[static_cast<std::size_t>(j)]);
      };
      // A_ij = beta_i (k_i . k_j) Gamma_ij, j < i
      std::vector<float> A(static_cast<std::size_t>(C * C), 0.0f);
      for (std::int64_t i = 0; i < C; ++i) {
        for (std::int64_t j = 0; j < i; ++j) {
          float dot = 0.0f;
          for (std::int64_t a = 0; a < dk; ++a) dot += K(i, a) * K(j, a);
          A[idx(i, j, C)] = B(i) * dot * gamma(i, j);
        }
      }
      // Tinv = (I + A)^-1 by forward substitution (unit lower triangular)
      std::vector<float> Ti(static_cast<std::size_t>(C * C), 0.0f);
      for (std::int64_t i = 0; i < C; ++i) {
        Ti[idx(i, i, C)] = 1.0f;
        for (std::int64_t j = 0; j < i; ++j) {
          float acc = 0.0f;
          for (std::int64_t m = j; m < i; ++m) acc += A[idx(i, m, C)] * Ti[idx(m, j, C)];
          Ti[idx(i, j, C)] = -acc;
        }
      }
      // U = Tinv (beta V) [C, dv];  W = Tinv (beta exp(G) K) [C, dk]
      std::vector<float> U(static_cast<std::size_t>(C * dv), 0.0f), W(static_cast<std::size_t>(C * dk), 0.0f);
      for (std::int64_t i = 0; i < C; ++i) {
        for (std::int64_t j = 0; j <= i; ++j) {
          const float tij = Ti[idx(i, j, C)];
          for (std::int64_t c = 0; c < dv; ++c) U[idx(i, c, dv)] += tij * B(j) * V(j, c);
          const float ej = std::exp(G[static_cast<std::size_t>(j)]);
          for (std::int64_t a = 0; a < dk; ++a) W[idx(i, a, dk)] += tij * B(j) * ej * K(j, a);
        }
      }
      // V' = U - W S
      std::vector<float> Vp(static_cast<std::size_t>(C * dv));
      for (std::int64_t i = 0; i < C; ++i) {
        for (std::int64_t c = 0; c < dv; ++c) {
          float acc = 0.0f;
          for (std::int64_t a = 0; a < dk; ++a) acc += W[idx(i, a, dk)] * S[a * dv + c];
          Vp[idx(i, c, dv)] = U[idx(i, c, dv)] - acc;
        }
      }
      // O = (exp(G) Q) S + P V', P_ij = (q_i . k_j) Gamma_ij, j <= i
      for (std::int64_t i = 0; i < C; ++i) {
        const float ei = std::exp(G[static_cast<std::size_t>(i)]);
        std::vector<float> P(static_cast<std::size_t>(i + 1));
        for (std::int64_t j = 0; j <= i; ++j) {
          float dot = 0.0f;
          for (std::int64_t a = 0; a < dk; ++a) dot += Q(i, a) * K(j, a);
          P[static_cast<std::size_t>(j)] = dot * gamma(i, j);
        }
        float* oi = o + ((c0 + i) * d.hv + h) * dv;
        for (std::int64_t c = 0; c < dv; ++c) {
          float acc = 0.0f;
          for (std::int64_t a = 0; a < dk; ++a) acc += ei * Q(i, a) * S[a * dv + c];
          for (std::int64_t j = 0; j <= i; ++j) acc += P[static_cast<std::size_t>(j)] * Vp[idx(j, c, dv)];
          oi[c] = acc;
        }
      }
      // S <- exp(G_last) S + sum_i exp(G_last - G_i) k_i (x) v'_i
      const float glast = G[static_cast<std::size_t>(C - 1)];
      for (std::int64_t a = 0; a < dk; ++a) {
        for (std::int64_t c = 0; c < dv; ++c) {
          float acc = std::exp(glast) * S[a * dv + c];
          for (std::int64_t i = 0; i < C; ++i) {
            acc += std::exp(glast - G[static_cast<std::size_t>(i)]) * K(i, a) * Vp[idx(i, c, dv)];
          }
          S[a * dv + c] = acc;
        }
      }
    }
  }
}

}  // namespace clef::ops::ref
