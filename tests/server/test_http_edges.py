# SPDX-License-Identifier: MIT
"""Request edges of `clef serve` answered as RFC 9110 / 9112 and docs/COMPATIBILITY.md say: a
client that leaves mid-headers is no 400, an absolute-form target's authority replaces Host, a
Host port is 16 bits, escaped letters in a path reach no route, two credentials are malformed, a
length too large for any body and a chunk larger than --max-body are 413 at once. Loopback only."""

from __future__ import annotations

import json
import socket
import time

from test_http_layer import connect, exchange, read_until_close


def statuses(port: int, raw: bytes, limit: float = 5) -> list:
    return [a[0] for a in exchange(port, raw, limit)[1]]


def test_leaving_mid_headers_is_not_a_bad_request(server):
    key = 'clef_requests_total{route="unmatched",status="400"}'
    before = server.metrics().get(key, 0)
    for cut in (b"G", b"GET /health HTTP/1.1\r\nHo", b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\n"):
        for _ in range(5):
            c = connect(server.port)
            c.sendall(cut)
            c.shutdown(socket.SHUT_WR)
            assert read_until_close(c, limit=5) == b"", cut  # no answer owed, none sent
            c.close()
    # a request that is malformed is still a 400 (the counter counts)
    assert statuses(server.port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n") == [400]
    assert server.metrics().get(key, 0) == before + 1


def test_absolute_form_authority_replaces_host(server):
    get = "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n"
    assert statuses(server.port, get.format("http://evil.example/health", "127.0.0.1").encode()) == [421]
    assert statuses(server.port, get.format("http://127.0.0.1/health", "evil.example").encode()) == [200]
    assert statuses(server.port, get.format(f"HTTPS://localhost:{server.port}/health", "x").encode()) == [200]
    for target in ("ftp://127.0.0.1/health", "file:///health", "gopher://127.0.0.1/health"):
        assert statuses(server.port, get.format(target, "127.0.0.1").encode()) == [400], target


def test_host_port_above_65535_is_refused(server):
    get = "GET /health HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n"
    assert statuses(server.port, get.format("127.0.0.1:65535").encode()) == [200]
    for host in ("127.0.0.1:65536", "localhost:99999", "[::1]:70000"):
        assert statuses(server.port, get.format(host).encode()) == [421], host


def test_escaped_letters_do_not_reach_a_route(server):
    get = "GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    assert statuses(server.port, get.format("/metrics").encode()) == [200]
    for path in ("/%6detrics", "/%6Detrics", "/%68ealth", "/v1%2Fmodels"):
        assert statuses(server.port, get.format(path).encode()) == [404], path
    # an escaped '@' (not a letter) still names the Cloudflare route
    body = b'{"state":"x","questions":{"q":{"type":"noul"}}}'
    raw = (f"POST /ai/run/%40cf/cloudflare/clef HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body
    t, answers = exchange(server.port, raw, limit=60)
    assert [a[0] for a in answers] == [200] and json.loads(answers[0][1])["success"] is True


def test_two_authorization_headers_are_400(server, make_server):
    two = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n"
    assert statuses(server.port, two) == [400]
    s = make_server("-q", "--api-key", "k3y")
    both = (b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer k3y\r\n"
            b"Authorization: Bearer wrong\r\n\r\n")
    assert statuses(s.port, both) == [400]
    assert statuses(s.port, both.replace(b"Bearer wrong", b"Bearer k3y")) == [400]


def test_lengths_beyond_any_body_are_413_at_once(server):
    head = b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    for n in (b"18446744073709551615", b"9223372036854775808", b"99999999999999999999999"):
        t, answers = exchange(server.port, head + b"Content-Length: " + n + b"\r\n\r\n")
        assert [a[0] for a in answers] == [413], (n, answers)
        assert json.loads(answers[0][1])["detail"]["error_type"] == "request_too_large"
    # a chunk announced larger than --max-body (64 MiB): 413 before any of its bytes
    t0 = time.monotonic()
    t, answers = exchange(server.port, head + b"Transfer-Encoding: chunked\r\n\r\n4000001\r\n{", limit=5)
    assert [a[0] for a in answers] == [413] and time.monotonic() - t0 < 2, answers
    # small chunks are read as usual (this body is valid JSON but no request: 422)
    t, answers = exchange(server.port, head + b"Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
                          b"2\r\n{}\r\n0\r\n\r\n", limit=30)
    assert [a[0] for a in answers] == [422]
