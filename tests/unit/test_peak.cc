// SPDX-License-Identifier: MIT
// The ARM64 peak meter (ops/peak.h measure_arm_peak): a positive rate for each instruction class the
// CPU has, 0 for one it lacks. The CPU's features are read here straight from the kernel's HWCAP
// bits, independently of ops/cpu/arm_features.h. Tiny iteration counts: under qemu the rates are the
// emulator's and only their sign means anything. Under qemu's max every class is present; under
// cortex-a76 SDOT is and SMMLA/BFMMLA are not (scripts/test_arm64.sh runs both).
#include <gtest/gtest.h>

#include <string>

#include "ops/peak.h"

#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>

namespace {

using clef::ops::ArmPeak;
using clef::ops::measure_arm_peak;

bool hwcap_has(ArmPeak p) {
  const unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
  switch (p) {
    case ArmPeak::kFp32Fmla: return (hwcap & HWCAP_ASIMD) != 0;
    case ArmPeak::kSdot: return (hwcap & HWCAP_ASIMDDP) != 0;
    case ArmPeak::kSmmla: return (hwcap2 & HWCAP2_I8MM) != 0;
    case ArmPeak::kBfmmla: return (hwcap2 & HWCAP2_BF16) != 0;
  }
  return false;
}

class ArmPeakMeter : public ::testing::TestWithParam<ArmPeak> {};

TEST_P(ArmPeakMeter, PositiveExactlyWhenTheCpuHasTheInstruction) {
  const ArmPeak p = GetParam();
  for (const int threads : {1, 2}) {
    const double g = measure_arm_peak(p, threads, 1, 2000);
    if (hwcap_has(p)) {
      EXPECT_GT(g, 0.0) << clef::ops::arm_peak_name(p) << ", " << threads << " threads";
    } else {
      EXPECT_EQ(g, 0.0) << clef::ops::arm_peak_name(p) << " is not on this CPU";
    }
  }
  EXPECT_EQ(measure_arm_peak(p, 1, 1, 0), 0.0);  // no iterations: nothing measured
}

INSTANTIATE_TEST_SUITE_P(Peaks, ArmPeakMeter,
                         ::testing::Values(ArmPeak::kFp32Fmla, ArmPeak::kSdot, ArmPeak::kSmmla, ArmPeak::kBfmmla),
                         [](const ::testing::TestParamInfo<ArmPeak>& param) {
                           switch (param.param) {
                             case ArmPeak::kFp32Fmla: return std::string("Fp32Fmla");
                             case ArmPeak::kSdot: return std::string("Sdot");
                             case ArmPeak::kSmmla: return std::string("Smmla");
                             case ArmPeak::kBfmmla: return std::string("Bfmmla");
                           }
                           return std::string("Unknown");
                         });

}  // namespace
#endif  // __aarch64__
