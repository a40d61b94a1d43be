// SPDX-License-Identifier: MIT
// The integer peak meters (ops/int8_gemm.h measure_int8_peak_gops, ops/quant_gemm.h
// measure_quant_peak_gops): a positive rate exactly for the kernels the CPU runs that have a
// dot-product sequence. The ARM64 peak meter (ops/peak.h measure_arm_peak): a positive rate for
// each instruction class the CPU has, 0 for one it lacks. The CPU's features are read here straight from the kernel's
// HWCAP bits, independently of ops/cpu/arm_features.h. Tiny iteration counts: under qemu the rates are the emulator's
// and only their sign means anything. Under qemu's max every class is present; under cortex-a76 SDOT is and
// SMMLA/BFMMLA are not (scripts/test_arm64.sh runs both).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "ops/int8_gemm.h"
#include "ops/peak.h"
#include "ops/quant_gemm.h"

namespace {

using clef::ops::QuantKernel;

TEST(IntegerPeaks, PositiveExactlyForTheKernelsThisCpuRunsWithADotProductSequence) {
  const auto supported = clef::ops::quant_kernels_supported();
  for (const QuantKernel k :
       {QuantKernel::kScalar, QuantKernel::kAvx2, QuantKernel::kAvxVnni, QuantKernel::kAvx512, QuantKernel::kAvx512Vnni,
        QuantKernel::kNeon, QuantKernel::kNeonDot, QuantKernel::kNeonI8mm}) {
    const bool has = std::find(supported.begin(), supported.end(), k) != supported.end();
    const bool sequence = k != QuantKernel::kScalar && k != QuantKernel::kNeon;
    const double g = clef::ops::measure_quant_peak_gops(k, 2, 1, 2000);
    if (has && sequence) {
      EXPECT_GT(g, 0.0) << clef::ops::quant_kernel_name(k);
    } else {
      EXPECT_EQ(g, 0.0) << clef::ops::quant_kernel_name(k);
    }
  }
  for (const clef::ops::Int8Kernel k : clef::ops::int8_kernels_supported()) {
    const bool sequence = k != clef::ops::Int8Kernel::kScalar && k != clef::ops::Int8Kernel::kNeon;
    EXPECT_EQ(clef::ops::measure_int8_peak_gops(k, 2, 1, 2000) > 0.0, sequence) << clef::ops::int8_kernel_name(k);
  }
}

}  // namespace

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
