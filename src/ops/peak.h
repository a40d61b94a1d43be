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

/// The timing harness of the integer peaks (measure_int8_peak_gops, measure_quant_peak_gops):
/// runs `chain(iters)` on `threads` threads at once, `repeats` times, and returns the best rate in
/// GOP/s, 2 OP per multiply-add. `chain` runs `iters` iterations of an instruction sequence on
/// independent accumulators and returns the multiply-adds of one iteration.
double best_chain_rate_gops(int threads, int repeats, std::int64_t iters, double (*chain)(std::int64_t));

#if defined(__aarch64__)
/// The ARM64 instruction classes whose peak measure_arm_peak measures (128-bit NEON forms).
/// One instruction's work, counting 2 operations per multiply-add as GFLOP/s counts an FMA:
enum class ArmPeak {
  kFp32Fmla,  ///< FMLA v.4s: 4 fp32 FMAs = 8 FLOP (every ARMv8-A core)
  kSdot,      ///< SDOT v.4s: 16 int8 multiply-adds = 32 OP (FEAT_DotProd)
  kSmmla,     ///< SMMLA: int8 2x8 by 8x2 matrix product, 32 multiply-adds = 64 OP (FEAT_I8MM)
  kBfmmla,    ///< BFMMLA: bf16 2x4 by 4x2 matrix product, 16 multiply-adds = 32 FLOP (FEAT_BF16)
};

/// "fp32 FMLA", "int8 SDOT", "int8 SMMLA", "bf16 BFMMLA".
const char* arm_peak_name(ArmPeak p) noexcept;

/// Measured peak of instruction class `p` on `threads` threads, in GFLOP/s (fp32, bf16) or GOP/s
/// (int8), with the operation counts above: best of `repeats` timed runs of `iters` iterations of
/// 16-28 independent accumulator chains per thread (cpu/peak_arm.cc says why that many). 0 when
/// the CPU lacks the instruction (ops/cpu/arm_features.h), so only instructions the CPU has ever
/// run. A run takes about iters x chains / (pipes x clock) seconds: 20M iterations are 30-50 ms
/// on a 4-pipe core at 3 GHz. Under emulation (qemu) the numbers mean nothing.
double measure_arm_peak(ArmPeak p, int threads, int repeats = 3, std::int64_t iters = 20'000'000);
#endif

}  // namespace clef::ops
