// SPDX-License-Identifier: MIT
// The GEMM library behind ops/gemm.h: the few matrix products linear() hands to it. One
// implementation per architecture is linked (src/ops/CMakeLists.txt): oneDNN on x86-64
// (cpu/gemm_onednn.cc), OpenBLAS on ARM64 (cpu/gemm_openblas.cc), where Debian's oneDNN has only
// reference GEMMs. Everything else of ops/gemm.h (weights, precisions, the int8 and block-quantized
// paths, the bf16 fallback) is the library-independent cpu/gemm.cc. Internal to src/ops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace clef::ops::gemm_backend {

/// y [m, n] = x [m, k] · Wᵀ (y += ... when `accumulate`), fp32 operands and sums: x row-major
/// with row stride k, W [n, k] row-major with row stride k (PyTorch Linear.weight), y row-major
/// with row stride ldc >= n (a column panel of a wider y). Runs on the engine's OpenMP threads.
void matmul_f32(std::int64_t m, std::int64_t n, std::int64_t k, const float* x, const float* w, float* y,
                std::int64_t ldc, bool accumulate);

/// False once the library is known to have no bf16 matmul at the level in use (cheap: no probe).
bool bf16_matmul_possible() noexcept;

/// The same product with bf16 x [m, k] and W [n, k] (bits), fp32 sums, y [m, n] fp32 (row stride
/// n). Returns false, computing nothing, when the library has no bf16 matmul at the level in use;
/// bf16_matmul_possible() is false from then on.
bool matmul_bf16(std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* x, const std::uint16_t* w,
                 float* y, bool accumulate);

/// A bf16 weight W [n, k] reordered once into the library's own layout for its bf16 matmul
/// (oneDNN: the blocked B its brgemm kernels read; given W as it is, every call copies W into that
/// layout first). Opaque; made by pack_bf16, kept by the GemmWeight it belongs to.
class PackedBf16 {
 public:
  PackedBf16() = default;
  PackedBf16(const PackedBf16&) = delete;
  PackedBf16& operator=(const PackedBf16&) = delete;
  virtual ~PackedBf16() = default;
  virtual std::int64_t n() const noexcept = 0;
  virtual std::int64_t k() const noexcept = 0;
  /// Bytes of the packed copy (the library may pad n and k to its blocks).
  virtual std::size_t bytes() const noexcept = 0;
};
/// Packs W [n, k] (bf16 bits, row-major, row stride k) on the engine's OpenMP threads. nullptr when
/// the library has no layout of its own for its bf16 matmul at the level in use (OpenBLAS; a level
/// without a bf16 matmul), or could not make the copy (memory): matmul_bf16 on W is then the path.
/// Moves bits only; does not throw for the library's errors.
std::unique_ptr<PackedBf16> pack_bf16(std::int64_t n, std::int64_t k, const std::uint16_t* w);
/// matmul_bf16 on a weight from pack_bf16: x [m, k] bf16, y [m, n] fp32 (row stride n), y += ... when
/// `accumulate`. The same kernels, blocking and sums as matmul_bf16 on the plain W (only where the
/// kernel reads B from changes), so the bits are the same. Returns false, computing nothing, when
/// the library cannot run this product on the packed layout (the caller takes matmul_bf16 on W).
bool matmul_bf16_packed(std::int64_t m, const PackedBf16& w, const std::uint16_t* x, float* y, bool accumulate);
/// Whether bf16 runs through the fp32 matmul (ops/gemm.h bf16_gemm_emulated; probes once).
bool bf16_matmul_emulated();

/// The library, its version, runtime, kernel choice and threads, e.g. "oneDNN 2.6.3 (OpenMP,
/// avx2, 2 threads" (no closing parenthesis: ops::gemm_backend_name adds to it).
std::string library_description();

}  // namespace clef::ops::gemm_backend
