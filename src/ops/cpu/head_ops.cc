// SPDX-License-Identifier: MIT
// CPU kernels of the joint head's ops (contracts in ops/head_ops.h), compiled once per SIMD target
// (Highway foreach_target, ops/isa.h) with -ffp-contract=off (src/ops/CMakeLists.txt): the 16-lane
// dot keeps its 16 partial sums in 16 / N vectors of N lanes, so every target adds the same
// products in the same order and returns the baseline's bits.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cpu/head_ops.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/vmath-inl.h"
#include "ops/head_ops.h"
#include "ops/isa.h"
#include "ops/parallel.h"

HWY_BEFORE_NAMESPACE();
namespace clef::ops {
namespace HWY_NAMESPACE {
namespace cpu = ::clef::ops::cpu::HWY_NAMESPACE;
namespace hn = hwy::HWY_NAMESPACE;

/// Lanes of dot16's partial sums, and the vectors of this target that hold them.
constexpr std::int64_t kDotLanes = 16;
constexpr std::int64_t kVecLanes = static_cast<std::int64_t>(hn::MaxLanes(cpu::DF()));
static_assert(kDotLanes % kVecLanes == 0, "a target's float vector must divide 16 lanes");
constexpr std::int64_t kVecs = kDotLanes / kVecLanes;

/// Register tile of LinearDot16Impl: kTileRows input rows × kTileOuts weight rows, each pair one
/// independent dot16 sharing every load.
constexpr std::int64_t kTileRows = 4, kTileOuts = 4;
/// Rows per panel of LinearDot16Impl (one thread's unit; the panel's inputs stay in L2 while every
/// weight row streams past once).
constexpr std::int64_t kRowPanel = 64;
/// Queries per task and keys per block of AttentionRunsImpl: a task's score rows stay in L2 and a
/// block's key/value rows in L1/L2 while every query of the task reads them.
constexpr std::int64_t kQueryBlock = 16, kKeyBlock = 128;

/// dot16's closing steps: s = Σ tail products (ascending), then s += lane 0..15 of `acc`.
HWY_INLINE float finish_dot16(const cpu::VF* acc, const float* a, const float* b, std::int64_t i, std::int64_t n) {
  const cpu::DF d;
  HWY_ALIGN float lanes[kDotLanes];
  for (std::int64_t v = 0; v < kVecs; ++v) hn::Store(acc[v], d, lanes + v * kVecLanes);
  float s = 0.0f;
  for (; i < n; ++i) s += a[i] * b[i];
  for (std::int64_t j = 0; j < kDotLanes; ++j) s += lanes[j];
  return s;
}

HWY_INLINE float dot16(const float* a, const float* b, std::int64_t n) {
  const cpu::DF d;
  cpu::VF acc[kVecs];
  for (auto& v : acc) v = hn::Zero(d);
  std::int64_t i = 0;
  for (; i + kDotLanes <= n; i += kDotLanes) {
    for (std::int64_t v = 0; v < kVecs; ++v) {
      const std::int64_t at = i + v * kVecLanes;
      acc[v] = hn::Add(acc[v], hn::Mul(hn::LoadU(d, a + at), hn::LoadU(d, b + at)));
    }
  }
  return finish_dot16(acc, a, b, i, n);
}

/// out[r * kTileOuts + o] = dot16(x + r * ldx, w + o * ldw, n) for the whole tile.
HWY_INLINE void dot16_tile(const float* x, std::int64_t ldx, const float* w, std::int64_t ldw, std::int64_t n,
                           float* out) {
  const cpu::DF d;
  cpu::VF acc[kTileRows][kTileOuts][kVecs];
  for (auto& row : acc) {
    for (auto& o : row) {
      for (auto& v : o) v = hn::Zero(d);
    }
  }
  std::int64_t i = 0;
  for (; i + kDotLanes <= n; i += kDotLanes) {
    for (std::int64_t v = 0; v < kVecs; ++v) {
      const std::int64_t at = i + v * kVecLanes;
      cpu::VF wv[kTileOuts];
      for (std::int64_t o = 0; o < kTileOuts; ++o) wv[o] = hn::LoadU(d, w + o * ldw + at);
      for (std::int64_t r = 0; r < kTileRows; ++r) {
        const cpu::VF xv = hn::LoadU(d, x + r * ldx + at);
        for (std::int64_t o = 0; o < kTileOuts; ++o) acc[r][o][v] = hn::Add(acc[r][o][v], hn::Mul(xv, wv[o]));
      }
    }
  }
  for (std::int64_t r = 0; r < kTileRows; ++r) {
    for (std::int64_t o = 0; o < kTileOuts; ++o) {
      out[r * kTileOuts + o] = finish_dot16(acc[r][o], x + r * ldx, w + o * ldw, i, n);
    }
  }
}

float Dot16Impl(const float* a, const float* b, std::int64_t n) { return dot16(a, b, n); }

void LinearDot16Impl(const float* x, std::int64_t rows, std::int64_t in, const float* w, std::int64_t out,
                     const float* b, float* y) {
  const std::int64_t panels = (rows + kRowPanel - 1) / kRowPanel;
  const auto put = [&](std::int64_t r, std::int64_t o, float v) { y[r * out + o] = v + (b == nullptr ? 0.0f : b[o]); };
#pragma omp parallel for schedule(static) if (rows > kRowPanel && rows * out * in >= (std::int64_t{1} << 22))
  for (std::int64_t p = 0; p < panels; ++p) {
    const std::int64_t r0 = p * kRowPanel, r1 = std::min(rows, r0 + kRowPanel);
    float t[kTileRows * kTileOuts];
    std::int64_t o = 0;
    for (; o + kTileOuts <= out; o += kTileOuts) {
      const float* wo = w + o * in;
      std::int64_t r = r0;
      for (; r + kTileRows <= r1; r += kTileRows) {
        dot16_tile(x + r * in, in, wo, in, in, t);
        for (std::int64_t a = 0; a < kTileRows; ++a) {
          for (std::int64_t c = 0; c < kTileOuts; ++c) put(r + a, o + c, t[a * kTileOuts + c]);
        }
      }
      for (; r < r1; ++r) {
        for (std::int64_t c = 0; c < kTileOuts; ++c) put(r, o + c, dot16(x + r * in, wo + c * in, in));
      }
    }
    for (; o < out; ++o) {
      for (std::int64_t r = r0; r < r1; ++r) put(r, o, dot16(x + r * in, w + o * in, in));
    }
  }
}

void LayerNormF64StatsImpl(const float* x, std::int64_t rows, std::int64_t n, const float* w, const float* b, float eps,
                           float* y) {
#pragma omp parallel for schedule(static) if (rows * n >= kParallelMin)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double mean = 0.0;
    for (std::int64_t i = 0; i < n; ++i) mean += static_cast<double>(xr[i]);
    mean /= static_cast<double>(n);
    double var = 0.0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double dv = static_cast<double>(xr[i]) - mean;
      var += dv * dv;
    }
    var /= static_cast<double>(n);
    const auto inv = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps)));
    const auto m = static_cast<float>(mean);
    for (std::int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - m) * inv * w[i] + b[i];
  }
}

void L2NormalizeF64Impl(const float* x, std::int64_t n, float* y) {
  double s = 0.0;
  for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  const double inv = 1.0 / std::max(std::sqrt(s), 1e-12);
  for (std::int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(static_cast<double>(x[i]) * inv);
}

void AttentionRunsImpl(const float* q, std::int64_t nq, std::int64_t width, std::int64_t heads, const KvRun* runs,
                       std::int64_t n_runs, float* ctx) {
  const std::int64_t d = width / heads;
  std::int64_t nk = 0;
  for (std::int64_t r = 0; r < n_runs; ++r) nk += runs[r].rows;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::fill(ctx, ctx + nq * width, 0.0f);
  const std::int64_t qblocks = (nq + kQueryBlock - 1) / kQueryBlock, tasks = heads * qblocks;
#pragma omp parallel for schedule(dynamic, 1) if (tasks > 1 && nq * nk * width >= (std::int64_t{1} << 20))
  for (std::int64_t task = 0; task < tasks; ++task) {
    const std::int64_t h = task / qblocks, i0 = (task % qblocks) * kQueryBlock, i1 = std::min(nq, i0 + kQueryBlock);
    std::vector<float> p(static_cast<std::size_t>((i1 - i0) * nk));
    // Scores, key block by key block (the block's rows are read once for every query).
    std::int64_t base = 0;
    for (std::int64_t ri = 0; ri < n_runs; ++ri) {
      const KvRun& r = runs[ri];
      for (std::int64_t j0 = 0; j0 < r.rows; j0 += kKeyBlock) {
        const std::int64_t j1 = std::min(r.rows, j0 + kKeyBlock);
        for (std::int64_t i = i0; i < i1; ++i) {
          const float* qi = q + i * width + h * d;
          float* pi = p.data() + (i - i0) * nk + base;
          for (std::int64_t j = j0; j < j1; ++j) pi[j] = dot16(qi, r.k + j * width + h * d, d) * scale;
        }
      }
      base += r.rows;
    }
    // Softmax per query: max, exp, double sum over j ascending; weights rounded to float.
    for (std::int64_t i = i0; i < i1; ++i) {
      float* pi = p.data() + (i - i0) * nk;
      float mx = -INFINITY;
      for (std::int64_t j = 0; j < nk; ++j) mx = std::max(mx, pi[j]);
      double sum = 0.0;
      for (std::int64_t j = 0; j < nk; ++j) {
        pi[j] = std::exp(pi[j] - mx);
        sum += static_cast<double>(pi[j]);
      }
      for (std::int64_t j = 0; j < nk; ++j) pi[j] = static_cast<float>(static_cast<double>(pi[j]) / sum);
    }
    // Context: each query accumulates over j ascending, key block by key block (lanes are
    // elements e, so vectors change no sum).
    const cpu::DF df;
    base = 0;
    for (std::int64_t ri = 0; ri < n_runs; ++ri) {
      const KvRun& r = runs[ri];
      for (std::int64_t j0 = 0; j0 < r.rows; j0 += kKeyBlock) {
        const std::int64_t j1 = std::min(r.rows, j0 + kKeyBlock);
        for (std::int64_t i = i0; i < i1; ++i) {
          const float* pi = p.data() + (i - i0) * nk + base;
          float* out = ctx + i * width + h * d;
          for (std::int64_t j = j0; j < j1; ++j) {
            const float wj = pi[j];
            const float* vj = r.v + j * width + h * d;
            const cpu::VF wv = hn::Set(df, wj);
            std::int64_t e = 0;
            for (; e + kVecLanes <= d; e += kVecLanes) {
              hn::StoreU(hn::Add(hn::LoadU(df, out + e), hn::Mul(wv, hn::LoadU(df, vj + e))), df, out + e);
            }
            for (; e < d; ++e) out[e] += wj * vj[e];
          }
        }
      }
      base += r.rows;
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace clef::ops
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace clef::ops {
HWY_EXPORT(Dot16Impl);
HWY_EXPORT(LinearDot16Impl);
HWY_EXPORT(LayerNormF64StatsImpl);
HWY_EXPORT(L2NormalizeF64Impl);
HWY_EXPORT(AttentionRunsImpl);

float dot16(const float* a, const float* b, std::int64_t n) { return CLEF_DISPATCH(Dot16Impl)(a, b, n); }
void linear_dot16(const float* x, std::int64_t rows, std::int64_t in, const float* w, std::int64_t out, const float* b,
                  float* y) {
  CLEF_DISPATCH(LinearDot16Impl)(x, rows, in, w, out, b, y);
}
void layer_norm_f64stats(const float* x, std::int64_t rows, std::int64_t n, const float* w, const float* b, float eps,
                         float* y) {
  CLEF_DISPATCH(LayerNormF64StatsImpl)(x, rows, n, w, b, eps, y);
}
void l2_normalize_f64(const float* x, std::int64_t n, float* y) { CLEF_DISPATCH(L2NormalizeF64Impl)(x, n, y); }
void attention_runs(const float* q, std::int64_t nq, std::int64_t width, std::int64_t heads,
                    std::span<const KvRun> runs, float* ctx) {
  CLEF_DISPATCH(AttentionRunsImpl)(q, nq, width, heads, runs.data(), static_cast<std::int64_t>(runs.size()), ctx);
}
}  // namespace clef::ops
#endif  // HWY_ONCE
