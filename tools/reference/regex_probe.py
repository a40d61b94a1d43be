#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Which split regex does transformers apply to a Clef release folder? (docs/TOKENIZER.md "Which split regex")

Builds a folder shaped like the Cloudflare/clef-flash release (the regenerated clef-flash tokenizer.json, whose
pre-tokenizer holds Qwen2's split regex; a tokenizer_config.json naming ``Qwen2Tokenizer``; a ``qwen3_5``
config.json; processor_config.json), loads it the way Cloudflare's reference does (``AutoTokenizer`` and
``AutoProcessor``), and writes, as JSON, the transformers / tokenizers versions, the classes loaded, which regex
the loaded pre-tokenizer holds (``qwen2``, ``qwen35`` or the string), and the ids of a fixed set of texts
(Thai, Devanagari and other Indic scripts, Arabic with harakat, emoji with VS16, ...).

Usage (the interpreter decides which transformers is measured):
    python tools/reference/regex_probe.py OUT.json

tests/reference/golden/regex_transformers-<version>.json were written by this script under transformers 5.10.2
(the version the clef-flash model card tests) and 5.24.0 (tools/reference/requirements.txt);
tests/reference/test_split_regex_option.py compares clef.cpp with each.
"""

from __future__ import annotations

import json
import pathlib
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

#: Texts whose ids the two regexes may split differently (marks inside words) plus controls.
TEXTS = [
    "สวัสดีครับ", "ภาษาไทยเป็นภาษาที่สวยงาม", "नमस्ते दुनिया", "क्षत्रिय", "हिन्दी में लिखा गया पाठ",
    "বাংলা ভাষা", "தமிழ் மொழி", "తెలుగు", "ಕನ್ನಡ", "മലയാളം", "ગુજરાતી", "ਪੰਜਾਬੀ",
    "وَالسَّلَامُ عَلَيْكُمْ", "بِسْمِ اللَّهِ الرَّحْمَٰنِ الرَّحِيمِ", "مرحبًا بالعالم",
    "❤️❤️", "I ❤️ you ☺️", "\u2764\ufe0f", "a\ufe0f", "e\u0301 x\u0301y", "\u0301a",
    "Это является важным шагом", "人力资源", "いっぱい", "Kami akan melanjutkan", "Hello world, it's fine.",
    "<|im_start|>user\nสวัสดี<|im_end|>",
]


def regex_kind(pattern: str) -> str:
    from clef_ref import tokenizer_build as tb

    return {tb.QWEN2_SPLIT_REGEX: "qwen2", tb.QWEN35_SPLIT_REGEX: "qwen35"}.get(pattern, pattern)


def loaded_regex(backend) -> str:
    """The Split pattern of a ``tokenizers.Tokenizer``'s pre-tokenizer, read from its JSON form."""
    pre = json.loads(backend.to_str())["pre_tokenizer"]
    splits = [p for p in (pre.get("pretokenizers") or [pre]) if p.get("type") == "Split"]
    return regex_kind(splits[0]["pattern"]["Regex"]) if splits else "none"


def write_folder(out: pathlib.Path) -> None:
    from clef_ref import presets as P
    from clef_ref import tokenizer_build as tb
    from clef_ref import processor_files as PF

    out.mkdir(parents=True, exist_ok=True)
    P.make_config("tiny", "bf16").save_pretrained(out)
    (out / "tokenizer.json").write_bytes(tb.get_tokenizer_json_bytes()[0])
    (out / "tokenizer_config.json").write_text(json.dumps(tb.build_tokenizer_config(), indent=2))
    (out / "processor_config.json").write_text(json.dumps(PF.processor_config(), indent=2))


def probe() -> dict:
    import tokenizers
    import transformers
    from transformers import AutoProcessor, AutoTokenizer

    with tempfile.TemporaryDirectory() as d:
        folder = pathlib.Path(d)
        write_folder(folder)
        tok = AutoTokenizer.from_pretrained(folder)
        proc = AutoProcessor.from_pretrained(folder)
        ptok = proc.tokenizer
        result = {
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "file_regex": "qwen2",
            "auto_tokenizer": {"class": type(tok).__name__, "regex": loaded_regex(tok.backend_tokenizer)},
            "auto_processor": {"class": type(proc).__name__, "tokenizer_class": type(ptok).__name__,
                               "image_processor_class": type(proc.image_processor).__name__,
                               "regex": loaded_regex(ptok.backend_tokenizer)},
            "ids": {t: list(ptok(t, add_special_tokens=False)["input_ids"]) for t in TEXTS},
        }
        assert result["ids"] == {t: list(tok(t, add_special_tokens=False)["input_ids"]) for t in TEXTS}
        return result


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__.split("\n\n")[2], file=sys.stderr)
        return 2
    res = probe()
    pathlib.Path(args[0]).write_text(json.dumps(res, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in res.items() if k != "ids"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
