// SPDX-License-Identifier: MIT
// int8 linear layers in ggml's Q8_0 scheme (`--precision int8`, and GGUF Q8_0 weights): y [m, n] =
// x [m, k] · Wᵀ with
//
//   W   symmetric int8, one scale per row and block of 32 along k:  W[j, 32b + i] ≈ dw[j, b] · qw[j, 32b + i]
//       (dw is IEEE fp16, qw in [-127, 127]). Made at load from F32/BF16/F16 weights exactly as
//       gguf-py's Q8_0 quantizer (and ggml's quantize_row_q8_0) makes it, or taken from Q8_0 GGUF
//       tensors, so both sources give the same bits.
//   x   quantized per row and block of 32 at each call ("dynamic" activations):
//       da = amax / 127 (fp32), qa = nearbyint(x · (1 / da)) in [-127, 127] (0 for an all-zero block).
//   y   y[r, j] = Σ_b  float(Σ_i qa[r, 32b+i] · qw[j, 32b+i]) · (dw[j, b] · da[r, b]),
//       summed over the blocks b = 0, 1, ... in order with one fused multiply-add per block
//       (the integer block sums are exact: |Σ| ≤ 32 · 127² < 2²⁴).
//
// Every kernel below computes exactly this expression (integer sums are exact, and the fp32
// operations happen in the same order), so all of them give the same bits as the scalar reference
// ref::int8_linear at every ISA level: no per-level tolerance. Kernels: kScalar (the reference
// itself, the baseline level), kAvx2 (vpmaddubsw/vpmaddwd with the sign trick: |qa| · sign(qw, qa),
// no int16 saturation since |qa|, |qw| ≤ 127), kAvxVnni (256-bit vpdpbusd, AVX-VNNI) and
// kAvx512Vnni (512-bit vpdpbusd); the VNNI kernels feed qw + 128 as the unsigned operand and
// subtract 128 · Σ qa per block (exact). ARM64: kNeon (SMULL + SADALP), kNeonDot (SDOT) and
// kNeonI8mm (SMMLA), all on the same packed weights (cpu/int8_gemm_neon-inl.h).
//
// k need not be a multiple of 32: rows are zero-padded to the next block (zeros add nothing).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace clef::ops {

/// Output columns per packed panel.
inline constexpr std::int64_t kInt8PanelCols = 16;
/// Elements per quantization block along k (Q8_0).
inline constexpr std::int64_t kInt8Block = 32;

/// A weight W [n, k] in the Q8_0 scheme, packed for the kernels: panels of 16 output columns;
/// inside a panel, per block of 32 k: 8 groups of 4 consecutive k, each holding the 16 columns'
/// 4 int8 values ([panel][block][k/4][col][4], 512 bytes), and the 16 fp16 scales
/// ([panel][block][col]). Columns past n (the last panel) and k past k() are zero.
class Int8Weight {
 public:
  Int8Weight() = default;
  /// Quantizes `data` (n x k little-endian elements of F32, BF16 or F16, any alignment) row by row,
  /// block by block, as gguf-py's Q8_0.quantize_blocks: d = amax / 127 (fp32), id = 1 / d (0 when
  /// d == 0), q = round-half-away(x · id), stored scale fp16(d). Runs on the engine's threads.
  /// Throws Unsupported for another dtype, InvalidArgument for non-positive sizes.
  static Int8Weight quantize(DType dtype, const void* data, std::int64_t n, std::int64_t k);
  /// Repacks ggml Q8_0 blocks (n rows of k / 32 blocks of 34 bytes: fp16 d, 32 int8 q; any
  /// alignment). k must be a multiple of 32 (InvalidArgument otherwise).
  static Int8Weight from_q8_0(const void* blocks, std::int64_t n, std::int64_t k);

  std::int64_t n() const noexcept { return n_; }
  std::int64_t k() const noexcept { return k_; }
  std::int64_t blocks() const noexcept { return nb_; }  ///< blocks per row: ceil(k / 32)
  std::int64_t panels() const noexcept { return np_; }  ///< ceil(n / 16)
  /// Packed int8 values of panel p, block b (512 bytes).
  const std::int8_t* q_block(std::int64_t p, std::int64_t b) const noexcept {
    return q_.data() + static_cast<std::size_t>((p * nb_ + b) * kInt8PanelCols * kInt8Block);
  }
  /// fp16 scales of panel p, block b (16 values).
  const std::uint16_t* d_block(std::int64_t p, std::int64_t b) const noexcept {
    return d_.data() + static_cast<std::size_t>((p * nb_ + b) * kInt8PanelCols);
  }
  /// qw[j, kk] (0 past the end of the row) and dw[j, b] as fp16 bits: element access for the
  /// reference and the tests.
  std::int8_t q_at(std::int64_t j, std::int64_t kk) const noexcept;
  std::uint16_t d_at(std::int64_t j, std::int64_t b) const noexcept;
  /// The dequantized value dw · qw (what the weight stands for).
  float value_at(std::int64_t j, std::int64_t kk) const noexcept;
  /// Bytes held (int8 values + scales).
  std::size_t bytes() const noexcept { return q_.size() + d_.size() * sizeof(std::uint16_t); }
  bool valid() const noexcept { return n_ > 0; }

 private:
  void allocate(std::int64_t n, std::int64_t k);
  /// Stores row j's block b: 32 values and its fp16 scale.
  void set_block(std::int64_t j, std::int64_t b, const std::int8_t* q32, std::uint16_t d) noexcept;
  std::int64_t n_ = 0, k_ = 0, nb_ = 0, np_ = 0;
  std::vector<std::int8_t> q_;
  std::vector<std::uint16_t> d_;
};

/// The int8 kernels of this binary.
/// x86-64: kAvx2, kAvxVnni, kAvx512Vnni; ARM64: kNeon (SMULL/SADALP), kNeonDot (SDOT),
/// kNeonI8mm (SMMLA); see cpu/int8_gemm_neon-inl.h.
enum class Int8Kernel : std::uint8_t { kScalar, kAvx2, kAvxVnni, kAvx512Vnni, kNeon, kNeonDot, kNeonI8mm };

/// "scalar", "avx2", "avxvnni", "avx512vnni", "neon", "neon-dotprod", "neon-i8mm".
const char* int8_kernel_name(Int8Kernel k) noexcept;
/// The kernels this CPU can run (kScalar first).
std::vector<Int8Kernel> int8_kernels_supported();
/// The kernel int8_linear uses: by the ISA level in use (ops/isa.h): baseline → scalar; avx2 →
/// avx2, or avxvnni on a CPU with AVX-VNNI but no AVX-512; avx512/avx512bf16 → avx512vnni when the
/// CPU has AVX512-VNNI, else as avx2. ARM64: baseline → scalar, neon → neon, neon-dotprod →
/// neon-dotprod, neon-i8mm and the SVE levels → neon-i8mm when the CPU has I8MM, else
/// neon-dotprod (every SVE core has SDOT). CLEF_INT8_KERNEL (a name above) forces one the CPU supports
/// (Unsupported otherwise; InvalidArgument for an unknown name).
Int8Kernel active_int8_kernel();

/// Measured int8 multiply-add peak of kernel `k` on `threads` threads, in GOP/s (2 OP per
/// multiply-add, as GFLOP/s counts an FMA): independent accumulator chains of the instruction
/// sequence that kernel runs per 32 (or 64) products: avx2 vpsignb + vpmaddubsw + vpmaddwd + vpaddd
/// on 256 bits, avxvnni one 256-bit vpdpbusd, avx512vnni one 512-bit vpdpbusd. Best of `repeats`
/// runs of `iters` iterations; on ARM64 SDOT for neon-dotprod and SMMLA for neon-i8mm
/// (measure_arm_peak, ops/peak.h). 0 for kScalar and kNeon (no dot-product peak) and for a kernel
/// this CPU lacks.
double measure_int8_peak_gops(Int8Kernel k, int threads, int repeats = 3, std::int64_t iters = 20'000'000);

/// Whose layout Int8Activations::interleaved holds.
enum class Interleaved : std::uint8_t { kNone, kInt8Avx2, kQuantTiles };

/// Activations of one call, quantized: qa [m, blocks·32] int8, |qa| (the AVX2 kernel's unsigned
/// operand), da [m, blocks] fp32 and 128 · Σ qa per block [m, blocks] int32 (the VNNI kernels'
/// correction).
struct Int8Activations {
  std::int64_t m = 0, k = 0, blocks = 0;  ///< x's rows and columns, ceil(k / 32)
  std::vector<std::int8_t> q;
  std::vector<std::uint8_t> absq;
  std::vector<float> d;
  std::vector<std::int32_t> sum128;
  bool simd = false;  ///< full blocks take the AVX2 quantizer (prepare_activations sets it)
  /// The block-quantized kernels' per-block sums (ops/quant_gemm.h: σlo | σhi << 16 as int16
  /// halves, and float(σlo + σhi)), [m, blocks] each: filled by quant_linear_quantized on first
  /// use, so several block-quantized weights reading these activations share them;
  /// prepare_activations marks them stale.
  std::vector<std::int32_t> half_sums;
  std::vector<float> block_sums;
  bool half_sums_ready = false;
  /// The activations with rows interleaved for the row tiles of one x86 kernel (the AVX2 kernels',
  /// or AVX512-VNNI's block-quantized tiles; one contiguous stream per tile instead of a stream per
  /// row and array; layouts in cpu/int8_gemm.cc and cpu/quant_layout.h), built by the first GEMM that
  /// runs that kernel on them, so weights reading the same activations share it; `interleaved_for`
  /// says whose (prepare_activations: none).
  std::vector<std::uint8_t> interleaved;
  Interleaved interleaved_for = Interleaved::kNone;
};

/// Quantizes x [m, k] (fp32, contiguous) per row and block of 32 (file comment). Runs on the
/// engine's threads; same bits at every level.
void quantize_activations(const float* x, std::int64_t m, std::int64_t k, Int8Activations& out);

/// The two halves of quantize_activations, for a producer that quantizes the rows it has just
/// written while they are in cache (ops::silu_mul_quantize, ops::gated_rms_norm_quantize):
/// prepare_activations sizes `out` for x [m, k] (serial, before the producer's parallel loop);
/// quantize_activation_span quantizes `count` floats of row `row` starting at its block `block0`
/// (x at that block's first element; count a multiple of 32 unless the span ends the row) with
/// the bits quantize_activations gives them. Spans of different rows or blocks may run on
/// different threads.
void prepare_activations(std::int64_t m, std::int64_t k, Int8Activations& out);
void quantize_activation_span(const float* x, std::int64_t count, std::int64_t row, std::int64_t block0,
                              Int8Activations& out);

/// y [m, n] = x [m, k] · Wᵀ in the Q8_0 scheme with the active kernel (y += ... when
/// `accumulate`: y + the block sum, one fp32 add). x and y contiguous fp32, not aliasing.
/// Throws InvalidArgument on a bad size.
void int8_linear(const float* x, std::int64_t m, const Int8Weight& w, float* y, bool accumulate);
/// int8_linear on activations already quantized by quantize_activations (x of k = w.k()
/// columns): several weights reading the same x quantize it once (and the AVX2 kernel interleaves
/// its rows once: Int8Activations::interleaved). Same bits as int8_linear on x. Throws
/// InvalidArgument when act does not match w.k().
void int8_linear_quantized(Int8Activations& act, const Int8Weight& w, float* y, bool accumulate);
/// The same with a chosen kernel (tests, benchmarks). Throws Unsupported when the CPU lacks it.
void int8_linear_with(Int8Kernel kernel, const float* x, std::int64_t m, const Int8Weight& w, float* y,
                      bool accumulate);

namespace ref {
/// Scalar oracle: quantizes x as quantize_activations does (its own plain loop) and evaluates the
/// expression of the file comment with Int8Weight::q_at / d_at, element by element.
void int8_linear(const float* x, std::int64_t m, const Int8Weight& w, float* y, bool accumulate);
/// Plain per-block Q8_0 quantization of one block of `count` ≤ 32 floats as gguf-py does; writes
/// 32 values (zeros past count) and returns the fp16 scale bits.
std::uint16_t quantize_q8_0_block(const float* x, std::int64_t count, std::int8_t* q32);
/// Activation quantization of one block of `count` ≤ 32 floats; writes 32 values, returns da.
float quantize_activation_block(const float* x, std::int64_t count, std::int8_t* q32);
}  // namespace ref

}  // namespace clef::ops
