// SPDX-License-Identifier: MIT
// Element types of tensors as named by the safetensors format, and scalar conversions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>

namespace clef {

/// Element type of a tensor. Names follow the safetensors header ("F32", "BF16", ...).
enum class DType : std::uint8_t {
  kBool,
  kU8,
  kI8,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
  kF8E4M3,
  kF8E5M2,
  /// ggml's Q8_0 block type (GGUF only, never a safetensors dtype): blocks of 32 elements along a
  /// row, each 2 bytes of IEEE fp16 scale d then 32 int8 q; element = d * q. 34 bytes per block.
  kQ8_0,
  /// The other ggml block types a GGUF file may hold (block sizes: dtype_block; layouts and the
  /// dequantization to fp32: core/quant_blocks.h, docs/GGUF.md "Block types"). Q4_0, Q4_1, Q5_0,
  /// Q5_1, Q4_K, Q5_K and Q6_K are also read by the
  /// block-quantized linear layers (ops/quant_gemm.h); Q2_K and Q3_K only through convert_to_f32.
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ2_K,
  kQ3_K,
  kQ4_K,
  kQ5_K,
  kQ6_K,
};

/// Size of one element in bytes; 0 for a block type (kQ8_0, kQ4_K, ...: use dtype_bytes).
std::size_t dtype_size(DType t) noexcept;
/// Block types: elements and bytes per block (ggml's block structs, docs/GGUF.md "Block types"):
/// Q4_0 32/18, Q4_1 32/20, Q5_0 32/22, Q5_1 32/24, Q8_0 32/34, Q2_K 256/84, Q3_K 256/110,
/// Q4_K 256/144, Q5_K 256/176, Q6_K 256/210; false (outputs untouched) for other dtypes.
bool dtype_block(DType t, std::uint64_t& elems, std::uint64_t& bytes) noexcept;
/// Bytes of `numel` elements (a block type: whole blocks; numel must be a multiple of the block).
std::uint64_t dtype_bytes(DType t, std::uint64_t numel) noexcept;
/// True for block-quantized types (kQ8_0 and the ggml types after it).
inline bool is_block_quantized(DType t) noexcept { return t >= DType::kQ8_0; }
/// Q8_0: elements per block and bytes per block.
inline constexpr std::int64_t kQ8_0BlockElems = 32;
inline constexpr std::int64_t kQ8_0BlockBytes = 34;
/// The safetensors name ("BF16").
std::string_view dtype_name(DType t) noexcept;
/// Parses a safetensors dtype name; nullopt when unknown (block types are not safetensors names).
std::optional<DType> dtype_from_name(std::string_view name) noexcept;
/// True for the floating types clef reads weights from: F32, BF16, F16.
inline bool is_weight_float(DType t) noexcept { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

/// bfloat16 bits -> float (exact).
inline float bf16_to_f32(std::uint16_t b) noexcept {
  std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// float -> bfloat16 bits, round to nearest even; NaN stays a (quiet) NaN.
inline std::uint16_t f32_to_bf16(float f) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

/// IEEE binary16 bits -> float (exact, including subnormals, inf and NaN).
float f16_to_f32(std::uint16_t h) noexcept;
/// float -> IEEE binary16 bits, round to nearest even, overflow to inf.
std::uint16_t f32_to_f16(float f) noexcept;

}  // namespace clef
