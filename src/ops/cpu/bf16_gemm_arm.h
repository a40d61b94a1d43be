// SPDX-License-Identifier: MIT
// bf16 matrix product on ARM64's BFMMLA (FEAT_BF16): the bf16 matmul of cpu/gemm_backend.h on
// ARM64, where OpenBLAS (as Debian builds it) has none. Internal to src/ops; aarch64 only.
//
// y [m, n] = x [m, k] · Wᵀ (y += ... when accumulating, one fp32 add), x and W bf16 bits
// row-major (W is the model's weight in place: PyTorch Linear.weight, mmapped), y fp32 row-major.
// Per call, x is packed into row pairs and, per panel of 16 columns, W into column pairs, both as
// 4-k groups ([2 rows or columns][4 k] bf16 = one BFMMLA operand; k padded with zeros to a multiple
// of 4, a missing odd row or column with zeros), then a 6 × 16 register tile of 24 independent
// accumulators runs BFMMLA over k (enough chains for 4 pipes of latency 4-6: docs/ARM64.md
// "Peaks per core").
//
// Numerics (docs/NUMERICS.md "bf16 on ARM64's BFMMLA"): each product of two bf16 values is exact
// in fp32; BFMMLA adds each 4-product group to the accumulator in two steps rounded to odd with
// denormals flushed to zero (the Arm architecture's BFDotAdd without FEAT_EBF16), so a k-term sum
// has at most k such roundings of at most 2⁻²³ relative each: |y − Σ x·w| ≤ k · 2⁻²³ · Σ |x·w|
// (first order), twice the bound of oneDNN's fp32 sums (round to nearest, 2⁻²⁴), plus what the
// flush loses (products and sums below 2⁻¹²⁶). The test Bf16Bfmmla.WithinItsErrorBound checks it.
#pragma once

#include <cstdint>

namespace clef::ops::cpu {

/// Whether the BFMMLA kernel runs at the level in use: the CPU has BF16 and the level is
/// neon-i8mm or above (ops/isa.h). Cheap.
bool bfmmla_gemm_available() noexcept;

/// The product of the file comment. Requires bfmmla_gemm_available() (Unsupported otherwise);
/// m, n, k >= 1. Runs on the engine's OpenMP threads (panels of 16 columns split over them).
void bfmmla_gemm(std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* x, const std::uint16_t* w,
                 float* y, bool accumulate);

}  // namespace clef::ops::cpu
