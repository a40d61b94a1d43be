// Optimized causal depthwise conv1d + SiLU with carried state (docs/MODEL.md §4.2).
// Channels are split into blocks across threads; inside a block the taps are transposed to
// [k, block] so every tap is a contiguous, vectorized multiply-add over channels. Compiled once
// per SIMD target (Highway foreach_target, ops/isa.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cpu/conv1d.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "ops/cpu/vmath-inl.h"
#include "ops/isa.h"
#include "ops/ops.h"

HWY_BEFORE_NAMESPACE();
namespace clef::ops {
namespace HWY_NAMESPACE {
namespace cpu = ::clef::ops::cpu::HWY_NAMESPACE;

void CausalConv1dSiluImpl(const float* x, std::int64_t t, std::int64_t c, const float* w, std::int64_t k, float* state,
                          float* y) {
  const std::int64_t hist = k - 1;
  constexpr std::int64_t kBlock = 256;
  const std::int64_t blocks = (c + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (t * c >= 8192)
  for (std::int64_t bi = 0; bi < blocks; ++bi) {
    const std::int64_t c0 = bi * kBlock;
    const std::int64_t nc = std::min(kBlock, c - c0);
    float wt[16 * kBlock];  // taps transposed [k, nc] (k <= 16 checked below)
    std::vector<float> wt_big;
    float* taps = wt;
    if (k > 16) {
      wt_big.resize(static_cast<std::size_t>(k * nc));
      taps = wt_big.data();
    }
    for (std::int64_t ch = 0; ch < nc; ++ch) {
      for (std::int64_t j = 0; j < k; ++j) taps[j * nc + ch] = w[(c0 + ch) * k + j];
    }
    for (std::int64_t i = 0; i < t; ++i) {
      float* __restrict out = y + i * c + c0;
      for (std::int64_t ch = 0; ch < nc; ++ch) out[ch] = 0.0f;
      for (std::int64_t j = 0; j < k; ++j) {
        const std::int64_t row = i + j - hist;  // input row index relative to x
        const float* __restrict in = row >= 0 ? x + row * c + c0 : state + (row + hist) * c + c0;
        const float* __restrict tj = taps + j * nc;
        for (std::int64_t ch = 0; ch < nc; ++ch) out[ch] += tj[ch] * in[ch];
      }
      cpu::silu_times(out, nullptr, out, nc);
    }
    // New state: last hist rows of [state ; x], for this channel block.
    for (std::int64_t r = 0; r < hist; ++r) {
      const std::int64_t row = t + r - hist;  // relative to x
      if (row >= 0) {
        std::copy(x + row * c + c0, x + row * c + c0 + nc, state + r * c + c0);
      } else {
        // Shift the old state up: rows are processed in increasing r and row + hist > r.
        std::copy(state + (row + hist) * c + c0, state + (row + hist) * c + c0 + nc, state + r * c + c0);
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace clef::ops
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace clef::ops {
HWY_EXPORT(CausalConv1dSiluImpl);

void causal_conv1d_silu(const float* x, std::int64_t t, std::int64_t c, const float* w, std::int64_t k, float* state,
                        float* y) {
  if (k < 1 || c < 1 || t < 0) throw InvalidArgument("causal_conv1d_silu: bad shape");
  if (t == 0) return;
  CLEF_DISPATCH(CausalConv1dSiluImpl)(x, t, c, w, k, state, y);
}
}  // namespace clef::ops
#endif  // HWY_ONCE
