// SPDX-License-Identifier: MIT
// fp32 matrix product on AVX2 FMA with packed panels, whose every output element is summed in one
// fixed order of fused multiply-adds and additions: the GEMM of the AVX2 level for fp32 weights and for bf16 values
// through fp32 products (docs/NUMERICS.md "fp32 GEMM with a fixed order (AVX2)"). Internal to src/ops; x86-64 only.
//
// y [m, n] = x [m, k] · Wᵀ (y += ... when accumulating), x fp32 row-major (row stride k; with x_bf16
// each value rounded to the nearest bf16 value first, as it is packed: bf16 mode's activations), W the
// model's weight in place, row-major [n, k] (PyTorch Linear.weight) in fp32, bf16 or fp16 (widened
// exactly as it is packed; nothing is kept), y fp32 row-major with row stride n.
//
// Arithmetic of one output element: for each block of 256 consecutive k (the last one shorter), the
// block sum p = fma chain from +0 over its k in increasing order (each step one rounding of the exact
// product plus the running sum; IEEE binary32, round to nearest even, subnormals kept); then
// y = p₀ (or y + p₀ when accumulating), y = y + p₁, ... in block order, one rounded addition each.
// None of it depends on m, on the row's position in x, on the register and cache blocking, on the
// thread count or on n, so a row's bits are a function of that row and W alone, and the scalar
// fma_gemm_reference (std::fma in the same order) is the oracle of the tests, bit for bit.
//
// Error (first order): at most 256 roundings inside a block and one per block after it, so
// |y − y₀ − Σ x·w| ≤ (256 + ⌈k / 256⌉) · 2⁻²⁴ · (|y₀| + Σ |x·w|) (docs/NUMERICS.md), like the
// library's blocked sums; one chain over all of k would allow k roundings.
#pragma once

#include <cstdint>
#include <span>

#include "core/dtype.h"

namespace clef::ops::cpu {

/// Whether the AVX2 FMA kernel can run: an x86-64 CPU with AVX2 and FMA whose kernel level in use
/// (ops/isa.h) is avx2. Cheap.
bool fma_gemm_available() noexcept;

/// Whether fma_gemm packs weights of this dtype (F32, BF16, F16).
bool fma_gemm_takes(DType w_dtype) noexcept;

/// The product of the file comment; `w` holds n·k values of `w_dtype` (any alignment). Requires
/// fma_gemm_available() (Unsupported otherwise), fma_gemm_takes(w_dtype) (InvalidArgument), and
/// m, n, k >= 1 (InvalidArgument). Runs on the engine's OpenMP threads (column panels, or row blocks
/// when n is narrow, split statically over them).
void fma_gemm(std::int64_t m, std::int64_t n, std::int64_t k, const float* x, bool x_bf16, DType w_dtype, const void* w,
              float* y, bool accumulate);

/// One weight of fma_gemm_shared: W [n, k] of `w_dtype` at `w` (any alignment) and its output y
/// [m, n] (row stride n), y = x · Wᵀ, or y += x · Wᵀ when `accumulate`.
struct FmaGemmOut {
  DType w_dtype = DType::kF32;
  const void* w = nullptr;
  std::int64_t n = 0;
  float* y = nullptr;
  bool accumulate = false;
};

/// fma_gemm for several weights reading one x [m, k] (a layer's input projections): x is packed
/// once (rounded once when x_bf16) instead of once per weight, and the column panels of all the
/// weights are split over the threads together (a narrow weight does not run a call of its own).
/// Every output gets the bits fma_gemm gives it alone. The outputs must not overlap each other
/// (InvalidArgument naming the two) nor x; otherwise the requirements and errors of fma_gemm, per
/// weight, and a non-empty `outs`.
void fma_gemm_shared(std::int64_t m, std::int64_t k, const float* x, bool x_bf16, std::span<const FmaGemmOut> outs);

/// The same arithmetic in plain scalar C++ (the oracle; any CPU, one thread).
void fma_gemm_reference(std::int64_t m, std::int64_t n, std::int64_t k, const float* x, bool x_bf16, DType w_dtype,
                        const void* w, float* y, bool accumulate);

}  // namespace clef::ops::cpu
