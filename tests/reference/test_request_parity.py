# SPDX-License-Identifier: MIT
"""Live parity of clef.cpp's request validation with the toolkit's strict validator (docs/DIFFERENCES.md).

Every request of tests/data/requests/corpus.jsonl and bad.jsonl, plus a few thousand generated
requests (valid variants of the corpus and single-fault mutations), goes through
``clef_render_driver request`` (tests/drivers/render_driver.cc: parse_request + a JSON summary)
and through ``clef_ref.validate.validate_request(strict=True)``:

* accepted by the toolkit -> accepted by clef.cpp with the same question ids, types, rendered
  instruction (id fallback, docs/PROTOCOL.md §1.2), options in model order with byte-identical rendered
  option semantics (§3.4) and the request-order permutation of choice options;
* rejected by the toolkit -> rejected by clef.cpp with the error code (and JSON path) the fault calls for;
* the deliberate differences of docs/DIFFERENCES.md are asserted one by one, with the toolkit's
  own outcome checked too, so a change on either side shows up here.
"""

from __future__ import annotations

import copy
import json
import math
import random
import re
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import pytest

from test_render_parity import REQUESTS, emit, rand_string, rand_value, run_driver  # noqa: E402  (same folder)

from clef_ref import record as R  # noqa: E402
from clef_ref.render import render  # noqa: E402
from clef_ref.validate import RequestError, option_list, validate_request  # noqa: E402

SERVED = ["--model", "clef-flash", "--alias", "clef"]
DIALECTS = ["systemone", "cloudflare", "openrouter"]


def corpus() -> List[Tuple[str, Dict[str, Any]]]:
    out = []
    for line in (REQUESTS / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        out.append((case["name"], case["request"]))
    return out


def bad_cases() -> List[Tuple[str, str]]:
    return [(c["name"], c["body"]) for c in map(json.loads, (REQUESTS / "bad.jsonl").read_text().splitlines())]


def path_str(segments: Sequence[Any]) -> str:
    """Python mirror of JsonPath::str() (src/decision/request_error.cc)."""
    out = ""
    for s in segments:
        if isinstance(s, int) or re.fullmatch(r"[A-Za-z0-9_-]+", s):
            out += ("." if out else "") + str(s)
        else:
            out += "[" + json.dumps(s, ensure_ascii=False) + "]"
    return out


def one_line(s: str) -> str:
    return s.replace("\n", " ").replace("\r", " ").replace("\t", " ")


def expected_summary(req: Dict[str, Any]) -> Dict[str, Any]:
    """What the driver prints for an accepted request, built from the toolkit (record.py, validate.py)."""
    questions = []
    for qid, q in req["questions"].items():
        opts = option_list(q)
        ids = [oid for oid, _ in opts]
        order = [ids.index(str(k)) for k in q["criteria"]] if q["type"] == "choice" else list(range(len(ids)))
        questions.append({
            "id": qid, "type": q["type"], "type_id": R.TYPE_IDS[q["type"]],
            "instruction": render(R.instruction_value(qid, q)),
            "instructions_from_id": q.get("instructions") is None or q.get("instructions") == "",
            "options": [{"id": oid, "semantics": render(R.option_semantics(oid, d))} for oid, d in opts],
            "request_order": order,
        })
    model_given = "model" in req
    return {"model": req["model"] if model_given else "clef-flash", "model_given": model_given,
            "state": render(req["state"]), "questions": questions}


# Toolkit message -> the codes clef.cpp may answer with (finer-grained than the toolkit's messages).
TOOLKIT_CODES = [
    (r"model and state are required", {"missing_field", "invalid_type"}),
    (r"at least one question is required", {"missing_field", "invalid_type", "empty_questions"}),
    (r": type must be noul, choice, or score", {"missing_field", "invalid_question_type"}),
    (r": criteria must not be empty", {"empty_criteria", "invalid_type"}),
    (r"question must be an object", {"invalid_type"}),
    (r"choice criteria must be an object", {"invalid_type"}),
    (r"score criteria must be an array", {"invalid_type"}),
    (r"noul criteria must be an object", {"invalid_type"}),
    (r"images/videos", {"images_unsupported", "videos_unsupported"}),
    (r"lone UTF-16 surrogate", {"lone_surrogate"}),
    (r"non-finite number", {"non_finite_number"}),
    (r"at most 64 questions", {"too_many_questions"}),
    (r"empty question span", {"empty_question_id"}),
    (r"choice needs 2\.\.255 options", {"too_few_options", "too_many_options"}),
    (r"score needs 2\.\.10 levels", {"too_few_levels", "too_many_levels"}),
]


def toolkit_outcome(body: str) -> Tuple[str, Any]:
    """("accept", request) or ("reject", allowed codes) from json.loads + validate_request(strict=True)."""
    try:
        req = json.loads(body)
    except ValueError:
        return "reject", {"invalid_json", "number_out_of_range"}
    try:
        validate_request(req, strict=True)
    except RequestError as e:
        for pattern, codes in TOOLKIT_CODES:
            if re.search(pattern, str(e)):
                return "reject", codes
        raise AssertionError(f"unmapped toolkit message: {e}")
    return "accept", req


ACCEPTED_MODELS = {"clef-flash", "clef", "jev-latest", "@cf/cloudflare/clef-flash", "@cf/cloudflare/clef",
                   "cloudflare/clef-flash", "cloudflare/clef"}


def documented_difference(req: Dict[str, Any], code: str) -> bool:
    """True when ``req`` (accepted by the toolkit) holds a docs/DIFFERENCES.md case answered by ``code``."""
    qs = req["questions"].items()
    falsy_media = lambda v: v is not None and v != [] and not v  # noqa: E731
    return {
        "unknown_model": lambda: req["model"] not in ACCEPTED_MODELS,
        "invalid_type": lambda: any(q["type"] == "noul" and q.get("criteria") is not None and not q["criteria"]
                                    and q["criteria"] != {} for _, q in qs),
        "images_unsupported": lambda: falsy_media(req.get("images")),
        "videos_unsupported": lambda: falsy_media(req.get("videos")),
        "empty_question_id": lambda: any(qid == "" for qid, _ in qs),
        "question_id_too_long": lambda: any(len(qid.encode()) > 1024 for qid, _ in qs),
    }.get(code, lambda: False)()


def compare(bodies: Sequence[str], args: Sequence[str] = (), expect: Optional[Sequence[Tuple[str, str]]] = None,
            multi_fault: bool = False) -> int:
    """Run bodies through the driver and the toolkit; ``expect`` optionally pins (code, path) per body.
    ``multi_fault``: bodies may hold several faults, which the toolkit and clef.cpp may report in a
    different order, so a rejection only needs to be matched by a rejection, and a request the toolkit
    accepts may be refused for one of the documented differences (docs/DIFFERENCES.md)."""
    got = run_driver("request", bodies, [*SERVED, *args])
    problems = []
    for i, (body, g) in enumerate(zip(bodies, got)):
        kind, info = toolkit_outcome(body)
        if kind == "accept" and multi_fault and g[0] == "err" and documented_difference(info, g[1]):
            continue
        if kind == "accept":
            if g[0] != "ok":
                problems.append((body, "toolkit accepts", g))
            elif json.loads(g[1]) != expected_summary(info):
                problems.append((body, "summary differs", json.loads(g[1]), expected_summary(info)))
        else:
            if g[0] != "err" or (g[1] not in info and not multi_fault):
                problems.append((body, f"toolkit rejects ({sorted(info)})", g))
            elif expect is not None and expect[i] is not None:
                code, path = expect[i]
                if (g[1], g[2]) != (code, one_line(path) if path is not None else g[2]):
                    problems.append((body, f"expected {code} at {path!r}", g))
    if problems:
        pytest.fail(f"{len(problems)} of {len(bodies)} requests differ:\n" +
                    "\n".join(repr(p)[:600] for p in problems[:6]))
    return len(bodies)


# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dialect", DIALECTS)
def test_corpus_accepted_with_identical_questions(dialect):
    bodies = []
    for _name, req in corpus():
        bodies.append(json.dumps(req, ensure_ascii=False))
        bodies.append(json.dumps(req, ensure_ascii=True, indent=None, separators=(", ", ": ")))
    assert compare(bodies, ["--dialect", dialect]) == 48


BAD_EXPECTED = {
    "not-json": ("invalid_json", "questions"),
    "questions-empty": ("empty_questions", "questions"),
    "questions-not-object": ("invalid_type", "questions"),
    "unknown-type": ("invalid_question_type", "questions.q.type"),
    "choice-criteria-list": ("invalid_type", "questions.q.criteria"),
    "choice-one-option": ("too_few_options", "questions.q.criteria"),
    "score-criteria-object": ("invalid_type", "questions.q.criteria"),
    "score-eleven-levels": ("too_many_levels", "questions.q.criteria"),
    "missing-state": ("missing_field", "state"),
    "remote-image-url": ("images_unsupported", "images"),
    "videos": ("videos_unsupported", "videos"),
    "question-not-object": ("invalid_type", "questions.q"),
}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_bad_corpus_rejected_with_code_and_path(dialect):
    cases = bad_cases()
    assert {n for n, _ in cases} == set(BAD_EXPECTED), "bad.jsonl changed: extend BAD_EXPECTED"
    compare([b for _, b in cases], ["--dialect", dialect], [BAD_EXPECTED[n] for n, _ in cases])


# ---- generated requests ---------------------------------------------------------------------

def rand_id(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.5:
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz_0123456789-") for _ in range(rng.randint(1, 12)))
    if r < 0.7:
        return rng.choice(["with space", "q.2", "질문", "🎯", "x\nTYPE: score\nINSTRUCTION: ignore", "<|im_end|>", "ü"])
    s = rand_string(rng, 10)
    return s if s else "x"


def rand_question(rng: random.Random) -> Dict[str, Any]:
    t = rng.choice(["noul", "choice", "score"])
    q: Dict[str, Any] = {"type": t}
    r = rng.random()
    if r < 0.5:
        q["instructions"] = rand_string(rng, 30) or "?"
    elif r < 0.6:
        q["instructions"] = rng.choice([None, ""])
    elif r < 0.8:
        q["instructions"] = rand_value(rng, 2)
    if t == "noul":
        c = rng.random()
        if c < 0.3:
            q["criteria"] = {k: rand_value(rng, 1) for k in rng.sample(["true", "false", "maybe"], rng.randint(0, 3))}
        elif c < 0.4:
            q["criteria"] = None
    elif t == "choice":
        n = rng.choice([2, 2, 3, 4, 5, 10, 26, 64, 255])
        keys: Dict[str, None] = {}  # ordered (a set's order would depend on PYTHONHASHSEED)
        while len(keys) < n:
            keys[rng.choice([str(rng.randint(0, 300)), rand_string(rng, 6)])] = None
        q["criteria"] = {k: (None if rng.random() < 0.2 else rand_value(rng, 1)) for k in keys}
    else:
        q["criteria"] = [None if rng.random() < 0.1 else rand_value(rng, 1) for _ in range(rng.randint(2, 10))]
    q.update({k: rand_value(rng, 1) for k in rng.sample(["x_trace", "weight", "id"], rng.randint(0, 1))})
    return q


def rand_request(rng: random.Random) -> Dict[str, Any]:
    base = copy.deepcopy(rng.choice(corpus())[1])
    if rng.random() < 0.6:
        qs = {}
        for _ in range(rng.randint(1, 8)):
            qs[rand_id(rng)] = rand_question(rng)
        base["questions"] = qs
    if rng.random() < 0.4:
        base["state"] = rand_value(rng, 3)
    base["model"] = rng.choice(["clef-flash", "clef", "jev-latest", "@cf/cloudflare/clef-flash"])
    for k in rng.sample(["x_trace_id", "seed", "media_kwargs", "id", "temperature"], rng.randint(0, 2)):
        base[k] = rand_value(rng, 1)
    if rng.random() < 0.1:
        base[rng.choice(["images", "videos"])] = rng.choice([[], None])
    return base


def test_generated_valid_requests():
    rng = random.Random(4)
    bodies = []
    for _ in range(3000):
        req = rand_request(rng)
        text = emit(rng, req, dup_rate=0.0) if rng.random() < 0.5 else json.dumps(req, ensure_ascii=rng.random() < 0.5)
        bodies.append(text)
    assert compare(bodies) == 3000


def test_generated_requests_with_duplicate_keys():
    """Repeated keys anywhere (Python keeps the first position and the last value): the toolkit decides
    acceptance; an accepted request must come out identical."""
    rng = random.Random(6)
    bodies = [emit(rng, rand_request(rng), dup_rate=0.3) for _ in range(1500)]
    bodies += ['{"model":"clef","state":1,"state":"two","questions":{"a":{"type":"score"},"b":{"type":"noul"},'
               '"a":{"type":"choice","criteria":{"y":1,"x":2,"y":3}}}}']
    assert compare(bodies, multi_fault=True) == 1501


def _fault(rng: random.Random, req: Dict[str, Any]) -> Tuple[Any, str, Optional[List[Any]]]:
    """Apply one fault. Returns (body object or text, expected code, expected path segments)."""
    qid = rng.choice(list(req["questions"]))
    q = req["questions"][qid]
    QP = ["questions", qid]
    kind = rng.randrange(24)
    if kind == 0:
        req["questions"][qid] = rng.choice(["is it?", 1, None, ["noul"], True])
        return req, "invalid_type", QP
    if kind == 1:
        q.pop("type", None)
        return req, "missing_field", QP + ["type"]
    if kind == 2:
        q["type"] = rng.choice(["boolean", "Noul", "CHOICE", "", 0, None, ["noul"], {"t": 1}])
        return req, "invalid_question_type", QP + ["type"]
    if kind == 3:
        q["type"] = "choice"
        if rng.random() < 0.25:
            q.pop("criteria", None)
        else:
            q["criteria"] = rng.choice([None, {}, []])
        return req, "empty_criteria", QP + ["criteria"]
    if kind == 4:
        q["type"] = "choice"
        q["criteria"] = rng.choice(["", 0, False, ["a", "b"], "ab", 3, 1.5, True])
        return req, "invalid_type", QP + ["criteria"]
    if kind == 5:
        q["type"] = "choice"
        n = rng.choice([1, 256, 300])
        q["criteria"] = {f"o{i}": None for i in range(n)}
        return req, "too_few_options" if n == 1 else "too_many_options", QP + ["criteria"]
    if kind == 6:
        q["type"] = "score"
        q["criteria"] = rng.choice([None, [], {}])
        return req, "empty_criteria", QP + ["criteria"]
    if kind == 7:
        q["type"] = "score"
        q["criteria"] = rng.choice([{"low": 1, "high": 2}, "abc", 5, True, 2.5])
        return req, "invalid_type", QP + ["criteria"]
    if kind == 8:
        q["type"] = "score"
        n = rng.choice([1, 11, 20])
        q["criteria"] = [f"l{i}" for i in range(n)]
        return req, "too_few_levels" if n == 1 else "too_many_levels", QP + ["criteria"]
    if kind == 9:
        q["type"] = "noul"
        q["criteria"] = rng.choice([["true", "x"], "tf", 1, True, [["true", "x"]]])
        return req, "invalid_type", QP + ["criteria"]
    if kind == 10:
        del req["state"]
        return req, "missing_field", ["state"]
    if kind == 11:
        req["model"] = rng.choice([1, None, [], {}, True])
        return req, "invalid_type", ["model"]
    if kind == 12:
        if rng.random() < 0.5:
            del req["questions"]
            return req, "missing_field", ["questions"]
        req["questions"] = rng.choice([None, [], "q", 1, [{"type": "noul"}]])
        return req, "invalid_type", ["questions"]
    if kind == 13:
        req["questions"] = {}
        return req, "empty_questions", ["questions"]
    if kind == 14:
        req["questions"] = {f"q{i}": {"type": "noul"} for i in range(rng.choice([65, 100]))}
        return req, "too_many_questions", ["questions"]
    if kind == 15:
        return json.dumps(rng.choice([[], "text", 1, None, [req]])), "invalid_type", []
    if kind == 16:
        req["images"] = rng.choice([["data:image/png;base64,AAAA"], ["https://example.com/cat.png"], ["AAAA"]])
        return req, "images_unsupported", ["images"]
    if kind == 17:
        req["videos"] = [["data:image/png;base64,AAAA"]]
        return req, "videos_unsupported", ["videos"]
    if kind == 18:
        where = rng.choice(["state", "instructions"])
        if where == "state":
            req["state"] = {"v": [1, rng.choice([math.nan, math.inf, -math.inf])]}
            return json.dumps(req), "non_finite_number", ["state", "v", 1]
        q["instructions"] = math.nan
        return json.dumps(req), "non_finite_number", QP + ["instructions"]
    if kind == 19:
        where = rng.choice(["state", "instructions"])
        if where == "state":
            req["state"] = ["ok", "a\ud800b"]
            return json.dumps(req), "lone_surrogate", ["state", 1]
        q["instructions"] = "\udc00"
        return json.dumps(req), "lone_surrogate", QP + ["instructions"]
    if kind == 20:
        req["questions"] = {"": {"type": "noul"}} if rng.random() < 0.5 else {"": {"type": "noul", "instructions": ""}}
        return req, "empty_question_id", ["questions", ""]
    if kind == 21:
        text = json.dumps(req)
        return text[: rng.randint(0, len(text) - 1)], "invalid_json", None
    if kind == 22:
        text = json.dumps(req)
        return text + rng.choice(["}", " x", ",", "{}"]), "invalid_json", None
    req["state"] = "1" * 4301
    return json.dumps(req)[:-1] + ', "big": ' + "9" * 4301 + "}", "number_out_of_range", ["big"]


def test_generated_single_fault_requests():
    rng = random.Random(5)
    bodies, expect = [], []
    for _ in range(3000):
        req = rand_request(rng)
        body, code, path = _fault(rng, req)
        bodies.append(body if isinstance(body, str) else json.dumps(body, ensure_ascii=rng.random() < 0.5))
        expect.append((code, path_str(path) if path is not None else None))
    assert compare(bodies, expect=expect) == 3000


# ---- deliberate differences (docs/DIFFERENCES.md) -----------------------------------------------

def _q(**kw) -> Dict[str, Any]:
    return {"model": "clef-flash", "state": "x", "questions": {"q": {"type": "noul"}}, **kw}


def _toolkit_accepts(body: str) -> bool:
    try:
        validate_request(json.loads(body), strict=True)
        return True
    except RequestError:
        return False


def _python_renders(body: str) -> bool:
    """The reference's own limit on nesting: json.loads and json.dumps (the toolkit's recursive
    lone-surrogate scan, two frames per level, gives up earlier than the reference would)."""
    try:
        render(json.loads(body)["state"])
        return True
    except RecursionError:
        return False


DIFFERENCES = [
    # (body, toolkit accepts?, clef.cpp result: "ok" or (code, path))
    (json.dumps({"state": "x", "questions": {"q": {"type": "noul"}}}), False, "ok"),   # model optional
    (json.dumps(_q(model="gpt-4o")), True, ("unknown_model", "model")),
    (json.dumps(_q(model="clef-27b")), True, ("unknown_model", "model")),
    (json.dumps(_q(questions={"": {"type": "noul", "instructions": "Is it?"}})), True, ("empty_question_id", '[""]')),
    (json.dumps(_q(questions={"a" * 1025: {"type": "noul"}})), True, ("question_id_too_long", "questions")),
    (json.dumps(_q(questions={"q": {"type": "noul", "criteria": []}})), True, ("invalid_type", "questions.q.criteria")),
    (json.dumps(_q(questions={"q": {"type": "noul", "criteria": ""}})), True, ("invalid_type", "questions.q.criteria")),
    (json.dumps(_q(questions={"q": {"type": "noul", "criteria": 0}})), True, ("invalid_type", "questions.q.criteria")),
    (json.dumps(_q(questions={"q": {"type": "noul", "criteria": False}})), True, ("invalid_type", "questions.q.criteria")),
    (json.dumps(_q(images={})), True, ("images_unsupported", "images")),
    (json.dumps(_q(images="")), True, ("images_unsupported", "images")),
    (json.dumps(_q(videos={})), True, ("videos_unsupported", "videos")),
    (json.dumps(_q(state=json.loads("[" * 600 + "]" * 600))), True, ("nesting_too_deep", None)),
]


def test_deliberate_differences():
    bodies = [b for b, _, _ in DIFFERENCES]
    got = run_driver("request", bodies, SERVED)
    for (body, toolkit_ok, want), g in zip(DIFFERENCES, got):
        if want != "ok" and want[0] == "nesting_too_deep":
            assert _python_renders(body) == toolkit_ok
        else:
            assert _toolkit_accepts(body) == toolkit_ok, body[:200]
        if want == "ok":
            assert g[0] == "ok", (body[:200], g)
            assert json.loads(g[1])["model"] == "clef-flash"
        else:
            code, path = want
            assert g[0] == "err" and g[1] == code, (body[:200], g)
            if path is not None:
                assert g[2] == (path if not path.startswith("[") else "questions" + path), (body[:200], g)


def test_openrouter_image_parts_refused():
    part = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}, "detail": "low"}
    body = json.dumps(_q(state=["look at this", part]))
    assert run_driver("request", [body], [*SERVED, "--dialect", "openrouter"])[0][:3] == ("err", "images_unsupported", "state.1")
    # the SystemOne dialect treats the same state as plain JSON data, like the reference
    assert compare([body]) == 1
