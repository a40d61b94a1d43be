#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks that every section a source or doc file cites in docs/ exists.

A citation is `docs/NAME.md` followed by section references
  §3.2   §2–§7   §6.1-6.2   Appendix B   "Heading text"
separated by commas, semicolons, "and", "or" or "/" (a comment may wrap between them).
  * §N must match a heading of docs/NAME.md that starts with N ("## 3. ..." or "### 3.2 ...");
    both ends of a range are checked;
  * Appendix X must match a heading "Appendix X...";
  * "Text" must occur (case-insensitively) in a heading, or start a bold label `**Text`.
A bare `§N` (not after "RFC nnnn", "Unicode" or "SPEC") is read as a section of: the file itself for
docs/MODEL.md, docs/PROTOCOL.md and docs/TOKENIZER.md; docs/PROTOCOL.md in docs/DIFFERENCES.md and
docs/COMPATIBILITY.md; elsewhere the docs file last cited with a section number before it (with -v,
bare references that name no docs file are listed as notes). Also fails on citations of research
notes that are not part of the repository (a sibling `shared` folder, the old spec file names such
as `protocol` + `.md`). "step N" / "item N" inside a section are not checked.

Usage: python3 scripts/check_doc_refs.py [-v]   (exit 1 and one line per problem if any)
Standard library only; reads the files git tracks under src apps tests tools bench scripts docs
cmake examples deploy .ci.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCAN = ("src", "apps", "tests", "tools", "bench", "scripts", "docs", "cmake", "examples", "deploy", ".ci")
EXTS = {".cc", ".h", ".hpp", ".cpp", ".py", ".md", ".cmake", ".txt", ".sh", ".toml", ".cfg", ".yaml", ".yml"}
DEFAULT_DOC = {"docs/DIFFERENCES.md": "PROTOCOL", "docs/COMPATIBILITY.md": "PROTOCOL"}

NUM = r"\d+(?:\.\d+)*"
GAP = r"(?:[\s/#*]|//)*"  # whitespace and comment markers of a wrapped line
REF = rf"(?:§\s?{NUM}(?:\s?[-–]\s?§?{NUM})?|Appendix [A-Z]|\"[^\"\n]+\")"
SEP = rf"(?:{GAP}(?:,|;|/|and|or){GAP}|\s)"
CITE = re.compile(rf"docs/([A-Z][A-Z_0-9]*)\.md((?:{SEP}?{GAP}{REF})*)")
ONE_REF = re.compile(rf"§\s?({NUM})(?:\s?[-–]\s?§?({NUM}))?|Appendix ([A-Z])|\"([^\"\n]+)\"")
BARE = re.compile(rf"(RFC\s?\d+\s?|SPEC\s?|docs/[A-Z_0-9]+\.md\S*\s?)?§\s?({NUM})")
FOREIGN = re.compile(r"\.\./shared|(?<![\w/])(architecture|protocol|tokenizer|peers|style|gguf-clef)\.md")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$", re.M)


def headings(name: str) -> tuple[set[str], list[str]] | None:
    path = ROOT / "docs" / f"{name}.md"
    if not path.is_file():
        return None
    nums, texts = set(), []
    for h in HEADING.findall(path.read_text(encoding="utf-8")):
        texts.append(h)
        m = re.match(rf"(?:§\s*)?({NUM})\.?(?:\s|$)", h)
        if m:
            nums.add(m.group(1))
        m = re.match(r"Appendix ([A-Z])\b", h)
        if m:
            nums.add("Appendix " + m.group(1))
    return nums, texts


def main() -> int:
    verbose = "-v" in sys.argv
    files = subprocess.run(["git", "ls-files", "--", *SCAN], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    cache: dict[str, tuple[set[str], list[str]] | None] = {}
    problems, notes, checked = [], [], 0
    bold: dict[str, str] = {}

    def check(doc: str, ref: re.Match, where: str) -> None:
        nonlocal checked
        if doc not in cache:
            cache[doc] = headings(doc)
        h = cache[doc]
        if doc not in bold:
            path = ROOT / "docs" / f"{doc}.md"
            bold[doc] = path.read_text(encoding="utf-8") if path.is_file() else ""
        checked += 1
        if h is None:
            problems.append(f"{where}: docs/{doc}.md does not exist")
            return
        nums, texts = h
        if ref.group(1):
            for n in filter(None, (ref.group(1), ref.group(2))):
                if n not in nums:
                    problems.append(f"{where}: docs/{doc}.md has no section §{n}")
        elif ref.group(3):
            if "Appendix " + ref.group(3) not in nums:
                problems.append(f"{where}: docs/{doc}.md has no Appendix {ref.group(3)}")
        elif ref.group(4):
            if not any(ref.group(4).lower() in t.lower() for t in texts) and f"**{ref.group(4)}" not in bold[doc]:
                problems.append(f'{where}: docs/{doc}.md has no heading containing "{ref.group(4)}"')

    for f in files:
        p = ROOT / f
        if p.suffix not in EXTS or not p.is_file() or f == "scripts/check_doc_refs.py":
            continue
        text = p.read_text(encoding="utf-8", errors="replace")
        for m in FOREIGN.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            problems.append(f"{f}:{line}: cites a file outside the repository: {m.group(0)}")
        spans = []
        for m in CITE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            spans.append((m.start(), m.end(), m.group(1), "§" in m.group(2)))
            for r in ONE_REF.finditer(m.group(2)):
                check(m.group(1), r, f"{f}:{line}")
        # bare § references: against the docs file whose sections the file cited last
        own = f[len("docs/"):-3] if f.startswith("docs/") and f.endswith(".md") else None
        for m in BARE.finditer(text):
            if m.group(1) or any(a <= m.start() < b for a, b, _, _ in spans):
                continue
            lead = re.sub(r"[\s/#*]+", " ", text[max(0, m.start() - 40):m.start()])
            if re.search(r"(RFC ?\d+|SPEC|Unicode|issue \d+)\s*$", lead):
                continue
            before = [d for a, _, d, numbered in spans if a < m.start() and numbered]
            if own in ("MODEL", "PROTOCOL", "TOKENIZER"):
                doc = own
            elif f in DEFAULT_DOC:
                doc = DEFAULT_DOC[f]
            else:
                doc = before[-1] if before else None
            line = text.count("\n", 0, m.start()) + 1
            if doc is None:
                notes.append(f"note {f}:{line}: §{m.group(2)} names no docs file")
                continue
            check(doc, ONE_REF.match("§" + m.group(2)), f"{f}:{line} (bare, read as docs/{doc}.md)")
    for p in problems + (notes if verbose else []):
        print(p)
    if verbose or problems:
        print(f"{checked} section references checked, {len(problems)} problems", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
