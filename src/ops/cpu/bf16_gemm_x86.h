// SPDX-License-Identifier: MIT
// bf16 matrix product on x86-64's AVX512-BF16 dot product (vdpbf16ps), whose every output row is
// computed the same way whatever the other rows are: the GEMM that lets rows of different requests
// share one call (continuous batching) and still give each request the bits it gets alone.
// Internal to src/ops; x86-64 only.
//
// y [m, n] = x [m, k] · Wᵀ (y += ... when accumulating, one fp32 add at the end), x and W bf16 bits
// row-major (W is the model's weight in place: PyTorch Linear.weight, mmapped; nothing is packed),
// y fp32 row-major with row stride n.
//
// Arithmetic of one output element (docs/NUMERICS.md "bf16 GEMM with fixed row arithmetic"): the
// k values of x's row and W's row, read as bf16 pairs (k padded with one zero when odd), go in 32-
// element blocks to the 16 lanes of a vdpbf16ps accumulator: lane l holds the pairs p ≡ l (mod 16),
// added in increasing p, each pair as two rounded fp32 additions of exact products (the odd element
// first, as the instruction is specified; bf16 subnormal inputs read as zero and subnormal results
// flushed to zero). The 16 lane sums are then added in a fixed tree: l + (l + 8), then + 4, + 2, + 1.
// None of this depends on m, on the row's position in x, on the thread count or on the level of
// the other kernels, so a row's bits are a function of that row and W alone. The scalar
// dpbf16_gemm_reference does exactly the same and is the oracle of the tests (bit for bit).
//
// Error (first order): each element has at most k roundings of at most 2⁻²⁴ relative plus the
// 15 of the final tree, so |y − Σ x·w| ≤ (k + 16) · 2⁻²⁴ · Σ |x·w|, as oneDNN's fp32 sums, plus what
// the flush loses (products and sums below 2⁻¹²⁶).
#pragma once

#include <cstdint>

namespace clef::ops::cpu {

/// Whether the vdpbf16ps kernel can run: the CPU has AVX512-BF16 and the kernel level in use is
/// avx512bf16 (ops/isa.h). Cheap.
bool dpbf16_gemm_available() noexcept;

/// The product of the file comment. Requires dpbf16_gemm_available() (Unsupported otherwise);
/// m, n, k >= 1 (InvalidArgument otherwise). Runs on the engine's OpenMP threads (groups of six
/// output columns split over them).
void dpbf16_gemm(std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* x, const std::uint16_t* w,
                 float* y, bool accumulate);

/// The same arithmetic in plain scalar C++ (the oracle; any CPU, one thread).
void dpbf16_gemm_reference(std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* x,
                           const std::uint16_t* w, float* y, bool accumulate);

}  // namespace clef::ops::cpu
