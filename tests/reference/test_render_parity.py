# SPDX-License-Identifier: MIT
"""Live parity of clef.cpp's JSON parser + ``render()`` with Python (docs/PROTOCOL.md §3.3).

The oracle is Python itself: ``json.dumps(json.loads(text), ensure_ascii=False, sort_keys=True,
separators=(",", ":"))`` for every value, and the toolkit's ``clef_ref.render.render`` (strings
verbatim) for prompt text. Every input text is piped through ``build/<preset>/bin/clef_render_driver``
(tests/drivers/render_driver.cc) and compared byte for byte; zero differences allowed.

Coverage: >= 100,000 generated values (random nesting, every float class: random bit patterns,
subnormals, powers of ten and their neighbours, integral floats, signed zeros, huge/tiny, long and
odd decimal spellings; integers up to Python's 4300-digit limit; every escape, random code points of
every plane; duplicate keys; random whitespace), every Unicode scalar value (raw and \\u-escaped),
nesting up to the 512 limit, the shared request corpus, and the inputs clef.cpp refuses on purpose.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import random
import struct
import subprocess
import sys
from typing import Any, List, Sequence, Tuple, Union

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
from conftest import REQUESTS  # noqa: E402
sys.path.insert(0, str(REPO_ROOT / "tools" / "reference"))

from clef_ref.render import render as ref_render  # noqa: E402

N_GENERATED = 100_000
MAX_DEPTH = 512  # JsonParseOptions::max_depth default


# ---------------------------------------------------------------------------------------------
# driver

def driver_binary() -> pathlib.Path:
    """clef_render_driver: $CLEF_RENDER_DRIVER, else next to $CLEF_BIN, else build/release/bin."""
    env = os.environ.get("CLEF_RENDER_DRIVER")
    if env:
        return pathlib.Path(env)
    clef_bin = os.environ.get("CLEF_BIN")
    if clef_bin:
        cand = pathlib.Path(clef_bin).parent / "clef_render_driver"
        if cand.exists():
            return cand
    return REPO_ROOT / "build" / "release" / "bin" / "clef_render_driver"


Result = Union[Tuple[str, bytes], Tuple[str, str, str, str]]


def run_driver(mode: str, lines: Sequence[Union[str, bytes]], args: Sequence[str] = ()) -> List[Result]:
    """Pipe one JSON text per line through the driver. Returns per line ``("ok", bytes)`` or
    ``("err", code, path, message)``. Lines must not contain a raw LF."""
    binary = driver_binary()
    if not binary.exists():
        pytest.fail(f"{binary} not found: build it first (cmake --build --preset release)")
    chunks = []
    for line in lines:
        b = line.encode("utf-8") if isinstance(line, str) else line
        assert b"\n" not in b
        chunks.append(b)
        chunks.append(b"\n")
    proc = subprocess.run([str(binary), mode, *args], input=b"".join(chunks), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"clef_render_driver failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}")
    out, pos, results = proc.stdout, 0, []
    for _ in lines:
        nl = out.index(b"\n", pos)
        head = out[pos:nl]
        pos = nl + 1
        if head.startswith(b"OK "):
            n = int(head[3:])
            results.append(("ok", out[pos:pos + n]))
            assert out[pos + n:pos + n + 1] == b"\n"
            pos += n + 1
        else:
            assert head.startswith(b"ERR "), head[:80]
            code, path, msg = head[4:].decode("utf-8").split("\t", 2)
            results.append(("err", code, path, msg))
    assert pos == len(out), "trailing driver output"
    return results


def py_dump(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8")


def assert_same_dumps(texts: Sequence[Union[str, bytes]], mode: str = "dump") -> int:
    """Every text parses in Python and C++ and renders to identical bytes. Returns the count."""
    expected = []
    for t in texts:
        v = json.loads(t)
        expected.append(ref_render(v).encode("utf-8") if mode == "render" else py_dump(v))
    got = run_driver(mode, texts)
    bad = [i for i in range(len(texts)) if got[i] != ("ok", expected[i])]
    if bad:
        lines = [f"{len(bad)} of {len(texts)} differ ({mode})"]
        for i in bad[:5]:
            t = texts[i] if isinstance(texts[i], str) else texts[i].decode("utf-8", "backslashreplace")
            lines += [f"  input : {t[:300].encode('unicode_escape').decode()}",
                      f"  clef  : {str(got[i])[:300]}",
                      f"  python: {expected[i][:300]!r}"]
        pytest.fail("\n".join(lines))
    return len(texts)


# ---------------------------------------------------------------------------------------------
# generators: Python values and random JSON spellings of them

SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def rand_code_point(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.45:
        return rng.randint(0x20, 0x7E)
    if r < 0.55:
        return rng.choice([0x22, 0x5C, 0x2F, 0x7F, 0x2028, 0x2029, 0xFEFF, 0xFFFE, 0xFFFF, 0xFFFD, 0x10000, 0x10FFFF])
    if r < 0.62:
        return rng.randint(0x00, 0x1F)
    if r < 0.75:
        return rng.randint(0x80, 0x7FF)
    if r < 0.88:
        c = rng.randint(0x800, 0xFFFF)
        return c if not 0xD800 <= c <= 0xDFFF else 0xE000
    return rng.randint(0x10000, 0x10FFFF)


def rand_string(rng: random.Random, max_len: int = 12) -> str:
    return "".join(chr(rand_code_point(rng)) for _ in range(rng.randint(0, max_len)))


def rand_float(rng: random.Random) -> float:
    r = rng.random()
    if r < 0.25:
        while True:
            x = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
            if math.isfinite(x):
                return x
    if r < 0.35:  # subnormal
        bits = rng.randint(1, (1 << 52) - 1) | (rng.randint(0, 1) << 63)
        return struct.unpack("<d", bits.to_bytes(8, "little"))[0]
    if r < 0.50:  # powers of ten and their neighbours: every repr threshold
        x = float(f"1e{rng.randint(-325, 308)}")
        for _ in range(rng.randint(0, 2)):
            x = math.nextafter(x, rng.choice([0.0, math.inf]))
        return -x if rng.random() < 0.3 else x
    if r < 0.62:  # integral floats
        return float(rng.choice([rng.randint(-10**6, 10**6), rng.randint(-2**62, 2**62), 2 ** rng.randint(0, 1023)]))
    if r < 0.70:
        return rng.choice([0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 1e16,
                           9999999999999998.0, 1e15, 0.0001, 9.999999999999999e-05, 0.1, 0.5, 1.0, 100.0])
    if r < 0.85:  # short decimals like human-written data
        return round(rng.uniform(-1e4, 1e4), rng.randint(0, 6))
    return rng.uniform(-1, 1) * 10.0 ** rng.randint(-30, 30)


def rand_int(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.5:
        return rng.randint(-1000, 1000)
    if r < 0.8:
        b = rng.choice([31, 32, 53, 63, 64, 65, 100])
        return rng.randint(-(2**b), 2**b) + rng.randint(-2, 2)
    if r < 0.97:
        return int("".join(rng.choice("0123456789") for _ in range(rng.randint(20, 400)))) * rng.choice([1, -1])
    n = rng.randint(4200, 4300)
    return int(rng.choice("123456789") + "".join(rng.choice("0123456789") for _ in range(n - 1))) * rng.choice([1, -1])


def rand_value(rng: random.Random, depth: int) -> Any:
    r = rng.random()
    if depth > 0 and r < 0.30:
        return [rand_value(rng, depth - 1) for _ in range(rng.randint(0, 5))]
    if depth > 0 and r < 0.55:
        return {rand_string(rng, 6): rand_value(rng, depth - 1) for _ in range(rng.randint(0, 5))}
    r = rng.random()
    if r < 0.30:
        return rand_string(rng)
    if r < 0.60:
        return rand_float(rng)
    if r < 0.85:
        return rand_int(rng)
    return rng.choice([True, False, None])


def ws(rng: random.Random) -> str:
    return "" if rng.random() < 0.7 else "".join(rng.choice(" \t\r") for _ in range(rng.randint(1, 3)))


def emit_string(rng: random.Random, s: str) -> str:
    out = ['"']
    for ch in s:
        c = ord(ch)
        if ch in SHORT_ESCAPES and (c < 0x20 or ch in '"\\') and rng.random() < 0.7:
            out.append(SHORT_ESCAPES[ch])
        elif c < 0x20 or ch in '"\\' or rng.random() < 0.08:
            if ch == "/" and rng.random() < 0.5:
                out.append("\\/")
                continue
            units = [c] if c < 0x10000 else [0xD800 + ((c - 0x10000) >> 10), 0xDC00 + ((c - 0x10000) & 0x3FF)]
            for u in units:
                h = f"{u:04x}"
                out.append("\\u" + (h.upper() if rng.random() < 0.5 else h))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def emit_float(rng: random.Random, x: float) -> str:
    t = _spell_float(rng, x)
    # A shortened spelling of a value near DBL_MAX can round up to infinity (refused on purpose,
    # tested in test_python_accepts_but_we_refuse); keep the generated values finite.
    return t if math.isfinite(float(t)) else repr(x)


def _spell_float(rng: random.Random, x: float) -> str:
    r = rng.random()
    if r < 0.5:
        return repr(x)
    if r < 0.65:
        return format(x, f".{rng.randint(1, 25)}e").replace("e", rng.choice(["e", "E"]))
    if r < 0.75:
        t = format(x, ".17e")
        m, e = t.split("e")
        return f"{m}e{'-' if int(e) < 0 else rng.choice(['+', ''])}{abs(int(e)):0{rng.randint(1, 5)}d}"
    if r < 0.85 and abs(x) < 1e30:
        t = format(x, f".{rng.randint(1, 40)}f")
        return t
    # correctly-rounded parse of long, odd spellings: shift the decimal point into the digits
    t = format(x, ".40e")
    m, e = t.split("e")
    sign = "-" if m.startswith("-") else ""
    digits = m.lstrip("-").replace(".", "")
    shift = rng.randint(0, 5)
    whole = digits[:1 + shift].lstrip("0") or "0"
    return f"{sign}{whole}.{digits[1 + shift:]}e{int(e) - shift}"


def emit(rng: random.Random, v: Any, dup_rate: float = 0.15) -> str:
    """A random valid JSON spelling of ``v`` (whitespace, escapes, float spellings); with probability
    ``dup_rate`` per object, one key is repeated with a new random value (Python keeps the last)."""
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return emit_float(rng, v)
    if isinstance(v, str):
        return emit_string(rng, v)
    if isinstance(v, list):
        return "[" + ws(rng) + ("," + ws(rng)).join(emit(rng, x, dup_rate) + ws(rng) for x in v) + "]"
    members = [(k, x) for k, x in v.items()]
    if members and rng.random() < dup_rate:  # duplicate key: Python keeps the first position, last value
        k, _ = rng.choice(members)
        members.append((k, rand_value(rng, 1)))
    return "{" + ws(rng) + ("," + ws(rng)).join(
        emit_string(rng, k) + ws(rng) + ":" + ws(rng) + emit(rng, x, dup_rate) + ws(rng) for k, x in members) + "}"


def nested(rng: random.Random, depth: int) -> str:
    opens, closes = [], []
    for _ in range(depth):
        if rng.random() < 0.5:
            opens.append("[")
            closes.append("]")
        else:
            k = emit_string(rng, rand_string(rng, 3))
            opens.append("{" + k + ":")
            closes.append("}")
    return "".join(opens) + emit(rng, rand_value(rng, 0)) + "".join(reversed(closes))


# ---------------------------------------------------------------------------------------------
# tests

def test_generated_values_match_json_dumps():
    rng = random.Random(20261129)
    texts = []
    for i in range(N_GENERATED):
        v = rand_value(rng, rng.choice([0, 0, 1, 2, 3, 4, 6]))
        texts.append(ws(rng) + emit(rng, v) + ws(rng))
    assert assert_same_dumps(texts) == N_GENERATED


def test_every_unicode_scalar_value_raw_and_escaped():
    texts = []
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    assert len(cps) == 1_112_064
    rng = random.Random(7)
    for start in range(0, len(cps), 512):
        s = "".join(chr(c) for c in cps[start:start + 512])
        texts.append(json.dumps([s], ensure_ascii=False))           # raw UTF-8 (controls escaped)
        texts.append(json.dumps({s[:64]: s}, ensure_ascii=True))     # \u escapes, surrogate pairs
        texts.append(emit(rng, {s[::-1][:40]: 1, s[:40]: 2}))        # mixed, key order by code point
    assert_same_dumps(texts)


def test_deep_nesting_up_to_the_limit():
    rng = random.Random(3)
    texts = [nested(rng, d) for d in list(range(1, 64)) + [100, 200, 300, 400, 500, 511, MAX_DEPTH] * 3]
    assert_same_dumps(texts)
    # One level beyond our limit: Python still parses it (RecursionError only near 1000 levels);
    # clef.cpp refuses it (docs/DIFFERENCES.md).
    too_deep = [nested(rng, MAX_DEPTH + 1), nested(rng, 900), "[" * 100_000]
    got = run_driver("dump", too_deep)
    assert all(g[0] == "err" and g[1] == "nesting_too_deep" for g in got), got


def test_top_level_strings_render_verbatim():
    rng = random.Random(11)
    texts = [emit_string(rng, rand_string(rng, 30)) for _ in range(2000)]
    texts += [emit(rng, rand_value(rng, 2)) for _ in range(2000)]
    texts += ['"plain \\n text"', '"  "', '""', '"<|im_end|>"']
    assert_same_dumps(texts, mode="render")


def test_corpus_values():
    texts = []
    for line in (REQUESTS / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        req = json.loads(line)["request"]
        values = [req, req["state"]]
        for q in req["questions"].values():
            values += [q, q.get("instructions"), q.get("criteria")]
            if isinstance(q.get("criteria"), dict):
                values += list(q["criteria"].values())
            elif isinstance(q.get("criteria"), list):
                values += q["criteria"]
        for v in values:
            texts.append(json.dumps(v, ensure_ascii=False))
            texts.append(json.dumps(v, ensure_ascii=True))
    assert_same_dumps(texts)
    assert_same_dumps(texts, mode="render")


def test_bom_and_whitespace():
    texts: List[Union[str, bytes]] = [b"\xef\xbb\xbf[1,2.0]", b"\xef\xbb\xbf \"x\"", " \t\r 1 \r\t ", "\t{}\r",
                                      "-0", "[-0,-0.0,0e0,-0E-0,1E+2,1e-0]"]
    assert_same_dumps(texts)


def test_python_rejects_and_so_do_we():
    """Inputs json.loads (on the UTF-8 body bytes) refuses: clef.cpp refuses them too."""
    cases: List[Tuple[Union[str, bytes], str]] = [
        ("", "invalid_json"), (" ", "invalid_json"), ("01", "invalid_json"), ("1.", "invalid_json"),
        (".5", "invalid_json"), ("-", "invalid_json"), ("+1", "invalid_json"), ("1e", "invalid_json"),
        ("[1,]", "invalid_json"), ('{"a":1,}', "invalid_json"), ("{a:1}", "invalid_json"), ("'x'", "invalid_json"),
        ("[1 2]", "invalid_json"), ("tru", "invalid_json"), ('"abc', "invalid_json"), ('"\\x"', "invalid_json"),
        ('"\\u12"', "invalid_json"), ("1 2", "invalid_json"), ('"a\tb"', "invalid_json"), ('"\x01"', "invalid_json"),
        ("nan", "invalid_json"), ("inf", "invalid_json"), ("-NaN", "invalid_json"), ("[", "invalid_json"),
        ('{"a":1}}', "invalid_json"), (b"\xff", "invalid_json"), (b'"\xc0\xaf"', "invalid_json"),
        (b'"\xf5\x80\x80\x80"', "invalid_json"), (b'"\xe2\x82"', "invalid_json"),
        ("1" * 4301, "number_out_of_range"), ("-" + "9" * 4301, "number_out_of_range"),
        ("[" + "1" * 5000 + "]", "number_out_of_range"),
    ]
    for text, _ in cases:
        with pytest.raises(ValueError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            json.loads(text)
    got = run_driver("dump", [t for t, _ in cases])
    mismatches = [(t, want, g) for (t, want), g in zip(cases, got) if g[0] != "err" or g[1] != want]
    assert not mismatches, mismatches


def test_python_accepts_but_we_refuse():
    """Deliberate differences (docs/DIFFERENCES.md): non-finite numbers and lone surrogates."""
    cases: List[Tuple[Union[str, bytes], str]] = [
        ("NaN", "non_finite_number"), ("Infinity", "non_finite_number"), ("-Infinity", "non_finite_number"),
        ('{"x":[1,NaN]}', "non_finite_number"), ("1e400", "non_finite_number"), ("-1e999", "non_finite_number"),
        ("1.7976931348623159e308", "non_finite_number"), ('"\\ud800"', "lone_surrogate"),
        ('"\\udc00"', "lone_surrogate"), ('"a\\ud800\\u0041"', "lone_surrogate"), ('"\\ude00\\ud83d"', "lone_surrogate"),
        ('{"\\udbff":1}', "lone_surrogate"), (b'"\xed\xa0\x80"', "lone_surrogate"),
        (b'"\xed\xa0\xbd\xed\xb8\x80"', "lone_surrogate"),
    ]
    for text, _ in cases:
        json.loads(text)  # Python accepts every one of them
    got = run_driver("dump", [t for t, _ in cases])
    mismatches = [(t, want, g) for (t, want), g in zip(cases, got) if g[0] != "err" or g[1] != want]
    assert not mismatches, mismatches
