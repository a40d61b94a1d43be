// Run-time CPU dispatch: which SIMD level the CPU kernels run at, so that one binary serves every
// x86-64 level.
//
// One portable binary carries every hot kernel of src/ops/cpu compiled for several x86-64 levels
// (Google Highway's foreach_target / HWY_DYNAMIC_DISPATCH, one copy per target in each kernel
// translation unit); the best level the CPU supports is chosen once, at the first kernel call or
// at init_isa(). The environment variable CLEF_ISA forces a lower one:
//
//   level        Highway target   what it adds
//   baseline     SCALAR           plain C++ (any x86-64; the portable fallback)
//   avx2         AVX2             256-bit vectors, FMA (x86-64-v3: Haswell, Zen 1-3, most laptops)
//   avx512       AVX3             512-bit vectors, masks (x86-64-v4: Skylake-X, Ice Lake)
//   avx512bf16   AVX3_DL          + VNNI/VBMI2 and the AVX512-BF16 dot product vdpbf16ps
//                                 (Zen 4/5, Sapphire Rapids; needs both the DL set and BF16)
//
// The GEMM library (oneDNN) is capped at the same level (dnnl::set_max_cpu_isa), so a forced
// level runs every op of the backbone at that level. An ARM64 (NEON/SVE) level is another Highway
// target and joins this table without touching the model code; a CUDA backend sits behind the
// op functions of ops.h / gemm.h, not here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace clef::ops {

/// SIMD levels of the CPU kernels, lowest first.
///
/// No SSE4 level: Highway 1.0.3's 128-bit x86 masked loads/stores read and write whole vectors,
/// which the kernels' column tails cannot allow (a tail at the end of a buffer would touch the
/// next page or another thread's row); every x86-64 CPU runs the baseline, and AVX2 covers
/// everything since 2013-2015.
enum class IsaLevel : std::uint8_t { kBaseline, kAvx2, kAvx512, kAvx512Bf16 };

/// "baseline", "avx2", "avx512", "avx512bf16".
const char* isa_name(IsaLevel level) noexcept;

/// Parses a level name as CLEF_ISA takes it (also "native" = the best supported); nullopt
/// otherwise. "native" is returned as nullopt through `native` = true.
std::optional<IsaLevel> isa_from_name(std::string_view s, bool* native = nullptr) noexcept;

/// The best level this CPU supports (CPUID through Highway, plus AVX512-BF16 for kAvx512Bf16).
IsaLevel best_supported_isa() noexcept;

/// Chooses the level once per process: CLEF_ISA if set (a level name or "native"), else the best
/// supported. Idempotent and thread-safe; kernels call it on first use, programs call it early so
/// a bad CLEF_ISA is reported before any work. Throws InvalidArgument for an unknown CLEF_ISA value
/// and Unsupported for a level this CPU lacks (both name the variable and the levels available).
IsaLevel init_isa();

/// The level in use (calls init_isa()).
IsaLevel active_isa();

/// One line for --version / inspect, e.g. "avx512bf16 (Highway AVX3_DL; CPU best avx512bf16)";
/// says "forced by CLEF_ISA" when the variable chose it.
std::string isa_description();

/// Every level this binary can run on this CPU, lowest first, comma-separated.
std::string supported_isa_list();

/// The level init_isa() chose (CLEF_ISA or the best supported), even after set_isa_for_testing.
IsaLevel configured_isa();

/// Tests only: re-points the Highway kernels at `level` (<= best_supported_isa()) inside a running
/// process, so one test can compare every level against the scalar oracle. oneDNN keeps the cap
/// set by init_isa(). Throws Unsupported above the CPU's best level.
void set_isa_for_testing(IsaLevel level);

}  // namespace clef::ops

/// Calls the Highway-exported kernel `fn` at the level chosen by init_isa().
#define CLEF_DISPATCH(fn) (::clef::ops::init_isa(), HWY_DYNAMIC_DISPATCH(fn))

namespace clef::ops {}  // namespace clef::ops
