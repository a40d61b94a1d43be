#!/usr/bin/env bash
# README command 1: install, build (Release), and run the main job on the embedded default model
# (a tiny random-weight Clef model that `clef` writes itself; nothing is downloaded): describe the
# model, then decide the first request of ../shared/requests/corpus.jsonl and print the SystemOne
# response.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release
./build/release/bin/clef inspect
corpus=../shared/requests/corpus.jsonl
echo
echo "== clef decide: the first request of $corpus"
head -n 1 "$corpus" | python3 -c 'import json, sys; print(json.dumps(json.loads(sys.stdin.readline())["request"]))' \
  | ./build/release/bin/clef decide --timings -
