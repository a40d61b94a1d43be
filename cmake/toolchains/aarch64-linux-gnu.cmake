# SPDX-License-Identifier: MIT
# Cross build for 64-bit ARM Linux (aarch64) on an x86-64 Debian 12 host (the arm64 preset;
# docs/ARM64.md). scripts/setup.sh --arm64 installs what it uses: Debian's GCC 12 cross compiler
# (crossbuild-essential-arm64), the arm64 -dev libraries as multiarch packages (headers and CMake
# package files under the aarch64-linux-gnu folders, found through CMAKE_LIBRARY_ARCHITECTURE), and
# qemu-user-static.
#
# CMAKE_CROSSCOMPILING_EMULATOR makes ctest (and gtest_discover_tests) run the arm64 test programs
# under qemu. Its CPU model is qemu's "max" (every ARM feature qemu emulates: NEON with dot product,
# I8MM and BF16, SVE and SVE2) with 256-bit SVE vectors; CLEF_QEMU_CPU chooses another one, e.g.
# "max,sve-default-vector-length=16" (128-bit SVE2) or "cortex-a76" (NEON with dot product only).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc-12)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++-12)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

set(CLEF_QEMU_CPU "max,sve-default-vector-length=32" CACHE STRING "qemu -cpu model the arm64 tests run on")
find_program(CLEF_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64 REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR "${CLEF_QEMU_AARCH64};-cpu;${CLEF_QEMU_CPU}")

# pkg-config reads only the arm64 .pc files (and the architecture-independent ones), never the
# host's x86-64 ones: FindOpenSSL, FindCURL and the pkg_check_modules calls take their paths from it.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
