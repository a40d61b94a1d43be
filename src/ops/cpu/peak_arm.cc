// SPDX-License-Identifier: MIT
// ARM64 peak meter (ops/peak.h measure_arm_peak): independent accumulator chains of one vector
// instruction per class (fp32 FMLA, SDOT, SMMLA, BFMMLA), on all threads. Compiled on aarch64 only.
//
// Not a Highway file: each chain loop is plain ACLE intrinsics in a function with its own target
// attribute, so the binary stays baseline ARMv8-A and a loop runs only after arm_features() says the
// CPU has its instruction. GCC 12 declares these intrinsics under "arch=armv8.2-a+<feature>" and
// refuses to inline them into a function whose target string lacks the arch part ("+dotprod" alone
// fails with "target specific option mismatch"), hence the arch=... attributes.
//
// Chains per loop = the instruction's latency x the number of pipes that can issue it, on the worst
// of the cores clef targets, plus a margin (latency / reciprocal throughput from LLVM 19's
// scheduling models, which transcribe Arm's Software Optimization Guides; `llvm-mca-19
// -instruction-info` prints them, tools/arm_mca.py checks the loops):
//
//   instruction      V1 (4 pipes)  V2 (4 pipes)  N1/A76 (2)  N2 (2)   needed   chains here
//   FMLA .4s         lat 4 -> 16   4 -> 16       4 -> 8      4 -> 8   16       20
//   SDOT .4s         lat 2 -> 8    3 -> 12       2 -> 4      3 -> 6   12       16
//   SMMLA            lat 3 -> 12   3 -> 12       (none)      3 -> 6   12       16
//   BFMMLA           lat 5 -> 20   6 -> 24       (none)      5 -> 10  24       28
//
// Two input registers plus 28 accumulators still fit the 32 vector registers. Every loop over the
// chains is unrolled by "#pragma GCC unroll" (GCC fully peels at most 16 iterations on its own, and
// an accumulator array that some loop still indexes lives in memory: the chain loop then stores it
// on every iteration). tools/arm_mca.py shows the loops hold nothing but the chains.
#include "ops/peak.h"

#include <arm_neon.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "ops/cpu/arm_features.h"

namespace clef::ops {
namespace {

constexpr int kFmlaChains = 20;
constexpr int kSdotChains = 16;
constexpr int kSmmlaChains = 16;
constexpr int kBfmmlaChains = 28;

/// `v`, which the compiler may no longer assume it knows: the chains start from values it cannot
/// tell apart, so it cannot merge identical chains into one (it would, from a shared constant).
template <class V>
inline V opaque(V v) {
  asm volatile("" : "+w"(v));
  return v;
}

double elapsed_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// fp32 FMLA chains; returns the seconds taken. `sink` keeps the sums alive.
__attribute__((noinline)) double fmla_chains(int threads, std::int64_t iters, float& sink) {
  const auto t0 = std::chrono::steady_clock::now();
  float total = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    float32x4_t acc[kFmlaChains];
#pragma GCC unroll 32
    for (auto& a : acc) a = opaque(vdupq_n_f32(0.0f));
    float32x4_t x = vdupq_n_f32(0.999f), y = vdupq_n_f32(1e-3f);
    asm volatile("" : "+w"(x), "+w"(y));  // opaque inputs: nothing to fold
    for (std::int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 32
      for (int c = 0; c < kFmlaChains; ++c) acc[c] = vfmaq_f32(acc[c], x, y);
    }
#pragma GCC unroll 32
    for (const auto& a : acc) total += vaddvq_f32(a);
  }
  sink += total;
  return elapsed_since(t0);
}

/// SDOT chains (FEAT_DotProd).
__attribute__((noinline, target("arch=armv8.2-a+dotprod"))) double sdot_chains(int threads, std::int64_t iters,
                                                                               float& sink) {
  const auto t0 = std::chrono::steady_clock::now();
  std::int64_t total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    int32x4_t acc[kSdotChains];
#pragma GCC unroll 32
    for (auto& a : acc) a = opaque(vdupq_n_s32(0));
    int8x16_t x = vdupq_n_s8(3), y = vdupq_n_s8(-2);
    asm volatile("" : "+w"(x), "+w"(y));
    for (std::int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 32
      for (int c = 0; c < kSdotChains; ++c) acc[c] = vdotq_s32(acc[c], x, y);
    }
#pragma GCC unroll 32
    for (const auto& a : acc) total += vaddvq_s32(a);
  }
  sink += static_cast<float>(total);
  return elapsed_since(t0);
}

/// SMMLA chains (FEAT_I8MM).
__attribute__((noinline, target("arch=armv8.2-a+i8mm"))) double smmla_chains(int threads, std::int64_t iters,
                                                                             float& sink) {
  const auto t0 = std::chrono::steady_clock::now();
  std::int64_t total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    int32x4_t acc[kSmmlaChains];
#pragma GCC unroll 32
    for (auto& a : acc) a = opaque(vdupq_n_s32(0));
    int8x16_t x = vdupq_n_s8(3), y = vdupq_n_s8(-2);
    asm volatile("" : "+w"(x), "+w"(y));
    for (std::int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 32
      for (int c = 0; c < kSmmlaChains; ++c) acc[c] = vmmlaq_s32(acc[c], x, y);
    }
#pragma GCC unroll 32
    for (const auto& a : acc) total += vaddvq_s32(a);
  }
  sink += static_cast<float>(total);
  return elapsed_since(t0);
}

/// BFMMLA chains (FEAT_BF16).
__attribute__((noinline, target("arch=armv8.2-a+bf16"))) double bfmmla_chains(int threads, std::int64_t iters,
                                                                              float& sink) {
  const auto t0 = std::chrono::steady_clock::now();
  float total = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    float32x4_t acc[kBfmmlaChains];
#pragma GCC unroll 32
    for (auto& a : acc) a = opaque(vdupq_n_f32(0.0f));
    // bf16 1e-3 (0x3a83) in every lane: the sums grow slowly and stay finite.
    bfloat16x8_t x = vreinterpretq_bf16_u16(vdupq_n_u16(0x3a83)), y = x;
    asm volatile("" : "+w"(x), "+w"(y));
    for (std::int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 32
      for (int c = 0; c < kBfmmlaChains; ++c) acc[c] = vbfmmlaq_f32(acc[c], x, y);
    }
#pragma GCC unroll 32
    for (const auto& a : acc) total += vaddvq_f32(a);
  }
  sink += total;
  return elapsed_since(t0);
}

bool cpu_has(ArmPeak p) {
  const cpu::ArmFeatures f = cpu::arm_features();
  switch (p) {
    case ArmPeak::kFp32Fmla: return true;  // Advanced SIMD is part of every ARMv8-A application core
    case ArmPeak::kSdot: return f.dotprod;
    case ArmPeak::kSmmla: return f.i8mm;
    case ArmPeak::kBfmmla: return f.bf16;
  }
  return false;
}

/// One timed run: G(FL)OP/s.
double run_once(ArmPeak p, int threads, std::int64_t iters, float& sink) {
  double seconds = 0.0, chains = 0.0, ops = 0.0;  // ops: per instruction (2 per multiply-add)
  switch (p) {
    case ArmPeak::kFp32Fmla: seconds = fmla_chains(threads, iters, sink), chains = kFmlaChains, ops = 8; break;
    case ArmPeak::kSdot: seconds = sdot_chains(threads, iters, sink), chains = kSdotChains, ops = 32; break;
    case ArmPeak::kSmmla: seconds = smmla_chains(threads, iters, sink), chains = kSmmlaChains, ops = 64; break;
    case ArmPeak::kBfmmla: seconds = bfmmla_chains(threads, iters, sink), chains = kBfmmlaChains, ops = 32; break;
  }
  if (seconds <= 0.0) return 0.0;
  return chains * ops * static_cast<double>(iters) * threads / seconds / 1e9;
}

}  // namespace

const char* arm_peak_name(ArmPeak p) noexcept {
  switch (p) {
    case ArmPeak::kFp32Fmla: return "fp32 FMLA";
    case ArmPeak::kSdot: return "int8 SDOT";
    case ArmPeak::kSmmla: return "int8 SMMLA";
    case ArmPeak::kBfmmla: return "bf16 BFMMLA";
  }
  return "?";
}

double measure_arm_peak(ArmPeak p, int threads, int repeats, std::int64_t iters) {
  if (!cpu_has(p) || threads < 1 || iters < 1) return 0.0;
  float sink = 0.0f;
  double best = 0.0;
  for (int r = 0; r < std::max(repeats, 1); ++r) best = std::max(best, run_once(p, threads, iters, sink));
  if (sink == 12345.0f) return 0.0;  // keeps the chains' sums alive
  return best;
}

}  // namespace clef::ops
