// SPDX-License-Identifier: MIT
// Internal to the block-quantized linear layer (ops/quant_gemm.h): the packed record layout of
// each type, and the per-panel buffer the kernels unpack a panel into.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/quant_gemm.h"

namespace clef::ops::quant_detail {

/// Compile-time facts of a type (the canonical form of ops/quant_gemm.h).
template <QuantType T>
struct Traits {
  static constexpr bool kK = T == QuantType::kQ4_K || T == QuantType::kQ5_K || T == QuantType::kQ6_K;
  static constexpr int kGroup = kK ? 8 : 1;  ///< blocks of 32 per ggml block
  static constexpr bool kFive = T == QuantType::kQ5_K || T == QuantType::kQ5_0 || T == QuantType::kQ5_1;
  static constexpr bool kSix = T == QuantType::kQ6_K;
  static constexpr bool kMin =
      T == QuantType::kQ4_K || T == QuantType::kQ5_K || T == QuantType::kQ4_1 || T == QuantType::kQ5_1;
  static constexpr bool kKScale = T == QuantType::kQ4_K || T == QuantType::kQ5_K;  ///< u8 sc + u8 mb per block
  static constexpr int kOff = T == QuantType::kQ6_K ? 32 : T == QuantType::kQ4_0 ? 8 : T == QuantType::kQ5_0 ? 16 : 0;
  /// Groups of 4 k whose int16 vpmaddubsw sums may be added before widening (bounds in
  /// ops/quant_gemm.h): 8 for 4-bit values (both halves of a block share the scale then), 4 for
  /// 5-bit, 2 for Q6_K (a flush never mixes the halves of types whose halves differ).
  static constexpr int kFlush = kSix ? 2 : kFive ? 4 : 8;
};

/// Byte offsets inside one (panel, ggml block) record.
struct Layout {
  int group = 1;             ///< blocks of 32 per record
  std::size_t qbytes = 256;  ///< packed values per block of 32: nibbles (+ high-bit planes)
  std::size_t d_off = 0;     ///< D [16] fp16
  std::size_t m_off = 0;     ///< M [16] fp16 (types with a min)
  std::size_t sc_off = 0;    ///< K types: per block sc / mb (Q4_K, Q5_K) or sc_lo / sc_hi (Q6_K), 16 each
  std::size_t bytes = 0;     ///< whole record
  bool five = false, six = false, has_min = false, kscale = false, q6 = false;
  int off = 0;
};

Layout layout_of(QuantType t) noexcept;

/// Per panel and block of 32, what the kernels read (unpacked once per panel, reused by every row
/// tile): q [8 groups][16 cols][4] u8 (group g = k 4g .. 4g+3), then [16] each of: sc_lo and sc_hi
/// as int32 holding the scale in both int16 halves (the vpmaddwd operand), the offset correction
/// pair (off·sc_lo | off·sc_hi << 16), D fp32, M·mb fp32.
inline constexpr std::size_t kUnpackedQ = 512;
inline constexpr std::size_t kUnpackedBlock = kUnpackedQ + 5 * 64;

/// The AVX2 and AVX512-VNNI kernels' activations (Int8Activations::interleaved,
/// Interleaved::kQuantTiles): one record per tile of kTileRows rows and block of 32, tiles in row
/// order, blocks in k order inside a tile: [8 groups][kTileRows rows][4] qa bytes (group g = k 4g .. 4g+3), then per
/// row da (fp32), float(σ) (fp32) and the σ pair (int32), [kTileRows] each, and −32·σlo, −32·σhi (int32,
/// [kTileRows][2]: Q6_K's offset terms, the start of its VNNI tile's half sums); rows past m are zero. A row tile reads
/// one contiguous stream instead of one per row and array (in-process A/B on Zen 3, m = 512, the 0.8b k = 1024 shapes:
/// Q4_K +6-8%, Q4_0 +2-8%, Q6_K +1-5%, k = 3584 level; same bits).
inline constexpr std::int64_t kTileRows = 3;
inline constexpr std::int64_t kTileDa = 32 * kTileRows;                 ///< byte offset of the da [kTileRows]
inline constexpr std::int64_t kTileSf = kTileDa + 4 * kTileRows;        ///< of float(σ) [kTileRows]
inline constexpr std::int64_t kTileSpair = kTileSf + 4 * kTileRows;     ///< of the σ pairs [kTileRows]
inline constexpr std::int64_t kTileQ6Off = kTileSpair + 4 * kTileRows;  ///< of −32·σlo, −32·σhi [kTileRows][2]
inline constexpr std::int64_t kTileRecord = kTileQ6Off + 8 * kTileRows;

}  // namespace clef::ops::quant_detail
