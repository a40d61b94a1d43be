// SPDX-License-Identifier: MIT
// Scalar oracles of the joint head's ops (ops/head_ops.h): each contract's summation order written
// as a plain loop, one element at a time, no tiling, blocking or threads. Compiled with
// -ffp-contract=off like the kernels (src/ops/CMakeLists.txt). Test oracles; never optimize.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/head_ops.h"

namespace clef::ops::ref {

float dot16(const float* a, const float* b, std::int64_t n) {
  float lane[16] = {};
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) lane[j] += a[i + j] * b[i + j];
  }
  float s = 0.0f;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int j = 0; j < 16; ++j) s += lane[j];
  return s;
}

void linear_dot16(const float* x, std::int64_t rows, std::int64_t in, const float* w, std::int64_t out, const float* b,
                  float* y) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t o = 0; o < out; ++o) {
      y[r * out + o] = dot16(x + r * in, w + o * in, in) + (b == nullptr ? 0.0f : b[o]);
    }
  }
}

void layer_norm_f64stats(const float* x, std::int64_t rows, std::int64_t n, const float* w, const float* b, float eps,
                         float* y) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    double sum = 0.0;
    for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(xr[i]);
    const double mean = sum / static_cast<double>(n);
    double sq = 0.0;
    for (std::int64_t i = 0; i < n; ++i)
      sq += (static_cast<double>(xr[i]) - mean) * (static_cast<double>(xr[i]) - mean);
    const auto inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(n) + static_cast<double>(eps)));
    const auto m = static_cast<float>(mean);
    for (std::int64_t i = 0; i < n; ++i) y[r * n + i] = (xr[i] - m) * inv * w[i] + b[i];
  }
}

void l2_normalize_f64(const float* x, std::int64_t n, float* y) {
  double s = 0.0;
  for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  const double norm = std::max(std::sqrt(s), 1e-12);
  for (std::int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(static_cast<double>(x[i]) * (1.0 / norm));
}

void attention_runs(const float* q, std::int64_t nq, std::int64_t width, std::int64_t heads, const float* k,
                    const float* v, std::int64_t nk, float* ctx) {
  const std::int64_t d = width / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::fill(ctx, ctx + nq * width, 0.0f);
  std::vector<float> p(static_cast<std::size_t>(nk));
  for (std::int64_t h = 0; h < heads; ++h) {
    for (std::int64_t i = 0; i < nq; ++i) {
      const float* qi = q + i * width + h * d;
      float mx = -INFINITY;
      for (std::int64_t j = 0; j < nk; ++j) {
        p[static_cast<std::size_t>(j)] = dot16(qi, k + j * width + h * d, d) * scale;
        mx = std::max(mx, p[static_cast<std::size_t>(j)]);
      }
      double sum = 0.0;
      for (float& e : p) {
        e = std::exp(e - mx);
        sum += static_cast<double>(e);
      }
      float* out = ctx + i * width + h * d;
      for (std::int64_t j = 0; j < nk; ++j) {
        const auto pj = static_cast<float>(static_cast<double>(p[static_cast<std::size_t>(j)]) / sum);
        const float* vj = v + j * width + h * d;
        for (std::int64_t e = 0; e < d; ++e) out[e] += pj * vj[e];
      }
    }
  }
}

}  // namespace clef::ops::ref
