// SPDX-License-Identifier: MIT
// Linear layers run directly on llama.cpp's block-quantized GGUF weights: y [m, n] = x [m, k] · Wᵀ
// with W [n, k] in one of the ggml block types Q4_K, Q5_K, Q6_K, Q4_0, Q4_1, Q5_0, Q5_1 (what
// llama-quantize's Q4_K_M / Q5_K_M / Q6_K / Q4_0 ... mixes hold besides Q8_0, which runs in
// ops/int8_gemm.h). The weight keeps its file's size: repacked at load into panels of 16 output
// columns (the same bytes, a few percent more for Q4_K/Q5_K whose 6-bit scales are unpacked), never
// expanded to int8 or fp32 as a whole.
//
// Canonical form of every type (docs/NUMERICS.md "Block-quantized weights"): a row is cut into
// blocks of 32 along k; element i of block b of row j is
//
//   w = D · sc(i) · (q(i) − off)  −  M · mb          (fp32, evaluated as gguf-py's dequantize does)
//
//   type   q (stored, unsigned)  off  sc(i) per 16 elements           D (fp16)         M · mb
//   Q4_K   0..15                   0   6-bit scale of the 32-sub-block  d of the 256-block  dmin · (6-bit min)
//   Q5_K   0..31                   0   6-bit scale of the 32-sub-block  d                   dmin · (6-bit min)
//   Q6_K   0..63                  32   int8 scale of the 16-sub-block   d                   0
//   Q4_0   0..15                   8   1                                d of the 32-block   0
//   Q4_1   0..15                   0   1                                d                   −m (fp16 m; w = d·q + m)
//   Q5_0   0..31                  16   1                                d                   0
//   Q5_1   0..31                   0   1                                d                   −m
//
// Activations are quantized per row and block of 32 exactly as in int8 mode (ops/int8_gemm.h:
// da = amax / 127 fp32, qa = nearbyint(x / da) in [-127, 127]). Then, per row r, column j and
// block b, with σlo / σhi the sums of qa over the block's first / second 16 elements:
//
//   Slo = Σ_{i<16} q(i)·qa(i),  Shi = Σ_{16≤i<32} q(i)·qa(i)                       (int32, exact)
//   I   = sc_lo · (Slo − off·σlo) + sc_hi · (Shi − off·σhi)                       (int32, exact)
//   u   = fma(float(I), D, −((M · float(mb)) · float(σlo + σhi)))   types with a min (Q4_K, Q5_K,
//                                                                   Q4_1, Q5_1; mb = 1 for _1)
//   u   = float(I) · D                                              the others
//   acc = fma(u, da, acc)                                           over b = 0, 1, ... in order
//   y[r, j] = acc   (y[r, j] + acc, one fp32 add, when accumulating)
//
// Integer bounds (all far inside int32; float(I) is even exact, |I| < 2²⁴): |q·qa| ≤ 63·127, so
// |I| ≤ 2 · 128 · 16 · 32 · 127 = 16 646 144 (Q6_K, the largest); Q5_K 63 · 32 · 31 · 127 = 7 937 376;
// the SIMD kernels sum vpmaddubsw's int16 pairs over at most 8 groups of 4 k for 4-bit values
// (8 · 2 · 15 · 127 = 30 480), 4 for 5-bit (4 · 2 · 31 · 127 = 31 496), 2 for Q6_K (2 · 2 · 63 · 127 =
// 32 004) before widening, below 32 767, so no int16 step saturates. D · sc and M · mb are exact fp32 products (11-bit
// × 8-bit mantissas).
//
// Every kernel computes exactly this expression in this order, so all give the same bits as the
// scalar oracle ref::quant_linear at every ISA level (no per-level tolerance). Kernels: scalar (the
// baseline level), avx2 (vpmaddubsw of the unsigned weights with the signed activations, vpaddw,
// vpmaddwd with the int16 scales), avx512 (the same code on 512-bit vectors; AVX512BW), avxvnni and
// avx512vnni (vpdpbusd forms Slo and Shi, or Slo + Shi where the halves share a scale, in int32,
// then vpmulld by the scales: the same integers); on ARM64 neon (SMULL + SADALP), neon-dotprod (SDOT) and neon-i8mm
// (SMMLA), which form Slo and Shi in int32 directly.
//
// Rows must be whole ggml blocks (k a multiple of 256 for the K types, 32 for the others), as a
// GGUF tensor always is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/dtype.h"
#include "ops/int8_gemm.h"

namespace clef::ops {

/// The ggml block types these kernels read.
enum class QuantType : std::uint8_t { kQ4_K, kQ5_K, kQ6_K, kQ4_0, kQ4_1, kQ5_0, kQ5_1 };

/// "Q4_K", "Q5_K", ...
const char* quant_type_name(QuantType t) noexcept;
/// The QuantType of a DType (nullopt for every other dtype, Q8_0 included).
std::optional<QuantType> quant_type_of(DType t) noexcept;
/// Elements (256 or 32) and bytes of one ggml block.
std::int64_t quant_block_elems(QuantType t) noexcept;
std::int64_t quant_block_bytes(QuantType t) noexcept;

/// One ggml block in the canonical form of the file comment (the block's 32-element sub-blocks
/// numbered s = 0 .. elems/32 - 1).
struct DecodedQuantBlock {
  std::uint8_t q[256];  ///< stored unsigned values, element order
  std::int8_t sc[16];   ///< sc per 16 elements (1 for the legacy types)
  std::uint8_t mb[8];   ///< the min multiplier per 32-sub-block (K types; 1 for _1 types, 0 else)
  std::uint16_t d;      ///< D, fp16 bits
  std::uint16_t mn;     ///< M, fp16 bits (Q4_K/Q5_K dmin; Q4_1/Q5_1 the sign-flipped m; 0 else)
  int off;              ///< the offset off
};

/// Decodes one ggml block of type t (quant_block_bytes(t) bytes, any alignment, little-endian).
void decode_quant_block(QuantType t, const std::byte* src, DecodedQuantBlock& out) noexcept;
/// Value of element e of a decoded block: fp32(D)·sc·(q − off) − fp32(M)·mb, with the products
/// and the one subtraction in that order (gguf-py's dequantize order; bit-identical to it).
float quant_block_value(const DecodedQuantBlock& b, int e) noexcept;

/// Output columns per packed panel.
inline constexpr std::int64_t kQuantPanelCols = 16;

/// A weight W [n, k] in one of the block types, repacked per panel of 16 columns and ggml block
/// ("superblock" of G = elems/32 blocks of 32): one record per (panel, superblock) holding
///   per block g < G: nibbles [4][16 cols][4] (byte = q(4t+i) & 15 | (q(16+4t+i) & 15) << 4 for
///   the column's k = 4t+i, t < 4), then for 5-bit types one plane [16][4] whose bit u (0..7) is bit
///   4 of q(4u+i), for Q6_K two planes [16][4] whose bits 2u, 2u+1 are bits 4-5 of q(16h+4u+i);
///   then D [16] fp16, M [16] fp16 (types with a min), and for K types per block g: Q4_K/Q5_K
///   sc [16] u8 and mb [16] u8, Q6_K sc_lo [16] i8 and sc_hi [16] i8.
/// Columns past n are zero.
class QuantWeight {
 public:
  QuantWeight() = default;
  /// Repacks n rows of k / elems ggml blocks of type t (any alignment). Runs on the engine's
  /// threads. InvalidArgument for non-positive sizes or k not whole blocks.
  static QuantWeight from_blocks(QuantType t, const void* blocks, std::int64_t n, std::int64_t k);

  QuantType type() const noexcept { return type_; }
  std::int64_t n() const noexcept { return n_; }
  std::int64_t k() const noexcept { return k_; }
  std::int64_t blocks() const noexcept { return k_ / 32; }    ///< blocks of 32 per row
  std::int64_t superblocks() const noexcept { return nsb_; }  ///< ggml blocks per row
  std::int64_t group() const noexcept { return group_; }      ///< blocks of 32 per ggml block
  std::int64_t panels() const noexcept { return np_; }        ///< ceil(n / 16)
  std::size_t record_bytes() const noexcept { return rec_; }
  /// The record of panel p, superblock s.
  const std::uint8_t* record(std::int64_t p, std::int64_t s) const noexcept {
    return data_.data() + static_cast<std::size_t>(p * nsb_ + s) * rec_;
  }
  /// Canonical parameters of row j (< n), block b, read back from the packed layout (the
  /// reference and the tests): q of element i < 32, sc of half h, mb, D and M bits, off.
  std::uint8_t q_at(std::int64_t j, std::int64_t b, int i) const noexcept;
  std::int8_t sc_at(std::int64_t j, std::int64_t b, int h) const noexcept;
  std::uint8_t mb_at(std::int64_t j, std::int64_t b) const noexcept;
  std::uint16_t d_at(std::int64_t j, std::int64_t b) const noexcept;
  std::uint16_t m_at(std::int64_t j, std::int64_t b) const noexcept;
  int offset() const noexcept;
  bool has_min() const noexcept;
  /// The weight value w[j, kk] (file comment; same bits as quant_block_value).
  float value_at(std::int64_t j, std::int64_t kk) const noexcept;
  /// Bytes held.
  std::size_t bytes() const noexcept { return data_.size(); }
  bool valid() const noexcept { return n_ > 0; }

 private:
  QuantType type_ = QuantType::kQ4_K;
  std::int64_t n_ = 0, k_ = 0, nsb_ = 0, group_ = 0, np_ = 0;
  std::size_t rec_ = 0;
  std::vector<std::uint8_t> data_;
};

/// The kernels of this binary for these types.
/// x86-64: kAvx2, kAvxVnni (256-bit vpdpbusd), kAvx512, kAvx512Vnni (512-bit vpdpbusd); ARM64:
/// kNeon (SMULL/SADALP), kNeonDot (SDOT), kNeonI8mm (SMMLA) (cpu/quant_gemm_neon-inl.h).
enum class QuantKernel : std::uint8_t { kScalar, kAvx2, kAvx512, kNeon, kNeonDot, kNeonI8mm, kAvxVnni, kAvx512Vnni };

/// "scalar", "avx2", "avxvnni", "avx512", "avx512vnni", "neon", "neon-dotprod", "neon-i8mm".
const char* quant_kernel_name(QuantKernel k) noexcept;
/// The kernels this CPU can run (kScalar first).
std::vector<QuantKernel> quant_kernels_supported();
/// By the ISA level in use (ops/isa.h), the dot product the int8 kernels use there: baseline →
/// scalar; avx2 → avx2, or avxvnni on a CPU with AVX-VNNI whose best level is avx2; avx512 /
/// avx512bf16 → avx512vnni when the CPU has AVX512-VNNI, else avx512 (AVX512BW is part of both
/// levels). ARM64: as active_int8_kernel (ops/int8_gemm.h). CLEF_QUANT_KERNEL=<name> forces one
/// (all give the same bits; for A/B timings); Unsupported when the CPU lacks it, InvalidArgument
/// on an unknown name.
QuantKernel active_quant_kernel();

/// Measured multiply-add peak of kernel `k`'s dot-product sequence on `threads` threads, in GOP/s
/// (2 OP per multiply-add): avx2 and avx512 vpmaddubsw + vpaddw per 32 (64) products, the
/// unsigned weight bytes of these types times the signed activation bytes into int16 sums (the
/// tiles' vpmaddwd widening, once per 1-4 groups, is left out: this is the sequence's ceiling);
/// avxvnni, avx512vnni, neon-dotprod and neon-i8mm run the int8 kernels' instruction
/// (measure_int8_peak_gops: vpdpbusd, SDOT, SMMLA). Best of `repeats` runs of `iters` iterations.
/// 0 for kScalar and kNeon and for a kernel this CPU lacks.
double measure_quant_peak_gops(QuantKernel k, int threads, int repeats = 3, std::int64_t iters = 20'000'000);

/// y [m, n] = x [m, k] · Wᵀ (y += ... when `accumulate`) with the active kernel. x and y
/// contiguous fp32, not aliasing. Throws InvalidArgument on a bad size.
void quant_linear(const float* x, std::int64_t m, const QuantWeight& w, float* y, bool accumulate);
/// The same with a chosen kernel (tests, benchmarks). Throws Unsupported when the CPU lacks it.
void quant_linear_with(QuantKernel kernel, const float* x, std::int64_t m, const QuantWeight& w, float* y,
                       bool accumulate);
/// quant_linear on activations already quantized: by quantize_activations (ops/int8_gemm.h), once
/// for several weights reading one x (ops::linear_shared), or by the op that wrote them
/// (ops::silu_mul_quantize, ops::gated_rms_norm_quantize). The same bits as quant_linear on x.
/// Fills act's half-block sums on first use (Int8Activations::half_sums). Throws InvalidArgument
/// unless act was quantized from rows of the weight's k (same blocks is not enough: k = 1000 and
/// 1024 both make 32).
void quant_linear_quantized(Int8Activations& act, const QuantWeight& w, float* y, bool accumulate);

namespace ref {
/// Scalar oracle: quantizes x with ref::quantize_activation_block and evaluates the expression
/// of the file comment element by element through QuantWeight's accessors.
void quant_linear(const float* x, std::int64_t m, const QuantWeight& w, float* y, bool accumulate);
}  // namespace ref

}  // namespace clef::ops
