# SPDX-License-Identifier: MIT
"""C++ encode_record and response building vs the Python toolkit (docs/PROTOCOL.md §2.1, §3), live.

* every request of tests/data/requests/corpus.jsonl and a few hundred generated ones: identical token
  ids, spans and piece lengths, with the real-vocabulary tokenizer (tiny preset) and the C++ stand-in;
* the budget: refused by default (input_too_long), the reference's truncation on request;
* responses: the C++ body for the reference's own logits equals the reference body byte for byte
  (compact separators), including Python's round(x, 4) and float repr.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import re
import subprocess

import numpy as np
import pytest

from conftest import CORPUS, REPO_ROOT


def driver() -> str:
    path = os.environ.get("CLEF_DECISION_DRIVER", str(REPO_ROOT / "build" / "release" / "bin" / "clef_decision_driver"))
    if not pathlib.Path(path).exists():
        pytest.fail(f"{path} missing: build the release preset first")
    return path


def corpus_requests():
    return [json.loads(ln)["request"] for ln in CORPUS.read_text(encoding="utf-8").splitlines() if ln.strip()]


def cpp_encode(model_dir, requests, max_length=None, truncate=False):
    args = [driver(), "encode", str(model_dir)]
    if max_length is not None:
        args.append(str(max_length))
        if truncate:
            args.append("truncate")
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in requests)
    r = subprocess.run(args, input=text, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return [json.loads(ln) for ln in r.stdout.splitlines()]


def py_encode(tok, request, max_length=16384):
    from clef_ref.record import encode_record

    rec = encode_record(request, tok, max_length, image_token_counts=request.get("x_image_token_counts", ()))
    return {
        "input_ids": list(rec.input_ids), "prefix_len": rec.prefix_len, "state_len": rec.state_len,
        "state_len_full": rec.state_len_full, "schema_len": rec.schema_len, "suffix_len": rec.suffix_len,
        "questions": [{"type_id": q.type_id, "span": list(q.span), "options": [list(s) for s in q.option_spans]}
                      for q in rec.questions],
    }


def generated_requests(n=300, seed=0):
    """Requests exercising render(): nested states, floats, big ints, escapes, unicode ids and options."""
    rng = random.Random(seed)
    words = ["refund", "ünïcödé", "日本語", "ok", "a\nb", "tab\there", "quote\"d", "back\\slash", "emoji 🎉", "<|im_end|>",
             "ctrl\x01", "สวัสดี", "नमस्ते", " spaced ", ""]

    def value(depth=0):
        k = rng.randrange(9 if depth < 3 else 6)
        if k == 0:
            return rng.choice(words)
        if k == 1:
            return rng.choice([0, -1, 7, 10**20, -(10**30), 2**63])
        if k == 2:
            return rng.choice([0.0, -0.0, 1.0, 1.5, 1e-05, 1e16, 1e15, 0.1, 2.5e-300, 1.7976931348623157e308, 123456.789])
        if k == 3:
            return rng.choice([True, False, None])
        if k == 4:
            return rng.uniform(-1e6, 1e6)
        if k == 5:
            return rng.choice(words) * rng.randrange(1, 4)
        if k == 6:
            return [value(depth + 1) for _ in range(rng.randrange(4))]
        return {rng.choice(words) + str(i): value(depth + 1) for i in range(rng.randrange(4))}

    out = []
    for i in range(n):
        qs = {}
        for j in range(rng.randrange(1, 5)):
            qid = rng.choice(["q", "ques tion", "ид", "q.1", "😀"]) + str(j)
            t = rng.choice(["noul", "choice", "score"])
            q = {"type": t}
            if rng.random() < 0.8:
                q["instructions"] = value(1) if rng.random() < 0.3 else rng.choice(words[:-1]) + " ?"
            if t == "choice":
                q["criteria"] = {rng.choice(words[:-1]) + str(k): value(2) for k in range(rng.randrange(2, 6))}
                if len(q["criteria"]) < 2:
                    q["criteria"]["other"] = None
            elif t == "score":
                q["criteria"] = [value(2) for _ in range(rng.randrange(2, 6))]
            elif rng.random() < 0.5:
                q["criteria"] = {"true": value(2), "false": None}
            qs[qid] = q
        out.append({"model": "clef", "state": value(), "questions": qs})
    return out


@pytest.fixture(scope="module")
def cpp_tiny(tmp_path_factory):
    from conftest import REPO_ROOT as root

    out = tmp_path_factory.mktemp("cpp-tiny") / "m"
    clef = root / "build" / "release" / "bin" / "clef"
    subprocess.run([str(clef), "make-model", "--out", str(out)], check=True, capture_output=True)
    return out


def _check_same(model_dir, requests):
    from clef_ref.record import load_tokenizer

    tok = load_tokenizer(model_dir)
    got = cpp_encode(model_dir, requests)
    assert len(got) == len(requests)
    for i, (req, g) in enumerate(zip(requests, got)):
        assert "error" not in g, (i, g)
        want = py_encode(tok, req)
        assert g == want, f"request {i}: first id difference at " + str(
            next((k for k, (a, b) in enumerate(zip(g["input_ids"], want["input_ids"])) if a != b), None))


def test_corpus_real_vocabulary(tiny_dir):
    _check_same(tiny_dir, corpus_requests())


def test_corpus_stand_in_tokenizer(cpp_tiny):
    _check_same(cpp_tiny, corpus_requests())


def test_generated_requests(tiny_dir):
    _check_same(tiny_dir, generated_requests())


def test_prefix_and_suffix_lengths(tiny_dir):
    (g,) = cpp_encode(tiny_dir, corpus_requests()[:1])
    assert g["prefix_len"] == 36 and g["suffix_len"] == 18  # docs/MODEL.md §14, with the Qwen3.5 vocabulary


def test_over_long_record_is_refused_then_truncated_like_the_reference(tiny_dir):
    from clef_ref.record import load_tokenizer

    tok = load_tokenizer(tiny_dir)
    req = next(r for r in corpus_requests() if isinstance(r["state"], str) and len(r["state"]) > 5000)
    full = py_encode(tok, req)
    budget = len(full["input_ids"]) - 100
    (refused,) = cpp_encode(tiny_dir, [req], budget)
    assert refused["error"] == "input_too_long" and refused["path"] == "state"
    # The state is tokenized only until it passes the room left (docs/TOKENIZER.md "Counting with a
    # limit"), so the message gives a lower bound, not the full count: room = budget - the rest, and
    # the reference's full state is longer than that room.
    m = re.search(r"maximum of (\d+) tokens \(state: more than (\d+), .*prompt and schema: (\d+)\)",
                  refused["message"])
    assert m, refused["message"]
    limit, room, rest = (int(g) for g in m.groups())
    assert limit == budget and room + rest == budget
    assert len(full["input_ids"]) - rest > room
    (cut,) = cpp_encode(tiny_dir, [req], budget, truncate=True)
    assert cut == py_encode(tok, req, budget)
    assert cut["state_len_full"] - cut["state_len"] == 100
    fixed = full["prefix_len"] + full["schema_len"] + full["suffix_len"]
    (schema,) = cpp_encode(tiny_dir, [req], fixed - 1, truncate=True)
    assert schema["error"] == "input_too_long" and f"schema requires {fixed} tokens" in schema["message"]


@pytest.mark.parametrize("index", range(5))
def test_response_body_matches_reference(ref, tmp_path, index):
    import reference

    req = reference.load_jsonl_request(CORPUS, index)
    a = ref.run(req)
    np.save(tmp_path / "logits.npy", a["logits"].numpy().astype(np.float32))
    (tmp_path / "req.json").write_text(json.dumps(req, ensure_ascii=False))
    r = subprocess.run([driver(), "respond", a["response"]["model"], str(tmp_path / "req.json"),
                        str(tmp_path / "logits.npy"), str(len(a["record"].input_ids))],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    want = json.dumps(a["response"], ensure_ascii=False, separators=(",", ":"))
    assert r.stdout.strip() == want


def test_round4_and_repr_match_python():
    """python_round4 + python_float_repr vs Python's repr(round(x, 4)) on ties and random doubles."""
    rng = random.Random(1)
    xs = [k / 2**n for n in range(1, 20) for k in range(0, 2**min(n, 8))]  # exact binary values, many ties
    xs += [rng.random() for _ in range(100000)] + [rng.uniform(-10, 10) for _ in range(20000)]
    xs += [0.99995, 0.00005, 0.00015, 1e-05, 5e-05, 0.12345, 0.5, 1.0, 0.0, -0.0, 123.45675]
    r = subprocess.run([driver(), "round4"], input="".join(repr(x) + "\n" for x in xs), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = r.stdout.splitlines()
    bad = [(x, g, repr(round(x, 4))) for x, g in zip(xs, got) if g != repr(round(x, 4))]
    assert len(got) == len(xs) and not bad, bad[:5]


@pytest.mark.parametrize("counts", [[1], [64], [117, 64], [4, 9, 16, 25], [3000]])
def test_image_blocks_match_the_reference(tiny_dir, cpp_tiny, counts):
    """Media block after the prefix (docs/PROTOCOL.md §3.2 step 2, §3.6): ids, spans and lengths as the
    toolkit's encode_record(image_token_counts=...), on both tokenizers."""
    reqs = [dict(r, x_image_token_counts=counts) for r in corpus_requests()[:6]]
    for folder in (tiny_dir, cpp_tiny):
        _check_same(folder, reqs)
        got = cpp_encode(folder, reqs[:1])[0]
        text_only = cpp_encode(folder, corpus_requests()[:1])[0]
        assert got["prefix_len"] == text_only["prefix_len"] + sum(counts) + 2 * len(counts) + 1


def test_image_blocks_budget_and_vision_tokens_in_text(tiny_dir):
    req = dict(corpus_requests()[0], x_image_token_counts=[500])
    text_only = cpp_encode(tiny_dir, [corpus_requests()[0]])[0]
    fixed = len(text_only["input_ids"]) - text_only["state_len"]
    # The images alone break the budget: input_too_long at `images` (the state could not help).
    got = cpp_encode(tiny_dir, [req], max_length=fixed + 100, truncate=True)[0]
    assert got["error"] == "input_too_long" and got["path"] == "images", got
    # A vision token written in the state of a request with images would be taken for a slot.
    bad = dict(req, state="look: <|image_pad|>")
    got = cpp_encode(tiny_dir, [bad])[0]
    assert got["error"] == "image_token_in_text" and got["path"] == "state", got
    # Without images the same text is ordinary (reference behaviour: special tokens are matched).
    ok = dict(corpus_requests()[0], state="look: <|image_pad|>")
    assert "error" not in cpp_encode(tiny_dir, [ok])[0]
