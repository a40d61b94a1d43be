#!/usr/bin/env bash
# README command 1: install, build (Release), and run the main job on the embedded default model
# (a tiny random-weight Clef model that `clef` writes itself; nothing is downloaded).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release
./build/release/bin/clef inspect
