#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks that no engine layer includes a layer it does not link.

The layers are the folders of src/, in the order of CLEF_LAYERS in src/CMakeLists.txt (lowest
first); each is one static library, clef_<layer>, whose target_link_libraries line in
src/<layer>/CMakeLists.txt names the layers it stands on. Checked:
  - every folder of src/ is a listed layer;
  - a layer links only layers listed before it (so the layers form a ladder with no circles);
  - a source file of layer L includes "M/..." only when M is L or a layer L links, directly or
    through the layers it links (so ops, which links only core, may not include io or decision
    even though both come before it in the list).
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


LINK = re.compile(r"target_link_libraries\(\s*clef_(\w+)\b([^)]*)\)", re.S)


def layer_links(order):
    """{layer: set of layers its clef_<layer> links directly}, read from src/<layer>/CMakeLists.txt."""
    links = {}
    for layer in order:
        cmake = SRC / layer / "CMakeLists.txt"
        found = set()
        if cmake.is_file():
            for m in LINK.finditer(cmake.read_text()):
                if m.group(1) == layer:
                    found |= {n for n in re.findall(r"\bclef_(\w+)\b", m.group(2)) if n in order}
        links[layer] = found
    return links


def reachable(links, layer):
    seen, todo = set(), list(links[layer])
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(links.get(n, ()))
    return seen


def main():
    order = layer_order()
    rank = {name: i for i, name in enumerate(order)}
    links = layer_links(order)
    allowed = {layer: reachable(links, layer) | {layer} for layer in order}
    problems = []
    for layer in order:
        for dep in sorted(links[layer]):
            if rank[dep] >= rank[layer]:
                problems.append(f"src/{layer}/CMakeLists.txt: clef_{layer} links clef_{dep}, which is not below it in CLEF_LAYERS")
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
            if target not in allowed[own]:
                rel = path.relative_to(ROOT)
                header = line.split('"')[1]
                stands_on = ", ".join(sorted(allowed[own] - {own}, key=rank.get)) or "nothing"
                problems.append(f"{rel}:{lineno}: layer {own} includes {header}, but clef_{own} does not link {target} (it stands on: {stands_on})")
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} layering problem(s): move the code to the layer it belongs to, or link the layer if it is below", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
