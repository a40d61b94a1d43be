// SPDX-License-Identifier: MIT
// Run-time level selection of the CPU kernels (ops/isa.h): Highway's target mask, plus oneDNN's
// ISA cap on x86-64. Compiled for the baseline only; it holds no kernels.
#include "ops/isa.h"

#include <cstdlib>
#include <iterator>
#include <mutex>
#include <string>

#if defined(__x86_64__)
#include <oneapi/dnnl/dnnl.hpp>
#endif

#include "core/error.h"
#include "hwy/highway.h"
#include "hwy/targets.h"
#if defined(__aarch64__)
#include "ops/cpu/arm_features.h"
#endif

namespace clef::ops {
namespace {

#if defined(__aarch64__)
constexpr IsaLevel kTopLevel = IsaLevel::kSve2_128;
constexpr const char* kLevelNames[] = {"baseline", "neon", "neon-dotprod", "neon-i8mm", "sve256", "sve2-128"};

/// The Highway targets a level may use: its own and the ones below it (sve256 and sve2-128 are
/// alternatives, never both).
std::int64_t allowed_targets(IsaLevel level) {
  std::int64_t m = HWY_SCALAR | HWY_EMU128;
  if (level >= IsaLevel::kNeon) m |= HWY_NEON;
  if (level == IsaLevel::kSve256) m |= HWY_SVE_256;
  if (level == IsaLevel::kSve2_128) m |= HWY_SVE2_128;
  return m;
}

const char* hwy_target_of(IsaLevel level) {
  switch (level) {
    case IsaLevel::kBaseline: return "SCALAR";
    case IsaLevel::kNeon:
    case IsaLevel::kNeonDotprod:
    case IsaLevel::kNeonI8mm: return "NEON";
    case IsaLevel::kSve256: return "SVE_256";
    case IsaLevel::kSve2_128: return "SVE2_128";
  }
  return "?";
}
#else
constexpr IsaLevel kTopLevel = IsaLevel::kAvx512Bf16;
constexpr const char* kLevelNames[] = {"baseline", "avx2", "avx512", "avx512bf16"};

/// The Highway targets a level may use (it and every lower one).
std::int64_t allowed_targets(IsaLevel level) {
  std::int64_t m = HWY_SCALAR | HWY_EMU128;
  if (level >= IsaLevel::kAvx2) m |= HWY_AVX2;
  if (level >= IsaLevel::kAvx512) m |= HWY_AVX3;
  if (level >= IsaLevel::kAvx512Bf16) m |= HWY_AVX3_DL;
  return m;
}

const char* hwy_target_of(IsaLevel level) {
  switch (level) {
    case IsaLevel::kBaseline: return "SCALAR";
    case IsaLevel::kAvx2: return "AVX2";
    case IsaLevel::kAvx512: return "AVX3";
    case IsaLevel::kAvx512Bf16: return "AVX3_DL";
  }
  return "?";
}
#endif
static_assert(std::size(kLevelNames) == static_cast<std::size_t>(kTopLevel) + 1);

/// Highway's own check of the CPU, before any restriction of ours (DisableTargets is sticky, so
/// read the mask through a fresh mock-free query).
std::int64_t hwy_supported_targets() {
  static const std::int64_t supported = [] {
    hwy::SetSupportedTargetsForTest(0);
    return hwy::SupportedTargets();
  }();
  return supported;
}

/// Points Highway's dispatch tables at `level` (and below).
void apply_hwy(IsaLevel level) {
#if defined(__aarch64__)
  // Highway never disables a target of the compiler's baseline (DisableTargets keeps them), and
  // NEON is part of the aarch64 baseline: the baseline level would still run NEON code. So the
  // level is applied as the set of targets Highway may treat as supported.
  hwy::SetSupportedTargetsForTest(hwy_supported_targets() & allowed_targets(level));
#else
  hwy::SetSupportedTargetsForTest(0);  // drop any earlier restriction
  hwy::DisableTargets(~allowed_targets(level));
#endif
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
}

#if defined(__x86_64__)
/// Caps oneDNN at the same level. Only possible before oneDNN's first kernel; returns false when
/// oneDNN refused (then it runs at its own best level).
bool apply_gemm_cap(IsaLevel level) {
  dnnl::cpu_isa cap = dnnl::cpu_isa::all;
  switch (level) {
    case IsaLevel::kBaseline: cap = dnnl::cpu_isa::sse41; break;
    case IsaLevel::kAvx2: cap = dnnl::cpu_isa::avx2; break;
    case IsaLevel::kAvx512: cap = dnnl::cpu_isa::avx512_core; break;
    case IsaLevel::kAvx512Bf16: return true;
  }
  try {
    dnnl::set_max_cpu_isa(cap);
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}
#else
/// OpenBLAS (the GEMM library on ARM64) has no level cap: it runs its kernels for this CPU.
bool apply_gemm_cap(IsaLevel) { return true; }
#endif

struct State {
  std::once_flag once;
  IsaLevel level = IsaLevel::kBaseline;
  IsaLevel configured = IsaLevel::kBaseline;  ///< what init_isa chose (tests may move `level`)
  bool forced = false;
  bool onednn_capped = true;
};

State& state() {
  static State s;
  return s;
}

/// The levels this CPU supports, lowest first, comma-separated.
std::string supported_levels() {
  std::string out;
  for (const IsaLevel level : isa_levels()) {
    if (!isa_supported(level)) continue;
    if (!out.empty()) out += ", ";
    out += isa_name(level);
  }
  return out;
}

/// Every value CLEF_ISA takes, comma-separated.
std::string all_level_names() {
  std::string out;
  for (const char* name : kLevelNames) out += std::string(name) + ", ";
  return out + "native";
}

}  // namespace

std::vector<IsaLevel> isa_levels() {
  std::vector<IsaLevel> out;
  for (int i = 0; i <= static_cast<int>(kTopLevel); ++i) out.push_back(static_cast<IsaLevel>(i));
  return out;
}

const char* isa_name(IsaLevel level) noexcept {
  const auto i = static_cast<std::size_t>(level);
  return i < std::size(kLevelNames) ? kLevelNames[i] : "?";
}

const char* isa_hwy_target(IsaLevel level) noexcept { return hwy_target_of(level); }

std::optional<IsaLevel> isa_from_name(std::string_view s, bool* native) noexcept {
  if (native != nullptr) *native = s == "native";
  for (std::size_t i = 0; i < std::size(kLevelNames); ++i) {
    if (s == kLevelNames[i]) return static_cast<IsaLevel>(i);
  }
  return std::nullopt;
}

#if defined(__aarch64__)
bool isa_supported(IsaLevel level) noexcept {
  const std::int64_t hwy = hwy_supported_targets();
  static const cpu::ArmFeatures f = cpu::arm_features();
  const bool neon = (hwy & HWY_NEON) != 0 && f.asimd && f.aes;  // Highway's NEON target needs AES
  const bool dotprod = neon && f.dotprod;
  const bool i8mm = dotprod && f.i8mm && f.bf16;
  switch (level) {
    case IsaLevel::kBaseline: return true;
    case IsaLevel::kNeon: return neon;
    case IsaLevel::kNeonDotprod: return dotprod;
    case IsaLevel::kNeonI8mm: return i8mm;
    case IsaLevel::kSve256: return i8mm && f.sve && (hwy & HWY_SVE_256) != 0;
    case IsaLevel::kSve2_128: return i8mm && f.sve2 && (hwy & HWY_SVE2_128) != 0;
  }
  return false;
}
#else
bool isa_supported(IsaLevel level) noexcept {
  const std::int64_t supported = hwy_supported_targets();
  switch (level) {
    case IsaLevel::kBaseline: return true;
    case IsaLevel::kAvx2: return (supported & HWY_AVX2) != 0;
    case IsaLevel::kAvx512: return (supported & HWY_AVX3) != 0;
    case IsaLevel::kAvx512Bf16: return (supported & HWY_AVX3_DL) != 0 && __builtin_cpu_supports("avx512bf16");
  }
  return false;
}
#endif

IsaLevel best_supported_isa() noexcept {
  IsaLevel best = IsaLevel::kBaseline;
  for (int i = 0; i <= static_cast<int>(kTopLevel); ++i) {
    if (isa_supported(static_cast<IsaLevel>(i))) best = static_cast<IsaLevel>(i);
  }
  return best;
}

IsaLevel init_isa() {
  State& s = state();
  std::call_once(s.once, [&s] {
    const IsaLevel best = best_supported_isa();
    IsaLevel level = best;
    const char* env = std::getenv("CLEF_ISA");
    if (env != nullptr && *env != '\0') {
      bool native = false;
      const auto want = isa_from_name(env, &native);
      const std::string value(env);
      const std::string shown =
          value.size() > 40 ? value.substr(0, 40) + "... (" + std::to_string(value.size()) + " bytes)" : value;
      if (!native) {
        if (!want) {
          throw InvalidArgument("CLEF_ISA: unknown level \"" + shown + "\"; expected one of " + all_level_names());
        }
        if (!isa_supported(*want)) {
          throw Unsupported("CLEF_ISA=" + shown + ": this CPU supports only " + supported_levels());
        }
        level = *want;
        s.forced = level != best;
      }
    }
    apply_hwy(level);
    s.onednn_capped = apply_gemm_cap(level);
    s.level = level;
    s.configured = level;
  });
  return s.level;
}

IsaLevel active_isa() { return init_isa(); }

std::string isa_description() {
  const IsaLevel level = init_isa();
  std::string out = std::string(isa_name(level)) + " (Highway " + hwy_target_of(level) + "; CPU best " +
                    isa_name(best_supported_isa());
  if (state().forced) out += "; forced by CLEF_ISA";
  if (!state().onednn_capped) out += "; oneDNN not capped";
  return out + ")";
}

std::string supported_isa_list() { return supported_levels(); }

IsaLevel configured_isa() {
  init_isa();
  return state().configured;
}

void set_isa_for_testing(IsaLevel level) {
  init_isa();
  if (!isa_supported(level)) {
    throw Unsupported(std::string("set_isa_for_testing: this CPU supports only ") + supported_levels());
  }
  apply_hwy(level);
  state().level = level;
}

}  // namespace clef::ops
