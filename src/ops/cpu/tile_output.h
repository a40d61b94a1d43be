// SPDX-License-Identifier: MIT
// Internal to the int8 and block-quantized GEMMs (cpu/int8_gemm.cc, cpu/quant_gemm.cc): the output
// lines of a register tile, prefetched for writing before the tile runs.
#pragma once

#include <cpuid.h>

#include <algorithm>
#include <cstdint>

namespace clef::ops::cpu {

/// Prefetches for writing (`prefetchw`: the line arrives in L1 owned, so the stores need no further
/// request) the lines of the fp32 output tile rows [r0, r0 + rows) x columns [c0, c0 + cols) of y,
/// whose rows are `n` floats long and contiguous (columns past n are not asked for, so no address
/// past y is formed; 16 floats are one 64-byte line). A GEMM writes y once and it is rarely in
/// cache: without this the tile's stores stalled on their misses at its end (perf: ~12% of the
/// 12-row Q4_K tile's samples on them). One thread, the 0.8b shapes at m = 512 and k = 1,024:
/// `prefetcht0` with the vector stores gained Q4_K +3-7%, Q8_0 +3-13% (either alone ±3%), and
/// `prefetchw` another +2-13% on all but the smallest shapes; in the model (2 threads, T = 512)
/// `prefetchw` over `prefetcht0`: Q4_K_M +2-5%, Q8_0 +7% (docs/PERFORMANCE.md). `prefetchw` is inline assembly because
/// the compiler emits it only for targets with PRFCHW, which these functions' targets do not name, and it runs only on
/// a CPU whose CPUID names PRFCHW (others get `prefetcht0`). A hint only: no effect on any value.
/// The FMA GEMM's C prefetch (cpu/fma_gemm_x86.cc) is the same idea.
inline void prefetch_output_tile(const float* y, std::int64_t n, std::int64_t r0, int rows, std::int64_t c0,
                                 std::int64_t cols) {
  static const bool kPrefetchw = [] {  // CPUID 0x80000001 ECX bit 8: PRFCHW
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(0x80000001u, &a, &b, &c, &d) != 0 && (c & (1u << 8)) != 0;
  }();
  const std::int64_t c1 = std::min(c0 + cols, n);
  if (c1 <= c0) return;
  for (std::int64_t r = r0; r < r0 + rows; ++r) {
    const float* yr = y + r * n;
    if (kPrefetchw) {
      for (std::int64_t c = c0; c < c1; c += 16) asm volatile("prefetchw %0" : : "m"(yr[c]));
      asm volatile("prefetchw %0" : : "m"(yr[c1 - 1]));
    } else {
      for (std::int64_t c = c0; c < c1; c += 16) __builtin_prefetch(yr + c, 1, 3);
      __builtin_prefetch(yr + c1 - 1, 1, 3);
    }
  }
}

}  // namespace clef::ops::cpu
