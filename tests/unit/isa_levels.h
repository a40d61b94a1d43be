// SPDX-License-Identifier: MIT
// Runs a kernel test once per SIMD level this CPU supports, up to the level CLEF_ISA (or the CPU)
// chose for the process (ops/isa.h), so every compiled path is compared with the scalar oracle
// wherever the tests run. The Highway kernels switch level in-process; oneDNN keeps its cap.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/isa.h"

namespace clef::test {

/// The levels this CPU supports, lowest first (ctest discovers the names once; a level above the
/// process's CLEF_ISA is skipped at run time, see AtIsaLevel).
inline std::vector<ops::IsaLevel> isa_levels_to_test() {
  std::vector<ops::IsaLevel> out;
  for (const ops::IsaLevel level : ops::isa_levels()) {
    if (ops::isa_supported(level)) out.push_back(level);
  }
  return out;
}

/// Fixture: SetUp switches the kernels to GetParam() (skipped above the configured level, so
/// CLEF_ISA=avx2 never runs AVX-512 code), TearDown restores the configured level.
class AtIsaLevel : public ::testing::TestWithParam<ops::IsaLevel> {
 protected:
  void SetUp() override {
    if (GetParam() > ops::configured_isa()) GTEST_SKIP() << "above CLEF_ISA=" << ops::isa_name(ops::configured_isa());
    ops::set_isa_for_testing(GetParam());
  }
  void TearDown() override { ops::set_isa_for_testing(ops::configured_isa()); }
};

/// gtest name suffix: the level's name, '-' written '_' (gtest names are identifiers:
/// neon_dotprod, sve2_128).
inline std::string isa_param_name(const ::testing::TestParamInfo<ops::IsaLevel>& info) {
  std::string name = ops::isa_name(info.param);
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

}  // namespace clef::test

/// Instantiates fixture SUITE (derived from clef::test::AtIsaLevel) over every testable level.
#define CLEF_INSTANTIATE_AT_ISA_LEVELS(SUITE)                                                   \
  INSTANTIATE_TEST_SUITE_P(Isa, SUITE, ::testing::ValuesIn(::clef::test::isa_levels_to_test()), \
                           ::clef::test::isa_param_name)
