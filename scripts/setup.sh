#!/usr/bin/env bash
# Installs everything clef.cpp needs on a Debian 12 machine: the C++ toolchain and libraries
# from Debian, and the Python reference toolkit (tools/reference/requirements.txt) from PyPI.
# Idempotent: packages already present are not reinstalled, so a second run takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  nlohmann-json3-dev libcli11-dev libssl-dev libcpp-httplib-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-14 libclang-rt-14-dev libomp-14-dev
  libdnnl-dev libopenblas-dev
  libpng-dev libjpeg62-turbo-dev libwebp-dev
  python3 python3-pip
)

missing=()
for p in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: Debian packages present"
fi

PY=${PYTHON:-python3}
# pip only downloads what is not already satisfied; keep its cache (torch is large).
if "$PY" - <<'PYEOF'
import sys
from importlib import metadata
want = {}
for line in open("tools/reference/requirements.txt"):
    line = line.split("#")[0].strip()
    if "==" in line:
        name, ver = line.split("==")
        want[name.strip()] = ver.strip()
for name, ver in want.items():
    try:
        have = metadata.version(name)
    except metadata.PackageNotFoundError:
        sys.exit(1)
    if have.split("+")[0] != ver:
        sys.exit(1)
sys.exit(0)
PYEOF
then
  echo "setup: Python requirements satisfied"
else
  echo "setup: installing Python requirements (tools/reference/requirements.txt)"
  "$PY" -m pip install --progress-bar off -r tools/reference/requirements.txt
fi
