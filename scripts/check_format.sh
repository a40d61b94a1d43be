#!/usr/bin/env bash
# Checks that the C++ sources (src/, apps/, tests/, bench/) follow .clang-format with clang-format-14
# (setup.sh --dev installs it). Prints each file that differs and exits 1; `--fix` rewrites them.
# scripts/test.sh runs it before any build (seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files -- 'src/*.cc' 'src/*.h' 'apps/*.cc' 'apps/*.h' 'tests/*.cc' 'tests/*.h' \
                                     'bench/*.cc' 'bench/*.h')
if [[ ${1:-} == --fix ]]; then
  clang-format-14 -i --style=file "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format-14 --style=file --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  printf 'check_format: %s does not follow .clang-format\n' "${bad[@]}" >&2
  echo "check_format: ${#bad[@]} file(s); fix with: bash scripts/check_format.sh --fix" >&2
  exit 1
fi
