# SPDX-License-Identifier: MIT
"""Exhaustive Unicode parity of the C++ tokenizer against PyPI ``tokenizers`` (docs/TOKENIZER.md §1.7, §1.9).

* character classes: clef's generated \\p{L}, \\p{M}, \\p{N} and \\s tables vs Oniguruma's, on every code
  point (Unicode 16.0.0; a future ``tokenizers`` on another Unicode version fails here first);
* NFC: every code point alone and next to combining marks of low/high class, plus every canonical
  composition pair (also with an interposed mark), vs ``tokenizers.normalizers.NFC`` (Unicode 9.0 data);
* split pieces: every code point in 4 contexts, for the Qwen3.5 and the Qwen2/Qwen3 regex;
* ids: every code point in 2 contexts through the full pipeline with the released clef-flash
  tokenizer.json (Qwen3.5 vocabulary) and with the Qwen3 vocabulary.

Contexts are joined into long texts (both sides see the same text; a failure names the context
around the first difference); one batch call per side.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import test_tokenizer_parity_util as U

CHUNK = 100_000  # contexts per joined text


def _split_only_json(regex: str) -> dict:
    """tokenizer.json with no normalizer, the given split regex and a 256-byte BPE vocab."""
    from clef_ref.tokenizer_build import byte_level_bpe_json, bytes_to_unicode

    b2u = bytes_to_unicode()
    return byte_level_bpe_json([], regex, {b2u[b]: b for b in range(256)}, [], normalizer=None, post_processor=False)


def test_unicode_versions_recorded():
    """The generated tables say which Unicode versions they hold (tools/unicode/NOTES.md)."""
    inc = (U.REPO_ROOT / "src" / "tokenizer" / "unicode_data.inc").read_text()
    assert 'kGeneratedPropsUnicodeVersion = "16.0.0"' in inc
    assert 'kGeneratedNfcUnicodeVersion = "9.0"' in inc


def test_generated_tables_match_generator(tmp_path):
    """unicode_data.inc is what tools/unicode/gen_unicode_tables.py writes (needs unicodedataplus 16.0.0,
    a developer-only dependency: skipped where it is not installed)."""
    import subprocess
    import sys

    try:
        import unicodedataplus  # noqa: F401
    except ImportError:
        pytest.skip("unicodedataplus not installed (see tools/unicode/NOTES.md)")
    out = tmp_path / "unicode_data.inc"
    subprocess.run([sys.executable, str(U.REPO_ROOT / "tools" / "unicode" / "gen_unicode_tables.py"), str(out)],
                   check=True, capture_output=True)
    assert out.read_bytes() == (U.REPO_ROOT / "src" / "tokenizer" / "unicode_data.inc").read_bytes()


def test_character_classes_every_code_point():
    from tokenizers import Regex, pre_tokenizers

    cps = U.all_code_points()
    text = "".join(map(chr, cps))
    (props,) = U.run_batch(["--json", str(_tmp_json("qwen35"))], "props", [text.encode()])
    props = np.frombuffer(props, dtype=np.uint8)
    assert len(props) == len(cps)
    for name, pat, bit in (("L", r"\p{L}", 1), ("M", r"\p{M}", 2), ("N", r"\p{N}", 4), ("s", r"\s", 8)):
        kept = np.zeros(len(cps), dtype=bool)  # not matched by the class
        for _piece, (a, b) in pre_tokenizers.Split(Regex(pat), behavior="removed").pre_tokenize_str(text):
            kept[a:b] = True
        mine = (props & bit) != 0
        diff = np.nonzero(mine == kept)[0]  # member iff not kept
        assert len(diff) == 0, f"\\p{{{name}}} differs on {len(diff)} code points, e.g. " + \
            ", ".join(f"U+{cps[i]:04X}" for i in diff[:10])
    assert int(((props & 8) != 0).sum()) == 25


_TMP = {}


def _tmp_json(kind: str) -> pathlib.Path:
    return _TMP[kind]


@pytest.fixture(scope="module", autouse=True)
def _split_jsons(tmp_path_factory):
    d = tmp_path_factory.mktemp("split-only")
    from clef_ref.tokenizer_build import QWEN35_SPLIT_REGEX

    for kind, regex in (("qwen35", QWEN35_SPLIT_REGEX), ("qwen2", U.QWEN2_SPLIT_REGEX)):
        p = d / f"{kind}.json"
        p.write_text(json.dumps(_split_only_json(regex), ensure_ascii=False), encoding="utf-8")
        _TMP[kind] = p
        _TMP[kind + "-regex"] = regex
    yield


def test_nfc_every_code_point_and_composition_pair():
    from tokenizers import normalizers

    import unicodedata2  # Unicode 18: a superset of every composition pair the oracle may know

    cps = [c for c in U.all_code_points() if c != 0x0A]
    tests = []
    for c in cps:
        ch = chr(c)
        tests += [ch, "a" + ch + "\u0334", "a\u0345" + ch, ch + "\u0301", "a" + ch + "\u0301\u0316"]
    for c in cps:
        d = unicodedata2.decomposition(chr(c))
        if d and not d.startswith("<"):
            parts = [int(x, 16) for x in d.split()]
            if len(parts) == 2:
                a, b = chr(parts[0]), chr(parts[1])
                tests += [a + b, a + "\u0316" + b, a + b + "\u0301", chr(c) + "\u0301\u0316"]
    tests += ["\u1100\u1161\u11a8", "\uac00\u11a8", "\u1100\u1161\u0301\u11a8", "\u0f73\u0f72", "e\u0301\u0323\u0304"]
    joined = "\n".join(tests)
    expected = normalizers.NFC().normalize_str(joined)
    (mine,) = U.run_batch(["--json", str(_tmp_json("qwen35"))], "nfc", [joined.encode()])
    mine = mine.decode()
    if mine != expected:
        got, exp = mine.split("\n"), expected.split("\n")
        assert len(got) == len(exp) == len(tests)
        U.assert_same(tests, got, exp, "NFC")
    assert len(tests) > 5_500_000


def _chunks(contexts):
    """Join contexts (no separator: both sides see the same text) into texts of CHUNK contexts;
    returns (texts, per text: cumulative code-point end of each context) for locating failures."""
    texts, bounds = [], []
    for i in range(0, len(contexts), CHUNK):
        part = contexts[i : i + CHUNK]
        texts.append("".join(part))
        bounds.append(np.cumsum([len(c) for c in part]))
    return texts, bounds


def _context_at(contexts, bounds, ti: int, cp_offset: int) -> str:
    k = int(np.searchsorted(bounds[ti], cp_offset, side="left"))
    lo, hi = max(0, k - 1), min(len(bounds[ti]), k + 2)
    return "".join(contexts[ti * CHUNK + lo : ti * CHUNK + hi])


def _contexts_pieces(cps, n_contexts: int):
    out = []
    for c in cps:
        ch = chr(c)
        out += [ch + "1", "a" + ch + "b", " " + ch + ch + "\t", "'" + ch + "\r\n"][:n_contexts]
    return out


@pytest.mark.parametrize("kind,n_contexts", [("qwen35", 4), ("qwen2", 2)])
def test_split_pieces_every_code_point_in_context(kind, n_contexts):
    """Every code point in 4 contexts (Qwen3.5; Qwen2: the first 2): after the previous context and
    before a digit, between letters, after a space and doubled before a tab, after an apostrophe and
    before CRLF. Both sides split the same texts."""
    from tokenizers import Regex, pre_tokenizers

    contexts = _contexts_pieces(U.all_code_points(), n_contexts)
    texts, bounds = _chunks(contexts)
    split = pre_tokenizers.Split(Regex(_TMP[kind + "-regex"]), behavior="isolated")
    mine = U.run_batch(["--json", str(_tmp_json(kind))], "ends", [t.encode() for t in texts])
    for ti, (m, text) in enumerate(zip(mine, texts)):
        theirs = np.fromiter((b for _p, (_a, b) in split.pre_tokenize_str(text)), dtype=np.int64)
        m = np.asarray(m, dtype=np.int64)
        if len(m) != len(theirs) or not np.array_equal(m, theirs):
            n = min(len(m), len(theirs))
            k = int(np.argmax(m[:n] != theirs[:n])) if np.any(m[:n] != theirs[:n]) else n
            off = int(min(m[k] if k < len(m) else len(text), theirs[k] if k < len(theirs) else len(text)))
            pytest.fail(f"{kind}: split differs in text {ti} at piece {k}, near {U.escape(_context_at(contexts, bounds, ti, off))!r}: "
                        f"clef ends {m[max(0, k - 3):k + 3].tolist()} vs oracle {theirs[max(0, k - 3):k + 3].tolist()}")
    assert len(contexts) == n_contexts * len(U.all_code_points())


def _contexts_ids(cps, n_contexts: int):
    out = []
    for c in cps:
        ch = chr(c)
        out += ["1" + ch, " " + ch + "a\n"][:n_contexts]
    return out


@pytest.mark.parametrize("vocab,n_contexts", [("qwen35", 2), ("qwen3", 1)])
def test_ids_every_code_point_in_context(vocab, n_contexts, tmp_path):
    """Every code point alone between digits (a digit is always its own piece and composes with
    nothing, so this is the code point alone) and (Qwen3.5) after a space before a letter, through
    the full pipeline (NFC, split, byte-level BPE) with a real vocabulary."""
    src = tmp_path / vocab
    if vocab == "qwen35":
        U.write_flash_dir(src)
    else:
        U.write_qwen3_dir(src)
    oracle = U.hf_backend(src, with_config=False)
    contexts = _contexts_ids(U.all_code_points(), n_contexts)
    texts, bounds = _chunks(contexts)
    mine = U.run_batch(["--model", str(src), "--no-config"], "encode", [t.encode() for t in texts])
    encs = oracle.encode_batch(texts, add_special_tokens=False)
    for ti, (m, e) in enumerate(zip(mine, encs)):
        if m != e.ids:
            k = next((i for i in range(min(len(m), len(e.ids))) if m[i] != e.ids[i]), min(len(m), len(e.ids)))
            off = e.offsets[min(k, len(e.offsets) - 1)][0]
            ctx = _context_at(contexts, bounds, ti, off)
            U.assert_same([ctx], [U.run_batch(["--model", str(src), "--no-config"], "encode", [ctx.encode()])[0]],
                          [list(oracle.encode(ctx, add_special_tokens=False).ids)], f"{vocab} ids")
            pytest.fail(f"{vocab}: ids differ in text {ti} at index {k} near {U.escape(ctx)!r}")
    assert len(contexts) == n_contexts * len(U.all_code_points())
