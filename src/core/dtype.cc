// SPDX-License-Identifier: MIT
#include "core/dtype.h"

#include <array>

namespace clef {
namespace {

struct DTypeInfo {
  DType type;
  std::string_view name;
  std::size_t size;           ///< bytes per element; 0 for a block type
  std::uint64_t block_elems;  ///< block types: elements per block (ggml's block structs), else 0
  std::uint64_t block_bytes;  ///< block types: bytes per block, else 0
};

constexpr std::array<DTypeInfo, 25> kInfo{{
    {DType::kBool, "BOOL", 1, 0, 0},     {DType::kU8, "U8", 1, 0, 0},          {DType::kI8, "I8", 1, 0, 0},
    {DType::kI16, "I16", 2, 0, 0},       {DType::kU16, "U16", 2, 0, 0},        {DType::kF16, "F16", 2, 0, 0},
    {DType::kBF16, "BF16", 2, 0, 0},     {DType::kI32, "I32", 4, 0, 0},        {DType::kU32, "U32", 4, 0, 0},
    {DType::kF32, "F32", 4, 0, 0},       {DType::kF64, "F64", 8, 0, 0},        {DType::kI64, "I64", 8, 0, 0},
    {DType::kU64, "U64", 8, 0, 0},       {DType::kF8E4M3, "F8_E4M3", 1, 0, 0}, {DType::kF8E5M2, "F8_E5M2", 1, 0, 0},
    {DType::kQ8_0, "Q8_0", 0, 32, 34},   {DType::kQ4_0, "Q4_0", 0, 32, 18},    {DType::kQ4_1, "Q4_1", 0, 32, 20},
    {DType::kQ5_0, "Q5_0", 0, 32, 22},   {DType::kQ5_1, "Q5_1", 0, 32, 24},    {DType::kQ2_K, "Q2_K", 0, 256, 84},
    {DType::kQ3_K, "Q3_K", 0, 256, 110}, {DType::kQ4_K, "Q4_K", 0, 256, 144},  {DType::kQ5_K, "Q5_K", 0, 256, 176},
    {DType::kQ6_K, "Q6_K", 0, 256, 210},
}};

const DTypeInfo& info(DType t) noexcept { return kInfo[static_cast<std::size_t>(t)]; }

}  // namespace

std::size_t dtype_size(DType t) noexcept { return info(t).size; }
std::string_view dtype_name(DType t) noexcept { return info(t).name; }

bool dtype_block(DType t, std::uint64_t& elems, std::uint64_t& bytes) noexcept {
  const DTypeInfo& i = info(t);
  if (i.block_elems == 0) return false;
  elems = i.block_elems;
  bytes = i.block_bytes;
  return true;
}

std::uint64_t dtype_bytes(DType t, std::uint64_t numel) noexcept {
  const DTypeInfo& i = info(t);
  if (i.block_elems != 0) return numel / i.block_elems * i.block_bytes;
  return numel * i.size;
}

std::optional<DType> dtype_from_name(std::string_view name) noexcept {
  for (const auto& i : kInfo) {
    if (i.name == name && !is_block_quantized(i.type)) return i.type;
  }
  return std::nullopt;
}

float f16_to_f32(std::uint16_t h) noexcept {
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      mant &= 0x3ffu;
      bits = sign | (static_cast<std::uint32_t>(127 - 15 - e) << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

std::uint16_t f32_to_f16(float f) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {                                                    // result is subnormal or zero
    if (abs < 0x33000000u) return static_cast<std::uint16_t>(sign);
    const std::uint32_t e = abs >> 23;
    std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - e;  // 14..24
    std::uint32_t half = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t mid = 1u << (shift - 1u);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<std::uint16_t>(sign | half);
  }
  std::uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  r += 0xfffu + ((r >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (r >> 13));
}

}  // namespace clef
