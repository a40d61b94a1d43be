// SPDX-License-Identifier: MIT
// Measured arithmetic peak of the CPU kernels' level (benchmarks quote "% of peak" against it).
#pragma once

#include <cstdint>

namespace clef::ops {

/// GFLOP/s of independent FMA chains on `threads` threads at the level in use (ops/isa.h).
struct PeakGflops {
  double fp32 = 0.0;      ///< fp32 FMA (2 FLOP per lane)
  double bf16 = 0.0;      ///< vdpbf16ps on avx512bf16 (4 FLOP per 32-bit lane); else = fp32 FMA
  bool bf16_dot = false;  ///< true when `bf16` is the vdpbf16ps peak
};

/// Best of `repeats` timed runs of `iters` iterations x 12 chains each (the machine may be
/// shared: take the best). Takes about 2 x repeats x iters x 12 x latency seconds.
PeakGflops measure_peak_gflops(int threads, int repeats = 3, std::int64_t iters = 20'000'000);

}  // namespace clef::ops
