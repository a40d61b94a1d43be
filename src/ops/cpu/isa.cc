// Run-time level selection of the CPU kernels (ops/isa.h): Highway's target mask plus oneDNN's
// ISA cap. Compiled for the baseline only; it holds no kernels.
#include "ops/isa.h"

#include <cstdlib>
#include <mutex>
#include <string>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/error.h"
#include "hwy/highway.h"
#include "hwy/targets.h"

namespace clef::ops {
namespace {

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

/// Points Highway's dispatch tables at `level` (and below).
void apply_hwy(IsaLevel level) {
  hwy::SetSupportedTargetsForTest(0);  // drop any earlier restriction
  hwy::DisableTargets(~allowed_targets(level));
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
}

/// Caps oneDNN at the same level. Only possible before oneDNN's first kernel; returns false when
/// oneDNN refused (then it runs at its own best level).
bool apply_onednn(IsaLevel level) {
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

std::string levels_upto(IsaLevel best) {
  std::string out;
  for (int i = 0; i <= static_cast<int>(best); ++i) {
    if (!out.empty()) out += ", ";
    out += isa_name(static_cast<IsaLevel>(i));
  }
  return out;
}

}  // namespace

const char* isa_name(IsaLevel level) noexcept {
  switch (level) {
    case IsaLevel::kBaseline: return "baseline";
    case IsaLevel::kAvx2: return "avx2";
    case IsaLevel::kAvx512: return "avx512";
    case IsaLevel::kAvx512Bf16: return "avx512bf16";
  }
  return "?";
}

std::optional<IsaLevel> isa_from_name(std::string_view s, bool* native) noexcept {
  if (native != nullptr) *native = s == "native";
  for (int i = 0; i <= static_cast<int>(IsaLevel::kAvx512Bf16); ++i) {
    const auto level = static_cast<IsaLevel>(i);
    if (s == isa_name(level)) return level;
  }
  return std::nullopt;
}

IsaLevel best_supported_isa() noexcept {
  // Highway's own CPUID check, before any restriction of ours (DisableTargets is sticky, so read
  // the mask through a fresh mock-free query).
  static const std::int64_t supported = [] {
    hwy::SetSupportedTargetsForTest(0);
    return hwy::SupportedTargets();
  }();
  if ((supported & HWY_AVX3_DL) != 0 && __builtin_cpu_supports("avx512bf16")) return IsaLevel::kAvx512Bf16;
  if ((supported & HWY_AVX3) != 0) return IsaLevel::kAvx512;
  if ((supported & HWY_AVX2) != 0) return IsaLevel::kAvx2;
  return IsaLevel::kBaseline;
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
          throw InvalidArgument("CLEF_ISA: unknown level \"" + shown +
                                "\"; expected one of baseline, avx2, avx512, avx512bf16, native");
        }
        if (*want > best) {
          throw Unsupported("CLEF_ISA=" + shown + ": this CPU supports only " + levels_upto(best));
        }
        level = *want;
        s.forced = level != best;
      }
    }
    apply_hwy(level);
    s.onednn_capped = apply_onednn(level);
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

std::string supported_isa_list() { return levels_upto(best_supported_isa()); }

IsaLevel configured_isa() {
  init_isa();
  return state().configured;
}

void set_isa_for_testing(IsaLevel level) {
  init_isa();
  if (level > best_supported_isa()) {
    throw Unsupported(std::string("set_isa_for_testing: this CPU supports only ") + levels_upto(best_supported_isa()));
  }
  apply_hwy(level);
  state().level = level;
}

}  // namespace clef::ops
