// SPDX-License-Identifier: MIT
// ggml block decoding and the scalar oracle of the block-quantized linear layer
// (ops/quant_gemm.h gives the expression; docs/NUMERICS.md "Block-quantized weights" the layouts).
//
// Block layouts (ggml's block structs, little-endian; described here in our own words):
//   Q4_0  18 B: fp16 d; 16 B nibbles: element e < 16 is the low nibble of byte e, e ≥ 16 the high
//               nibble of byte e - 16. w = d · (q - 8).
//   Q4_1  20 B: fp16 d, fp16 m, 16 B nibbles as Q4_0. w = d · q + m.
//   Q5_0  22 B: fp16 d, u32 qh (bit e = bit 4 of element e), 16 B nibbles. w = d · (q - 16).
//   Q5_1  24 B: fp16 d, fp16 m, u32 qh, 16 B nibbles. w = d · q + m.
//   Q4_K 144 B: fp16 d, fp16 dmin, 12 B of eight 6-bit scales and mins, 128 B nibbles. Sub-block
//               j < 4: scale = byte j & 63, min = byte j+4 & 63; j ≥ 4: scale = (byte j+4 & 15) |
//               (byte j-4 >> 6) << 4, min = (byte j+4 >> 4) | (byte j >> 6) << 4. Element 64c + 32t + i
//               (c < 4, t < 2, i < 32) is nibble t of byte 32c + i. w = d · scale · q − dmin · min.
//   Q5_K 176 B: fp16 d, fp16 dmin, 12 B scales/mins as Q4_K, 32 B qh (bit j of byte i = bit 4 of
//               element 32j + i), 128 B nibbles as Q4_K.
//   Q6_K 210 B: 128 B low nibbles, 64 B high 2-bit pairs, 16 int8 scales, fp16 d. Element
//               128h + 64t + i (h, t < 2, i < 64) has low 4 bits = nibble t of byte 64h + i; element
//               128h + 32u + i (u < 4, i < 32) has bits 4-5 = bits 2u, 2u+1 of byte 128 + 32h + i.
//               w = d · scale[e / 16] · (q − 32).
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "ops/int8_gemm.h"
#include "ops/quant_gemm.h"

namespace clef::ops {

const char* quant_type_name(QuantType t) noexcept {
  switch (t) {
    case QuantType::kQ4_K: return "Q4_K";
    case QuantType::kQ5_K: return "Q5_K";
    case QuantType::kQ6_K: return "Q6_K";
    case QuantType::kQ4_0: return "Q4_0";
    case QuantType::kQ4_1: return "Q4_1";
    case QuantType::kQ5_0: return "Q5_0";
    case QuantType::kQ5_1: return "Q5_1";
  }
  return "?";
}

std::optional<QuantType> quant_type_of(DType t) noexcept {
  switch (t) {
    case DType::kQ4_K: return QuantType::kQ4_K;
    case DType::kQ5_K: return QuantType::kQ5_K;
    case DType::kQ6_K: return QuantType::kQ6_K;
    case DType::kQ4_0: return QuantType::kQ4_0;
    case DType::kQ4_1: return QuantType::kQ4_1;
    case DType::kQ5_0: return QuantType::kQ5_0;
    case DType::kQ5_1: return QuantType::kQ5_1;
    default: return std::nullopt;
  }
}

std::int64_t quant_block_elems(QuantType t) noexcept {
  return t == QuantType::kQ4_K || t == QuantType::kQ5_K || t == QuantType::kQ6_K ? 256 : 32;
}

std::int64_t quant_block_bytes(QuantType t) noexcept {
  switch (t) {
    case QuantType::kQ4_K: return 144;
    case QuantType::kQ5_K: return 176;
    case QuantType::kQ6_K: return 210;
    case QuantType::kQ4_0: return 18;
    case QuantType::kQ4_1: return 20;
    case QuantType::kQ5_0: return 22;
    case QuantType::kQ5_1: return 24;
  }
  return 0;
}

namespace {

std::uint8_t byte_at(const std::byte* p, int i) noexcept { return static_cast<std::uint8_t>(p[i]); }

std::uint16_t u16_at(const std::byte* p) noexcept {
  std::uint16_t v;
  std::memcpy(&v, p, 2);  // little-endian hosts (x86-64 / ARM64)
  return v;
}

/// Legacy 32-element types: nibbles at `qs`, optional 32 high bits.
void decode_legacy(const std::byte* qs, const std::byte* qh, DecodedQuantBlock& out) noexcept {
  std::uint32_t h = 0;
  if (qh != nullptr) std::memcpy(&h, qh, 4);
  for (int e = 0; e < 32; ++e) {
    const std::uint8_t b = byte_at(qs, e % 16);
    std::uint8_t q = e < 16 ? (b & 15) : (b >> 4);
    if (qh != nullptr) q = static_cast<std::uint8_t>(q | (((h >> e) & 1u) << 4));
    out.q[e] = q;
  }
  out.sc[0] = out.sc[1] = 1;
}

/// Q4_K / Q5_K: scales and mins of the eight 32-sub-blocks, nibbles, optional high bits.
void decode_k45(const std::byte* src, bool five, DecodedQuantBlock& out) noexcept {
  out.d = u16_at(src);
  out.mn = u16_at(src + 2);
  const std::byte* s = src + 4;
  for (int j = 0; j < 8; ++j) {
    int sc, mn;
    if (j < 4) {
      sc = byte_at(s, j) & 63;
      mn = byte_at(s, j + 4) & 63;
    } else {
      sc = (byte_at(s, j + 4) & 15) | ((byte_at(s, j - 4) >> 6) << 4);
      mn = (byte_at(s, j + 4) >> 4) | ((byte_at(s, j) >> 6) << 4);
    }
    out.sc[2 * j] = out.sc[2 * j + 1] = static_cast<std::int8_t>(sc);
    out.mb[j] = static_cast<std::uint8_t>(mn);
  }
  const std::byte* qh = src + 16;
  const std::byte* qs = five ? src + 48 : src + 16;
  for (int e = 0; e < 256; ++e) {
    const int c = e / 64, t = (e / 32) % 2, i = e % 32;
    std::uint8_t q = static_cast<std::uint8_t>((byte_at(qs, 32 * c + i) >> (4 * t)) & 15);
    if (five) q = static_cast<std::uint8_t>(q | (((byte_at(qh, i) >> (e / 32)) & 1) << 4));
    out.q[e] = q;
  }
}

void decode_q6_k(const std::byte* src, DecodedQuantBlock& out) noexcept {
  const std::byte* ql = src;
  const std::byte* qh = src + 128;
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, r = e % 128;
    const int lo = (byte_at(ql, 64 * h + r % 64) >> (4 * (r / 64))) & 15;
    const int hi = (byte_at(qh, 32 * h + r % 32) >> (2 * (r / 32))) & 3;
    out.q[e] = static_cast<std::uint8_t>(lo | (hi << 4));
  }
  for (int s = 0; s < 16; ++s) out.sc[s] = static_cast<std::int8_t>(src[192 + s]);
  out.d = u16_at(src + 208);
}

}  // namespace

void decode_quant_block(QuantType t, const std::byte* src, DecodedQuantBlock& out) noexcept {
  out = DecodedQuantBlock{};
  switch (t) {
    case QuantType::kQ4_K:
      decode_k45(src, false, out);
      out.off = 0;
      return;
    case QuantType::kQ5_K:
      decode_k45(src, true, out);
      out.off = 0;
      return;
    case QuantType::kQ6_K:
      decode_q6_k(src, out);
      out.off = 32;
      return;
    case QuantType::kQ4_0:
      out.d = u16_at(src);
      decode_legacy(src + 2, nullptr, out);
      out.off = 8;
      return;
    case QuantType::kQ4_1:
      out.d = u16_at(src);
      out.mn = static_cast<std::uint16_t>(u16_at(src + 2) ^ 0x8000u);  // w = d·q − (−m)
      decode_legacy(src + 4, nullptr, out);
      out.mb[0] = 1;
      out.off = 0;
      return;
    case QuantType::kQ5_0:
      out.d = u16_at(src);
      decode_legacy(src + 6, src + 2, out);
      out.off = 16;
      return;
    case QuantType::kQ5_1:
      out.d = u16_at(src);
      out.mn = static_cast<std::uint16_t>(u16_at(src + 2) ^ 0x8000u);
      decode_legacy(src + 8, src + 4, out);
      out.mb[0] = 1;
      out.off = 0;
      return;
  }
}

float quant_block_value(const DecodedQuantBlock& b, int e) noexcept {
  const float a = f16_to_f32(b.d) * static_cast<float>(b.sc[e / 16]);
  const float m = f16_to_f32(b.mn) * static_cast<float>(b.mb[e / 32]);
  return a * static_cast<float>(static_cast<int>(b.q[e]) - b.off) - m;
}

namespace ref {

void quant_linear(const float* x, std::int64_t m, const QuantWeight& w, float* y, bool accumulate) {
  if (!w.valid() || m <= 0) throw InvalidArgument("quant_linear: empty weight or m <= 0");
  const std::int64_t n = w.n(), k = w.k(), nb = w.blocks();
  const int off = w.offset();
  const bool has_min = w.has_min();
  std::vector<std::int8_t> qa(static_cast<std::size_t>(k));
  std::vector<float> da(static_cast<std::size_t>(nb));
  for (std::int64_t r = 0; r < m; ++r) {
    for (std::int64_t b = 0; b < nb; ++b) {
      da[static_cast<std::size_t>(b)] = quantize_activation_block(x + r * k + b * 32, 32, qa.data() + b * 32);
    }
    for (std::int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (std::int64_t b = 0; b < nb; ++b) {
        std::int32_t s[2] = {0, 0}, sigma[2] = {0, 0};
        for (int i = 0; i < 32; ++i) {
          const std::int32_t a = qa[static_cast<std::size_t>(b * 32 + i)];
          s[i / 16] += static_cast<std::int32_t>(w.q_at(j, b, i)) * a;
          sigma[i / 16] += a;
        }
        const std::int32_t isum =
            w.sc_at(j, b, 0) * (s[0] - off * sigma[0]) + w.sc_at(j, b, 1) * (s[1] - off * sigma[1]);
        const float dd = f16_to_f32(w.d_at(j, b));
        float u;
        if (has_min) {
          const float mt =
              (f16_to_f32(w.m_at(j, b)) * static_cast<float>(w.mb_at(j, b))) * static_cast<float>(sigma[0] + sigma[1]);
          u = std::fma(static_cast<float>(isum), dd, -mt);
        } else {
          u = static_cast<float>(isum) * dd;
        }
        acc = std::fma(u, da[static_cast<std::size_t>(b)], acc);
      }
      float& out = y[r * n + j];
      out = accumulate ? out + acc : acc;
    }
  }
}

}  // namespace ref
}  // namespace clef::ops
