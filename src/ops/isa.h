// SPDX-License-Identifier: MIT
// Run-time CPU dispatch: which SIMD level the CPU kernels run at, so that one binary serves every
// level of its architecture (x86-64 or ARM64).
//
// One portable binary carries every hot kernel of src/ops/cpu compiled for several levels (Google
// Highway's foreach_target / HWY_DYNAMIC_DISPATCH, one copy per target in each kernel translation
// unit); the best level the CPU supports is chosen once, at the first kernel call or at
// init_isa(). The environment variable CLEF_ISA forces another one the CPU supports.
//
// x86-64:
//   level        Highway target   what it adds
//   baseline     SCALAR           plain C++ (any x86-64; the portable fallback)
//   avx2         AVX2             256-bit vectors, FMA (x86-64-v3: Haswell, Zen 1-3, most laptops)
//   avx512       AVX3             512-bit vectors, masks (x86-64-v4: Skylake-X, Ice Lake)
//   avx512bf16   AVX3_DL          + VNNI/VBMI2 and the AVX512-BF16 dot product vdpbf16ps
//                                 (Zen 4/5, Sapphire Rapids; needs both the DL set and BF16)
//
// ARM64 (aarch64; docs/ARM64.md). Each level needs the features of the ones above it in this table
// (sve256 and sve2-128 are alternatives: a CPU's SVE vectors are 256 or 128 bits long):
//   level        Highway target   the CPU needs
//   baseline     SCALAR           any ARMv8-A core
//   neon         NEON             Advanced SIMD with AES (Highway 1.0.3's NEON target needs AES)
//   neon-dotprod NEON             + SDOT/UDOT (Cortex-A76/Pi 5, Neoverse N1/Graviton2, Apple M1)
//   neon-i8mm    NEON             + I8MM (SMMLA) and BF16 (BFMMLA) (Apple M2+, recent Cortex-A)
//   sve256       SVE_256          + SVE with 256-bit vectors (Neoverse V1: Graviton3)
//   sve2-128     SVE2_128         + SVE2 with 128-bit vectors (Neoverse V2/N2: Graviton4, Grace)
// The Highway kernels of the dot-product levels are the neon ones; what those levels add are the
// int8 and block-quantized GEMM kernels (SDOT at neon-dotprod, SMMLA at neon-i8mm; the SVE levels
// take the best the CPU has), which give the same bits as on x86. bf16 has no BFMMLA kernel yet.
//
// On x86-64 the GEMM library (oneDNN) is capped at the same level (dnnl::set_max_cpu_isa), so a
// forced level runs every op of the backbone at that level. On ARM64 the GEMM library is OpenBLAS
// (ops/gemm.h), which chooses its own kernels for the CPU. A CUDA backend sits behind the op
// functions of ops.h / gemm.h, not here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace clef::ops {

/// SIMD levels of the CPU kernels of this binary's architecture, lowest first.
///
/// No SSE4 level on x86-64: Highway 1.0.3's 128-bit x86 masked loads/stores read and write whole
/// vectors, which the kernels' column tails cannot allow (a tail at the end of a buffer would touch
/// the next page or another thread's row); every x86-64 CPU runs the baseline, and AVX2 covers
/// everything since 2013-2015. (NEON's have the same flaw; the kernels' tails take a stack copy
/// there instead: cpu/vmath-inl.h LoadTail / StoreTail.)
#if defined(__aarch64__)
enum class IsaLevel : std::uint8_t { kBaseline, kNeon, kNeonDotprod, kNeonI8mm, kSve256, kSve2_128 };
#else
enum class IsaLevel : std::uint8_t { kBaseline, kAvx2, kAvx512, kAvx512Bf16 };
#endif

/// Every level of this architecture, lowest first (whether or not this CPU supports it).
std::vector<IsaLevel> isa_levels();

/// "baseline", "avx2", "avx512", "avx512bf16"; on ARM64 "baseline", "neon", "neon-dotprod",
/// "neon-i8mm", "sve256", "sve2-128".
const char* isa_name(IsaLevel level) noexcept;

/// Parses a level name as CLEF_ISA takes it (also "native" = the best supported); nullopt
/// otherwise. "native" is returned as nullopt through `native` = true.
std::optional<IsaLevel> isa_from_name(std::string_view s, bool* native = nullptr) noexcept;

/// Whether this CPU can run the kernels of `level` (x86-64: CPUID through Highway, plus
/// AVX512-BF16 for kAvx512Bf16; ARM64: Highway's target check plus the features of cpu/arm_features.h).
bool isa_supported(IsaLevel level) noexcept;

/// The best (highest) level this CPU supports.
IsaLevel best_supported_isa() noexcept;

/// Chooses the level once per process: CLEF_ISA if set (a level name or "native"), else the best
/// supported. Idempotent and thread-safe; kernels call it on first use, programs call it early so
/// a bad CLEF_ISA is reported before any work. Throws InvalidArgument for an unknown CLEF_ISA value
/// and Unsupported for a level this CPU lacks (both name the variable and the levels available).
IsaLevel init_isa();

/// The level in use (calls init_isa()).
IsaLevel active_isa();

/// One line for --version / inspect, e.g. "avx512bf16 (Highway AVX3_DL; CPU best avx512bf16)";
/// says "forced by CLEF_ISA" when the variable chose it (the GEMM line of --version names the
/// int8 and block-quantized kernels).
std::string isa_description();

/// Every level this binary can run on this CPU, lowest first, comma-separated.
std::string supported_isa_list();

/// The Highway target name of the level's kernels ("SCALAR", "AVX2", "NEON", "SVE_256", ...).
const char* isa_hwy_target(IsaLevel level) noexcept;

/// The Highway target the kernels dispatch to now, e.g. "AVX2" or "SVE_256": isa_hwy_target() of
/// the level in use, read from a kernel file's own copy (defined in cpu/convert.cc).
const char* dispatched_hwy_target();

/// The level init_isa() chose (CLEF_ISA or the best supported), even after set_isa_for_testing.
IsaLevel configured_isa();

/// Tests only: re-points the Highway kernels at `level` (one isa_supported() accepts) inside a
/// running process, so one test can compare every level against the scalar oracle. oneDNN keeps
/// the cap set by init_isa(). Throws Unsupported for a level this CPU lacks.
void set_isa_for_testing(IsaLevel level);

}  // namespace clef::ops

/// Calls the Highway-exported kernel `fn` at the level chosen by init_isa().
#define CLEF_DISPATCH(fn) (::clef::ops::init_isa(), HWY_DYNAMIC_DISPATCH(fn))

namespace clef::ops {}  // namespace clef::ops
