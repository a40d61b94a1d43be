#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Generate src/tokenizer/unicode_data.inc: the Unicode tables of the clef tokenizer.

Written for clef.cpp from the Unicode Character Database as exposed by the PyPI package
``unicodedataplus`` 16.0.0.post1 (Unicode 16.0.0 general categories, canonical combining classes,
canonical decompositions, NFC, and the ``age`` property). See tools/unicode/NOTES.md for why these
exact versions; in short (both measured against PyPI ``tokenizers`` 0.23.3, see
tests/reference/test_tokenizer_parity_unicode.py):

* the split regex (Oniguruma inside ``tokenizers``) uses **Unicode 16.0** for ``\\p{L}``, ``\\p{M}``,
  ``\\p{N}``; ``\\s`` is the White_Space property (25 code points, unchanged since Unicode 6.1);
* the NFC normalizer (Rust crate ``unicode-normalization-alignments``) uses **Unicode 9.0** data: every
  code point assigned after 9.0 is treated as unassigned (combining class 0, no decomposition, no
  composition). Normalization data of assigned code points never changes (Unicode stability policy),
  so "Unicode 16 data restricted to age <= 9.0" is exactly the Unicode 9.0 normalization data.

Usage (developer machine; the output is committed):

    pip install --target /tmp/udp unicodedataplus==16.0.0.post1
    PYTHONPATH=/tmp/udp python3 tools/unicode/gen_unicode_tables.py src/tokenizer/unicode_data.inc
"""

from __future__ import annotations

import sys
from typing import Dict, List, Tuple

import unicodedataplus as ucd

EXPECTED_UCD = "16.0.0"
NFC_MAX_AGE = (9, 0)
BLOCK = 128  # code points per second-stage block
MAX_CP = 0x110000

# White_Space (PropList.txt); stable since Unicode 6.1 (U+180E left it in 6.3).
WHITE_SPACE = [0x9, 0xA, 0xB, 0xC, 0xD, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029,
               0x202F, 0x205F, 0x3000]

# Property bits (must match src/tokenizer/unicode.h).
P_LETTER, P_MARK, P_NUMBER, P_SPACE, P_NFC_CHECK = 1, 2, 4, 8, 16

S_BASE, L_BASE, V_BASE, T_BASE = 0xAC00, 0x1100, 0x1161, 0x11A7
L_COUNT, V_COUNT, T_COUNT = 19, 21, 28
S_COUNT = L_COUNT * V_COUNT * T_COUNT


def age_ok(cp: int) -> bool:
    a = ucd.age(chr(cp))
    if not a or not a[0].isdigit():  # "Unassigned"
        return False
    major, minor = (int(x) for x in a.split(".")[:2])
    return (major, minor) <= NFC_MAX_AGE


def nfc_ccc(cp: int) -> int:
    return ucd.combining(chr(cp)) if age_ok(cp) else 0


def nfc_decomp1(cp: int) -> List[int]:
    """One level of canonical decomposition under the NFC data version ([] when none)."""
    if not age_ok(cp) or S_BASE <= cp < S_BASE + S_COUNT:
        return []
    d = ucd.decomposition(chr(cp))
    if not d or d.startswith("<"):
        return []
    return [int(x, 16) for x in d.split()]


def full_decomp(cp: int) -> List[int]:
    d = nfc_decomp1(cp)
    if not d:
        return [cp]
    out: List[int] = []
    for x in d:
        out += full_decomp(x)
    return out


def main(out_path: str) -> None:
    if ucd.unidata_version != EXPECTED_UCD:
        sys.exit(f"need unicodedataplus with Unicode {EXPECTED_UCD}, got {ucd.unidata_version}")
    cps = range(MAX_CP)

    # --- NFC data (Unicode 9.0 subset) ---
    decomp: Dict[int, List[int]] = {}
    comp: Dict[Tuple[int, int], int] = {}
    for cp in cps:
        if 0xD800 <= cp <= 0xDFFF:
            continue
        d1 = nfc_decomp1(cp)
        if not d1:
            continue
        decomp[cp] = full_decomp(cp)
        # primary composite: a pair decomposition that NFC keeps (not in Full_Composition_Exclusion)
        if len(d1) == 2 and ucd.normalize("NFC", chr(cp)) == chr(cp):
            comp[(d1[0], d1[1])] = cp
    seconds = {b for (_, b) in comp}
    seconds |= set(range(V_BASE, V_BASE + V_COUNT)) | set(range(T_BASE + 1, T_BASE + T_COUNT))

    props = bytearray(MAX_CP)
    ccc = bytearray(MAX_CP)
    ws = set(WHITE_SPACE)
    for cp in cps:
        if 0xD800 <= cp <= 0xDFFF:
            continue
        ch = chr(cp)
        cat = ucd.category(ch)
        p = 0
        if cat[0] == "L":
            p |= P_LETTER
        elif cat[0] == "M":
            p |= P_MARK
        elif cat[0] == "N":
            p |= P_NUMBER
        if cp in ws:
            p |= P_SPACE
        c = nfc_ccc(cp)
        ccc[cp] = c
        # NFC "needs work" flag: anything that may change under NFC in some context.
        changes_alone = cp in decomp and not (len(nfc_decomp1(cp)) == 2 and comp.get(tuple(nfc_decomp1(cp))) == cp)
        if c != 0 or changes_alone or cp in seconds:
            p |= P_NFC_CHECK
        props[cp] = p

    def two_stage(data: bytearray) -> Tuple[List[int], List[bytes]]:
        index: List[int] = []
        blocks: List[bytes] = []
        seen: Dict[bytes, int] = {}
        for start in range(0, MAX_CP, BLOCK):
            blk = bytes(data[start : start + BLOCK])
            if blk not in seen:
                seen[blk] = len(blocks)
                blocks.append(blk)
            index.append(seen[blk])
        return index, blocks

    lines: List[str] = []
    w = lines.append
    w("// SPDX-License-Identifier: MIT")
    w("// GENERATED by tools/unicode/gen_unicode_tables.py -- do not edit.")
    w(f"// Source: unicodedataplus {ucd.unidata_version} (Unicode Character Database).")
    w("// Split-regex classes: Unicode 16.0.0. NFC data: Unicode 9.0 (code points with Age <= 9.0).")
    w("// Included once, by src/tokenizer/unicode.cc.")
    w(f'constexpr const char* kGeneratedPropsUnicodeVersion = "{ucd.unidata_version}";')
    w('constexpr const char* kGeneratedNfcUnicodeVersion = "9.0";')
    w(f"constexpr std::uint32_t kBlockShift = {BLOCK.bit_length() - 1};")
    for name, data in (("Props", props), ("Ccc", ccc)):
        index, blocks = two_stage(data)
        w(f"constexpr std::uint16_t k{name}Index[{len(index)}] = {{")
        for i in range(0, len(index), 24):
            w("  " + ",".join(str(x) for x in index[i : i + 24]) + ",")
        w("};")
        w(f"constexpr std::uint8_t k{name}Blocks[{len(blocks) * BLOCK}] = {{")
        for blk in blocks:
            for i in range(0, BLOCK, 32):
                w("  " + ",".join(str(x) for x in blk[i : i + 32]) + ",")
        w("};")
    # decompositions: sorted by code point
    w("struct DecompEntry { std::uint32_t cp; std::uint16_t offset; std::uint8_t length; };")
    flat: List[int] = []
    entries = []
    for cp in sorted(decomp):
        seq = decomp[cp]
        entries.append((cp, len(flat), len(seq)))
        flat += seq
    assert len(flat) < 65536 and max(e[2] for e in entries) < 256
    w(f"constexpr DecompEntry kDecomp[{len(entries)}] = {{")
    for i in range(0, len(entries), 6):
        w("  " + " ".join(f"{{0x{c:X},{o},{n}}}," for c, o, n in entries[i : i + 6]))
    w("};")
    w(f"constexpr std::uint32_t kDecompData[{len(flat)}] = {{")
    for i in range(0, len(flat), 12):
        w("  " + ",".join(f"0x{x:X}" for x in flat[i : i + 12]) + ",")
    w("};")
    w("struct CompEntry { std::uint64_t key; std::uint32_t composite; };  // key = first << 21 | second")
    items = sorted(((a << 21) | b, c) for (a, b), c in comp.items())
    w(f"constexpr CompEntry kComp[{len(items)}] = {{")
    for i in range(0, len(items), 4):
        w("  " + " ".join(f"{{0x{k:X}ull,0x{c:X}}}," for k, c in items[i : i + 4]))
    w("};")
    with open(out_path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {out_path}: {len(two_stage(props)[1])} props blocks, {len(two_stage(ccc)[1])} ccc blocks, "
          f"{len(entries)} decompositions, {len(items)} compositions", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "src/tokenizer/unicode_data.inc")
