#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks that no C++ function in src/, apps/ or python/ is longer than 120 lines.

A function that long does several things; split it along the steps its comments name. A function
is a top-level brace block (outside any other function) whose head ends in ")" plus qualifiers
(const, noexcept, override, a trailing return type; a member-initializer list ends in ")" too);
its length runs from the first line of its head to its closing brace. Comments, string and
character literals (raw strings included) are blanked first, so braces inside them do not count.
Lambdas and blocks inside a function count toward the function that holds them.
Prints one line per long function (FILE:LINE: N lines: HEAD) and exits 1 when there is any; exits 0
silently. Standard library only; run from anywhere: python3 scripts/check_function_length.py [--max N]
"""
import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
FOLDERS = ("src", "apps", "python")
SUFFIXES = (".cc", ".h", ".inc")
RAW_STRING = re.compile(r'R"([^()\\\s]{0,16})\((.*?)\)\1"', re.S)
SCOPE = re.compile(r"\b(namespace|struct|class|enum|union)\b[^;(){}]*$")
FUNCTION_HEAD = re.compile(r"\)\s*(const|noexcept|override|final|mutable|->[^;{}]*|\s)*$")


def blank(text: str) -> str:
    """`text` with comments and literals replaced by spaces (newlines kept, so line numbers hold)."""
    text = RAW_STRING.sub(lambda m: '""' + re.sub(r"[^\n]", " ", m.group(0))[2:], text)
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text[i] in "\"'":
            quote, j = text[i], i + 1
            while j < n and text[j] != quote and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(quote + " " * (min(j, n) - i - 1) + quote)
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def long_functions(path: pathlib.Path, limit: int):
    """(first line, lines, head) of each function of `path` longer than `limit` lines."""
    text = blank(path.read_text(errors="replace"))
    found, stack = [], []  # stack: (kind, first line, head)
    line, head, head_line = 1, "", 0
    for ch in text:
        if ch == "{":
            h = head.strip()
            if SCOPE.search(h) or re.search(r'extern\s*""$', h):
                kind = "scope"
            elif not any(k == "function" for k, _, _ in stack) and FUNCTION_HEAD.search(h):
                kind = "function"
            else:
                kind = "block"
            stack.append((kind, head_line or line, " ".join(h.split())[:90]))
            head, head_line = "", 0
        elif ch == "}" or ch == ";":
            if ch == "}" and stack:
                kind, first, h = stack.pop()
                if kind == "function" and line - first + 1 > limit:
                    found.append((first, line - first + 1, h))
            head, head_line = "", 0
        else:
            if not head_line and not ch.isspace():
                head_line = line
            head += ch
        if ch == "\n":
            line += 1
            if head.lstrip().startswith("#"):  # a preprocessor line is not part of a head
                head, head_line = "", 0
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=120, help="the most lines a function may have (default 120)")
    args = parser.parse_args()
    problems = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in SUFFIXES and path.is_file():
                for first, n, head in long_functions(path, args.max):
                    problems.append(f"{path.relative_to(ROOT)}:{first}: {n} lines: {head}")
    for p in problems:
        print(p)
    if problems:
        print(f"check_function_length: {len(problems)} function(s) over {args.max} lines: split each along the "
              "steps its comments name", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
