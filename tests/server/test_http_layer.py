# SPDX-License-Identifier: MIT
"""The event-driven HTTP layer of `clef serve`: strict framing, Host / Content-Type
guards, auth before the body, validation before the queue, half-close, pipelining, deadlines,
the connection limit, slowloris and a flood of malformed requests. Loopback only, bounded loops."""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import random
import resource
import socket
import threading
import time
import zlib

import pytest

from conftest import corpus

SMALL = [(n, r) for n, r in corpus() if len(json.dumps(r)) < 2000]


def connect(port: int, timeout: float = 10) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def read_until_close(s: socket.socket, limit: float = 10) -> bytes:
    """Everything the server sends until it closes (a reset ends it too); fails after `limit` s."""
    out = b""
    deadline = time.monotonic() + limit
    while True:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            d = s.recv(65536)
        except ConnectionResetError:
            break
        except socket.timeout:
            raise AssertionError(f"the server did not close within {limit} s; got {out[:300]!r}")
        if not d:
            break
        out += d
    return out


def read_answers(s: socket.socket, n: int, limit: float = 10) -> list:
    """Reads `n` answers (status, headers, body) from one connection."""
    buf = b""
    out = []
    deadline = time.monotonic() + limit
    while len(out) < n:
        while b"\r\n\r\n" not in buf:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            d = s.recv(65536)
            assert d, f"connection closed after {len(out)} answers: {buf[:200]!r}"
            buf += d
        head, buf = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {k.lower(): v.strip() for k, v in (x.split(":", 1) for x in lines[1:])}
        if status == 100:
            continue
        size = int(headers.get("content-length", "0"))
        while len(buf) < size:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            d = s.recv(65536)
            assert d, "connection closed inside a body"
            buf += d
        out.append((status, headers, buf[:size]))
        buf = buf[size:]
    return out


def exchange(port: int, raw: bytes, limit: float = 10):
    """Sends raw bytes, reads until the server closes: (seconds taken, answers as (status, body))."""
    s = connect(port)
    t0 = time.monotonic()
    try:
        try:
            s.sendall(raw)
        except OSError:
            pass
        data = read_until_close(s, limit)
    finally:
        s.close()
    took = time.monotonic() - t0
    answers = []
    while data.startswith(b"HTTP/1.1 "):
        head, _, rest = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        n = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                n = int(v)
        if status != 100:
            answers.append((status, rest[:n]))
        data = rest[n:]
    return took, answers


def post_head(path: str = "/v1/systemone", extra: str = "", host: str = "127.0.0.1") -> str:
    return f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{extra}"


def proc_status(pid: int) -> dict:
    out = {}
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out


# ---------------------------------------------------------------------------------------------
# Host and Content-Type (DNS rebinding, cross-origin simple requests)


def test_host_header_must_name_the_server(make_server):
    s = make_server("-q", "--allow-host", "clef.internal")
    name, req = SMALL[0]
    body = json.dumps(req).encode()
    for host in ["127.0.0.1", f"127.0.0.1:{s.port}", "localhost", f"LOCALHOST:{s.port}", "[::1]",
                 f"[::1]:{s.port}", "clef.internal", f"clef.internal:{s.port}"]:
        t, answers = exchange(s.port, (post_head(host=host) + f"Content-Length: {len(body)}\r\n"
                                       "Connection: close\r\n\r\n").encode() + body)
        assert [a[0] for a in answers] == [200], (host, answers)
    for host in ["evil.example", f"evil.example:{s.port}", "127.0.0.1.evil.example", "localhost.evil", "x@127.0.0.1",
                 "127.0.0.1:abc", "[::1", "clef.internal.evil"]:
        t, answers = exchange(s.port, (post_head(host=host) + f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
        assert [a[0] for a in answers] == [421], (host, answers)
        assert json.loads(answers[0][1])["detail"]["error_type"] == "misdirected_request"
    # GET routes are guarded too (a rebinding page could read /metrics)
    t, answers = exchange(s.port, b"GET /metrics HTTP/1.1\r\nHost: evil.example\r\n\r\n")
    assert [a[0] for a in answers] == [421]
    # HTTP/1.1 without Host: 400; HTTP/1.0 may omit it
    t, answers = exchange(s.port, b"GET /health HTTP/1.1\r\n\r\n")
    assert [a[0] for a in answers] == [400]
    t, answers = exchange(s.port, b"GET /health HTTP/1.0\r\n\r\n")
    assert [a[0] for a in answers] == [200]
    t, answers = exchange(s.port, b"GET /health HTTP/1.1\r\nHost: localhost\r\nHost: localhost\r\n\r\n")
    assert [a[0] for a in answers] == [400]
    # --allow-host '*' accepts any Host
    s2 = make_server("-q", "--allow-host", "*")
    t, answers = exchange(s2.port, b"GET /health HTTP/1.1\r\nHost: anything.example\r\nConnection: close\r\n\r\n")
    assert [a[0] for a in answers] == [200]


@pytest.mark.parametrize("ctype", [None, "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                                   "multipart/form-data; boundary=x", "application/jsonx", "json", "application/",
                                   "text/json"])
def test_non_json_content_type_is_415(server, ctype):
    name, req = SMALL[0]
    headers = {} if ctype is None else {"Content-Type": ctype}
    body = json.dumps(req).encode()
    for path, check in [("/v1/systemone", lambda j: j["detail"]["error_type"] == "unsupported_media_type"),
                        ("/ai/run/@cf/cloudflare/clef", lambda j: j["success"] is False),
                        ("/api/alpha/decisions", lambda j: j["error"]["code"] == 415)]:
        status, h, resp = server.request("POST", path, body, headers)
        assert status == 415 and h["content-type"] == "application/json", (ctype, path, resp[:200])
        assert check(json.loads(resp)), resp


@pytest.mark.parametrize("ctype", ["application/json", "application/json; charset=utf-8", "APPLICATION/JSON",
                                   "application/vnd.clef+json", "application/problem+json;v=1"])
def test_json_content_types_are_decided(server, decide_outputs, ctype):
    name, req = SMALL[0]
    status, _, resp = server.request("POST", "/v1/systemone", json.dumps(req, ensure_ascii=False).encode("utf-8"),
                                     {"Content-Type": ctype})
    assert status == 200 and resp == decide_outputs[name]


# ---------------------------------------------------------------------------------------------
# Framing (request smuggling / desync)

BAD_FRAMING = {
    "plus_sign_length": "Content-Length: +2\r\n\r\n{}",
    "length_with_letters": "Content-Length: 2abc\r\n\r\n{}",
    "length_list": "Content-Length: 2, 2\r\n\r\n{}",
    "two_lengths": "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{} ",
    "two_equal_lengths": "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
    "negative_length": "Content-Length: -1\r\n\r\n{}",
    "te_list": "Transfer-Encoding: chunked, identity\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    "te_xchunked": "Transfer-Encoding: xchunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    "te_gzip_chunked": "Transfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    "te_identity": "Transfer-Encoding: identity\r\n\r\n{}",
    "te_twice": "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    "te_and_length": "Transfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    "chunk_without_crlf": "Transfer-Encoding: chunked\r\n\r\n2\r\n{}0\r\n\r\n",
    "bad_chunk_size": "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    "bare_lf_header": "X-A: 1\nContent-Length: 2\r\n\r\n{}",
    "header_without_colon": "Broken header line\r\nContent-Length: 2\r\n\r\n{}",
    "space_before_colon": "Content-Length : 2\r\n\r\n{}",
}


@pytest.mark.parametrize("case", sorted(BAD_FRAMING))
def test_bad_framing_is_400_at_once_and_the_connection_ends(server, case):
    raw = (post_head() + BAD_FRAMING[case]).encode() + b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    took, answers = exchange(server.port, raw, limit=5)
    assert took < 2, (case, took)
    assert [a[0] for a in answers] == [400], (case, answers)  # nothing after it is served
    assert json.loads(answers[0][1])["detail"]["error_type"] == "invalid_request_error"


def test_bare_lf_request_line_is_400_at_once(server):
    took, answers = exchange(server.port, b"GET /health HTTP/1.1\nHost: 127.0.0.1\n\n", limit=5)
    assert took < 2 and [a[0] for a in answers] == [400]


def test_header_limits_are_431_at_once(server):
    many = "".join(f"X-H{i}: v\r\n" for i in range(150))
    took, answers = exchange(server.port, f"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n{many}\r\n".encode())
    assert took < 2 and [a[0] for a in answers] == [431]
    # A header block that never ends: refused as soon as it passes the limit, not at a timeout.
    s = connect(server.port)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
    t0 = time.monotonic()
    try:
        for _ in range(64):
            s.sendall(b"a" * 1024)
    except OSError:
        pass
    data = read_until_close(s, limit=5)
    s.close()
    assert time.monotonic() - t0 < 2 and data.startswith(b"HTTP/1.1 431 "), data[:200]
    # a 100 KB request line
    took, answers = exchange(server.port, b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert took < 2 and [a[0] for a in answers] == [431]


def test_lengths_refused_before_the_body(make_server):
    s = make_server("-q", "--max-body", "100000")
    for length in ["100001", "99999999999999999999999999", "18446744073709551616"]:
        sock = connect(s.port)
        t0 = time.monotonic()
        sock.sendall((post_head() + f"Content-Length: {length}\r\n\r\n").encode())  # no body follows
        data = read_until_close(sock, limit=5)
        sock.close()
        assert time.monotonic() - t0 < 2, length
        assert data.startswith(b"HTTP/1.1 413 "), (length, data[:200])
        assert b"Connection: close" in data
    # A POST without a length: 411 at once (not a read timeout).
    took, answers = exchange(s.port, (post_head() + "\r\n").encode() + b"{}")
    assert took < 2 and [a[0] for a in answers] == [411]
    took, answers = exchange(s.port, (post_head("/api/alpha/decisions") + "\r\n").encode())
    assert [a[0] for a in answers] == [411] and json.loads(answers[0][1])["error"]["code"] == 411


def test_get_with_a_body_reads_it_and_pipelining_answers_in_order(server, decide_outputs):
    s = connect(server.port)
    smuggled = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n" % len(smuggled) + smuggled +
              b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    answers = read_answers(s, 2)
    assert [a[0] for a in answers] == [200, 200]
    assert all(json.loads(a[2])["status"] == "ok" for a in answers)  # the body was not run as /metrics
    # Two pipelined GET /health, a decision and a 404: four answers in order on one connection.
    name, req = SMALL[1]
    body = json.dumps(req, ensure_ascii=False).encode()
    s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" +
              (post_head() + f"Content-Length: {len(body)}\r\n\r\n").encode() + body +
              b"GET /nope HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    answers = read_answers(s, 4, limit=60)
    s.close()
    assert [a[0] for a in answers] == [200, 200, 200, 404]
    assert answers[2][2] == decide_outputs[name]


def test_half_close_still_gets_the_answer(server, decide_outputs):
    name, req = SMALL[2]
    body = json.dumps(req, ensure_ascii=False).encode()
    s = connect(server.port, timeout=60)
    s.sendall((post_head() + f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
    s.shutdown(socket.SHUT_WR)
    answers = read_answers(s, 1, limit=60)
    s.close()
    assert answers[0][0] == 200 and answers[0][2] == decide_outputs[name]
    # two pipelined GET /health, then half-close: two answers
    s = connect(server.port)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 2)
    s.shutdown(socket.SHUT_WR)
    answers = read_answers(s, 2)
    s.close()
    assert [a[0] for a in answers] == [200, 200]


def test_half_close_while_queued_is_not_a_disconnect(make_server, decide_outputs):
    s = make_server("-q")
    heavy = json.dumps(dict(corpus())["sixty-four-questions"]).encode()
    name, req = SMALL[3]
    body = json.dumps(req, ensure_ascii=False).encode()
    hs = []
    for _ in range(2):  # keep the engine busy so the next request waits in the queue
        h = connect(s.port, timeout=60)
        h.sendall((post_head() + f"Content-Length: {len(heavy)}\r\n\r\n").encode() + heavy)
        hs.append(h)
    c = connect(s.port, timeout=60)
    c.sendall((post_head() + f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
    c.shutdown(socket.SHUT_WR)
    answers = read_answers(c, 1, limit=60)
    assert answers[0][0] == 200 and answers[0][2] == decide_outputs[name]
    for h in hs:
        assert read_answers(h, 1, limit=60)[0][0] == 200
        h.close()
    c.close()


# ---------------------------------------------------------------------------------------------
# Auth before the body, validation before the queue


def test_auth_is_checked_before_the_body_and_before_404_405(make_server):
    s = make_server("-q", "--api-key", "k3y")
    # A huge declared body without the key: 401 at once, the body is never read.
    sock = connect(s.port)
    t0 = time.monotonic()
    sock.sendall((post_head() + "Content-Length: 1000000000\r\n\r\n").encode())
    data = read_until_close(sock, limit=5)
    sock.close()
    assert time.monotonic() - t0 < 2 and data.startswith(b"HTTP/1.1 401 "), data[:200]
    # A gzip bomb without the key is not decompressed either (401, not 413).
    bomb = gzip.compress(b" " * (8 << 20))
    status, _, _ = s.request("POST", "/v1/systemone", bomb, {"Content-Encoding": "gzip",
                                                             "Content-Type": "application/json"})
    assert status == 401
    for method, path in [("GET", "/nope"), ("POST", "/nope"), ("GET", "/v1/systemone"), ("DELETE", "/v1/models")]:
        status, headers, body = s.request(method, path, b"{}" if method != "GET" else None)
        assert status == 401, (method, path)
        assert headers.get("www-authenticate") == "Bearer", headers  # RFC 9110 §11.6.1
        assert json.loads(body)["detail"]["error_type"] == "authentication_error"
    good = {"Authorization": "Bearer k3y"}
    assert s.request("GET", "/nope", headers=good)[0] == 404
    assert s.request("GET", "/v1/systemone", headers=good)[0] == 405
    assert s.request("GET", "/health")[0] == 200
    assert s.request("POST", "/health", b"{}")[0] == 405  # /health stays open


def test_bad_bodies_are_refused_without_taking_a_queue_slot(make_server, tiny_model, tmp_path):
    from conftest import bad_cases
    from test_routes import decide_errors
    s = make_server("-q", "--queue", "1", "--max-running", "1", "--state-cache-mb", "0")  # no cache: the second heavy one is slow too
    heavy = json.dumps(dict(corpus())["sixty-four-questions"]).encode()
    # Bodies refused while parsing (the engine refuses image and length problems only later).
    cases = [b for n, b in bad_cases() if "image" not in n and "video" not in n][:12]
    assert len(cases) >= 8
    expected = decide_errors(tiny_model, cases, tmp_path)
    # Reference bytes: each bad body alone on an idle server.
    alone = [s.request("POST", "/v1/systemone", b.encode(), {"Content-Type": "application/json"}) for b in cases]
    hs = []
    for want in ("clef_decisions_running", "clef_queue_depth"):  # one running, then one queued: the queue (1) is full
        h = connect(s.port, timeout=60)
        h.sendall((post_head() + f"Content-Length: {len(heavy)}\r\n\r\n").encode() + heavy)
        hs.append(h)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = s.metrics()
            if m[want] == 1:
                break
            time.sleep(0.002)
        assert m[want] == 1, m
    t0 = time.monotonic()
    busy = [s.request("POST", "/v1/systemone", b.encode(), {"Content-Type": "application/json"}) for b in cases]
    took = time.monotonic() - t0
    m2 = s.metrics()
    assert m2["clef_queue_depth"] == 1, "the queue must have stayed full during the bad requests"
    for h in hs:
        assert read_answers(h, 1, limit=60)[0][0] == 200
        h.close()
    for (st, _, body), (st2, _, body2), (code, _) in zip(alone, busy, expected):
        # every one is a 4xx now, not a 503: it never needed a queue slot; same bytes as alone
        assert 400 <= st2 < 500 and (st2, body2) == (st, body), (code, st2, body2[:200])
        assert json.loads(body2)["detail"][0]["type"] == code or code == "unknown_model"
    assert m2.get('clef_overload_total{reason="queue_full"}', 0) == 0
    assert took < 5, took


# ---------------------------------------------------------------------------------------------
# Deadlines, connection limit, shutdown


def test_header_and_body_deadlines(make_server):
    s = make_server("-q", "--header-timeout", "0.5", "--body-timeout", "0.7")
    sock = connect(s.port)
    t0 = time.monotonic()
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.")  # stalls inside the headers
    data = read_until_close(sock, limit=5)
    took = time.monotonic() - t0
    sock.close()
    assert 0.4 < took < 1.5 and data.startswith(b"HTTP/1.1 408 "), (took, data[:200])
    sock = connect(s.port)
    t0 = time.monotonic()
    sock.sendall((post_head() + "Content-Length: 100\r\n\r\n{\"state\":").encode())  # stalls inside the body
    data = read_until_close(sock, limit=5)
    took = time.monotonic() - t0
    sock.close()
    assert 0.6 < took < 1.7 and data.startswith(b"HTTP/1.1 408 "), (took, data[:200])
    # A connection that sends nothing is closed without an answer.
    sock = connect(s.port)
    t0 = time.monotonic()
    assert read_until_close(sock, limit=5) == b""
    assert time.monotonic() - t0 < 1.5
    sock.close()


def test_connections_beyond_the_limit_are_refused_cleanly(make_server):
    s = make_server("-q", "--max-connections", "8", "--header-timeout", "20", "--body-timeout", "20")
    held = [connect(s.port) for _ in range(8)]
    for h in held:  # uploads in progress: none waits for a request, so none can be shed
        h.sendall(post_head().encode() + b"Content-Length: 100\r\n\r\n{")
    time.sleep(0.2)
    took, answers = exchange(s.port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", limit=5)
    assert took < 2 and [a[0] for a in answers] == [503], answers
    assert json.loads(answers[0][1])["detail"]["error_type"] == "overloaded_error"
    for h in held:
        h.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        took, answers = exchange(s.port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        if answers and answers[0][0] == 200:
            break
        time.sleep(0.05)
    assert answers[0][0] == 200
    assert s.metrics()['clef_overload_total{reason="connections"}'] >= 1
    # Connections still sending headers are shed, oldest first, to admit a new one.
    fds = len(os.listdir(f"/proc/{s.pid}/fd"))
    waiting = []
    for _ in range(8):
        w = connect(s.port)
        w.sendall(b"GET /health HTTP/1.1\r\n")
        waiting.append(w)
        time.sleep(0.01)
    deadline = time.monotonic() + 10  # until the server holds all 8 (it is then full)
    while len(os.listdir(f"/proc/{s.pid}/fd")) < fds + 8 and time.monotonic() < deadline:
        time.sleep(0.02)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        took, answers = exchange(s.port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
                                 limit=5)
        if answers and answers[0][0] == 200:
            break
        time.sleep(0.05)
    assert [a[0] for a in answers] == [200], answers
    assert read_until_close(waiting[0], limit=5) == b""  # the oldest was closed, unanswered
    for w in waiting:
        w.close()
    deadline = time.monotonic() + 5  # until the server has seen the closes (it is full until then)
    while s.request("GET", "/health")[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert s.metrics()["clef_connections_shed_total"] >= 1


def test_answers_during_shutdown_carry_connection_close(make_server):
    s = make_server("-q")
    heavy = json.dumps(dict(corpus())["sixty-four-questions"]).encode()
    socks = []
    for _ in range(3):
        c = connect(s.port, timeout=60)
        c.sendall((post_head() + f"Content-Length: {len(heavy)}\r\n\r\n").encode() + heavy)
        socks.append(c)
    idle = connect(s.port)  # an idle keep-alive connection ends at once
    idle.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert read_answers(idle, 1)[0][0] == 200
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = s.metrics()
        if m["clef_queue_depth"] + m["clef_decisions_running"] + m["clef_decisions_total"] >= 3:
            break
        time.sleep(0.01)
    s.proc.send_signal(15)
    assert read_until_close(idle, limit=5) == b""
    for c in socks:
        data = read_until_close(c, limit=60)
        done = [a for a in data.split(b"HTTP/1.1 ")[1:] if not a.startswith(b"100 ")]
        assert done and done[-1].startswith(b"200 ") and b"Connection: close" in done[-1], data[:300]
        c.close()
    assert s.proc.wait(timeout=30) == 0


# ---------------------------------------------------------------------------------------------
# Slowloris and the flood


def raise_nofile(n: int):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(n, soft)), hard))
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        pytest.fail(f"RLIMIT_NOFILE hard limit {hard} is below the {n} descriptors this test needs")


def test_slowloris_does_not_starve_real_clients(make_server, decide_outputs):
    raise_nofile(2400)
    s = make_server("-q", "--header-timeout", "60")
    for name, req in SMALL:  # warm-up: the engine's buffers are not the HTTP layer's
        assert s.post_json("/v1/systemone", req)[0] == 200
    before = proc_status(s.pid)
    stalled = []
    for i in range(1000):
        c = connect(s.port)
        c.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow-%d: " % i)
        stalled.append(c)
    errors = []
    lat = []
    lock = threading.Lock()

    def client(k):
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
        for i in range(25):
            name, req = SMALL[(k * 5 + i) % len(SMALL)]
            t0 = time.monotonic()
            conn.request("GET", "/health")
            r = conn.getresponse()
            r.read()
            with lock:
                lat.append(time.monotonic() - t0)
            if r.status != 200:
                errors.append(("health", r.status))
            conn.request("POST", "/v1/systemone", body=json.dumps(req, ensure_ascii=False).encode("utf-8"),
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            body = r.read()
            if r.status != 200 or body != decide_outputs[name]:
                with lock:
                    errors.append((name, r.status, body[:100]))
        conn.close()

    ts = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    during = proc_status(s.pid)
    for c in stalled:
        c.close()
    assert errors == [], errors[:5]
    lat.sort()
    p99 = lat[int(len(lat) * 0.99) - 1]
    print(f"slowloris: /health p99 {p99 * 1000:.1f} ms, threads {before['Threads']} -> {during['Threads']}, "
          f"RSS {before['VmRSS']} -> {during['VmRSS']}")
    assert len(lat) == 100 and p99 < 0.1, f"/health p99 {p99 * 1000:.1f} ms"
    # Event-driven: no thread per connection, and ~KiB per stalled connection.
    assert int(during["Threads"]) <= int(before["Threads"]) + 2, (before["Threads"], during["Threads"])
    rss_growth = int(during["VmRSS"].split()[0]) - int(before["VmRSS"].split()[0])
    assert rss_growth < 32 * 1024, f"RSS grew {rss_growth} KiB for 1000 stalled connections"


def flood_requests(n: int, seed: int):
    """Malformed or truncated requests: bad chunking, lying lengths, huge headers, compression
    bombs, binary garbage, smuggling patterns. Each ends with the client's half-close."""
    rng = random.Random(seed)
    bomb_gz = gzip.compress(b"[" * (4 << 20))
    bomb_df = zlib.compress(b" " * (4 << 20), 9)
    ok_body = json.dumps(SMALL[0][1]).encode()
    for i in range(n):
        k = i % 12
        if k == 0:
            yield bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
        elif k == 1:  # bad chunk sizes / missing CRLF
            yield (post_head() + "Transfer-Encoding: chunked\r\n\r\n").encode() + rng.choice(
                [b"zz\r\n", b"5\r\n{}", b"-1\r\nx\r\n", b"2\r\n{}0\r\n\r\n", b"ffffffffffffffffff\r\n", b"2;\x00\r\n{}\r\n"])
        elif k == 2:  # lying length: shorter than the body (the rest is garbage, not a request)
            yield (post_head() + "Content-Length: 5\r\n\r\n").encode() + ok_body
        elif k == 3:  # lying length: longer than the body, then half-close
            yield (post_head() + f"Content-Length: {len(ok_body) + 50}\r\n\r\n").encode() + ok_body
        elif k == 4:  # huge header
            yield b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Huge: " + b"h" * rng.randrange(17000, 40000) + b"\r\n\r\n"
        elif k == 5:
            yield (post_head(extra="Content-Encoding: gzip\r\n") + f"Content-Length: {len(bomb_gz)}\r\n\r\n").encode() + bomb_gz
        elif k == 6:
            yield (post_head(extra="Content-Encoding: deflate\r\n") + f"Content-Length: {len(bomb_df)}\r\n\r\n").encode() + bomb_df
        elif k == 7:  # smuggling: CL + TE, TE obfuscations
            yield (post_head() + rng.choice(["Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
                                             "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n",
                                             "Transfer-Encoding:  chunked , x\r\n", "Transfer-Encoding: \x0bchunked\r\n",
                                             "Content-Length: 0\r\nContent-Length: 44\r\n"]) +
                   "\r\n0\r\n\r\nGET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").encode()
        elif k == 8:  # bad request lines
            yield rng.choice([b"GET\r\n\r\n", b"GET / HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n", b" / HTTP/1.1\r\n\r\n",
                              b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\x00: x\r\n\r\n", b"\r\n\r\n\r\n"])
        elif k == 9:  # truncated corpus request
            cut = rng.randrange(1, len(ok_body))
            yield (post_head() + f"Content-Length: {cut}\r\n\r\n").encode() + ok_body[:cut]
        elif k == 10:  # corrupt compressed data
            yield (post_head(extra="Content-Encoding: " + rng.choice(["gzip", "br", "deflate"]) + "\r\n") +
                   "Content-Length: 40\r\n\r\n").encode() + bytes(rng.randrange(256) for _ in range(40))
        else:  # truncated headers
            yield b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le"


def test_flood_of_malformed_requests_then_the_corpus(make_server, decide_outputs):
    raise_nofile(4096)
    deadline = 1.0
    s = make_server("-q", "--max-body", "1000000", "--header-timeout", str(deadline), "--body-timeout", str(deadline))
    # warm-up: the corpus once, so the baseline includes the engine's own buffers
    for name, req in corpus():
        status, _, body = s.post_json("/v1/systemone", req)
        assert status == 200 and body == decide_outputs[name], name
    rss0 = s.rss_kib()
    # Every 250th request stalls (no half-close): it must be cut off at its deadline (408).
    stalls = [b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le",  # inside the headers
              (post_head() + "Content-Length: 100\r\n\r\n").encode() + b'{"state":']  # inside the body
    reqs = [(raw, True) if i % 250 else (stalls[(i // 250) % 2], False)
            for i, raw in enumerate(flood_requests(10000, seed=15))]
    statuses = {}
    worst = [0.0]
    lock = threading.Lock()
    failures = []

    def worker(part):
        for raw, half_close in part:
            c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
            t0 = time.monotonic()
            try:
                try:
                    c.sendall(raw)
                    if half_close:
                        c.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                data = b""
                while True:
                    try:
                        d = c.recv(65536)
                    except ConnectionResetError:
                        break
                    if not d:
                        break
                    data += d
            except socket.timeout:
                with lock:
                    failures.append(("no close within 10 s", raw[:80]))
                continue
            finally:
                c.close()
            took = time.monotonic() - t0
            for part_ in data.split(b"HTTP/1.1 ")[1:]:
                st = int(part_[:3])
                with lock:
                    statuses[st] = statuses.get(st, 0) + 1
                if st >= 500:
                    with lock:
                        failures.append((st, raw[:80], data[:200]))
            with lock:
                worst[0] = max(worst[0], took)

    threads = [threading.Thread(target=worker, args=(reqs[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == [], failures[:5]
    assert worst[0] < deadline + 1.5, f"a request waited {worst[0]:.2f} s (deadline {deadline} s)"
    assert statuses.get(200, 0) + statuses.get(422, 0) + statuses.get(400, 0) > 1000, statuses
    assert statuses.get(413, 0) >= 1000 and statuses.get(431, 0) >= 500, statuses
    assert statuses.get(408, 0) == 40, statuses  # the stalled ones were cut off, with an answer
    assert s.proc.poll() is None
    rss1 = s.rss_kib()
    for name, req in corpus():
        status, _, body = s.post_json("/v1/systemone", req)
        assert status == 200 and body == decide_outputs[name], name
    rss2 = s.rss_kib()
    print(f"flood: statuses {sorted(statuses.items())}, worst wait {worst[0]:.2f} s, "
          f"RSS {rss0} -> {rss1} (after the flood) -> {rss2} KiB (after the corpus)")
    assert rss1 - rss0 < 64 * 1024, f"RSS {rss0} KiB -> {rss1} KiB after the flood"
    assert rss2 - rss0 < 64 * 1024, f"RSS {rss0} KiB -> {rss2} KiB after the flood and the corpus"


def test_help_lists_the_http_flags():
    import subprocess
    from conftest import clef_bin, env
    r = subprocess.run([clef_bin(), "serve", "--help"], capture_output=True, text=True, env=env(), timeout=60)
    assert r.returncode == 0
    for flag in ["--allow-host", "--header-timeout", "--body-timeout", "--max-connections", "--body-budget",
                 "X-Clef-Route-Key"]:
        assert flag in r.stdout, flag
    for bad in (["--header-timeout", "0"], ["--max-connections", "0"], ["--body-timeout", "x"], ["--body-budget", "0"]):
        assert subprocess.run([clef_bin(), "serve", *bad], capture_output=True, env=env(), timeout=60).returncode == 2


def test_keep_alive_limit_closes_after_100_requests(server):
    s = connect(server.port)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 101)  # pipelined; the 101st is never read
    answers = read_answers(s, 100)
    assert [a[0] for a in answers] == [200] * 100
    assert all("connection" not in a[1] for a in answers[:99])
    assert answers[99][1]["connection"] == "close"
    assert read_until_close(s, limit=5) == b""
    s.close()


def test_pipelining_past_the_keep_alive_limit_loses_no_answer(server):
    """The 100th answer ends the connection while 900 pipelined requests are still unread: the server
    half-closes and drains them (lingering close), so the client reads all 100 answers and a clean end
    of stream, never a reset that would destroy answers it had not read yet."""
    s = connect(server.port)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 1000)
    time.sleep(0.5)  # let the server answer and close before the client reads anything
    data = b""
    deadline = time.monotonic() + 10
    while True:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            d = s.recv(65536)
        except ConnectionResetError:
            raise AssertionError(f"connection reset after {data.count(b'HTTP/1.1 200 ')} answers")
        if not d:
            break
        data += d
    s.close()
    assert data.count(b"HTTP/1.1 200 ") == 100
    assert data.count(b"Connection: close") == 1


def test_several_content_encoding_fields_are_415(server):
    """Separate Content-Encoding fields form one list (RFC 9110 §5.3): two codings are refused, not
    half-decoded."""
    body = gzip.compress(gzip.compress(json.dumps(SMALL[0][1]).encode()))
    for codings in (["gzip", "gzip"], ["identity", "gzip"], ["br", "gzip"]):
        fields = "".join(f"Content-Encoding: {c}\r\n" for c in codings)
        raw = (post_head() + fields + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body
        _, answers = exchange(server.port, raw)
        assert [a[0] for a in answers] == [415], (codings, answers)


def test_http10_transfer_encoding_is_400_and_closes(server):
    """Transfer-Encoding in an HTTP/1.0 request is faulty framing (RFC 9112 §6.1): 400, and the
    pipelined request after it is never read."""
    body = json.dumps(SMALL[0][1]).encode()
    raw = (b"POST /v1/systemone HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           b"Connection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n" +
           f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\nGET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    _, answers = exchange(server.port, raw)
    assert [a[0] for a in answers] == [400]


def test_shutdown_does_not_wait_for_a_slow_upload(make_server):
    """SIGTERM ends a connection still sending its body at once (its request was never started), so a
    slow uploader cannot hold the shutdown for --body-timeout (30 s by default)."""
    s = make_server("-q")
    up = connect(s.port)
    up.sendall((post_head() + "Content-Length: 1000\r\n\r\n").encode() + b'{"sta')
    time.sleep(0.5)
    t0 = time.monotonic()
    s.proc.send_signal(15)
    assert s.proc.wait(timeout=20) == 0
    took = time.monotonic() - t0
    up.close()
    assert took < 5, f"shutdown took {took:.1f} s"
