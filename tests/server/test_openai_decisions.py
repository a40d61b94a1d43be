# SPDX-License-Identifier: MIT
"""`clef serve` under OpenAI's Decisions contract (`POST /v1/decisions`, docs/PROTOCOL.md §7), driven by
the official `openai` SDK (sync and async) and LangChain's `OpenAIDecisions`: every question type, unnamed
questions, typed choice values, message-array inputs with text, JSON and image parts, 400 questions, each
refusal with its `param`, the state cache in `usage`, and the same probabilities as System One for every
corpus request's translation (tests/data/requests/corpus_openai.jsonl, tools/reference/to_openai_decisions.py)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, REQUESTS, clef_bin, corpus, env

openai = pytest.importorskip("openai")
from openai.types.decision import (AnswerAnswerResourceChoice, AnswerAnswerResourcePredicate,  # noqa: E402
                                   AnswerAnswerResourceScore, Decision)

TICKET = "Hi, I was charged twice for my annual plan on Nov 3rd. Can you refund the duplicate?"
QUESTIONS = [
    {"type": "predicate", "name": "refund", "instructions": "Does the customer ask for a refund?"},
    {"type": "choice", "instructions": "Which team should handle it?",  # unnamed
     "choices": [{"value": "billing", "description": "Payments and invoices"}, {"value": "technical"},
                 {"value": True, "description": "Escalate"}, {"value": False}]},
    {"type": "score", "name": "anger", "instructions": "How angry is the customer?",
     "levels": [{"label": "calm"}, {"label": "annoyed", "description": "Complains politely"}, {"label": "furious"}]},
]


def client(server) -> "openai.OpenAI":
    return openai.OpenAI(base_url=server.url + "/v1", api_key="test-key", max_retries=0)


def png_url(w: int = 48, h: int = 32) -> str:
    from PIL import Image

    b = io.BytesIO()
    Image.new("RGB", (w, h), (200, 30, 30)).save(b, "PNG")
    return "data:image/png;base64," + base64.b64encode(b.getvalue()).decode()


def check_typed(d: Decision, questions) -> None:
    """The SDK's typed answers: one per question, in order, names kept (None when unnamed)."""
    assert isinstance(d, Decision) and len(d.answers) == len(questions)
    kinds = {"predicate": AnswerAnswerResourcePredicate, "choice": AnswerAnswerResourceChoice,
             "score": AnswerAnswerResourceScore}
    for a, q in zip(d.answers, questions):
        assert isinstance(a, kinds[q["type"]]) and a.name == q.get("name")
        if q["type"] == "predicate":
            assert 0.0 <= a.probability <= 1.0
        elif q["type"] == "choice":
            values = [c["value"] for c in q["choices"]]
            assert [p.value for p in a.probabilities] == values  # request order, types kept
            assert [type(p.value) for p in a.probabilities] == [type(v) for v in values]
            assert a.choice in values and type(a.choice) is type(values[values.index(a.choice)])
            assert abs(sum(p.probability for p in a.probabilities) - 1) < 0.02
        else:
            assert [(p.value, p.label) for p in a.probabilities] == [(i, lv["label"]) for i, lv in
                                                                     enumerate(q["levels"])]
            assert 0.0 <= a.score <= len(q["levels"]) - 1
    assert d.usage.input_tokens > 0 and d.usage.total_tokens == d.usage.input_tokens
    assert d.usage.output_tokens == 0 and d.usage.output_tokens_details.reasoning_tokens == 0


def test_sdk_sync_and_async_every_question_type(server):
    d = client(server).decisions.create(model="clef-flash", input=TICKET, questions=QUESTIONS)
    check_typed(d, QUESTIONS)

    async def run():
        async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0) as c:
            return await c.decisions.create(model="clef-flash", input=TICKET, questions=QUESTIONS)

    a = asyncio.run(run())
    check_typed(a, QUESTIONS)
    assert a.answers == d.answers  # same request, same answers


def test_models_list_through_the_sdk(server):
    """`GET /v1/models` carries OpenAI's list object beside TypeSafe's list: the SDK's models.list()
    names the served model (it returned an empty list when the body had only `models`)."""
    ids = [m.id for m in client(server).models.list()]
    assert ids == ["clef-tiny-random"], ids


def test_same_answer_as_the_system_one_twin(server):
    """Names are the ids, an unnamed question is its 1-based position, bool values are "true"/"false"."""
    twin = {"model": "clef-flash", "state": TICKET, "questions": {
        "refund": {"type": "noul", "instructions": QUESTIONS[0]["instructions"]},
        "2": {"type": "choice", "instructions": QUESTIONS[1]["instructions"],
              "criteria": {"billing": "Payments and invoices", "technical": None, "true": "Escalate", "false": None}},
        "anger": {"type": "score", "instructions": QUESTIONS[2]["instructions"],
                  "criteria": ["calm", {"label": "annoyed", "description": "Complains politely"}, "furious"]}}}
    status, _, body = server.post_json("/v1/systemone", twin)
    assert status == 200
    s1 = json.loads(body)
    d = client(server).decisions.create(model="clef-flash", input=TICKET, questions=QUESTIONS)
    assert d.answers[0].probability == s1["answers"]["refund"]["noul"]
    assert [p.probability for p in d.answers[1].probabilities] == list(s1["answers"]["2"]["probabilities"].values())
    assert str(d.answers[1].choice).lower() == s1["answers"]["2"]["choice"]
    assert d.answers[2].score == s1["answers"]["anger"]["score"]
    assert [p.probability for p in d.answers[2].probabilities] == list(
        s1["answers"]["anger"]["probabilities"].values())
    assert d.usage.input_tokens == s1["usage"]["input_tokens"]


def test_message_array_input_with_text_json_and_image_parts(server):
    img = png_url()
    conversation = [
        {"role": "system", "content": "Support triage."},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "My order arrived like this:"},
            {"type": "input_image", "image_url": img, "detail": "low"},
            {"type": "input_json", "data": {"order": "A-55120", "total": 1250.0}}]},
        {"type": "function_call", "call_id": "c1", "name": "lookup_order", "arguments": "{\"id\": \"A-55120\"}"},
        {"type": "function_call_output", "call_id": "c1", "output": "delivered, damaged"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Sorry to hear that."}]},
    ]
    d = client(server).decisions.create(model="clef-flash", input=conversation, questions=QUESTIONS)
    check_typed(d, QUESTIONS)
    # The record Clef sees (docs/PROTOCOL.md §7.3): the items as a JSON array, the image on the vision path.
    state = [{"role": "system", "content": "Support triage."},
             {"role": "user", "content": "My order arrived like this:\n{\"order\":\"A-55120\",\"total\":1250.0}"},
             {"type": "function_call", "call_id": "c1", "name": "lookup_order", "arguments": "{\"id\": \"A-55120\"}"},
             {"type": "function_call_output", "call_id": "c1", "output": "delivered, damaged"},
             {"role": "assistant", "content": "Sorry to hear that."}]
    twin = {"model": "clef-flash", "state": state, "images": [img], "questions": {
        "refund": {"type": "noul", "instructions": QUESTIONS[0]["instructions"]}}}
    status, _, body = server.post_json("/v1/systemone", twin)
    assert status == 200
    one = client(server).decisions.create(model="clef-flash", input=conversation, questions=QUESTIONS[:1])
    assert one.answers[0].probability == json.loads(body)["answers"]["refund"]["noul"]
    assert one.usage.input_tokens == json.loads(body)["usage"]["input_tokens"]
    # One user message is its content text: the same record as the plain string.
    msg = [{"role": "user", "content": [{"type": "input_text", "text": TICKET}]}]
    assert client(server).decisions.create(model="clef-flash", input=msg, questions=QUESTIONS).answers == \
        client(server).decisions.create(model="clef-flash", input=TICKET, questions=QUESTIONS).answers


def test_four_hundred_questions(make_server):
    s = make_server("--max-tokens", "32768")
    questions = [{"type": "choice", "instructions": "Q", "choices": [{"value": "a"}, {"value": True}]}
                 for _ in range(400)]
    d = client(s).decisions.create(model="clef-flash", input="x", questions=questions)
    assert len(d.answers) == 400 and all(a.name is None for a in d.answers)
    assert all(isinstance(a.choice, (str, bool)) for a in d.answers)


def refused(server, body) -> dict:
    with pytest.raises(openai.BadRequestError) as e:
        client(server).decisions.create(**body)
    assert e.value.status_code == 400
    err = e.value.body
    assert err["type"] == "invalid_request_error" and err["message"]
    return err


@pytest.mark.parametrize("change, param, code", [
    (lambda b: b.update(questions=[]), "questions", "empty_questions"),
    (lambda b: b.update(questions=[QUESTIONS[0]] * 401), "questions", "too_many_questions"),
    (lambda b: b["questions"][1].update(choices=[{"value": "a"}]), "questions[1].choices", "too_few_options"),
    (lambda b: b["questions"][1].update(choices=[{"value": f"o{i}"} for i in range(256)]),
     "questions[1].choices", "too_many_options"),
    (lambda b: b["questions"][1].update(choices=[{"value": "a"}, {"value": "b"}, {"value": "a"}]),
     "questions[1].choices[2].value", "duplicate_choice"),
    (lambda b: b["questions"][1].update(choices=[{"value": False}, {"value": "false"}]),
     "questions[1].choices[1].value", "indistinct_choices"),
    (lambda b: b["questions"][2].update(levels=[]), "questions[2].levels", "too_few_levels"),
    (lambda b: b["questions"][2].update(levels=[{"label": str(i)} for i in range(11)]), "questions[2].levels",
     "too_many_levels"),
    (lambda b: b.update(input=[{"type": "reasoning", "summary": []}]), "input[0].type", "invalid_value"),
    (lambda b: b.update(input=[{"role": "user", "content": [{"type": "input_audio", "data": "x"}]}]),
     "input[0].content[0].type", "invalid_value"),
    (lambda b: b.update(input=[{"role": "user", "content": [
        {"type": "input_image", "image_url": "https://example.com/cat.png"}]}]),
     "input[0].content[0].image_url", "image_url_unsupported"),
    (lambda b: b["questions"][0].update(instructions=[{"type": "input_image", "image_url": png_url()}]),
     "questions[0].instructions[0]", "unsupported_part"),
    (lambda b: b.update(input=[{"type": "function_call_output", "call_id": "nope", "output": "x"}]),
     "input[0].call_id", "unmatched_call_id"),
])
def test_refusals_name_the_field(server, change, param, code):
    body = {"model": "clef-flash", "input": TICKET, "questions": json.loads(json.dumps(QUESTIONS))}
    change(body)
    err = refused(server, body)
    assert (err["param"], err["code"]) == (param, code)


def test_errors_in_openai_shape(server, make_server):
    strict = make_server("--strict-model")
    with pytest.raises(openai.NotFoundError) as e:
        client(strict).decisions.create(model="gpt-6-luna", input="x", questions=QUESTIONS)
    assert e.value.body["param"] == "model" and e.value.body["code"] == "unknown_model"
    with pytest.raises(openai.AuthenticationError) as e:  # an HTTP-layer error on this route: OpenAI's envelope
        client(make_server("--api-key", "right")).decisions.create(model="clef-flash", input="x", questions=QUESTIONS)
    assert e.value.status_code == 401 and set(e.value.body) == {"message", "type", "param", "code"}
    # A record over the token budget names `input` (the state), not System One's field.
    with pytest.raises(openai.BadRequestError) as e:
        client(make_server("--max-tokens", "1024")).decisions.create(
            model="clef-flash", input="refund " * 3000, questions=QUESTIONS[:1])
    assert (e.value.body["param"], e.value.body["code"]) == ("input", "input_too_long")
    # A bad image is named by the part that carried it.
    bad = [{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]
    assert refused(server, {"model": "clef-flash", "input": bad, "questions": QUESTIONS})["param"] == \
        "input[0].content[0].image_url"


def test_state_cache_in_usage(make_server):
    s = make_server("--state-cache-mb", "64")
    c = client(s)
    state = "Order A-55120 was charged twice on Nov 3rd; the customer wants the duplicate refunded. " * 4
    first = c.decisions.create(model="clef-flash", input=state, questions=QUESTIONS)
    again = c.decisions.create(model="clef-flash", input=state, questions=QUESTIONS)
    assert first.usage.input_tokens_details.cached_tokens == 0
    assert first.usage.input_tokens_details.cache_write_tokens > 0
    assert again.usage.input_tokens_details.cached_tokens == first.usage.input_tokens_details.cache_write_tokens
    assert again.usage.input_tokens_details.cache_write_tokens == 0
    assert again.answers == first.answers  # a warm answer is bit-identical
    other = c.decisions.create(model="clef-flash", input=state, questions=QUESTIONS[:1])  # same state, new question
    assert other.usage.input_tokens_details.cached_tokens == first.usage.input_tokens_details.cache_write_tokens
    # prompt_cache_key scopes the cache; explicit mode without a breakpoint uses none.
    scoped = c.decisions.create(model="clef-flash", input=state, questions=QUESTIONS, prompt_cache_key="tenant-7")
    assert scoped.usage.input_tokens_details.cached_tokens == 0 and scoped.answers == first.answers
    off = c.decisions.create(model="clef-flash", input=state, questions=QUESTIONS,
                             prompt_cache_options={"mode": "explicit"})
    assert off.usage.input_tokens_details.cached_tokens == 0 == off.usage.input_tokens_details.cache_write_tokens


def test_langchain_openai_decisions(server):
    pytest.importorskip("langchain_openai")
    from langchain_core.messages import HumanMessage
    from langchain_openai.decisions import Choice, Level, OpenAIDecisions, Predicate, Score

    lc = OpenAIDecisions(model="clef-flash", base_url=server.url + "/v1", api_key="test-key", max_retries=0)
    request = {
        "input": [HumanMessage(content=[{"type": "text", "text": TICKET},
                                        {"type": "image_url", "image_url": {"url": png_url()}}])],
        "questions": {
            "refund": Predicate(instructions="Does the customer ask for a refund?"),
            "team": Choice(instructions="Which team?", choices={"billing": "Payments", True: "Escalate", False: None}),
            "anger": Score(instructions="How angry?", levels=["calm", Level(label="furious", description="Shouting")]),
        },
    }
    r = lc.invoke(request)
    assert set(r.predicates) == {"refund"} and set(r.choices) == {"team"} and set(r.scores) == {"anger"}
    assert set(r.choices["team"].probabilities) == {"billing", True, False}
    assert r.scores["anger"].legend == {0: "calm", 1: "furious"}
    a = asyncio.run(lc.ainvoke(request))
    assert a.answers == r.answers
    assert r.usage.input_tokens > 0


def test_corpus_translations_answer_like_system_one(server, decide_outputs, tmp_path):
    """Every corpus request's committed OpenAI translation: the same probabilities, bit for bit, and the
    same tokens as the System One request; the script still writes the committed file."""
    out = tmp_path / "corpus_openai.jsonl"
    r = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "reference" / "to_openai_decisions.py"),
                        str(REQUESTS / "corpus.jsonl"), str(out)], capture_output=True, text=True, env=env())
    assert r.returncode == 0, r.stderr
    committed = (REQUESTS / "corpus_openai.jsonl").read_text(encoding="utf-8")
    assert out.read_text(encoding="utf-8") == committed
    originals = dict(corpus())
    translated = [json.loads(x) for x in committed.splitlines() if x]
    assert [c["name"] for c in translated] == list(originals)
    assert sum("request" in c for c in translated) >= 20
    for case in translated:
        if "request" not in case:
            continue
        s1 = json.loads(decide_outputs[case["name"]])  # the System One answer (equal to the server's: test_routes)
        status, _, body = server.post_json("/v1/decisions", case["request"])
        assert status == 200, (case["name"], body[:300])
        oa = json.loads(body)
        Decision.model_validate(oa)  # the SDK's own model
        assert oa["usage"]["input_tokens"] == s1["usage"]["input_tokens"], case["name"]
        for a, (qid, s) in zip(oa["answers"], s1["answers"].items(), strict=True):
            assert a["name"] == qid, case["name"]
            if s["type"] == "noul":
                assert a["probability"] == s["noul"], (case["name"], qid)
            elif s["type"] == "choice":
                assert [p["probability"] for p in a["probabilities"]] == list(s["probabilities"].values())
                assert [p["value"] for p in a["probabilities"]] == list(s["probabilities"])
                assert (a["choice"], a["confidence"]) == (s["choice"], s["confidence"]), (case["name"], qid)
            else:
                assert [p["probability"] for p in a["probabilities"]] == list(s["probabilities"].values())
                assert (a["score"], a["confidence"]) == (s["score"], s["confidence"]), (case["name"], qid)
