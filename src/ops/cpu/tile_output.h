// SPDX-License-Identifier: MIT
// Internal to the int8 and block-quantized GEMMs (cpu/int8_gemm.cc, cpu/quant_gemm.cc): the output
// lines of a register tile, prefetched before the tile runs.
#pragma once

#include <algorithm>
#include <cstdint>

namespace clef::ops::cpu {

/// Prefetches into L1 (`prefetcht0`: the targets do not enable `prefetchw`) the lines of the fp32
/// output tile rows [r0, r0 + rows) x columns [c0, c0 + cols) of y, whose rows are `n` floats long
/// and contiguous (columns past n are not asked for, so no address past y is formed; 16 floats are
/// one 64-byte line). A GEMM writes y once and it is rarely in cache: without this the tile's stores
/// stalled on their misses at its end (perf: ~12% of the 12-row Q4_K tile's samples on them); with
/// it the misses overlap the tile's arithmetic (one thread, the 0.8b shapes at m = 512 and k = 1,024:
/// Q4_K +2-9%, Q8_0 +3-13% together with the vector stores, docs/PERFORMANCE.md). Same idea as the
/// FMA GEMM's C prefetch (cpu/fma_gemm_x86.cc). A hint only: no effect on any value.
inline void prefetch_output_tile(const float* y, std::int64_t n, std::int64_t r0, int rows, std::int64_t c0,
                                 std::int64_t cols) {
  const std::int64_t c1 = std::min(c0 + cols, n);
  if (c1 <= c0) return;
  for (std::int64_t r = r0; r < r0 + rows; ++r) {
    const float* yr = y + r * n;
    for (std::int64_t c = c0; c < c1; c += 16) __builtin_prefetch(yr + c, 1, 3);
    __builtin_prefetch(yr + c1 - 1, 1, 3);
  }
}

}  // namespace clef::ops::cpu
