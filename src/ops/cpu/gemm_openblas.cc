// SPDX-License-Identifier: MIT
// GEMM library on ARM64 (cpu/gemm_backend.h): OpenBLAS cblas_sgemm (Debian's
// libopenblas-openmp-dev: the OpenMP build, so it runs on the engine's OpenMP threads, and a
// dynamic-arch library that picks its kernels for the CPU at load: Cortex-A, Neoverse N1/V1/N2, ...).
//
// Debian's oneDNN for arm64 has only reference (non-vectorized) GEMMs, so it is not used on ARM64.
// Debian builds OpenBLAS without its bf16 GEMM (no sbgemm): bf16 runs clef's own BFMMLA kernel
// (cpu/bf16_gemm_arm.h) where the CPU has FEAT_BF16 and the level is neon-i8mm or above, else the
// fp32 fallback of cpu/gemm.cc (bf16 values through the fp32 matmul; docs/NUMERICS.md "Precision
// modes").
#include <omp.h>

#include <climits>
#include <string>

#include <cblas.h>

#include "core/error.h"
#include "ops/cpu/bf16_gemm_arm.h"
#include "ops/cpu/gemm_backend.h"

namespace clef::ops::gemm_backend {
namespace {

/// A size as CBLAS takes it (32-bit int in this build); InvalidArgument when it does not fit.
blasint blas_int(std::int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) {
    throw InvalidArgument(std::string("linear: ") + what + " = " + std::to_string(v) +
                          " exceeds OpenBLAS's 32-bit sizes");
  }
  return static_cast<blasint>(v);
}

}  // namespace

void matmul_f32(std::int64_t m, std::int64_t n, std::int64_t k, const float* x, const float* w, float* y,
                std::int64_t ldc, bool accumulate) {
  // Row-major C = A · Bᵀ with A = x [m, k] and B = W [n, k]: W is used in place (no copy).
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(m, "m"), blas_int(n, "n"), blas_int(k, "k"), 1.0f, x,
              blas_int(k, "k"), w, blas_int(k, "k"), accumulate ? 1.0f : 0.0f, y, blas_int(ldc, "ldc"));
}

bool bf16_matmul_possible() noexcept { return cpu::bfmmla_gemm_available(); }

bool matmul_bf16(std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* x, const std::uint16_t* w,
                 float* y, bool accumulate) {
  if (!cpu::bfmmla_gemm_available()) return false;
  cpu::bfmmla_gemm(m, n, k, x, w, y, accumulate);
  return true;
}

// clef's BFMMLA kernel reads W as it is (cpu/bf16_gemm_arm.h packs its panels itself).
std::unique_ptr<PackedBf16> pack_bf16(std::int64_t, std::int64_t, const std::uint16_t*) { return nullptr; }

bool matmul_bf16_packed(std::int64_t, const PackedBf16&, const std::uint16_t*, float*, bool) { return false; }

bool bf16_matmul_emulated() { return !cpu::bfmmla_gemm_available(); }

std::string library_description() {
  // openblas_get_config() reads e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY neoversen1 MAX_THREADS=64".
  std::string config = openblas_get_config();
  const std::size_t version_end = config.find(' ', config.find(' ') + 1);
  return config.substr(0, version_end) + " (OpenMP, " + openblas_get_corename() + " kernels, " +
         std::to_string(omp_get_max_threads()) + " threads" +
         (cpu::bfmmla_gemm_available() ? "; bf16: clef BFMMLA kernel" : "");
}

}  // namespace clef::ops::gemm_backend
