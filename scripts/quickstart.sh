#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# README command 1: install what the main job needs, build the `clef` binary (Release), and run the
# main job on the embedded default model (a tiny random-weight Clef model that `clef` writes itself;
# nothing is downloaded): describe the model, then decide examples/request.json (shipped in the
# repository) and print the SystemOne response.
# Only the main tier of scripts/setup.sh (Debian C++ toolchain + libraries) is installed and only the
# `clef` target is built; no Python is needed. README command 2 (scripts/test.sh) does the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Tests and benchmarks are off here so that configuring needs no GoogleTest / Google Benchmark;
# `cmake --preset release` (as scripts/test.sh runs it) turns them on again in the same build folder.
cmake --preset release -DCLEF_BUILD_TESTS=OFF -DCLEF_BUILD_BENCH=OFF >/dev/null
cmake --build --preset release --target clef
clef=./build/release/bin/clef
echo
echo "== clef inspect (the embedded default model)"
"$clef" inspect
echo
echo "== clef decide examples/request.json"
"$clef" decide --timings examples/request.json
echo
echo "quickstart: the binary is $clef; to put clef on PATH with its man page and bash completion:"
echo "quickstart:   sudo cmake --install build/release   (or a Debian package: docs/DEPLOYMENT.md \"Installing\")"
