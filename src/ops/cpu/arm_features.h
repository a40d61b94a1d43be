// SPDX-License-Identifier: MIT
// The ARM64 CPU features the kernel levels of ops/isa.h depend on, read from the operating system
// (the one platform-specific piece of ARM level detection). Linux: getauxval(AT_HWCAP / AT_HWCAP2),
// the kernel's own report of what the CPU and the kernel support (arm_features_linux.cc). A macOS
// port supplies the same function from sysctl hw.optional.arm.FEAT_* in its own file. Internal to
// src/ops; compiled on aarch64 only.
#pragma once

namespace clef::ops::cpu {

/// What the CPU (and the operating system) supports, as the Arm architecture names it.
struct ArmFeatures {
  bool asimd = false;    ///< Advanced SIMD (NEON); part of every ARMv8-A application core
  bool aes = false;      ///< the AES instructions (Highway 1.0.3's NEON target requires them)
  bool dotprod = false;  ///< FEAT_DotProd: SDOT/UDOT (int8 four-way dot products)
  bool i8mm = false;     ///< FEAT_I8MM: SMMLA/USMMLA/USDOT (int8 2x8 by 8x2 matrix multiply)
  bool bf16 = false;     ///< FEAT_BF16: BFDOT/BFMMLA (bf16 dot products into fp32)
  bool sve = false;      ///< FEAT_SVE
  bool sve2 = false;     ///< FEAT_SVE2
};

/// The features of the CPU this process runs on (read once per call; cheap).
ArmFeatures arm_features() noexcept;

}  // namespace clef::ops::cpu
