// SPDX-License-Identifier: MIT
// Bulk dtype conversions of the CPU kernels (weights and activations), vectorized per SIMD level
// (ops/isa.h). Single-threaded: callers split large arrays over the engine's threads. Results
// equal the scalar conversions of core/dtype.h bit for bit (tests/unit/test_ops.cc).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace clef::ops {

/// dst[i] = float(bf16 bits src[i]) (exact). src 2-byte aligned.
void bf16_to_f32_n(const std::uint16_t* src, std::int64_t n, float* dst);

/// dst[i] = f32_to_bf16(src[i]): round to nearest even, NaN stays a quiet NaN.
void f32_to_bf16_n(const float* src, std::int64_t n, std::uint16_t* dst);

/// dst[i] = bf16_to_f32(f32_to_bf16(src[i])): the value rounded to bf16, kept as float (dst may
/// alias src).
void round_to_bf16_n(const float* src, std::int64_t n, float* dst);

/// convert_to_f32 (core/quant_blocks.h) with the BF16 case vectorized when `src` is 2-byte aligned;
/// F32 and F16 (and misaligned BF16) take the scalar path. Throws Unsupported for other dtypes.
void widen_to_f32_n(DType dtype, const void* src, std::int64_t n, float* dst);

}  // namespace clef::ops
