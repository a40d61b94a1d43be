// SPDX-License-Identifier: MIT
// Scalar reference implementations of the backbone's elementwise, norm, conv, gate, rotary and
// attention ops (docs/MODEL.md §2-§7). Slow and obvious on purpose: each function is the
// formula of the spec written out, with double accumulation where a sum is taken. These are the
// oracles of tests/unit/test_ops.cc and must never be "optimized".
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/quant_blocks.h"
#include "ops/ops.h"
#include "ops/rope_freq.h"

namespace clef::ops::ref {
namespace {

double D(float x) { return static_cast<double>(x); }
double sigmoid_d(double x) { return 1.0 / (1.0 + std::exp(-x)); }

void check(bool ok, const char* op, const char* what) {
  if (!ok) throw InvalidArgument(std::string(op) + ": " + what);
}

}  // namespace

void embedding_gather(DType dtype, const void* table, std::int64_t rows, std::int64_t h,
                      std::span<const std::int32_t> ids, float* out) {
  const auto* bytes = static_cast<const std::byte*>(table);
  const std::size_t row_bytes = dtype_bytes(dtype, static_cast<std::uint64_t>(h));  // Q8_0: whole blocks
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int64_t id = ids[i];
    if (id < 0 || id >= rows) {
      throw InvalidArgument("embedding_gather: token id " + std::to_string(id) + " outside [0, " +
                            std::to_string(rows) + ")");
    }
    // out[i, :] = table[id, :]
    convert_to_f32(dtype, bytes + static_cast<std::size_t>(id) * row_bytes, static_cast<std::size_t>(h),
                   out + static_cast<std::int64_t>(i) * h);
  }
}

void rms_norm_offset(const float* x, std::int64_t rows, std::int64_t n, const float* w, float eps, float* y) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double ss = 0.0;
    for (std::int64_t j = 0; j < n; ++j) ss += D(xr[j]) * D(xr[j]);
    // r = 1 / sqrt(mean(x^2) + eps); y = (x * r) * (1 + w)
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + D(eps)));
    for (std::int64_t j = 0; j < n; ++j) yr[j] = (xr[j] * inv) * (1.0f + w[j]);
  }
}

void gated_rms_norm(const float* o, const float* z, std::int64_t rows, std::int64_t n, const float* w, float eps,
                    float* y) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* orow = o + r * n;
    const float* zr = z + r * n;
    float* yr = y + r * n;
    double ss = 0.0;
    for (std::int64_t j = 0; j < n; ++j) ss += D(orow[j]) * D(orow[j]);
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + D(eps)));
    for (std::int64_t j = 0; j < n; ++j) {
      // n = o * r; y = w * n; y = y * silu(z)
      const float normed = w[j] * (orow[j] * inv);
      const float silu_z = static_cast<float>(D(zr[j]) * sigmoid_d(D(zr[j])));
      yr[j] = normed * silu_z;
    }
  }
}

void silu_mul(const float* gate, const float* up, std::int64_t n, float* out) {
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<float>(D(gate[i]) * sigmoid_d(D(gate[i]))) * up[i];
  }
}

void add_inplace(float* h, const float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) h[i] += x[i];
}

void sigmoid_mul(float* o, const float* gate, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) o[i] *= static_cast<float>(sigmoid_d(D(gate[i])));
}

void l2norm_rows(float* x, std::int64_t rows, std::int64_t n, std::int64_t stride, float eps, float scale) {
  for (std::int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * stride;
    double ss = 0.0;
    for (std::int64_t j = 0; j < n; ++j) ss += D(xr[j]) * D(xr[j]);
    // x / sqrt(sum(x^2) + eps), eps on the SUM (FLA l2norm)
    const float inv = static_cast<float>(1.0 / std::sqrt(ss + D(eps)));
    for (std::int64_t j = 0; j < n; ++j) xr[j] = (xr[j] * inv) * scale;
  }
}

void causal_conv1d_silu(const float* x, std::int64_t t, std::int64_t c, const float* w, std::int64_t k, float* state,
                        float* y) {
  check(k >= 1, "causal_conv1d_silu", "kernel width must be >= 1");
  // Full input rows: [state (k-1 rows) ; x (t rows)].
  const std::int64_t hist = k - 1;
  auto in = [&](std::int64_t row, std::int64_t ch) -> float {
    return row < hist ? state[row * c + ch] : x[(row - hist) * c + ch];
  };
  for (std::int64_t i = 0; i < t; ++i) {
    for (std::int64_t ch = 0; ch < c; ++ch) {
      // u[i, ch] = sum_j w[ch, j] * input[i - (k-1) + j, ch]; tap k-1 = current token
      double acc = 0.0;
      for (std::int64_t j = 0; j < k; ++j) acc += D(w[ch * k + j]) * D(in(i + j, ch));
      y[i * c + ch] = static_cast<float>(acc * sigmoid_d(acc));
    }
  }
  // New state = the last k-1 rows of the full input.
  std::vector<float> next(static_cast<std::size_t>(hist * c));
  for (std::int64_t r = 0; r < hist; ++r) {
    for (std::int64_t ch = 0; ch < c; ++ch) next[static_cast<std::size_t>(r * c + ch)] = in(t + r, ch);
  }
  for (std::size_t i = 0; i < next.size(); ++i) state[i] = next[i];
}

void gdn_gates(const float* b, const float* a, std::int64_t t, std::int64_t hv, const float* neg_a,
               const float* dt_bias, float* beta, float* g) {
  for (std::int64_t i = 0; i < t; ++i) {
    for (std::int64_t h = 0; h < hv; ++h) {
      const std::int64_t j = i * hv + h;
      beta[j] = static_cast<float>(sigmoid_d(D(b[j])));
      const float xs = a[j] + dt_bias[h];
      // PyTorch softplus(beta=1, threshold=20): x if x > 20 else log1p(exp(x))
      const float sp = xs > 20.0f ? xs : static_cast<float>(std::log1p(std::exp(static_cast<double>(xs))));
      g[j] = neg_a[h] * sp;
    }
  }
}

void rope_tables(const RopeDims& r, const std::int32_t* pos, std::int64_t t, float* cos, float* sin) {
  const std::int64_t half = r.rotary_dim / 2;
  const std::vector<float> inv = rope_inv_freq(r);
  const std::vector<int> stream = rope_streams(r);
  for (std::int64_t i = 0; i < t; ++i) {
    for (std::int64_t f = 0; f < half; ++f) {
      const float p = static_cast<float>(pos[stream[static_cast<std::size_t>(f)] * t + i]);
      const float angle = p * inv[static_cast<std::size_t>(f)];  // one fp32 multiply
      cos[i * half + f] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin[i * half + f] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

void apply_rope(float* x, std::int64_t t, std::int64_t heads, std::int64_t head_dim, std::int64_t row_stride,
                std::int64_t rotary_dim, const float* cos, const float* sin) {
  const std::int64_t half = rotary_dim / 2;
  for (std::int64_t i = 0; i < t; ++i) {
    for (std::int64_t h = 0; h < heads; ++h) {
      float* v = x + i * row_stride + h * head_dim;
      for (std::int64_t f = 0; f < half; ++f) {
        const float c = cos[i * half + f], s = sin[i * half + f];
        const float a = v[f], b = v[f + half];
        // q*cos + rotate_half(q)*sin, rotate_half(q) = [-q2, q1]
        v[f] = a * c + (-b) * s;
        v[f + half] = b * c + a * s;
      }
    }
  }
}

void attention(const AttentionDims& d, std::int64_t t, std::int64_t tk, const float* q, const float* kc,
               const float* vc, float* o) {
  check(tk >= t && d.nkv > 0 && d.nh % d.nkv == 0, "attention", "bad shapes");
  const std::int64_t group = d.nh / d.nkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d.hd));
  std::vector<double> s(static_cast<std::size_t>(tk));
  for (std::int64_t i = 0; i < t; ++i) {
    const std::int64_t last = tk - t + i;  // causal by sequence index
    for (std::int64_t h = 0; h < d.nh; ++h) {
      const std::int64_t j = h / group;
      const float* qi = q + (i * d.nh + h) * d.hd;
      double mx = -std::numeric_limits<double>::infinity();
      for (std::int64_t p = 0; p <= last; ++p) {
        const float* kp = kc + (p * d.nkv + j) * d.hd;
        double dot = 0.0;
        for (std::int64_t e = 0; e < d.hd; ++e) dot += D(qi[e]) * D(kp[e]);
        s[static_cast<std::size_t>(p)] = dot * scale;
        mx = std::max(mx, s[static_cast<std::size_t>(p)]);
      }
      double sum = 0.0;
      for (std::int64_t p = 0; p <= last; ++p) {
        s[static_cast<std::size_t>(p)] = std::exp(s[static_cast<std::size_t>(p)] - mx);
        sum += s[static_cast<std::size_t>(p)];
      }
      float* oi = o + (i * d.nh + h) * d.hd;
      for (std::int64_t e = 0; e < d.hd; ++e) {
        double acc = 0.0;
        for (std::int64_t p = 0; p <= last; ++p) {
          acc += s[static_cast<std::size_t>(p)] * D(vc[(p * d.nkv + j) * d.hd + e]);
        }
        oi[e] = static_cast<float>(acc / sum);
      }
    }
  }
}

}  // namespace clef::ops::ref
