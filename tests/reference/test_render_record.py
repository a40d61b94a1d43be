# SPDX-License-Identifier: MIT
"""render() (docs/PROTOCOL.md §3.3), validation (§5.3) and encode_record (§3)."""

from __future__ import annotations

import json

import pytest

from clef_ref import record as R
from clef_ref.render import parse_request_text, render
from clef_ref.validate import PolicyError, ReferenceCrash, RequestError, option_list, validate_request


@pytest.mark.parametrize("text,expected", [
    ("1.0", "1.0"), ("1e-05", "1e-05"), ("1e+16", "1e+16"), ("1e16", "1e+16"), ("-0.0", "-0.0"), ("1e2", "100.0"),
    ("0.0001", "0.0001"), ("1000000000000000.0", "1000000000000000.0"), ("1.2345e20", "1.2345e+20"),
    ("2.5e-07", "2.5e-07"), ("0.1", "0.1"), ("123456789012345678901234567890", "123456789012345678901234567890"),
    ("-5", "-5"), ("true", "true"), ("null", "null"),
    ('"plain \\n text"', "plain \n text"),  # strings verbatim
    ('{"b":1,"a":{"d":[1,2.0],"c":null}}', '{"a":{"c":null,"d":[1,2.0]},"b":1}'),
    ('{"é":1,"z":2,"A":3,"😀":4}', '{"A":3,"z":2,"é":1,"😀":4}'),
    ('["tab\\tand\\u0001ctrl", "q\\"b\\\\s/", "\\u007f\\u2028ü"]', '["tab\\tand\\u0001ctrl","q\\"b\\\\s/","\x7f\u2028ü"]'),
    ('{"a":1,"a":2}', '{"a":2}'),
])
def test_render(text, expected):
    assert render(parse_request_text(text)) == expected


def _req(questions, state="ok", model="clef-flash"):
    return {"model": model, "state": state, "questions": questions}


def test_validation_reference_rules():
    with pytest.raises(RequestError, match="model and state are required"):
        validate_request({"model": "x", "questions": {"q": {"type": "noul"}}})
    with pytest.raises(RequestError, match="model and state are required"):
        validate_request({"model": 1, "state": None, "questions": {"q": {"type": "noul"}}})
    with pytest.raises(RequestError, match="at least one question is required"):
        validate_request(_req({}))
    with pytest.raises(RequestError, match="at least one question is required"):
        validate_request(_req([{"type": "noul"}]))
    with pytest.raises(RequestError, match="q: type must be noul, choice, or score"):
        validate_request(_req({"q": {"type": "boolean"}}))
    with pytest.raises(RequestError, match="q: criteria must not be empty"):
        validate_request(_req({"q": {"type": "choice", "criteria": {}}}))
    with pytest.raises(ReferenceCrash):
        validate_request(_req({"q": "is it?"}))
    with pytest.raises(ReferenceCrash):
        validate_request(_req({"q": {"type": "choice", "criteria": ["a", "b"]}}))
    with pytest.raises(ReferenceCrash):
        validate_request(_req({"q": {"type": "score", "criteria": 5}}))
    with pytest.raises(ReferenceCrash):
        validate_request(_req({"q": {"type": "noul"}}, state="\ud800"))
    # silent-but-wrong cases pass the reference rules, fail strict
    score_obj = _req({"q": {"type": "score", "criteria": {"low": 1, "high": 2}}})
    validate_request(score_obj)
    with pytest.raises(PolicyError):
        validate_request(score_obj, strict=True)
    with pytest.raises(PolicyError):
        validate_request(_req({"q": {"type": "choice", "criteria": {"a": None}}}), strict=True)
    validate_request(_req({"q": {"type": "noul"}}, state=None), strict=True)


def test_bad_corpus_rejected():
    import pathlib
    from conftest import BAD

    for line in BAD.read_text().splitlines():
        case = json.loads(line)
        try:
            req = parse_request_text(case["body"])
        except json.JSONDecodeError:
            continue
        with pytest.raises(RequestError):
            validate_request(req, strict=True)


def test_option_order_and_defaults():
    assert option_list({"type": "choice", "criteria": {"10": 1, "2": 2, "1": 3, "20": 4}}) == [
        ("1", 3), ("10", 1), ("2", 2), ("20", 4)]
    assert option_list({"type": "noul"}) == [
        ("true", "The proposition is true or the answer is yes."),
        ("false", "The proposition is false or the answer is no.")]
    assert option_list({"type": "noul", "criteria": {"true": "T", "false": None, "x": 1}}) == [("true", "T"), ("false", None)]
    assert option_list({"type": "score", "criteria": ["a", None]}) == [("0", "a"), ("1", None)]


def test_encode_spans(tokenizer):
    req = _req({
        "sentiment": {"type": "choice", "instructions": "Overall sentiment of the text",
                      "criteria": {"positive": "good", "negative": None, "neutral": {"k": 1.0}}},
        "shipped": {"type": "noul", "instructions": ""},
        "lvl": {"type": "score", "criteria": ["low", "high"]},
    })
    validate_request(req)
    rec = R.encode_record(req, tokenizer)
    ids = rec.input_ids
    assert ids[:36] == R.tok(tokenizer, R.PREFIX) and rec.prefix_len == 36 and rec.suffix_len == 18
    assert ids[-18:] == R.tok(tokenizer, R.SUFFIX)
    # docs/PROTOCOL.md §3.2 check: state "ok" → question span [61, 66)
    q0 = rec.questions[0]
    assert q0.span == (61, 66)
    assert ids[slice(*q0.span)] == R.tok(tokenizer, "Overall sentiment of the text")
    assert q0.option_ids == ["negative", "neutral", "positive"]
    sems = ['{"option_id":"negative"}', '{"description":{"k":1.0},"option_id":"neutral"}',
            '{"description":"good","option_id":"positive"}']
    for j, (sp, sem) in enumerate(zip(q0.option_spans, sems), start=1):
        assert ids[slice(*sp)] == R.tok(tokenizer, sem)
        head = R.tok(tokenizer, f"OPTION {j}: ")
        assert ids[sp[0] - len(head): sp[0]] == head
        assert ids[sp[1]] == 198
    # instruction fallback to the id
    q1 = rec.questions[1]
    assert ids[slice(*q1.span)] == R.tok(tokenizer, "shipped")
    assert q1.option_ids == ["true", "false"]
    assert ids[slice(*q1.option_spans[0])] == R.tok(
        tokenizer, '{"description":"The proposition is true or the answer is yes.","option_id":"true"}')
    assert rec.questions[2].option_ids == ["0", "1"] and rec.questions[2].type_id == 2
    # pieces never merge: END FIELD\n then SUFFIX's \n are two 198 tokens
    assert ids[-19] == 198 and ids[-18] == 198
    # full reconstruction from pieces
    rebuilt = R.tok(tokenizer, R.PREFIX) + R.tok(tokenizer, "ok") + R.tok(tokenizer, R.SCHEMA_HEAD)
    assert ids[: len(rebuilt)] == rebuilt


def test_truncation_and_overflow(tokenizer):
    req = _req({"q": {"type": "noul", "instructions": "x?"}}, state="word " * 400)
    full = R.encode_record(req, tokenizer)
    rec = R.encode_record(req, tokenizer, max_length=200)
    assert len(rec.input_ids) == 200 and rec.truncated
    assert rec.input_ids[36: 36 + rec.state_len] == full.input_ids[36: 36 + rec.state_len]
    assert rec.input_ids[-18:] == full.input_ids[-18:]
    fixed = 36 + full.schema_len + 18
    with pytest.raises(RequestError, match=f"schema requires {fixed} tokens before state; maximum is 50"):
        R.encode_record(req, tokenizer, max_length=50)


def test_special_tokens_in_state_are_live(tokenizer):
    rec = R.encode_record(_req({"q": {"type": "noul"}}, state="a<|im_end|>b"), tokenizer)
    assert 248046 in rec.input_ids[36:36 + rec.state_len]
