// SPDX-License-Identifier: MIT
// Scalar dequantizers of ggml's block-quantized tensor types (the blocks a GGUF file stores), into
// fp32, and convert_to_f32 for every stored weight type. The block sizes are core/dtype.h's
// dtype_block. Layouts and formulas: docs/GGUF.md "Block types" (ggml's documented block structs; the
// per-element arithmetic is the order PyPI gguf 0.19's numpy dequantizer uses, so the two agree
// bit for bit, which tests/reference/test_quant_blocks.py checks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "core/dtype.h"

namespace clef {

/// Dequantizes `n` elements of block type `t` (whole blocks, starting at a block boundary,
/// little-endian, any alignment) at `src` into `dst[0, n)` as fp32. Reads exactly
/// n / block_elems * block_bytes bytes. Every formula is a fixed sequence of fp32 products and one
/// subtraction or addition (no fused multiply-add), so results are deterministic.
/// Throws Unsupported when `t` is not a block type or n is not a multiple of the block size.
void dequantize_blocks(DType t, const std::byte* src, std::size_t n, float* dst);

/// Converts `n` elements of type `src_type` (F32, BF16 or F16, little-endian, any alignment; or
/// whole blocks of a block type starting at a block boundary, n a multiple of its block size:
/// dequantize_blocks) at `src` to float. Throws Unsupported for any other dtype.
void convert_to_f32(DType src_type, const std::byte* src, std::size_t n, float* dst);

/// Where find_non_finite found a value that is (or decodes to) NaN or ±Inf.
struct NonFiniteValue {
  std::uint64_t element = 0;  ///< flat element index (a block type: the block's first element)
  const char* field = "";     ///< a block type: the block's fp16 field ("d", "dmin" or "m"); "" otherwise
  bool nan = false;           ///< NaN (else an infinity)
};

/// The first non-finite value of the tensor `bytes` of dtype `t`, or nullopt when every value is
/// finite. One pass over the bytes, no allocation (docs/GGUF.md "Finite weights"):
///  * F32, F16, BF16: every element (its exponent bits all ones);
///  * the block types of dtype_block: every block's IEEE fp16 fields (d; dmin of Q2_K, Q4_K,
///    Q5_K; m of Q4_1, Q5_1). The other fields are small integers, so a block decodes to finite
///    values exactly when these are finite (the largest finite fp16 times the largest product of
///    integer fields, 65504 * 128 * 32 for Q6_K, is far below the fp32 limit);
///  * any other dtype (integers, F64, F8): nullopt (not checked; weights are never those).
/// A trailing partial block or element is ignored.
std::optional<NonFiniteValue> find_non_finite(DType t, std::span<const std::byte> bytes) noexcept;

}  // namespace clef
