#!/usr/bin/env bash
# Installs what clef.cpp needs on a Debian 12 (bookworm) machine, in two tiers:
#
#   bash scripts/setup.sh         main tier: the C++ toolchain and the libraries that building and
#                                 running the `clef` binary needs (Debian packages only; no Python).
#   bash scripts/setup.sh --dev   full tier: the main tier, plus what the tests and benchmarks need
#                                 (GoogleTest/GoogleMock, Google Benchmark, clang-14 + libFuzzer
#                                 runtime + libomp for the fuzz preset, clang-format-14, ccache,
#                                 python3-venv) and the Python
#                                 reference toolkit (tools/reference/requirements.txt, from PyPI)
#                                 in a virtual environment, .venv/ at the repository root.
#
# The virtual environment is made with `$PYTHON -m venv` (default PYTHON: the python3 on PATH,
# e.g. Debian's /usr/bin/python3 or a pyenv one); pip only ever installs into it, never into the
# system Python. Tests and tools then run with .venv/bin/python ($CLEF_VENV overrides the folder).
#
# Idempotent and fast on a second run: only missing Debian packages are installed (apt-get update
# runs only then), and pip runs only when requirements.txt or the base interpreter changed since
# the last successful install (a stamp file in the venv records both).
set -euo pipefail
cd "$(dirname "$0")/.."

tier=main
for arg in "$@"; do
  case "$arg" in
    --dev|--full) tier=dev ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
)
# Full tier: unit tests, benchmarks, the fuzz preset (clang-14), the Python reference toolkit,
# and HAProxy for the scale-out tests and benchmark (tests/server/test_scaleout.py; deploy/haproxy/).
DEV_PACKAGES=(
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-14 libclang-rt-14-dev libomp-14-dev
  clang-format-14   # scripts/check_format.sh: the C++ sources follow .clang-format
  ccache   # compiler cache: every preset compiles through it when installed (CMakeLists.txt, CLEF_CCACHE)
  python3 python3-venv ca-certificates
  haproxy
)

packages=("${MAIN_PACKAGES[@]}")
[[ $tier == dev ]] && packages+=("${DEV_PACKAGES[@]}")

installed=$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${packages[@]}" 2>/dev/null \
  | awk '$2 == "installed" {print $1}' || true)
missing=()
for p in "${packages[@]}"; do
  grep -qxF "$p" <<<"$installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages ($tier tier): ${missing[*]}"
  SUDO=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup: not root and no sudo; install as root: apt-get install ${missing[*]}" >&2; exit 1; }
    SUDO=(sudo)
  fi
  # apt's per-package chatter goes to a log, shown only if it fails.
  log=$(mktemp /tmp/clef-setup-apt.XXXXXX.log)
  { "${SUDO[@]}" apt-get update -qq &&
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  } >"$log" 2>&1 || { tail -n 40 "$log" >&2; echo "setup: apt-get failed (full log: $log)" >&2; exit 1; }
  rm -f "$log"
  echo "setup: Debian packages installed"
else
  echo "setup: Debian packages present ($tier tier)"
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
  echo "setup: creating a Python venv with ${base_id% *} ($venv)"
  "$base" -m venv --clear "$venv"
fi
rm -f "$stamp"
echo "setup: installing Python requirements into the venv ($req)"
# pip keeps its download cache (~/.cache/pip), so a re-made venv does not download torch again.
PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/python" -m pip install --progress-bar off -r "$req"
printf '%s\n' "$want_stamp" >"$stamp"
echo "setup: Python venv ready ($venv/bin/python)"
