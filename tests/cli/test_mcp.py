# SPDX-License-Identifier: MIT
"""`clef mcp` with the reference MCP client (PyPI `mcp`): initialize, list the tools, `decide` on
every corpus request (the text content equals `clef decide`'s bytes), a refused request as a tool
error with its code and JSON path, `model_info`; and the raw stream: stdout carries only
JSON-RPC messages."""

from __future__ import annotations

import asyncio
import json
import pathlib
import subprocess

import pytest
from conftest import clef_bin, run_clef

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = REPO_ROOT / "tests" / "data" / "requests" / "corpus.jsonl"
OPENAI_CORPUS = CORPUS.with_name("corpus_openai.jsonl")  # tools/reference/to_openai_decisions.py


def corpus() -> list[dict]:
    return [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def expected(cpp_tiny, tmp_path_factory) -> list[str]:
    """`clef decide`'s stdout for every corpus request (one --jsonl run: the same bytes as one
    `clef decide` per request, tests/cli/test_decide_jsonl.py)."""
    d = tmp_path_factory.mktemp("mcp")
    src = d / "in.jsonl"
    src.write_text("".join(json.dumps(c["request"]) + "\n" for c in corpus()))
    r = run_clef("decide", "-m", str(cpp_tiny), "--jsonl", str(src), "--no-progress")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    single = run_clef("decide", "-m", str(cpp_tiny), str(REPO_ROOT / "examples" / "request.json"), check=True)
    assert single.stdout.endswith("\n")
    return lines


def test_mcp_reference_client(cpp_tiny, expected, tmp_path):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    async def session_run():
        params = StdioServerParameters(command=clef_bin(), args=["mcp", "-m", str(cpp_tiny)])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                assert init.server_info.name == "clef"
                assert init.capabilities.tools is not None
                await session.send_ping()
                tools = {t.name: t for t in (await session.list_tools()).tools}
                assert set(tools) == {"decide", "model_info"}
                schema = tools["decide"].input_schema
                assert schema["required"] == ["state", "questions"]
                assert {"noul", "choice", "score"} == {
                    b["properties"]["type"]["const"] for b in schema["properties"]["questions"]["additionalProperties"]["oneOf"]}
                got = []
                for case in corpus():
                    res = await session.call_tool("decide", case["request"])
                    assert not res.is_error, res.content
                    got.append(res.content[0].text)
                    assert res.structured_content == json.loads(res.content[0].text)
                bad = await session.call_tool("decide", {"state": {}, "questions": {"q": {"type": "maybe"}}})
                assert bad.is_error
                err = json.loads(bad.content[0].text)["error"]
                assert err["code"] == "invalid_question_type" and err["path"] == "questions.q.type"
                missing = await session.call_tool("decide", {"questions": {"q": {"type": "noul", "instructions": "?"}}})
                assert missing.is_error and json.loads(missing.content[0].text)["error"]["code"] == "missing_field"
                # The same state with other questions: the session's engine reuses the computed state.
                again = dict(corpus()[0]["request"], questions={"q": {"type": "noul", "instructions": "Again?"}})
                assert not (await session.call_tool("decide", again)).is_error
                # OpenAI's Decisions body (docs/PROTOCOL.md §7.1): answered in OpenAI's shape, the same numbers.
                openai_body = json.loads(OPENAI_CORPUS.read_text().splitlines()[0])["request"]
                oa = await session.call_tool("decide", openai_body)
                assert not oa.is_error, oa.content
                got_openai.append(oa.content[0].text)
                empty = await session.call_tool("decide", dict(openai_body, questions=[]))
                assert empty.is_error
                assert json.loads(empty.content[0].text)["error"] | {"message": ""} == {
                    "code": "empty_questions", "path": "questions", "message": ""}
                info = await session.call_tool("model_info", {})
                assert not info.is_error
                return got, json.loads(info.content[0].text)

    got_openai: list[str] = []
    got, info = asyncio.run(session_run())
    assert got == expected
    # clef decide takes the same OpenAI body; both agree with the System One answer of its twin.
    body = tmp_path / "openai.json"
    body.write_text(json.dumps(json.loads(OPENAI_CORPUS.read_text().splitlines()[0])["request"]))
    single = run_clef("decide", "-m", str(cpp_tiny), str(body), check=True)
    oa, s1 = json.loads(got_openai[0]), json.loads(expected[0])
    assert json.loads(single.stdout)["answers"] == oa["answers"]
    assert oa["usage"]["input_tokens_details"]["cached_tokens"] > 0  # the session had computed this state
    assert [a["name"] for a in oa["answers"]] == list(s1["answers"])
    assert oa["answers"][0]["probability"] == s1["answers"]["is_malicious"]["noul"]
    assert [p["probability"] for p in oa["answers"][1]["probabilities"]] == list(
        s1["answers"]["category"]["probabilities"].values())
    inspect = json.loads(run_clef("inspect", "--json", str(cpp_tiny), check=True).stdout)
    for key, value in inspect.items():
        assert info[key] == value, key
    assert info["precision"] == "fp32" and info["kernel_level"]
    assert info["state_cache"]["hits"] >= 1 and info["state_cache"]["budget_bytes"] > 0


def test_mcp_stdout_carries_only_protocol(cpp_tiny):
    """Raw stream: parse errors, unknown methods, notifications and a batch; every stdout line is a
    JSON-RPC 2.0 message and the logs are on stderr."""
    req = corpus()[0]["request"]
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        "this is not json",
        {"jsonrpc": "2.0", "id": 2, "method": "no/such/method"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "decide", "arguments": req}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "nope", "arguments": {}}},
        [{"jsonrpc": "2.0", "id": 5, "method": "ping"}, {"jsonrpc": "2.0", "method": "notifications/cancelled",
                                                         "params": {"requestId": 9}}],
    ]
    stdin = "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
    r = subprocess.run([clef_bin(), "mcp", "-m", str(cpp_tiny)], input=stdin, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(out) == 6
    assert out[0]["id"] == 1 and out[0]["result"]["protocolVersion"] == "2025-06-18"
    assert out[1]["error"]["code"] == -32700 and out[1]["id"] is None
    assert out[2]["id"] == 2 and out[2]["error"]["code"] == -32601
    assert out[3]["id"] == 3 and out[3]["result"]["isError"] is False
    assert out[4]["id"] == 4 and out[4]["error"]["code"] == -32602
    assert out[5] == [{"jsonrpc": "2.0", "id": 5, "result": {}}]
    assert "clef mcp: serving" in r.stderr


def test_mcp_deeply_nested_arguments_are_refused_not_a_crash(cpp_tiny):
    """Arguments nested 100,000 levels deep (a copy or serialization of them would recurse once per
    level and overflow the stack): the message is refused with -32600 and the server goes on; 600
    levels reach the engine, which refuses them as nesting_too_deep (a tool error)."""
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}

    def call(i: int, depth: int) -> str:
        return ('{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"decide","arguments":'
                '{"state":%s%s,"questions":{}}}}' % (i, "[" * depth, "]" * depth))
    stdin = "\n".join([json.dumps(init), call(2, 100_000), call(3, 600),
                       json.dumps({"jsonrpc": "2.0", "id": 4, "method": "ping"})]) + "\n"
    r = subprocess.run([clef_bin(), "mcp", "-m", str(cpp_tiny)], input=stdin, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    out = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(out) == 4
    assert out[1]["error"]["code"] == -32600 and "nested deeper than" in out[1]["error"]["message"]
    assert out[2]["id"] == 3 and out[2]["result"]["isError"] is True
    assert "nesting_too_deep" in out[2]["result"]["content"][0]["text"]
    assert out[3] == {"jsonrpc": "2.0", "id": 4, "result": {}}


def test_mcp_message_over_max_message_is_refused_and_the_session_goes_on(cpp_tiny):
    """A line over --max-message (here 4096 bytes; a 100 kB line, longer than one 64 KiB read) is
    skipped up to its newline without being stored and answered -32600 with id null, naming the
    limit and the option; the next request is still answered. (Without the cap the line was read
    whole, however long, and answered as a ping.)"""
    big = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"pad": "x" * 100_000}})
    stdin = "\n".join([big, json.dumps({"jsonrpc": "2.0", "id": 3, "method": "ping"})]) + "\n"
    r = subprocess.run([clef_bin(), "mcp", "-m", str(cpp_tiny), "--max-message", "4096"], input=stdin,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    out = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(out) == 2, r.stdout[:2000]
    err = out[0]["error"]
    assert out[0]["id"] is None and err["code"] == -32600, out[0]
    assert "4096 bytes" in err["message"] and "--max-message" in err["message"], err
    assert out[1] == {"jsonrpc": "2.0", "id": 3, "result": {}}



def _mcp_run(cpp_tiny, tmp_path, stdin: bytes, *extra: str) -> tuple[list, str, int]:
    """Runs `clef mcp` on raw stdin bytes (through files, so the child is reaped by wait4 alone);
    returns (parsed stdout lines, stderr, the child's own peak RSS in KiB)."""
    import os
    src, out, err = tmp_path / "stdin", tmp_path / "stdout", tmp_path / "stderr"
    src.write_bytes(stdin)
    with open(src, "rb") as i, open(out, "wb") as o, open(err, "wb") as e:
        p = subprocess.Popen([clef_bin(), "mcp", "-m", str(cpp_tiny), *extra], stdin=i, stdout=o, stderr=e)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    stderr = err.read_text(errors="replace")
    assert p.returncode == 0, stderr[-2000:]
    return [json.loads(line) for line in out.read_text().splitlines()], stderr, usage.ru_maxrss


def test_mcp_batch_cap_refuses_a_million_items_in_bounded_memory(cpp_tiny, tmp_path):
    """A 3 MB line holding a batch of 1,000,000 empty objects is refused whole with one -32600
    (id null) naming --max-batch, counted while parsed: the child's peak RSS stays within 64 MiB of
    a session that answers one ping (before: an 86 MB answer line and ~740 MiB peak). A batch of
    exactly --max-batch messages is still answered, one more is refused, and the session goes on."""
    ping = json.dumps({"jsonrpc": "2.0", "id": 9, "method": "ping"})
    base, _, base_rss = _mcp_run(cpp_tiny, tmp_path, (ping + "\n").encode())
    assert base == [{"jsonrpc": "2.0", "id": 9, "result": {}}]
    huge = "[" + ",".join(["{}"] * 1_000_000) + "]"
    out, _, rss = _mcp_run(cpp_tiny, tmp_path, (huge + "\n" + ping + "\n").encode())
    assert len(out) == 2, [str(x)[:200] for x in out]
    assert out[0]["id"] is None and out[0]["error"]["code"] == -32600, out[0]
    assert "--max-batch" in out[0]["error"]["message"] and "128" in out[0]["error"]["message"]
    assert out[1] == {"jsonrpc": "2.0", "id": 9, "result": {}}
    assert rss - base_rss < 64 * 1024, (rss, base_rss)

    def batch(n: int) -> str:
        return json.dumps([{"jsonrpc": "2.0", "id": k, "method": "ping"} for k in range(n)])
    out, _, _ = _mcp_run(cpp_tiny, tmp_path, (batch(3) + "\n" + batch(4) + "\n").encode(), "--max-batch", "3")
    assert out[0] == [{"jsonrpc": "2.0", "id": k, "result": {}} for k in range(3)]
    assert out[1]["id"] is None and out[1]["error"]["code"] == -32600 and "more than 3" in out[1]["error"]["message"]


def test_mcp_empty_batch_trailing_bytes_and_repeated_keys(cpp_tiny, expected, tmp_path):
    """JSON-RPC 2.0: `[]` is answered with one Invalid Request (-32600, id null) (before: no answer);
    a NUL or other bytes after the JSON are a parse error (-32700) (before: a NUL ended the parse and
    the message was run); a repeated key, written plainly or escaped ("arguments" and
    "\\u0061rguments"), is -32600 (before: one copy was checked and the other decided). A lone
    escaped key is the same key: its arguments are the ones decided."""
    req = corpus()[0]["request"]
    other = {"state": {"x": 1}, "questions": {"q": {"type": "noul", "instructions": "Other?"}}}
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    call_head = '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"decide",'
    dup_escaped = (call_head % 2) + '"arguments":%s,"\\u0061rguments":%s}}' % (json.dumps(req), json.dumps(other))
    dup_plain = (call_head % 3) + '"arguments":%s,"arguments":%s}}' % (json.dumps(other), json.dumps(req))
    lone_escaped = (call_head % 4) + '"\\u0061rguments":%s}}' % json.dumps(req)
    lines = [b"[]", json.dumps(ping).encode() + b"\0", json.dumps(ping).encode() + b" x",
             dup_escaped.encode(), dup_plain.encode(), b'{"jsonrpc":"2.0","id":5,"method":"ping","id":6}',
             lone_escaped.encode(), b"[" + json.dumps(ping).encode() + b"]"]
    out, _, _ = _mcp_run(cpp_tiny, tmp_path, b"\n".join(lines) + b"\n")
    assert len(out) == len(lines), out
    assert out[0] == {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "invalid request: an empty batch"}}
    assert out[1]["id"] is None and out[1]["error"]["code"] == -32700 and "NUL" in out[1]["error"]["message"]
    assert out[2]["id"] is None and out[2]["error"]["code"] == -32700
    # The message is about the text (where and what), not the JSON library's exception type.
    assert "column" in out[2]["error"]["message"] and "json.exception" not in out[2]["error"]["message"], out[2]
    for a in out[3:6]:
        assert a["id"] is None and a["error"]["code"] == -32600 and "appears twice" in a["error"]["message"], a
    assert '"arguments"' in out[3]["error"]["message"] and '"id"' in out[5]["error"]["message"]
    assert out[6]["id"] == 4 and out[6]["result"]["isError"] is False
    assert out[6]["result"]["content"][0]["text"] == expected[0]  # clef decide's bytes for that request
    assert out[7] == [{"jsonrpc": "2.0", "id": 1, "result": {}}]


def _tools_and_instructions(cpp_tiny) -> tuple[dict, str]:
    """tools/list and the initialize instructions of a raw `clef mcp` session."""
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}},
             {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
    r = subprocess.run([clef_bin(), "mcp", "-m", str(cpp_tiny)], input="".join(json.dumps(x) + "\n" for x in lines),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    out = [json.loads(line) for line in r.stdout.splitlines()]
    return {t["name"]: t for t in out[1]["result"]["tools"]}, out[0]["result"]["instructions"]


def _described(schema: dict, where: str, missing: list) -> None:
    """Collects into `missing` every property (and option/level item) of `schema` without a description."""
    for name, sub in schema.get("properties", {}).items():
        if not sub.get("description", "").strip():
            missing.append(f"{where}.{name}")
        _described(sub, f"{where}.{name}", missing)
    for key in ("additionalProperties", "items"):
        sub = schema.get(key)
        if isinstance(sub, dict):
            if "oneOf" in sub:
                for i, branch in enumerate(sub["oneOf"]):
                    if not branch.get("description", "").strip():
                        missing.append(f"{where}.{key}.oneOf[{i}]")
                    _described(branch, f"{where}.{key}.oneOf[{i}]", missing)
            elif not sub.get("description", "").strip():
                missing.append(f"{where}.{key}")


def test_mcp_decide_tool_says_what_each_field_does(cpp_tiny):
    """The decide tool's text states the protocol's facts (docs/PROTOCOL.md §1.6, the same source): a
    noul answer is one probability that the statement is true; criteria are written into the prompt
    and change the answer; no "unsure" answers and nothing "ignored by the model"; every field of the
    input schema is described. (The old text said noul "answers yes, no, unsure with probabilities"
    and noul criteria were "ignored by the model".)"""
    tools, instructions = _tools_and_instructions(cpp_tiny)
    decide = tools["decide"]
    text = json.dumps(decide) + instructions
    assert "unsure" not in text.lower() and "ignored" not in text.lower()
    desc = decide["description"]
    assert "a noul question answers with noul: one number, the probability" in desc
    assert "that the statement is true" in desc
    assert "criteria" in desc and "written into the prompt, so changing any of them can change the answers" in desc
    assert "the probability that a statement is true" in instructions
    branches = {b["properties"]["type"]["const"]: b for b in
                decide["inputSchema"]["properties"]["questions"]["additionalProperties"]["oneOf"]}
    for kind, branch in branches.items():
        crit = branch["properties"]["criteria"]["description"]
        assert "written into the prompt" in crit and "change the" in crit, (kind, crit)
    assert "one number, the probability" in branches["noul"]["description"]
    assert branches["noul"]["required"] == ["type"]
    assert branches["choice"]["required"] == branches["score"]["required"] == ["type", "criteria"]
    missing: list = []
    _described(decide["inputSchema"], "arguments", missing)
    assert not missing, missing
    assert len(json.dumps(decide["inputSchema"])) > 2000  # every field carries its text


def test_mcp_decide_schema_accepts_what_the_validator_accepts(cpp_tiny, tmp_path):
    """The input schema and the request validator agree: every corpus request and a set of accepted
    variants validate; every single fault the validator refuses for its shape (type, criteria,
    counts, missing fields) is refused by the schema too. And adding noul criteria, which the old text
    called ignored, moves the answer."""
    import jsonschema

    tools, _ = _tools_and_instructions(cpp_tiny)
    validator = jsonschema.Draft202012Validator(tools["decide"]["inputSchema"])
    base = {"state": {"text": "hello"}, "questions": {"q": {"type": "noul", "instructions": "Is it a greeting?"}}}

    def with_q(q: dict, **top) -> dict:
        return {**base, "questions": {"q": q}, **top}

    n = len(corpus())
    accepted = [c["request"] for c in corpus()] + [
        base,
        with_q({**base["questions"]["q"], "criteria": {"true": "It says hello.", "false": None}}),
        with_q({"type": "noul", "criteria": None}),
        with_q({"type": "noul", "instructions": {"ask": ["nested", 1]}}),
        with_q({"type": "choice", "criteria": {"a": None, "b": {"k": 1}}}),
        with_q({"type": "score", "criteria": ["low", None, {"x": 2}]}),
        with_q({"type": "noul", "criterias": {"true": "x"}}),  # unknown keys are ignored
        {**base, "state": None, "images": None, "x-extra": 1},
        {**base, "images": []},
        {**base, "model": "anything"},
        {**base, "questions": {f"q{i}": {"type": "noul"} for i in range(64)}},
    ]
    refused = [
        with_q({"type": "Choice", "criteria": {"a": 1, "b": 2}}),
        with_q({"type": "choice", "criterias": {"a": 1, "b": 2}}),
        with_q({"type": "choice", "criteria": ["a", "b"]}),
        with_q({"type": "choice", "criteria": {"a": 1}}),
        with_q({"type": "choice", "criteria": {str(i): i for i in range(256)}}),
        with_q({"type": "choice", "criteria": None}),
        with_q({"type": "score", "criteria": {"low": 1, "high": 2}}),
        with_q({"type": "score", "criteria": "abc"}),
        with_q({"type": "score", "criteria": ["one"]}),
        with_q({"type": "score", "criteria": [str(i) for i in range(11)]}),
        with_q({"type": "noul", "criteria": ["a", "b"]}),
        with_q({"instructions": "no type"}),
        {**base, "questions": {"q": "a question as a string"}},
        {**base, "questions": {}},
        {**base, "questions": {f"q{i}": {"type": "noul"} for i in range(65)}},
        {**base, "questions": {"": {"type": "noul", "instructions": "x"}}},
        {**base, "questions": []},
        {"questions": base["questions"]},
        {"state": "x"},
        {**base, "model": 7},
        {**base, "images": "data:image/png;base64,AAAA"},
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in accepted + refused))
    r = run_clef("decide", "-m", str(cpp_tiny), "--jsonl", str(src), "--no-progress")
    assert r.returncode == 1, r.stderr
    answers = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(answers) == len(accepted) + len(refused)
    for req, ans in zip(accepted + refused, answers):
        by_validator = "error" not in ans
        by_schema = validator.is_valid(req)
        assert by_validator == by_schema == (req in accepted), (req, ans, list(validator.iter_errors(req))[:1])
    plain, with_criteria = answers[n]["answers"]["q"]["noul"], answers[n + 1]["answers"]["q"]["noul"]
    assert plain != with_criteria, "noul criteria are written into the prompt"
