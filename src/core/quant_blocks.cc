// SPDX-License-Identifier: MIT
#include "core/quant_blocks.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"

// Built with -ffp-contract=off (src/core/CMakeLists.txt): `a * b - c` must round the product before the
// subtraction, as numpy does, on every ISA the file may be compiled for.

namespace clef {
namespace {

std::uint8_t u8(const std::byte* p, int i) noexcept {
  return static_cast<std::uint8_t>(p[static_cast<std::size_t>(i)]);
}

float half_at(const std::byte* p) noexcept {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// Legacy 32-element blocks. Element i < 16 takes the low nibble of qs[i], element i + 16 the high
// nibble; Q5_* add bit i of the little-endian u32 qh as the fifth bit.
void q4_0(const std::byte* b, float* y) {
  const float d = half_at(b);
  const std::byte* qs = b + 2;
  for (int i = 0; i < 16; ++i) {
    y[i] = d * static_cast<float>((u8(qs, i) & 0x0F) - 8);
    y[i + 16] = d * static_cast<float>((u8(qs, i) >> 4) - 8);
  }
}

void q4_1(const std::byte* b, float* y) {
  const float d = half_at(b), m = half_at(b + 2);
  const std::byte* qs = b + 4;
  for (int i = 0; i < 16; ++i) {
    y[i] = d * static_cast<float>(u8(qs, i) & 0x0F) + m;
    y[i + 16] = d * static_cast<float>(u8(qs, i) >> 4) + m;
  }
}

/// The 5-bit values of a Q5_0/Q5_1 block: qh at `qh_at`, nibbles at `qh_at + 4`.
void five_bit(const std::byte* qh_at, int q[32]) {
  std::uint32_t qh;
  std::memcpy(&qh, qh_at, 4);
  const std::byte* qs = qh_at + 4;
  for (int i = 0; i < 16; ++i) {
    q[i] = (u8(qs, i) & 0x0F) | static_cast<int>(((qh >> i) & 1u) << 4);
    q[i + 16] = (u8(qs, i) >> 4) | static_cast<int>(((qh >> (i + 16)) & 1u) << 4);
  }
}

void q5_0(const std::byte* b, float* y) {
  const float d = half_at(b);
  int q[32];
  five_bit(b + 2, q);
  for (int i = 0; i < 32; ++i) y[i] = d * static_cast<float>(q[i] - 16);
}

void q5_1(const std::byte* b, float* y) {
  const float d = half_at(b), m = half_at(b + 2);
  int q[32];
  five_bit(b + 4, q);
  for (int i = 0; i < 32; ++i) y[i] = d * static_cast<float>(q[i]) + m;
}

void q8_0(const std::byte* b, float* y) {
  const float d = half_at(b);
  for (int i = 0; i < 32; ++i) y[i] = d * static_cast<float>(static_cast<std::int8_t>(b[2 + i]));
}

// K-quants: super-blocks of 256.

/// Q2_K (84 bytes): scales[16] (low nibble: scale, high nibble: min of each 16-element group),
/// qs[64], fp16 d, fp16 dmin. Element e = 128h + 32s + l takes bits 2s..2s+1 of qs[32h + l];
/// group e / 16. y = (d * sc) * q - (dmin * m).
void q2_k(const std::byte* b, float* y) {
  const std::byte* sc = b;
  const std::byte* qs = b + 16;
  const float d = half_at(b + 80), dmin = half_at(b + 82);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, s = (e % 128) / 32, l = e % 32, g = e / 16;
    const float dl = d * static_cast<float>(u8(sc, g) & 0x0F);
    const float ml = dmin * static_cast<float>(u8(sc, g) >> 4);
    const int q = (u8(qs, 32 * h + l) >> (2 * s)) & 3;
    y[e] = dl * static_cast<float>(q) - ml;
  }
}

/// Q3_K (110 bytes): hmask[32], qs[64], scales[12], fp16 d. Group g (16 elements) has the 6-bit
/// scale (low nibble of scales[g % 8] shifted by 4 * (g / 8)) | (bits 2(g/4).. of scales[8 + g % 4]) << 4,
/// minus 32. Element e = 128h + 32s + l: low 2 bits from qs[32h + l] >> 2s; bit e / 32 of
/// hmask[l] clear subtracts 4. y = (d * scale) * q.
void q3_k(const std::byte* b, float* y) {
  const std::byte* hmask = b;
  const std::byte* qs = b + 32;
  const std::byte* sc = b + 96;
  const float d = half_at(b + 108);
  for (int e = 0; e < 256; ++e) {
    const int g = e / 16;
    const int lo = (u8(sc, g % 8) >> (4 * (g / 8))) & 0x0F;
    const int hi = (u8(sc, 8 + g % 4) >> (2 * (g / 4))) & 0x03;
    const float dl = d * static_cast<float>((lo | (hi << 4)) - 32);
    const int h = e / 128, s = (e % 128) / 32, l = e % 32;
    const int low = (u8(qs, 32 * h + l) >> (2 * s)) & 3;
    const int high = (u8(hmask, l) >> (e / 32)) & 1;
    y[e] = dl * static_cast<float>(low - (high != 0 ? 0 : 4));
  }
}

/// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block from its 12 packed bytes:
/// j < 4: scale = s[j] & 63, min = s[j + 4] & 63; j >= 4: scale = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4,
/// min = (s[j + 4] >> 4) | (s[j] >> 6) << 4.
void k_scale_min(const std::byte* s, int j, int& scale, int& min) {
  if (j < 4) {
    scale = u8(s, j) & 63;
    min = u8(s, j + 4) & 63;
  } else {
    scale = (u8(s, j + 4) & 0x0F) | ((u8(s, j - 4) >> 6) << 4);
    min = (u8(s, j + 4) >> 4) | ((u8(s, j) >> 6) << 4);
  }
}

/// Q4_K (144 bytes): fp16 d, fp16 dmin, scales[12], qs[128]. Sub-block j (32 elements) takes the
/// low (j even) or high (j odd) nibbles of qs[32 (j / 2) .. + 32]. y = (d * sc_j) * q - (dmin * m_j).
/// Q5_K (176 bytes) adds qh[32] before qs: bit j of qh[l] is the fifth bit of element 32j + l.
void q45_k(const std::byte* b, float* y, bool five) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const std::byte* scales = b + 4;
  const std::byte* qh = b + 16;
  const std::byte* qs = five ? b + 48 : b + 16;
  for (int j = 0; j < 8; ++j) {
    int sc = 0, m = 0;
    k_scale_min(scales, j, sc, m);
    const float dl = d * static_cast<float>(sc);
    const float ml = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      int q = (u8(qs, 32 * (j / 2) + l) >> (4 * (j % 2))) & 0x0F;
      if (five) q |= ((u8(qh, l) >> j) & 1) << 4;
      y[32 * j + l] = dl * static_cast<float>(q) - ml;
    }
  }
}

/// Q6_K (210 bytes): ql[128], qh[64], scales[16] (int8), fp16 d. Half h (128 elements), position
/// p = 64t + l (t 0..1, l 0..63): low nibble of ql[64h + l] (t = 0) or its high nibble (t = 1);
/// position p = 32u + k (u 0..3): bits 2u..2u+1 of qh[32h + k] are the two high bits. q - 32,
/// group (128h + p) / 16. y = (d * scale) * (q - 32).
void q6_k(const std::byte* b, float* y) {
  const std::byte* ql = b;
  const std::byte* qh = b + 128;
  const std::byte* sc = b + 192;
  const float d = half_at(b + 208);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, p = e % 128;
    const int low = (u8(ql, 64 * h + p % 64) >> (4 * (p / 64))) & 0x0F;
    const int high = (u8(qh, 32 * h + p % 32) >> (2 * (p / 32))) & 0x03;
    const float dl = d * static_cast<float>(static_cast<std::int8_t>(sc[e / 16]));
    y[e] = dl * static_cast<float>((low | (high << 4)) - 32);
  }
}

}  // namespace

void dequantize_blocks(DType t, const std::byte* src, std::size_t n, float* dst) {
  std::uint64_t be = 0, bb = 0;
  if (!dtype_block(t, be, bb)) {
    throw Unsupported("dequantize_blocks: " + std::string(dtype_name(t)) + " is not a block-quantized type");
  }
  const auto elems = static_cast<std::size_t>(be), bytes = static_cast<std::size_t>(bb);
  if (n % elems != 0) {
    throw Unsupported("cannot convert " + std::to_string(n) + " " + std::string(dtype_name(t)) +
                      " elements: not whole blocks of " + std::to_string(elems));
  }
  for (std::size_t k = 0; k < n / elems; ++k) {
    const std::byte* b = src + k * bytes;
    float* y = dst + k * elems;
    switch (t) {
      case DType::kQ4_0: q4_0(b, y); break;
      case DType::kQ4_1: q4_1(b, y); break;
      case DType::kQ5_0: q5_0(b, y); break;
      case DType::kQ5_1: q5_1(b, y); break;
      case DType::kQ8_0: q8_0(b, y); break;
      case DType::kQ2_K: q2_k(b, y); break;
      case DType::kQ3_K: q3_k(b, y); break;
      case DType::kQ4_K: q45_k(b, y, false); break;
      case DType::kQ5_K: q45_k(b, y, true); break;
      case DType::kQ6_K: q6_k(b, y); break;
      default: break;  // dtype_block refused it above
    }
  }
}

void convert_to_f32(DType src_type, const std::byte* src, std::size_t n, float* dst) {
  switch (src_type) {
    case DType::kF32: std::memcpy(dst, src, n * sizeof(float)); return;
    case DType::kBF16:
    case DType::kF16: {
      const bool bf16 = src_type == DType::kBF16;
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        dst[i] = bf16 ? bf16_to_f32(b) : f16_to_f32(b);
      }
      return;
    }
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K: dequantize_blocks(src_type, src, n, dst); return;
    default: throw Unsupported("cannot convert dtype " + std::string(dtype_name(src_type)) + " to F32");
  }
}

namespace {

/// Index of the first of `n` little-endian U values at `p` whose bits under `mask` (the exponent)
/// are all ones. Scans chunks with a branch-free OR so the compiler vectorizes the common case.
template <class U>
std::optional<std::size_t> first_all_ones(const std::byte* p, std::size_t n, U mask) noexcept {
  constexpr std::size_t kChunk = 2048;
  for (std::size_t base = 0; base < n; base += kChunk) {
    const std::size_t m = std::min(kChunk, n - base);
    const std::byte* c = p + base * sizeof(U);
    U hit = 0;
    for (std::size_t i = 0; i < m; ++i) {
      U x;
      std::memcpy(&x, c + i * sizeof(U), sizeof(U));
      hit |= static_cast<U>(static_cast<U>(~x) & mask) == 0 ? U{1} : U{0};
    }
    if (hit == 0) continue;
    for (std::size_t i = 0; i < m; ++i) {
      U x;
      std::memcpy(&x, c + i * sizeof(U), sizeof(U));
      if (static_cast<U>(x & mask) == mask) return base + i;
    }
  }
  return std::nullopt;
}

template <class U>
bool mantissa_nonzero(const std::byte* p, std::size_t i, U mask) noexcept {
  U x;
  std::memcpy(&x, p + i * sizeof(U), sizeof(U));
  return static_cast<U>(x & static_cast<U>(~mask) & static_cast<U>(~(U{1} << (8 * sizeof(U) - 1)))) != 0;
}

/// The fp16 fields of a block type: byte offsets inside the block and names (at most two).
struct BlockScales {
  int count = 0;
  int offset[2] = {0, 0};
  const char* name[2] = {"", ""};
};

BlockScales block_scales(DType t) noexcept {
  switch (t) {
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ8_0: return {1, {0, 0}, {"d", ""}};
    case DType::kQ4_1:
    case DType::kQ5_1: return {2, {0, 2}, {"d", "m"}};
    case DType::kQ2_K: return {2, {80, 82}, {"d", "dmin"}};
    case DType::kQ3_K: return {1, {108, 0}, {"d", ""}};
    case DType::kQ4_K:
    case DType::kQ5_K: return {2, {0, 2}, {"d", "dmin"}};
    case DType::kQ6_K: return {1, {208, 0}, {"d", ""}};
    default: return {};
  }
}

}  // namespace

std::optional<NonFiniteValue> find_non_finite(DType t, std::span<const std::byte> bytes) noexcept {
  const std::byte* p = bytes.data();
  switch (t) {
    case DType::kF32: {
      const std::uint32_t mask = 0x7F800000u;
      if (const auto i = first_all_ones<std::uint32_t>(p, bytes.size() / 4, mask)) {
        return NonFiniteValue{*i, "", mantissa_nonzero<std::uint32_t>(p, *i, mask)};
      }
      return std::nullopt;
    }
    case DType::kF16:
    case DType::kBF16: {
      const std::uint16_t mask = t == DType::kF16 ? std::uint16_t{0x7C00} : std::uint16_t{0x7F80};
      if (const auto i = first_all_ones<std::uint16_t>(p, bytes.size() / 2, mask)) {
        return NonFiniteValue{*i, "", mantissa_nonzero<std::uint16_t>(p, *i, mask)};
      }
      return std::nullopt;
    }
    default: break;
  }
  std::uint64_t be = 0, bb = 0;
  if (!dtype_block(t, be, bb)) return std::nullopt;
  const BlockScales sc = block_scales(t);
  const auto block_bytes = static_cast<std::size_t>(bb);
  const std::size_t blocks = bytes.size() / block_bytes;
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::byte* blk = p + b * block_bytes;
    for (int k = 0; k < sc.count; ++k) {
      std::uint16_t h;
      std::memcpy(&h, blk + sc.offset[k], 2);
      if ((h & 0x7C00u) == 0x7C00u) {
        return NonFiniteValue{b * be, sc.name[k], (h & 0x03FFu) != 0};
      }
    }
  }
  return std::nullopt;
}

}  // namespace clef
