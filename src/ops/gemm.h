// SPDX-License-Identifier: MIT
// Linear layers (GEMM) behind one interface, so a CUDA backend can slot in later.
//
// y [m, n] = x [m, k] · Wᵀ with W [n, k] row-major (PyTorch Linear.weight), fp32 accumulation.
// The CPU backend is oneDNN's matmul on x86-64 (chosen by measurement over OpenBLAS, see
// docs/NUMERICS.md and bench/bench_ops.cc) and OpenBLAS's sgemm on ARM64, where Debian's oneDNN has
// only reference GEMMs (docs/ARM64.md "GEMM"; cpu/gemm_backend.h); both run on the engine's OpenMP
// pool (ops/parallel.h).
//
// Precision (docs/NUMERICS.md "Precision modes"):
//   kF32  parity mode: fp32 activations times exact fp32 weights (bf16/f16 weights are widened,
//         which is exact), fp32 accumulation;
//   kBF16 fast mode: activations rounded to bf16, bf16 weights used in place (mmapped, zero
//         copy), products summed in fp32, fp32 output. Where the library has no bf16 matmul
//         (oneDNN below AVX-512; OpenBLAS), the same operands go through its fp32 matmul
//         (bf16_gemm_emulated()).
#pragma once

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "ops/int8_gemm.h"
#include "ops/quant_gemm.h"

namespace clef::ops {
namespace gemm_backend {
class PackedBf16;  // cpu/gemm_backend.h
}  // namespace gemm_backend

/// Numeric mode of the backbone's linear layers.
///   kInt8: weights in ggml's Q8_0 scheme (symmetric int8, one scale per block of 32 along k; made
///          at load from F32/BF16/F16 weights exactly as gguf-py's quantize_q8_0 does, or taken
///          from Q8_0 GGUF tensors), activations quantized per row and block of 32 at each call,
///          integer dot products per block, fp32 sums (ops/int8_gemm.h).
enum class Precision : std::uint8_t { kF32, kBF16, kInt8 };

/// "fp32" / "bf16" / "int8".
const char* precision_name(Precision p) noexcept;
/// Parses "fp32"/"f32", "bf16" or "int8"; nullopt otherwise.
std::optional<Precision> precision_from_name(std::string_view s) noexcept;

/// The weight of one linear layer, W [n, k], prepared for one precision. Zero-copy when the
/// stored dtype is what the precision consumes (BF16 for kBF16, F32 for kF32) and the data is
/// suitably aligned; otherwise converted once here (F32/F16 -> bf16 for kBF16), or for kF32 on a
/// BF16/F16 weight either widened per call into scratch or, with resident fp32 weights
/// (set_fp32_resident_weights), widened once on first use into an fp32 copy kept from then on.
/// A zero-copy GemmWeight points into `data`, which must outlive it. Movable, not copyable.
class GemmWeight {
 public:
  GemmWeight() = default;
  /// `data` holds n x k little-endian elements of `dtype` (F32, BF16 or F16), any alignment, or
  /// ggml Q8_0 blocks (DType::kQ8_0). kInt8 quantizes (or repacks) here, on the
  /// engine's threads, into an owned Int8Weight (ops/int8_gemm.h) and then drops the resident
  /// pages of `data` when it is a MappedFile's (MappedFile::drop_pages): memory holds the int8
  /// copy only. A block-quantized ggml weight (DType kQ4_K, kQ5_K, kQ6_K, kQ4_0, kQ4_1, kQ5_0,
  /// kQ5_1) is repacked into an owned QuantWeight (ops/quant_gemm.h) at every precision (its own
  /// kernels; the mapped pages are dropped likewise); so is a Q8_0 weight, which takes the int8 path
  /// at every precision: a quantized file chooses its kernels by itself. Throws Unsupported for another
  /// dtype, InvalidArgument for non-positive sizes or a block type's k not whole blocks.
  GemmWeight(DType dtype, const void* data, std::int64_t n, std::int64_t k, Precision p);
  GemmWeight(GemmWeight&&) noexcept = default;
  GemmWeight& operator=(GemmWeight&&) noexcept = default;
  GemmWeight(const GemmWeight&) = delete;
  GemmWeight& operator=(const GemmWeight&) = delete;

  std::int64_t n() const noexcept { return n_; }  ///< output features
  std::int64_t k() const noexcept { return k_; }  ///< input features
  Precision precision() const noexcept { return precision_; }
  DType stored_dtype() const noexcept { return dtype_; }
  const void* stored_data() const noexcept { return data_; }
  /// Bytes this object allocated so far (0 when zero-copy; a resident fp32 copy counts once it
  /// was made).
  std::size_t owned_bytes() const noexcept;
  bool valid() const noexcept { return data_ != nullptr; }

  /// Pointer to the operand the backend multiplies with (bf16 bits for kBF16; fp32 when the
  /// stored weight is aligned F32 in kF32), or nullptr when it must be widened (per call, or once
  /// into the resident copy: resident_f32()).
  const void* operand() const noexcept { return operand_; }
  /// kF32 with resident fp32 weights on a BF16/F16 weight: the fp32 copy [n, k], made (widened
  /// exactly, on the engine's threads) by the first call; nullptr in every other case.
  /// Thread-safe.
  const float* resident_f32() const;
  /// bf16 mode on the GEMM library's bf16 matmul: the operand packed once into the library's own
  /// layout (cpu/gemm_backend.h pack_bf16) if use_packed_bf16() has made it, else nullptr. No side
  /// effect. Thread-safe.
  const gemm_backend::PackedBf16* packed_bf16() const;
  /// The same for one library call of linear(): counts the call, and the call numbered
  /// bf16_pack_after_calls() (as it was when this weight was built) makes the packed copy, where
  /// the operand is the stored bf16 bytes themselves (no owned copy); their mapped pages are dropped
  /// then (MappedFile::drop_pages). Returns the copy from that call on; nullptr before it, where the
  /// library reads W as it is, or when packing is off. Thread-safe.
  const gemm_backend::PackedBf16* use_packed_bf16() const;
  /// kInt8: the packed int8 weight; nullptr otherwise.
  const Int8Weight* int8() const noexcept { return int8_.get(); }
  /// A block-quantized weight (any precision): the repacked weight; nullptr otherwise.
  const QuantWeight* quant() const noexcept { return quant_.get(); }

 private:
  DType dtype_ = DType::kF32;
  const void* data_ = nullptr;
  const void* operand_ = nullptr;
  std::int64_t n_ = 0, k_ = 0;
  Precision precision_ = Precision::kF32;
  std::vector<std::uint16_t> owned_;  ///< bf16 copy when the stored dtype is not BF16
  struct Fp32Copy {                   ///< the fp32 copy of kF32 with resident weights, made by the first call
    std::once_flag once;
    std::unique_ptr<float[]> data;  ///< not value-initialized: every element is written once
    std::atomic<bool> made{false};
  };
  std::unique_ptr<Fp32Copy> fp32_copy_;
  struct PackedCopy {  ///< bf16 mode's library-packed operand, made by the call numbered pack_at
    explicit PackedCopy(int at) : pack_at(at) {}
    int pack_at;
    std::atomic<int> calls{0};
    std::once_flag once;
    std::shared_ptr<const gemm_backend::PackedBf16> data;  ///< shared_ptr: the type is incomplete here
    std::atomic<bool> made{false};
  };
  std::unique_ptr<PackedCopy> packed_;
  std::unique_ptr<Int8Weight> int8_;    ///< kInt8
  std::unique_ptr<QuantWeight> quant_;  ///< a block-quantized ggml weight
};

/// fp32 mode with a BF16/F16 checkpoint: whether GemmWeights built from now on keep an fp32 copy
/// of the weight, made on its first use (resident: 4 bytes per parameter, no per-call widening,
/// 15-20% faster prefill on the 0.8b preset at AVX2) or widen it per call panel by panel (stream:
/// resident memory stays the mmapped checkpoint). The engine decides per model
/// (runtime/backbone.h, Fp32Weights). Both give identical results (widening is exact). Process-wide, like the
/// thread count; set it before the model is built.
void set_fp32_resident_weights(bool resident) noexcept;
bool fp32_resident_weights() noexcept;

/// bf16 mode on the GEMM library's bf16 matmul (oneDNN): at which library call of a weight
/// GemmWeights built from now on pack their operand into the library's own layout
/// (GemmWeight::use_packed_bf16); until then, or always with 0, each call hands W over as it is and
/// the library copies it into that layout itself. Packing costs about what 8 of those per-call
/// copies cost, so the default packs on the 8th call: a run that uses a weight fewer times never
/// pays for it, and a long-running one (a server, repeated requests) pays about twice what the
/// best choice in hindsight would at worst (docs/PERFORMANCE.md "When to pack"). Both give identical
/// results (the same kernels and sums; docs/NUMERICS.md "Kernel changes that change no bit").
/// Packing replaces the mapped checkpoint pages, which replicas on one host share, by a private
/// copy of about the same size (docs/DEPLOYMENT.md). Default from the environment: CLEF_BF16_PACK
/// unset or empty = kBf16PackAfterCallsDefault, 0 = never, a whole number N from 1 to 1000000 =
/// the N-th call; anything else throws InvalidArgument naming the variable. Process-wide; set it
/// before the model is built. Throws InvalidArgument (calls < 0 or > 1000000) from the setter too.
inline constexpr int kBf16PackAfterCallsDefault = 8;
void set_bf16_pack_after_calls(int calls);
int bf16_pack_after_calls();

/// y [m, n] = x [m, k] · Wᵀ, or y += x · Wᵀ when `accumulate` (fused residual add). kInt8
/// weights run ops::int8_linear, block-quantized ones ops::quant_linear.
/// x and y are contiguous fp32 and must not alias. m >= 1. Throws InvalidArgument on a bad size.
void linear(const float* x, std::int64_t m, const GemmWeight& w, float* y, bool accumulate = false);

/// One output of linear_shared: y [m, w->n()] = x · Wᵀ, or y += x · Wᵀ when `accumulate`.
struct LinearOut {
  const GemmWeight* w = nullptr;
  float* y = nullptr;
  bool accumulate = false;
};

/// linear() for several weights reading the same x [m, k] (a layer's input projections): x is
/// converted once per operand kind (bf16 words for the bf16 matmuls, int8 blocks for the int8
/// weights, packed once for clef's FMA GEMM) instead of once per weight. The same bits as one
/// linear() call per output. Every weight's k must equal the first one's; no y may alias x or
/// overlap another output's y. Throws InvalidArgument otherwise or as linear() does.
void linear_shared(const float* x, std::int64_t m, std::span<const LinearOut> outs);

/// Whether w runs on activations quantized to 8 bits per block of 32 (an int8-mode weight or a
/// block-quantized one), so that linear_quantized can take activations the producing op quantized
/// as it wrote them (ops::silu_mul_quantize, ops::gated_rms_norm_quantize).
bool linear_takes_quantized(const GemmWeight& w);
/// y (+)= x · Wᵀ from x quantized by quantize_activations (or a producer's same-bits quantization):
/// the same bits as linear(x). Throws InvalidArgument unless linear_takes_quantized(w) and act has
/// w's k.
void linear_quantized(Int8Activations& act, const GemmWeight& w, float* y, bool accumulate);

/// Whether bf16 weights (kBF16) run clef's own vdpbf16ps GEMM (cpu/bf16_gemm_x86.h: each row's bits
/// independent of the other rows; docs/NUMERICS.md "bf16 GEMM with fixed row arithmetic") instead of
/// the library's bf16 matmul, where the level in use has AVX512-BF16 (elsewhere the library's path is
/// taken either way). Default from the environment: CLEF_BF16_GEMM=clef on, unset / empty / "library"
/// off, anything else InvalidArgument at the first bf16 linear call. Process-wide.
void set_own_bf16_gemm(bool on) noexcept;
bool own_bf16_gemm_active();

/// Whether fp32 products (fp32 weights, and bf16 weights where the library has no bf16 matmul: bf16
/// values through fp32 products) run clef's own AVX2 FMA GEMM (cpu/fma_gemm_x86.h: one fixed order
/// of fused multiply-adds and additions per element, so each row's bits are independent of the other rows;
/// docs/NUMERICS.md "fp32 GEMM with a fixed order (AVX2)") instead of the library's fp32 matmul, where
/// the level in use is avx2 (elsewhere the library's path is taken either way). Default from the
/// environment: CLEF_FP32_GEMM unset, empty or "clef" on, "library" off, anything else
/// InvalidArgument at the first such call. Process-wide.
void set_own_fp32_gemm(bool on) noexcept;
bool own_fp32_gemm_active();

/// Whether linear() computes every row of y from that row of x and W alone, whatever the other rows
/// of the call are (how many, in which place): true for clef's own kernels (int8, block-quantized,
/// bf16 on the vdpbf16ps GEMM while it is active, and fp32 / bf16 on the FMA GEMM at the avx2 level
/// while it is active), false for the library's matmuls (fp32, and bf16 otherwise), whose blocking,
/// and so each sum's order, depends on the number of rows. Rows of
/// several sequences may share a call only where this is true (nn/linear.h linear_shared_rows).
bool linear_rows_independent(const GemmWeight& w);

/// True when the GEMM library has no bf16 matmul at the level in use (ops/isa.h), so kBF16 runs
/// the same numerics through its fp32 matmul (activations rounded to bf16 values, bf16 weights
/// widened exactly, fp32 sums; docs/NUMERICS.md).
bool bf16_gemm_emulated();

/// Name and version of the GEMM library in use and the int8 and block-quantized kernels, e.g.
/// "oneDNN 2.6.3 (OpenMP, avx512_core_bf16, 2 threads); int8: clef avx512vnni kernel; Q4_K..Q6_K,
/// Q4_0..Q5_1: clef avx512 kernel".
std::string gemm_backend_name();

namespace ref {
/// Scalar oracle of linear(): double accumulation of float(x) * float(W) products; in kBF16 the
/// x values are first rounded to bf16 (W as stored, rounded to bf16 if not BF16).
void linear(const float* x, std::int64_t m, DType dtype, const void* w, std::int64_t n, std::int64_t k, float* y,
            bool accumulate, Precision p);
}  // namespace ref

}  // namespace clef::ops
