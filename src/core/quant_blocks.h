// Scalar dequantizers of ggml's block-quantized tensor types (the blocks a GGUF file stores), into
// fp32. Layouts and formulas: docs/GGUF.md "Block types" (ggml's documented block structs; the
// per-element arithmetic is the order PyPI gguf 0.19's numpy dequantizer uses, so the two agree
// bit for bit, which tests/reference/test_quant_blocks.py checks).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace clef {

/// Elements and bytes of one block of `t`: Q4_0 32/18, Q4_1 32/20, Q5_0 32/22, Q5_1 32/24,
/// Q8_0 32/34, Q2_K 256/84, Q3_K 256/110, Q4_K 256/144, Q5_K 256/176, Q6_K 256/210.
/// False (outputs untouched) for a dtype that is not a block type.
bool quant_block_layout(DType t, std::int64_t& block_elems, std::int64_t& block_bytes) noexcept;

/// Dequantizes `n` elements of block type `t` (whole blocks, starting at a block boundary,
/// little-endian, any alignment) at `src` into `dst[0, n)` as fp32. Reads exactly
/// n / block_elems * block_bytes bytes. Every formula is a fixed sequence of fp32 products and one
/// subtraction or addition (no fused multiply-add), so results are deterministic.
/// Throws Unsupported when `t` is not a block type or n is not a multiple of the block size.
void dequantize_blocks(DType t, const std::byte* src, std::size_t n, float* dst);

}  // namespace clef
