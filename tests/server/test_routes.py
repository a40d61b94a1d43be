# SPDX-License-Identifier: MIT
"""Every route of `clef serve`, and its answers against `clef decide` (the same engine, no HTTP)."""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest

from conftest import bad_cases, clef_bin, corpus, env

def decide_errors(model, bodies, tmp_path):
    """The error objects `clef decide --jsonl` writes for `bodies`, as (code, path) by line."""
    src = tmp_path / "bad.jsonl"
    src.write_text("".join(b + "\n" for b in bodies), encoding="utf-8")
    r = subprocess.run([clef_bin(), "decide", "--model", str(model), "--threads", "1", "--jsonl", str(src),
                        "--no-progress"], capture_output=True, text=True, env=env(), timeout=300)
    out = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(out) == len(bodies) and all("error" in o for o in out), r.stdout[-2000:]
    return [(o["error"]["code"], o["error"]["path"]) for o in out]


CF_ROUTES = ["/ai/run/@cf/cloudflare/clef-flash", "/client/v4/accounts/0123abcd/ai/run/@cf/cloudflare/clef"]


JSON_SYNTAX = {"invalid_json", "lone_surrogate", "non_finite_number", "number_out_of_range", "nesting_too_deep"}


def cloudflare_code(code: str) -> int:
    """Workers AI error codes (docs/PROTOCOL.md §2.5)."""
    if code in JSON_SYNTAX:
        return 6003
    return {"empty_questions": 5006, "too_few_questions": 5006, "invalid_question_type": 5006,
            "unknown_model": 7000, "input_too_long": 5021}.get(code, 5012)


def expected_status(code: str, dialect: str) -> int:
    """Statuses of docs/PROTOCOL.md §2.5 per dialect."""
    if dialect == "systemone":
        return 400 if code == "unknown_model" else 422
    if dialect == "cloudflare":
        cf = cloudflare_code(code)
        return 422 if cf == 5012 else 413 if cf == 5021 else 400
    return 400 if code in JSON_SYNTAX else 413 if code == "input_too_long" else 422


def test_health_models_and_content_types(server):
    status, h, body = server.request("GET", "/health")
    assert status == 200 and h["content-type"] == "application/json"
    assert json.loads(body) == {"status": "ok", "model": "clef-tiny-random", "loaded": True}
    status, h, body = server.request("GET", "/v1/models")
    assert status == 200 and h["content-type"] == "application/json"
    models = json.loads(body)["models"]
    assert len(models) == 1 and set(models[0]) == {"name", "description", "release_date"}
    assert models[0]["name"] == "clef-tiny-random" and "RANDOM WEIGHTS" in models[0]["description"]


@pytest.mark.parametrize("method,path,allow", [
    ("GET", "/v1/systemone", "POST"), ("PUT", "/v1/systemone", "POST"), ("POST", "/health", "GET, HEAD"),
    ("DELETE", "/v1/models", "GET, HEAD"), ("GET", "/api/alpha/decisions", "POST"),
    ("GET", CF_ROUTES[0], "POST"), ("OPTIONS", "/metrics", "GET, HEAD"),
])
def test_wrong_method_is_405_json(server, method, path, allow):
    status, h, body = server.request(method, path, b"{}" if method in ("PUT", "POST", "DELETE") else None)
    assert status == 405 and h["content-type"] == "application/json" and h["allow"] == allow
    j = json.loads(body)
    if path.startswith("/ai/"):
        assert j["success"] is False and j["errors"][0]["code"] == 7000
    elif path == "/api/alpha/decisions":
        assert j["error"]["code"] == 405
    else:
        assert j["detail"]["error_type"] == "method_not_allowed"


@pytest.mark.parametrize("method,path", [
    ("GET", "/"), ("GET", "/v2/systemone"), ("POST", "/v1/systemone/"), ("POST", "/ai/run/@cf/cloudflare/"),
    ("POST", "/ai/run/@cf/cloudflare/clef/extra"), ("POST", "/client/v4/accounts//ai/run/@cf/cloudflare/clef"),
    ("PATCH", "/nothing"),
])
def test_unknown_route_is_404_json(server, method, path):
    status, h, body = server.request(method, path, b"{}" if method != "GET" else None)
    assert status == 404 and h["content-type"] == "application/json"
    assert json.loads(body)["detail"]["error_type"] == "not_found_error"


def test_cloudflare_unknown_model_in_path(server):
    name, req = corpus()[0]
    status, h, body = server.post_json("/ai/run/@cf/cloudflare/llama-3", req)
    assert status == 400 and h["content-type"] == "application/json"
    j = json.loads(body)
    assert j["success"] is False and j["result"] is None and j["errors"][0]["code"] == 7000


def test_every_corpus_request_equals_clef_decide_on_every_route(server, decide_outputs):
    for name, req in corpus():
        want = decide_outputs[name]
        # Every request on the main route of each dialect; the aliases get the quick ones (the 64-question,
        # 255-option and 3k-word requests take the tiny model ~0.2 s each on two busy CPUs).
        small = len(json.dumps(req)) < 2000
        for path in ["/v1/systemone", "/api/alpha/decisions"] + (["/v1/decisions"] if small else []):
            status, h, body = server.post_json(path, req)
            assert (status, h["content-type"]) == (200, "application/json"), (name, path, body[:300])
            assert body == want, (name, path)
        for path in CF_ROUTES if small else CF_ROUTES[:1]:
            status, h, body = server.post_json(path, req)
            assert (status, h["content-type"]) == (200, "application/json"), (name, path, body[:300])
            env = json.loads(body)
            assert env["success"] is True and env["errors"] == [] and env["messages"] == []
            assert set(env) == {"result", "success", "errors", "messages"}
            # byte-exact: the envelope embeds the SystemOne body unchanged
            assert body == b'{"result":' + want + b',"success":true,"errors":[],"messages":[]}', (name, path)


@pytest.mark.parametrize("dialect", ["systemone", "cloudflare", "openrouter"])
def test_bad_requests_get_the_dialects_4xx_and_code(server, dialect, tiny_model, tmp_path):
    cases = bad_cases()
    expected = decide_errors(tiny_model, [b for _, b in cases], tmp_path)
    path = {"systemone": "/v1/systemone", "cloudflare": CF_ROUTES[0], "openrouter": "/api/alpha/decisions"}[dialect]
    for (name, body), (code, jpath) in zip(cases, expected):
        if dialect == "openrouter" and jpath.startswith("images"):
            # OpenRouter carries images inside `state`; a top-level `images` field is refused as such
            # (docs/PROTOCOL.md §1.5), whatever it holds.
            code, jpath = "images_unsupported", "images"
        status, h, resp = server.request("POST", path, body.encode(), {"Content-Type": "application/json"})
        assert status == expected_status(code, dialect), (name, status, resp[:300])
        assert h["content-type"] == "application/json"
        j = json.loads(resp)
        if dialect == "systemone":
            if code == "unknown_model":
                assert j["detail"]["error_type"] == "api_usage_error"
            else:
                (d,) = j["detail"]
                assert d["type"] == code and d["loc"][0] == "body", name
                if jpath and code not in JSON_SYNTAX:
                    assert ".".join(str(x) for x in d["loc"][1:]) == jpath, name
        elif dialect == "cloudflare":
            assert j["success"] is False and j["result"] is None
            assert j["errors"][0]["code"] == cloudflare_code(code), name
        else:
            assert j["error"]["code"] == status and j["error"]["metadata"]["type"] == code, name
            if code not in JSON_SYNTAX:
                assert j["error"]["metadata"]["path"] == jpath, name



# Validation codes that hosted Workers AI answers 400 (code 5006) rather than 422 (docs/PROTOCOL.md §2.5).
CF_BAD_INPUT = {"empty_questions", "too_few_questions", "invalid_question_type"}


def test_the_same_mistake_gets_the_same_status_on_every_route(server, tiny_model, tmp_path):
    """Every route of one dialect answers a mistake with one status, and the dialects differ only where
    docs/COMPATIBILITY.md "Status of a refused request" says: JSON syntax 400 on the Cloudflare and
    OpenRouter routes, unknown_model 400, input_too_long 413 (not SystemOne), and on the Cloudflare
    routes the three codes hosted Workers AI answers 400/5006. Every other mistake is 422 everywhere."""
    routes = {"systemone": ["/v1/systemone", "/v1/decisions", "/systemone"], "cloudflare": CF_ROUTES,
              "openrouter": ["/api/alpha/decisions"]}
    cases = bad_cases()
    expected = decide_errors(tiny_model, [b for _, b in cases], tmp_path)
    seen_422 = set()
    for (name, body), (code, jpath) in zip(cases, expected):
        statuses = {}
        for dialect, paths in routes.items():
            got = set()
            for path in paths:
                status, _, resp = server.request("POST", path, body.encode(), {"Content-Type": "application/json"})
                got.add(status)
            assert len(got) == 1, (name, dialect, got)
            statuses[dialect] = got.pop()
        if jpath.startswith("images"):  # OpenRouter refuses a top-level images field as such (§1.5)
            assert statuses.pop("openrouter") == 422, name
        if code in JSON_SYNTAX:
            want = {"systemone": 422, "cloudflare": 400, "openrouter": 400}
        elif code == "unknown_model":
            want = {"systemone": 400, "cloudflare": 400, "openrouter": 422}
        elif code == "input_too_long":
            want = {"systemone": 422, "cloudflare": 413, "openrouter": 413}
        elif code in CF_BAD_INPUT:
            want = {"systemone": 422, "cloudflare": 400, "openrouter": 422}
        else:
            want = {"systemone": 422, "cloudflare": 422, "openrouter": 422}
            seen_422.add(code)
        assert statuses == {k: v for k, v in want.items() if k in statuses}, (name, code, statuses)
    assert len(seen_422) >= 5, seen_422  # the corpus of bad requests covers many validation codes


def test_metrics_count_routes_tokens_and_stage_histograms(server):
    before = server.metrics()
    name, req = corpus()[0]
    status, _, body = server.post_json("/v1/systemone", req)
    assert status == 200
    tokens = json.loads(body)["usage"]["input_tokens"]
    server.request("GET", "/nope")
    after = server.metrics()
    key = 'clef_requests_total{route="/v1/systemone",status="200"}'
    assert after[key] - before.get(key, 0) == 1
    key404 = 'clef_requests_total{route="unmatched",status="404"}'
    assert after[key404] - before.get(key404, 0) == 1
    assert after["clef_input_tokens_total"] - before["clef_input_tokens_total"] == tokens
    assert after["clef_decisions_total"] - before["clef_decisions_total"] == 1
    for stage in ["queue", "tokenize", "prefill", "head", "total"]:
        c = f'clef_stage_seconds_count{{stage="{stage}"}}'
        assert after[c] - before[c] == 1
        assert after[f'clef_stage_seconds_bucket{{stage="{stage}",le="+Inf"}}'] == after[c]
    assert after["clef_queue_depth"] == 0 and after["clef_queue_capacity"] == 64
    status, h, _ = server.request("GET", "/metrics")
    assert h["content-type"].startswith("text/plain; version=0.0.4")


def test_access_log_has_no_request_content(server):
    marker = "zq-secret-marker-7731"
    status, _, _ = server.post_json("/v1/systemone", {"state": marker, "questions": {marker: {"type": "noul"}}})
    assert status == 200
    status, _, _ = server.post_json("/v1/systemone", {"state": marker, "questions": {"q": {"type": marker}}})
    assert status == 422
    server.request("GET", "/" + marker)
    log = server.log.read_text(errors="replace")
    assert marker not in log
    assert "clef serve: POST /v1/systemone 200 " in log and "clef serve: GET unmatched 404 " in log


def test_each_decision_body_is_parsed_once_and_keyed_from_that_parse(server):
    """Validation, the route key and the decision read one parse of a body (docs/ARCHITECTURE.md "The HTTP
    server"): /metrics' JSON-text counter grows by one per decision body on every route (answered, refused or not
    JSON) and by none for a GET. The X-Clef-Route-Key is the SHA-256 of the state's and images' text as sent,
    spacing and escapes kept (docs/DEPLOYMENT.md), built here from the pieces the body is written from."""
    name, req = corpus()[0]
    raw_state = '{"ticket" : [1, "}\\u0041"] , "n": -0.0}'
    text = ('{ "questions" : ' + json.dumps(req["questions"]) + ' ,\n "state":  ' + raw_state + ' }').encode()
    openai_body = {"model": "clef-flash", "input": "Please refund the duplicate charge.",
                   "questions": [{"type": "predicate", "name": "refund", "instructions": "Does it ask for a refund?"}]}
    before = server.metrics()["clef_json_texts_parsed_total"]
    posts = [("/v1/systemone", text), ("/systemone", text), (CF_ROUTES[0], text), (CF_ROUTES[1], text),
             ("/api/alpha/decisions", text), ("/v1/decisions", text),
             ("/v1/decisions", json.dumps(openai_body).encode()),
             ("/v1/systemone", b'{"state": 1, "questions": {}}'), ("/v1/systemone", b"{not json")]
    statuses = []
    for path, body in posts:
        status, h, _ = server.request("POST", path, body, {"Content-Type": "application/json"})
        statuses.append(status)
        if status == 200 and b'"state"' in body:
            want = hashlib.sha256(("state=" + raw_state + "\nimages=").encode()).hexdigest()
            assert h["x-clef-route-key"] == want, path
    assert statuses[:7] == [200] * 7 and statuses[7] == 422 and statuses[8] == 422, statuses
    server.request("GET", "/health")
    server.request("GET", "/v1/models")
    after = server.metrics()["clef_json_texts_parsed_total"]
    assert after - before == len(posts)
