// SPDX-License-Identifier: MIT
// Scalar references of the vision tower ops (ops/vision_ops.h): the formulas of
// docs/MODEL.md §6.6-§6.7 written out with double accumulation. Test oracles; never optimize.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/vision_ops.h"

namespace clef::ops::ref {
namespace {
double D(float x) { return static_cast<double>(x); }
}  // namespace

void layer_norm(const float* x, std::int64_t rows, std::int64_t n, const float* w, const float* b, float eps,
                float* y) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double s = 0.0;
    for (std::int64_t j = 0; j < n; ++j) s += D(xr[j]);
    const double mean = s / static_cast<double>(n);
    double ss = 0.0;
    for (std::int64_t j = 0; j < n; ++j) ss += (D(xr[j]) - mean) * (D(xr[j]) - mean);
    // biased variance
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + D(eps));
    for (std::int64_t j = 0; j < n; ++j) {
      yr[j] = static_cast<float>((D(xr[j]) - mean) * inv * D(w[j]) + D(b[j]));
    }
  }
}

void add_bias(float* y, std::int64_t rows, std::int64_t n, const float* b) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < n; ++j) y[r * n + j] += b[j];
  }
}

void gelu_tanh(const float* x, std::int64_t n, float* y) {
  const double beta = std::sqrt(2.0 / 3.14159265358979323846);
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = D(x[i]);
    y[i] = static_cast<float>(0.5 * v * (1.0 + std::tanh(beta * (v + 0.044715 * v * v * v))));
  }
}

void gelu_erf(const float* x, std::int64_t n, float* y) {
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = D(x[i]);
    y[i] = static_cast<float>(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));
  }
}

void attention_full(const AttentionDims& d, std::int64_t t, const float* q, const float* k, const float* v, float* o) {
  if (d.nh <= 0 || d.nkv <= 0 || d.hd <= 0 || d.nh % d.nkv != 0 || t < 0) {
    throw InvalidArgument("attention_full: bad shapes");
  }
  const std::int64_t group = d.nh / d.nkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d.hd));
  std::vector<double> s(static_cast<std::size_t>(t));
  for (std::int64_t i = 0; i < t; ++i) {
    for (std::int64_t h = 0; h < d.nh; ++h) {
      const std::int64_t j = h / group;
      const float* qi = q + (i * d.nh + h) * d.hd;
      double mx = -std::numeric_limits<double>::infinity();
      for (std::int64_t p = 0; p < t; ++p) {  // every key: no causal mask
        const float* kp = k + (p * d.nkv + j) * d.hd;
        double dot = 0.0;
        for (std::int64_t e = 0; e < d.hd; ++e) dot += D(qi[e]) * D(kp[e]);
        s[static_cast<std::size_t>(p)] = dot * scale;
        mx = std::max(mx, s[static_cast<std::size_t>(p)]);
      }
      double sum = 0.0;
      for (std::int64_t p = 0; p < t; ++p) {
        s[static_cast<std::size_t>(p)] = std::exp(s[static_cast<std::size_t>(p)] - mx);
        sum += s[static_cast<std::size_t>(p)];
      }
      float* oi = o + (i * d.nh + h) * d.hd;
      for (std::int64_t e = 0; e < d.hd; ++e) {
        double acc = 0.0;
        for (std::int64_t p = 0; p < t; ++p) acc += s[static_cast<std::size_t>(p)] * D(v[(p * d.nkv + j) * d.hd + e]);
        oi[e] = static_cast<float>(acc / sum);
      }
    }
  }
}

}  // namespace clef::ops::ref
