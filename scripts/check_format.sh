#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Checks that the C++ sources (src/, apps/, python/, tests/, bench/) follow .clang-format with clang-format-14
# (setup.sh --dev installs it). Prints each file that differs and exits 1; `--fix` rewrites them.
# Needs a git checkout (the files are git's tracked ones). scripts/test.sh runs it before any build.
# Also checks that every source file carries the license line (scripts/check_spdx.py; LICENSE).
set -euo pipefail
cd "$(dirname "$0")/.."
spdx_rc=0
if [[ ${1:-} == --fix ]]; then python3 scripts/check_spdx.py --fix; else python3 scripts/check_spdx.py || spdx_rc=1; fi
if ! command -v clang-format-14 >/dev/null; then
  echo "check_format: clang-format-14 not found (bash scripts/setup.sh --dev installs it)" >&2
  exit 2
fi
listing=$(mktemp)
trap 'rm -f "$listing"' EXIT
if ! git ls-files -z -- 'src/*.cc' 'src/*.h' 'apps/*.cc' 'apps/*.h' 'python/*.cc' 'tests/*.cc' 'tests/*.h' 'bench/*.cc' \
     'bench/*.h' >"$listing"; then
  echo "check_format: git ls-files failed: run it in a git checkout of clef.cpp" >&2
  exit 2
fi
mapfile -d '' -t files <"$listing"
if ((${#files[@]} == 0)); then
  echo "check_format: no C++ files found under src/ apps/ python/ tests/ bench/" >&2
  exit 2
fi
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
exit "$spdx_rc"
