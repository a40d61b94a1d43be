#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs what clef.cpp needs on a Debian 12 (bookworm) machine, in two tiers:
#
#   bash scripts/setup.sh         main tier: the C++ toolchain and the libraries that building and
#                                 running the `clef` binary needs (Debian packages only; no Python).
#   bash scripts/setup.sh --dev   full tier: the main tier, plus what the tests and benchmarks need
#                                 (GoogleTest/GoogleMock, Google Benchmark, clang-14 + libFuzzer
#                                 runtime + libomp for the fuzz preset, libc++ for the libc++
#                                 compile check, clang-format-14, ccache,
#                                 python3-venv, python3-dev) and the Python
#                                 reference toolkit (tools/reference/requirements.txt, from PyPI)
#                                 in a virtual environment, .venv/ at the repository root.
#   bash scripts/setup.sh --python adds (to either tier) what `pip install .` of the Python package
#                                 needs besides the main tier: Python's headers and venv module
#                                 (python3-dev, python3-venv); docs/PYTHON.md.
#   bash scripts/setup.sh --arm64 adds (to either tier) what cross-building for ARM64 (aarch64) and
#                                 testing under emulation needs: the arm64 architecture in dpkg
#                                 (multiarch), Debian's GCC 12 cross compiler, qemu-user-static, and the
#                                 arm64 (`:arm64`) -dev libraries of the arm64 preset (docs/ARM64.md).
#                                 OpenBLAS replaces oneDNN there, so no arm64 oneDNN/OpenCL is installed.
#
# The virtual environment is made with `$PYTHON -m venv` (default PYTHON: the python3 on PATH,
# e.g. Debian's /usr/bin/python3 or a pyenv one); pip only ever installs into it, never into the
# system Python. Tests and tools then run with .venv/bin/python ($CLEF_VENV overrides the folder).
#
# Idempotent and fast on a second run: only missing Debian packages are installed (apt-get update
# runs only then), and pip runs only when requirements.txt or the base interpreter changed since
# the last successful install (a stamp file in the venv records both).
#
# Each step prints one line with an estimate before it starts and one with its time after; apt's and
# pip's own output goes to logs in $CLEF_SETUP_LOGS (default build/setup-logs/), kept after the run
# (the last 40 lines are shown when a step fails).
set -euo pipefail
cd "$(dirname "$0")/.."

tier=main
arm64=0
python=0
for arg in "$@"; do
  case "$arg" in
    --dev|--full) tier=dev ;;
    --arm64) arm64=1 ;;
    --python) python=1 ;;
    -h|--help) sed -n '3,32p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup: unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done

# Main tier: building and running `clef` (Release preset, target clef).
MAIN_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  nlohmann-json3-dev libcli11-dev libssl-dev libboost1.74-dev zlib1g-dev libbrotli-dev
  libdnnl-dev ocl-icd-opencl-dev opencl-headers   # Debian's dnnl-config.cmake requires OpenCL
  libopenblas-dev libhwy-dev
  libpng-dev libjpeg62-turbo-dev libwebp-dev
  libcurl4-openssl-dev                             # clef pull (HTTP client; docs/MODELS.md)
  file                                             # cpack's Debian package: dpkg-shlibdeps' input (docs/DEPLOYMENT.md)
)
# Full tier: unit tests, benchmarks, the fuzz preset (clang-14), the Python reference toolkit,
# and HAProxy for the scale-out tests and benchmark (tests/server/test_scaleout.py; deploy/haproxy/).
DEV_PACKAGES=(
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-14 libclang-rt-14-dev libomp-14-dev
  libc++-14-dev libc++abi-14-dev   # scripts/check_libcxx.sh: the portable layers compile against libc++ (docs/ARM64.md)
  clang-format-14   # scripts/check_format.sh: the C++ sources follow .clang-format
  ccache   # compiler cache: every preset compiles through it when installed (CMakeLists.txt, CLEF_CCACHE)
  python3 python3-venv python3-dev ca-certificates   # python3-dev: the Python package stage (pip install .)
  haproxy
  git   # tests/hub: `git check-ref-format` is the reference for --revision names
)

# --arm64: the cross toolchain and emulator (host packages), and the arm64 builds of the libraries
# the arm64 preset links (tests included: GoogleTest/GoogleMock). nlohmann-json3-dev and
# libcli11-dev are architecture-independent: the main tier's copies serve the cross build.
ARM64_HOST_PACKAGES=(
  crossbuild-essential-arm64   # aarch64-linux-gnu-g++-12 and the arm64 C library
  qemu-user-static             # qemu-aarch64-static runs the arm64 tests (cmake/toolchains/aarch64-linux-gnu.cmake)
  ccache
  llvm-19   # llvm-mca-19 / llvm-mc-19: tools/arm_mca.py (LLVM 14 has no Neoverse scheduling models)
)
ARM64_TARGET_PACKAGES=(
  libhwy-dev libopenblas-openmp-dev   # kernels; GEMM (OpenBLAS on the OpenMP runtime clef's loops use)
  libssl-dev libboost1.74-dev zlib1g-dev libbrotli-dev libcurl4-openssl-dev
  libpng-dev libjpeg62-turbo-dev libwebp-dev
  libgtest-dev libgmock-dev
)

# --python: building the Python extension (pip install .; python/CMakeLists.txt) with Debian's Python.
PYTHON_PACKAGES=(python3-dev python3-venv)

packages=("${MAIN_PACKAGES[@]}")
((python)) && packages+=("${PYTHON_PACKAGES[@]}")
[[ $tier == dev ]] && packages+=("${DEV_PACKAGES[@]}")
((arm64)) && packages+=("${ARM64_HOST_PACKAGES[@]}")

SUDO=()
as_root() {
  if [[ $(id -u) -ne 0 && ${#SUDO[@]} -eq 0 ]]; then
    command -v sudo >/dev/null || { echo "setup: not root and no sudo; run as root: $*" >&2; exit 1; }
    SUDO=(sudo)
  fi
  "${SUDO[@]}" "$@"
}

installed=$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${packages[@]}" 2>/dev/null \
  | awk '$2 == "installed" {print $1}' || true)
missing=()
for p in "${packages[@]}"; do
  grep -qxF "$p" <<<"$installed" || missing+=("$p")
done
logs=${CLEF_SETUP_LOGS:-$PWD/build/setup-logs}
mkdir -p "$logs"
# step LOG COMMAND...: runs COMMAND with its output in $logs/LOG; on failure shows the log's tail.
step() {
  local log=$logs/$1 t0=$SECONDS
  shift
  if ! "$@" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "setup: failed after $((SECONDS - t0)) s (full log: $log)" >&2
    exit 1
  fi
  echo "setup:   done in $((SECONDS - t0)) s (log: $log)"
}

if ((arm64)); then
  # Foreign-architecture packages are queried by their qualified names (NAME:arm64).
  for p in "${ARM64_TARGET_PACKAGES[@]}"; do
    [[ $(dpkg-query -W -f='${db:Status-Status}' "$p:arm64" 2>/dev/null || true) == installed ]] || missing+=("$p:arm64")
  done
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    echo "setup: adding the arm64 architecture to dpkg (multiarch)"
    as_root dpkg --add-architecture arm64
  fi
fi
if ((${#missing[@]})); then
  echo "setup: refreshing Debian's package lists (apt-get update, about 10-30 s) ..."
  step apt-update.log as_root apt-get update
  # How many packages the install brings in with their dependencies, and how much it downloads:
  # apt's own dry run. About 2 s per package to download and unpack (a fresh Debian 12 on a busy
  # 2-core machine: the main tier's 94 packages in 203 s).
  plan=$(LC_ALL=C apt-get install -s --no-install-recommends "${missing[@]}" 2>/dev/null || true)
  n=$(grep -c '^Inst ' <<<"$plan" || true)
  minutes=$(( (2 * n + 59) / 60 ))
  echo "setup: installing ${#missing[@]} Debian packages ($tier tier$( ((arm64)) && echo ' + arm64')$( ((python)) && echo ' + python'); $n with their dependencies, about $minutes min): ${missing[*]} ..."
  # --no-remove: an arm64 library may upgrade its amd64 twin in lockstep (multiarch versions must
  # match) but never removes one.
  step apt-install.log as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends --no-remove "${missing[@]}"
else
  echo "setup: Debian packages present ($tier tier$( ((arm64)) && echo ' + arm64')$( ((python)) && echo ' + python'))"
fi

[[ $tier == dev ]] || exit 0

# Python reference toolkit, in a virtual environment.
venv=${CLEF_VENV:-$PWD/.venv}
base=${PYTHON:-python3}
command -v "$base" >/dev/null || { echo "setup: no Python interpreter '$base' (set PYTHON)" >&2; exit 1; }
# The interpreter itself (a pyenv shim resolves to the Python it runs), and the one a venv was made from.
pyid='import os, sys; print(os.path.realpath(getattr(sys, "_base_executable", sys.executable)), sys.version.split()[0])'
base_id=$("$base" -c "$pyid")
venv_id=$("$venv/bin/python" -c "$pyid" 2>/dev/null || true)
req=tools/reference/requirements.txt
stamp="$venv/.clef-setup-stamp"
want_stamp="$base_id $(sha256sum "$req" | cut -d' ' -f1)"

if [[ $venv_id == "$base_id" && -f $stamp && $(<"$stamp") == "$want_stamp" ]]; then
  echo "setup: Python venv up to date ($venv)"
  exit 0
fi
if [[ $venv_id != "$base_id" ]]; then
  if [[ -e $venv && ! -f $venv/pyvenv.cfg && -n $(ls -A "$venv" 2>/dev/null) ]]; then
    echo "setup: $venv exists and is not a Python venv; refusing to clear it (set CLEF_VENV)" >&2; exit 1
  fi
  # Missing, broken, or made by another interpreter: made (again) from scratch.
  echo "setup: creating a Python venv with ${base_id% *} ($venv, a few seconds) ..."
  step venv.log "$base" -m venv --clear "$venv"
fi
rm -f "$stamp"
echo "setup: installing the Python toolkit into the venv ($req: PyTorch, transformers, ...; ~5 GB, about 5-10 min) ..."
# pip keeps its download cache (~/.cache/pip), so a re-made venv does not download torch again.
PIP_DISABLE_PIP_VERSION_CHECK=1 step pip-install.log "$venv/bin/python" -m pip install --progress-bar off -r "$req"
printf '%s\n' "$want_stamp" >"$stamp"
echo "setup: Python venv ready ($venv/bin/python)"
