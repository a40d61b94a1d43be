// SPDX-License-Identifier: MIT
// ARM64 feature detection on Linux (cpu/arm_features.h): the hardware capability bits the kernel
// passes to every process (getauxval; the bit numbers are the kernel's uapi asm/hwcap.h).
#include <sys/auxv.h>

#include <asm/hwcap.h>

#include "ops/cpu/arm_features.h"

namespace clef::ops::cpu {

ArmFeatures arm_features() noexcept {
  const unsigned long hw = getauxval(AT_HWCAP);
  const unsigned long hw2 = getauxval(AT_HWCAP2);
  ArmFeatures f;
  f.asimd = (hw & HWCAP_ASIMD) != 0;
  f.aes = (hw & HWCAP_AES) != 0;
  f.dotprod = (hw & HWCAP_ASIMDDP) != 0;
  f.sve = (hw & HWCAP_SVE) != 0;
  f.i8mm = (hw2 & HWCAP2_I8MM) != 0;
  f.bf16 = (hw2 & HWCAP2_BF16) != 0;
  f.sve2 = (hw2 & HWCAP2_SVE2) != 0;
  return f;
}

}  // namespace clef::ops::cpu
