// SPDX-License-Identifier: MIT
// Measured arithmetic peak of the level in use (ops/peak.h), one copy per SIMD target (Highway).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cpu/peak.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "ops/cpu/microgemm-inl.h"
#include "ops/cpu/vmath-inl.h"
#include "ops/isa.h"
#include "ops/peak.h"

HWY_BEFORE_NAMESPACE();
namespace clef::ops {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace cpu = ::clef::ops::cpu::HWY_NAMESPACE;

/// 12 independent FMA chains per thread (enough to cover the FMA latency x ports of current
/// cores), all threads; returns GFLOP/s (2 per lane per FMA).
double PeakFp32Impl(int threads, std::int64_t iters) {
  const auto t0 = std::chrono::steady_clock::now();
  float sink = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
  {
    const cpu::DF d;
    cpu::VF acc[12];
    for (auto& a : acc) a = hn::Set(d, 0.0f);
    const cpu::VF x = hn::Set(d, 0.999f), y = hn::Set(d, 1e-3f);
    for (std::int64_t i = 0; i < iters; ++i) {
      for (auto& a : acc) a = hn::MulAdd(a, x, y);
    }
    for (auto& a : acc) sink += hn::GetLane(hn::SumOfLanes(d, a));
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (sink == 12345.0f) return 0.0;  // keeps the chains alive
  return 12.0 * static_cast<double>(cpu::lanes()) * 2.0 * static_cast<double>(iters) * threads / s / 1e9;
}

#if defined(CLEF_HAVE_BF16_DOT)
/// 12 independent vdpbf16ps chains (32 bf16 products = 64 FLOP each).
CLEF_BF16_ATTR double peak_bf16_dot(int threads, std::int64_t iters) {
  const auto t0 = std::chrono::steady_clock::now();
  float sink = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
  {
    __m512 acc[12];
    for (auto& a : acc) a = _mm512_set1_ps(0.0f);
    const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
    for (std::int64_t i = 0; i < iters; ++i) {
      for (auto& a : acc) a = _mm512_dpbf16_ps(a, x, x);
    }
    for (auto& a : acc) sink += _mm512_reduce_add_ps(a);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (sink == 12345.0f) return 0.0;
  return 12.0 * 64.0 * static_cast<double>(iters) * threads / s / 1e9;
}
#endif

/// The bf16 mode's peak: vdpbf16ps where the level has it, else the fp32 FMA peak (the bf16
/// mode multiplies bf16 values with fp32 FMAs there).
double PeakBf16Impl(int threads, std::int64_t iters) {
#if defined(CLEF_HAVE_BF16_DOT)
  return peak_bf16_dot(threads, iters);
#else
  return PeakFp32Impl(threads, iters);
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace clef::ops
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace clef::ops {
HWY_EXPORT(PeakFp32Impl);
HWY_EXPORT(PeakBf16Impl);

PeakGflops measure_peak_gflops(int threads, int repeats, std::int64_t iters) {
  PeakGflops p;
  for (int r = 0; r < repeats; ++r) {
    p.fp32 = std::max(p.fp32, CLEF_DISPATCH(PeakFp32Impl)(threads, iters));
    p.bf16 = std::max(p.bf16, CLEF_DISPATCH(PeakBf16Impl)(threads, iters));
  }
#if defined(__x86_64__)
  p.bf16_dot = active_isa() == IsaLevel::kAvx512Bf16;
#endif
  return p;
}

double best_chain_rate_gops(int threads, int repeats, std::int64_t iters, double (*chain)(std::int64_t)) {
  double best = 0.0;
  for (int r = 0; r < repeats; ++r) {
    double macs_per_iter = 0.0;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      const double m = chain(iters);
#pragma omp master
      macs_per_iter = m;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * macs_per_iter * static_cast<double>(iters) * threads / s / 1e9);
  }
  return best;
}
}  // namespace clef::ops
#endif  // HWY_ONCE
