// SPDX-License-Identifier: MIT
// Optimized causal depthwise conv1d + SiLU with carried state (docs/MODEL.md §4.2), alone and as
// the fused GDN input stage (conv + SiLU, q/k L2 norm, gates: §4.2-4.4). The taps are transposed
// to [k, channels] so every tap is a contiguous, vectorized multiply-add over channels. The
// plain op splits channel blocks across threads; the fused stage splits token rows, so each
// row's conv output is still in L1 when its heads are normalized and its gates computed (one
// pass over the chunk instead of three). Compiled once per SIMD target (Highway foreach_target,
// ops/isa.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cpu/conv1d.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/cpu/vmath-inl.h"
#include "ops/isa.h"
#include "ops/ops.h"

HWY_BEFORE_NAMESPACE();
namespace clef::ops {
namespace HWY_NAMESPACE {
namespace cpu = ::clef::ops::cpu::HWY_NAMESPACE;

namespace {
constexpr std::int64_t kConvBlock = 256;

/// y[0, nc) = silu(sum_j taps[j, 0..nc) * in_j[0..nc)) for one row and one channel block: per
/// vector of channels the tap sum runs in a register from zero, one multiply-add per tap in order
/// j = 0..k-1 (fused where the target has FMA, as the compiler fused the plain loop this replaces),
/// then x * sigmoid(x) as cpu::silu_times computes it. rows[j] points at the input row of tap j
/// (at the block's first channel). The sum never goes through memory: a row-by-row version that
/// did (out[ch] += tap * in) ran ~10x slower, its stores 4 KiB-aliasing the input loads (rows of
/// 6,144 floats are 24 KiB apart).
inline void conv_row_block(const float* const* rows, const float* taps, std::int64_t ldt, std::int64_t k,
                           std::int64_t nc, float* out) {
  namespace hn = hwy::HWY_NAMESPACE;
  const cpu::DF d;
  const std::int64_t N = cpu::lanes();
  std::int64_t ch = 0;
  if (k == 4) {  // the models' conv: the same multiply-adds, tap loop unrolled, pointers in registers
    const float *x0 = rows[0], *x1 = rows[1], *x2 = rows[2], *x3 = rows[3];
    const float *w0 = taps, *w1 = taps + ldt, *w2 = taps + 2 * ldt, *w3 = taps + 3 * ldt;
    for (; ch + N <= nc; ch += N) {
      cpu::VF acc = hn::MulAdd(hn::LoadU(d, w0 + ch), hn::LoadU(d, x0 + ch), hn::Zero(d));
      acc = hn::MulAdd(hn::LoadU(d, w1 + ch), hn::LoadU(d, x1 + ch), acc);
      acc = hn::MulAdd(hn::LoadU(d, w2 + ch), hn::LoadU(d, x2 + ch), acc);
      acc = hn::MulAdd(hn::LoadU(d, w3 + ch), hn::LoadU(d, x3 + ch), acc);
      hn::StoreU(hn::Mul(acc, cpu::Sigmoid(d, acc)), d, out + ch);
    }
  }
  for (; ch + N <= nc; ch += N) {
    cpu::VF acc = hn::Zero(d);
    for (std::int64_t j = 0; j < k; ++j)
      acc = hn::MulAdd(hn::LoadU(d, taps + j * ldt + ch), hn::LoadU(d, rows[j] + ch), acc);
    hn::StoreU(hn::Mul(acc, cpu::Sigmoid(d, acc)), d, out + ch);
  }
  if (ch < nc) {
    const auto t = static_cast<std::size_t>(nc - ch);
    const auto m = hn::FirstN(d, t);
    cpu::VF acc = hn::Zero(d);
    for (std::int64_t j = 0; j < k; ++j) {
      acc = hn::MulAdd(cpu::LoadTail(m, d, taps + j * ldt + ch, t), cpu::LoadTail(m, d, rows[j] + ch, t), acc);
    }
    cpu::StoreTail(hn::Mul(acc, cpu::Sigmoid(d, acc)), m, d, out + ch, t);
  }
}
}  // namespace

/// The input row of each tap of output row i, at channel c0: tap j reads row i + j - (k-1) of
/// [state (k-1 rows) ; x], rows c floats apart.
inline void tap_rows(const float* x, const float* state, std::int64_t c, std::int64_t k, std::int64_t i,
                     std::int64_t c0, const float** rows) {
  for (std::int64_t j = 0; j < k; ++j) {
    const std::int64_t row = i + j - (k - 1);  // relative to x
    rows[j] = (row >= 0 ? x + row * c : state + (row + k - 1) * c) + c0;
  }
}

/// The carried state after t rows, channels [c0, c0 + nc): the last k-1 rows of [state ; x], in
/// place (rows are written in increasing order and each reads a later one). Runs after every
/// output row has read the old state.
inline void carry_state(const float* x, std::int64_t t, std::int64_t c, std::int64_t k, std::int64_t c0,
                        std::int64_t nc, float* state) {
  const std::int64_t hist = k - 1;
  for (std::int64_t r = 0; r < hist; ++r) {
    const std::int64_t row = t + r - hist;  // relative to x
    const float* src = (row >= 0 ? x + row * c : state + (row + hist) * c) + c0;
    std::copy(src, src + nc, state + r * c + c0);
  }
}

void CausalConv1dSiluImpl(const float* x, std::int64_t t, std::int64_t c, const float* w, std::int64_t k, float* state,
                          float* y) {
  const std::int64_t blocks = (c + kConvBlock - 1) / kConvBlock;
#pragma omp parallel if (t * c >= 8192)
  {
    std::vector<float> taps(static_cast<std::size_t>(k * kConvBlock));  // the block's taps transposed [k, nc]
    std::vector<const float*> rows(static_cast<std::size_t>(k));
#pragma omp for schedule(static)
    for (std::int64_t bi = 0; bi < blocks; ++bi) {
      const std::int64_t c0 = bi * kConvBlock;
      const std::int64_t nc = std::min(kConvBlock, c - c0);
      transpose_conv_taps(w + c0 * k, nc, k, taps.data());
      for (std::int64_t i = 0; i < t; ++i) {
        tap_rows(x, state, c, k, i, c0, rows.data());
        conv_row_block(rows.data(), taps.data(), nc, k, nc, y + i * c + c0);
      }
    }
  }
  // Each channel block's state after all its rows (blocks are disjoint, so after the loop is the
  // same as after each block).
  carry_state(x, t, c, k, 0, c, state);
}

void GdnInputStageImpl(const GdnInputStage& s, std::int64_t t, const float* x, float* state, float* u, const float* b,
                       const float* a, float* beta, float* g) {
  const std::int64_t c = s.channels, k = s.conv_k;
  // Taps transposed [k, c] (c * k floats: 96 KiB for the 0.8b layer), shared by all threads: the
  // caller's, or made here.
  const float* taps = s.conv_taps;
  if (taps == nullptr) {
    thread_local std::vector<float> taps_buf;
    taps_buf.resize(static_cast<std::size_t>(k * c));
    transpose_conv_taps(s.conv_w, c, k, taps_buf.data());
    taps = taps_buf.data();
  }
#pragma omp parallel if (t * c >= 8192)
  {
    std::vector<const float*> rows(static_cast<std::size_t>(k));
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < t; ++i) {
      float* ui = u + i * c;
      for (std::int64_t c0 = 0; c0 < c; c0 += kConvBlock) {
        tap_rows(x, state, c, k, i, c0, rows.data());
        conv_row_block(rows.data(), taps + c0, c, k, std::min(kConvBlock, c - c0), ui + c0);
      }
      // L2 norm of the q heads (then scaled by qscale) and k heads, as L2normRowsImpl.
      for (std::int64_t h = 0; h < 2 * s.hk; ++h) {
        float* xr = ui + h * s.dk;
        const float scale = h < s.hk ? s.qscale : 1.0f;
        const float inv = 1.0f / std::sqrt(cpu::sum_squares(xr, s.dk) + s.eps);
        for (std::int64_t e = 0; e < s.dk; ++e) xr[e] = (xr[e] * inv) * scale;
      }
      // Gates of the row, as GdnGatesImpl.
      const std::int64_t hv = s.hv;
      cpu::sigmoid_times(b + i * hv, nullptr, beta + i * hv, hv);
      for (std::int64_t h = 0; h < hv; ++h) {
        const float xs = a[i * hv + h] + s.dt_bias[h];
        const float sp = xs > 20.0f ? xs : std::log1p(std::exp(xs));
        g[i * hv + h] = s.neg_a[h] * sp;
      }
    }
  }
  carry_state(x, t, c, k, 0, c, state);
}

}  // namespace HWY_NAMESPACE
}  // namespace clef::ops
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace clef::ops {
HWY_EXPORT(CausalConv1dSiluImpl);
HWY_EXPORT(GdnInputStageImpl);

void transpose_conv_taps(const float* w, std::int64_t c, std::int64_t k, float* taps) {
  for (std::int64_t ch = 0; ch < c; ++ch) {
    for (std::int64_t j = 0; j < k; ++j) taps[j * c + ch] = w[ch * k + j];
  }
}

void causal_conv1d_silu(const float* x, std::int64_t t, std::int64_t c, const float* w, std::int64_t k, float* state,
                        float* y) {
  if (k < 1 || c < 1 || t < 0) throw InvalidArgument("causal_conv1d_silu: bad shape");
  if (t == 0) return;
  CLEF_DISPATCH(CausalConv1dSiluImpl)(x, t, c, w, k, state, y);
}

void gdn_input_stage(const GdnInputStage& s, std::int64_t t, const float* x, float* state, float* u, const float* b,
                     const float* a, float* beta, float* g) {
  if (s.conv_k < 1 || s.channels < 1 || t < 0 || s.hk < 0 || s.dk < 1 || s.hv < 0 || 2 * s.hk * s.dk > s.channels)
    throw InvalidArgument("gdn_input_stage: bad shape (channels " + std::to_string(s.channels) + ", conv_k " +
                          std::to_string(s.conv_k) + ", hk " + std::to_string(s.hk) + ", dk " + std::to_string(s.dk) +
                          ", hv " + std::to_string(s.hv) + ")");
  if (t == 0) return;
  CLEF_DISPATCH(GdnInputStageImpl)(s, t, x, state, u, b, a, beta, g);
}
}  // namespace clef::ops
#endif  // HWY_ONCE
