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


def test_mcp_reference_client(cpp_tiny, expected):
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
                info = await session.call_tool("model_info", {})
                assert not info.is_error
                return got, json.loads(info.content[0].text)

    got, info = asyncio.run(session_run())
    assert got == expected
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
