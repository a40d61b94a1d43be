#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The libc++ compile check (scripts/test.sh stage "libc++ compile check"; docs/ARM64.md "macOS"): the
# nearest this Linux machine gets to a macOS build, whose toolchain is clang with LLVM's libc++.
#   1. scripts/check_platform_seams.py: no Linux-only or glibc-only call (malloc_trim, /proc paths,
#      POLLRDHUP, ...) outside the platform seams (src/core/platform.cc, src/ops/cpu/arm_features_linux.cc).
#      A libc++ compile on Linux cannot catch these: glibc's headers still declare them.
#   2. clang++-14 -std=c++20 -stdlib=libc++ -fsyntax-only -Werror with the project's warnings on every
#      source file of the engine layers (src/<layer>/*.cc, unit tests left out): what libstdc++ lets
#      through and libc++ does not (a header included only by way of another, a library feature
#      libc++ lacks, e.g. floating-point std::from_chars), and clang's own warnings.
#   3. src/core/platform.cc once more as on a system other than Linux (__linux__ undefined), so the
#      fallback branches of the seams compile too.
# What it does not prove: that anything builds, links or runs on macOS (Apple's SDK headers, Apple
# clang, Accelerate and Homebrew's libomp are not here), nor the __APPLE__ branches.
# Left out, each for a reason:
#   src/ops/cpu/arm_features_linux.cc  Linux aarch64 only (AT_HWCAP bits); the arm64 preset compiles it.
#   src/ops/cpu/*_arm.cc               aarch64 only (ACLE intrinsics: the peak meter, the BFMMLA GEMM);
#                                      the arm64 preset compiles them.
#   src/ops/cpu/quant_gemm.cc          its x86-64 CPU check uses __builtin_cpu_supports("f16c"), which
#                                      clang 14 does not know (GCC and newer clang do); an ARM64 build
#                                      does not compile that branch.
#   apps/, python/                     not engine layers (the CLI passes this check today, ~60 s more CPU;
#                                      the Python module needs nanobind and Python's headers).
# Debian's Boost 1.74 detects std::invoke_result only with libstdc++ or MSVC, and libc++ in C++20 has
# no std::result_of: BOOST_ASIO_HAS_STD_INVOKE_RESULT=1 says what newer Boost finds by itself.
# Needs clang-14 and libc++-14-dev (bash scripts/setup.sh --dev). CLEF_LIBCXX_JOBS (default 2)
# compilers run at once. Prints each failing file's errors and exits 1; exits 0 quietly otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
CXX=${CLEF_LIBCXX_CXX:-clang++-14}
JOBS=${CLEF_LIBCXX_JOBS:-2}
if ! command -v "$CXX" >/dev/null; then
  echo "check_libcxx: $CXX not found (bash scripts/setup.sh --dev installs clang-14)" >&2
  exit 2
fi
if ! echo '#include <vector>' | "$CXX" -std=c++20 -stdlib=libc++ -x c++ -fsyntax-only - 2>/dev/null; then
  echo "check_libcxx: $CXX finds no libc++ headers (bash scripts/setup.sh --dev installs libc++-14-dev)" >&2
  exit 2
fi

python3 scripts/check_platform_seams.py

# The warnings of cmake/ClefWarnings.cmake (less GCC's -Wno-restrict) and the definitions the layers'
# CMakeLists.txt pass; -fopenmp finds clang's omp.h (libomp-14-dev).
flags=(-std=c++20 -stdlib=libc++ -fsyntax-only -Werror
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wnon-virtual-dtor -Wold-style-cast
  -Wcast-align -Woverloaded-virtual -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough
  -Isrc -fopenmp -DCLEF_VERSION='"0.0.0-libcxx"'
  '-DHWY_DISABLED_TARGETS=(HWY_SSSE3|HWY_SSE4)' -DHWY_WANT_AVX3_DL
  -DBOOST_ALL_NO_LIB -DBOOST_ASIO_NO_DEPRECATED -DBOOST_BEAST_USE_STD_STRING_VIEW
  -DBOOST_ASIO_HAS_STD_INVOKE_RESULT=1)
layers=$(sed -n 's/^set(CLEF_LAYERS \(.*\))$/\1/p' src/CMakeLists.txt)
[[ -n $layers ]] || { echo "check_libcxx: no set(CLEF_LAYERS ...) in src/CMakeLists.txt" >&2; exit 2; }
patterns=()
for layer in $layers; do patterns+=("src/$layer/*.cc"); done
mapfile -t files < <(git ls-files -- "${patterns[@]}" | grep -v '_test\.cc$' |
  grep -vxF -e src/ops/cpu/arm_features_linux.cc -e src/ops/cpu/quant_gemm.cc | grep -v '^src/ops/cpu/.*_arm\.cc$')
((${#files[@]} > 0)) || { echo "check_libcxx: no source files found (a git checkout is needed)" >&2; exit 2; }

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
export CXX logs
# compile LABEL FILE FLAGS...: one compiler run; a failure leaves a log behind: LABEL, then the errors.
compile() {
  local label=$1 file=$2 out
  shift 2
  if ! out=$("$CXX" "$@" "$file" 2>&1); then printf '%s\n%s\n' "$label" "$out" >"$logs/${label//\//_}.log"; fi
}
export -f compile
# shellcheck disable=SC2016  # $1 and $@ are the inner bash's
printf '%s\0' "${files[@]}" | xargs -0 -P "$JOBS" -I{} bash -c 'compile "$1" "$@"' _ {} "${flags[@]}"
# The seams' fallbacks: as on a system that is not Linux (libc++ then needs its thread API named).
compile "src/core/platform.cc (not Linux)" src/core/platform.cc "${flags[@]}" -U__linux__ -U__linux -Ulinux \
  -U__gnu_linux__ -D_LIBCPP_HAS_THREAD_API_PTHREAD

failed=("$logs"/*.log)
if [[ -e ${failed[0]} ]]; then
  for log in "${failed[@]}"; do
    echo "check_libcxx: $(head -n 1 "$log") does not compile with $CXX -stdlib=libc++:" >&2
    sed -n '2,41p' "$log" >&2
  done
  echo "check_libcxx: ${#failed[@]} of $((${#files[@]} + 1)) compilations failed" >&2
  exit 1
fi
