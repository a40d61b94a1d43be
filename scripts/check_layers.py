#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks that no engine layer includes a higher one.

The layers are the folders of src/, in the order of CLEF_LAYERS in src/CMakeLists.txt (lowest
first); each is one static library that links only the layers before it. A source file of layer L
may include "M/..." only when M is L or comes before L. Every folder of src/ must be a listed layer.
Prints one line per violation (FILE:LINE: ...) and exits 1 when there is any; exits 0 silently.
Standard library only; run from anywhere: python3 scripts/check_layers.py
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"/]+)/[^"]*"')


def layer_order():
    text = (SRC / "CMakeLists.txt").read_text()
    m = re.search(r"set\(CLEF_LAYERS\s+([^)]*)\)", text)
    if not m:
        sys.exit("check_layers: no set(CLEF_LAYERS ...) in src/CMakeLists.txt")
    return m.group(1).split()


def main():
    order = layer_order()
    rank = {name: i for i, name in enumerate(order)}
    chain = " < ".join(order)
    problems = []
    for d in sorted(p for p in SRC.iterdir() if p.is_dir()):
        if d.name not in rank:
            problems.append(f"src/{d.name}/: not a layer (add it to CLEF_LAYERS in src/CMakeLists.txt)")
    for path in sorted(SRC.rglob("*")):
        if path.suffix not in (".h", ".cc", ".inc") or not path.is_file():
            continue
        own = path.relative_to(SRC).parts[0]
        if own not in rank:
            continue
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m or m.group(1) not in rank:
                continue
            target = m.group(1)
            if rank[target] > rank[own]:
                rel = path.relative_to(ROOT)
                header = line.split('"')[1]
                problems.append(f"{rel}:{lineno}: layer {own} includes {header}, but {target} is above {own} ({chain})")
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} layering problem(s): move the code to the layer it belongs to, never link upward", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
