// SPDX-License-Identifier: MIT
// Internal to the int8 and block-quantized GEMMs (cpu/int8_gemm.cc, cpu/quant_gemm.cc): the output
// lines of a register tile, prefetched for writing before the tile runs.
#pragma once

#include <cstdint>

namespace clef::ops::cpu {

/// Prefetches for writing the lines of the fp32 tile y [rows][cols] (row stride `ld` floats) so
/// that the read-for-ownership misses of its stores overlap the tile's arithmetic: a GEMM writes y
/// once and it is rarely in cache (perf had ~12% of the Q4_K tile's samples on its stores; with
/// this, the block-quantized GEMMs of the 0.8b k = 1,024 shapes run 2-9% faster, docs/PERFORMANCE.md).
/// A hint only: no fault, no effect on any value.
inline void prefetch_output_tile(const float* y, std::int64_t ld, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const float* yr = y + r * ld;
    for (int c = 0; c < cols; c += 16) __builtin_prefetch(yr + c, 1, 3);
    __builtin_prefetch(yr + cols - 1, 1, 3);
  }
}

}  // namespace clef::ops::cpu
