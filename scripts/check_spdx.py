#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks that every source file git tracks carries the project's license line.

The line is `SPDX-License-Identifier: MIT` in the file's comment syntax, within its first three lines
(after a `#!` line where there is one). Source files: C++ (.cc .h .inc), Python (.py), shell (.sh, .bash and
.ci/run), CMake (CMakeLists.txt, .cmake) and Lua (.lua). LICENSE at the repository root holds the text.

Usage: python3 scripts/check_spdx.py [--fix]
  exit 1 with one line per file that lacks the line; --fix adds it (after the shebang) instead.
Standard library only; scripts/check_format.sh runs it.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TAG = "SPDX-License-Identifier: MIT"


def comment(path: str) -> str | None:
    """The line comment marker of a source file, or None when the file is not a source file."""
    name = path.rsplit("/", 1)[-1]
    if name.endswith((".cc", ".h", ".inc")):
        return "//"
    if name.endswith((".py", ".sh", ".bash", ".cmake")) or name == "CMakeLists.txt" or path == ".ci/run":
        return "#"
    if name.endswith(".lua"):
        return "--"
    return None


def main() -> int:
    fix = "--fix" in sys.argv[1:]
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    missing = []
    for f in files:
        marker = comment(f)
        p = ROOT / f
        if marker is None or not p.is_file():
            continue
        lines = p.read_text(encoding="utf-8").splitlines(keepends=True)
        if any(TAG in line for line in lines[:3]):
            continue
        if not fix:
            missing.append(f)
            continue
        at = 1 if lines and lines[0].startswith("#!") else 0
        lines.insert(at, f"{marker} {TAG}\n")
        p.write_text("".join(lines), encoding="utf-8")
        print(f"check_spdx: added the license line to {f}")
    for f in missing:
        print(f"check_spdx: {f} has no '{TAG}' line in its first three lines", file=sys.stderr)
    if missing:
        print(f"check_spdx: {len(missing)} file(s); fix with: python3 scripts/check_spdx.py --fix", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
