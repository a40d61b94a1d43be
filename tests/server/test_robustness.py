# SPDX-License-Identifier: MIT
"""Bad input, huge bodies, vanished clients, auth, overload and shutdown of `clef serve`."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import corpus


def raw_exchange(port: int, head: bytes, body_chunks, timeout: float = 60) -> bytes:
    """Sends a raw request (sending errors ignored: the server may stop reading) and returns
    everything the server answers until it closes or `timeout`."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(head)
            for c in body_chunks:
                s.sendall(c)
        except OSError:
            pass
        out = b""
        while True:
            try:
                d = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not d:
                break
            out += d
            if b"\r\n\r\n" in out:
                head_end = out.index(b"\r\n\r\n") + 4
                hdr = out[:head_end].decode("latin-1").lower()
                n = next((int(x.split(":")[1]) for x in hdr.split("\r\n") if x.startswith("content-length:")), None)
                if n is not None and len(out) >= head_end + n:
                    break
        return out
    finally:
        s.close()


def status_of(resp: bytes) -> int:
    return int(resp.split(b" ", 2)[1])


def body_of(resp: bytes) -> dict:
    return json.loads(resp.split(b"\r\n\r\n", 1)[1])


def test_100_mb_body_is_413_and_the_server_stays_small(server):
    size = 100 << 20
    rss0 = server.rss_kib()
    head = (f"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {size}\r\n\r\n").encode()
    chunk = b" " * (1 << 20)
    resp = raw_exchange(server.port, head, (chunk for _ in range(100)))
    assert status_of(resp) == 413, resp[:300]
    assert body_of(resp)["detail"]["error_type"] == "request_too_large"
    # Chunked transfer encoding has no length up front: the server counts as it reads.
    head = (b"POST /api/alpha/decisions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    one = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
    t0 = time.monotonic()
    resp = raw_exchange(server.port, head, (one for _ in range(100)), timeout=30)
    # The server stops reading at the limit and resets the connection after its answer, so the
    # sender learns at once (not after its own send timeout).
    assert time.monotonic() - t0 < 20
    assert status_of(resp) == 413, resp[:300]
    assert body_of(resp)["error"]["code"] == 413
    assert server.rss_kib() - rss0 < 48 * 1024, "a refused body must not be buffered"
    name, req = corpus()[0]
    assert server.post_json("/v1/systemone", req)[0] == 200


def test_unreadable_body_is_400_json_and_the_connection_ends(server):
    # A malformed chunk size: the rest of the stream cannot be trusted, so nothing after it is served.
    head = (b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    s.sendall(head + b"zz\r\nGET /health HTTP/1.1\r\n\r\n")
    resp = b""
    while True:  # until the server closes (a timeout here fails the test)
        d = s.recv(65536)
        if not d:
            break
        resp += d
    s.close()
    assert status_of(resp) == 400 and body_of(resp)["detail"]["error_type"] == "invalid_request_error"
    assert resp.count(b"HTTP/1.1") == 1


def test_gzip_bomb_is_413_and_unknown_encoding_415(make_server):
    import gzip
    s = make_server("--max-body", "1000000", "-q")
    bomb = gzip.compress(b" " * (20 << 20))  # 20 MiB of spaces, ~20 KB compressed
    json_ct = {"Content-Type": "application/json"}
    status, _, body = s.request("POST", "/v1/systemone", bomb, {"Content-Encoding": "gzip", **json_ct})
    assert status == 413, body[:200]
    name, req = corpus()[0]
    gz = gzip.compress(json.dumps(req).encode())
    status, _, body = s.request("POST", "/v1/systemone", gz, {"Content-Encoding": "gzip", **json_ct})
    assert status == 200 and json.loads(body)["answers"]
    status, h, body = s.request("POST", "/v1/systemone", b"(\xb5/\xfd", {"Content-Encoding": "zstd", **json_ct})
    assert status == 415 and h["content-type"] == "application/json"


def malformed_bodies(n: int, seed: int):
    """Generated bodies that are not valid requests: random bytes, truncations and mutations of
    corpus requests, wrong types, deep nesting."""
    rng = random.Random(seed)
    # Small requests only: a mutation that stays valid is decided, and the big ones take ~0.2 s each.
    reqs = [b for b in (json.dumps(r, ensure_ascii=False).encode() for _, r in corpus()) if len(b) < 1500]
    for i in range(n):
        k = i % 6
        base = reqs[rng.randrange(len(reqs))]
        if k == 0:
            yield bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
        elif k == 1:
            yield base[: rng.randrange(1, len(base) - 1)]
        elif k == 2:
            b = bytearray(base)
            for _ in range(rng.randrange(1, 4)):
                b[rng.randrange(len(b))] = rng.choice(b'{}[]",:\\\x00\xff\xc3')
            yield bytes(b)
        elif k == 3:
            yield json.dumps(rng.choice([[], 1, "x", None, {"questions": 5}, {"state": 1, "questions": {"q": 1}},
                                         {"state": 1, "questions": {"q": {"type": "score", "criteria": "abc"}}}])).encode()
        elif k == 4:
            d = rng.randrange(100, 5000)
            yield b'{"state":' + b"[" * d + b"]" * d + b',"questions":{"q":{"type":"noul"}}}'
        else:
            yield b'{"state":"x","questions":{"q":{"type":"noul","instructions":"\\ud800"}}}'


def test_10000_malformed_bodies_then_a_good_request(server, decide_outputs):
    bodies = list(malformed_bodies(10000, seed=6))
    statuses = {}
    lock = threading.Lock()

    def worker(part):
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        for b in part:
            try:
                conn.request("POST", "/v1/systemone", body=b, headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
            except (http.client.HTTPException, OSError):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
                conn.request("POST", "/v1/systemone", body=b, headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
            assert r.getheader("Content-Type") == "application/json"
            j = json.loads(data)
            if r.status == 200:
                assert j["answers"], "an answer must have answers"
            else:
                assert 400 <= r.status < 500, (r.status, data[:200])
            with lock:
                statuses[r.status] = statuses.get(r.status, 0) + 1
        conn.close()

    threads = [threading.Thread(target=worker, args=(bodies[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(statuses.values()) == 10000
    assert not any(s >= 500 for s in statuses), statuses
    name, req = corpus()[1]
    status, _, body = server.post_json("/v1/systemone", req)
    assert status == 200 and body == decide_outputs[name]
    assert server.proc.poll() is None


def test_client_killed_mid_request(server):
    """A client process killed while sending its body, and one killed while waiting for its answer."""
    name, req = corpus()[0]
    body = json.dumps(req).encode()
    code = f"""
import socket, sys, time
s = socket.create_connection(("127.0.0.1", {server.port}))
body = {body!r}
mode = sys.argv[1]
head = (b"POST /v1/systemone HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nContent-Type: application/json\\r\\n"
        b"Content-Length: %d\\r\\n\\r\\n" % len(body))
s.sendall(head + (body[: len(body) // 2] if mode == "half" else body))
print("sent", flush=True)
time.sleep(60)
"""
    for mode in ["half", "full"]:
        p = subprocess.Popen([sys.executable, "-c", code, mode], stdout=subprocess.PIPE)
        assert p.stdout.readline().strip() == b"sent"
        p.kill()
        p.wait()
    status, _, resp = server.post_json("/v1/systemone", req)
    assert status == 200 and json.loads(resp)["answers"]


def test_client_gone_while_queued_is_cancelled(make_server):
    """Requests queued behind slow ones whose clients disconnect are dropped, not decided. One
    decision at a time (--max-running 1), so the light requests cannot join a running batch; the
    clients leave once all five are seen queued (clef_queue_depth), not after a fixed sleep."""
    s = make_server("-q", "--max-running", "1")
    heavy = dict(corpus())["sixty-four-questions"]
    light = dict(corpus())["alert-triage"]
    before = s.metrics()
    results = []

    def send_heavy():
        results.append(s.post_json("/v1/systemone", heavy)[0])

    ts = [threading.Thread(target=send_heavy) for _ in range(3)]
    for t in ts:
        t.start()
    time.sleep(0.05)
    body = json.dumps(light).encode()
    socks = []
    for _ in range(5):
        c = socket.create_connection(("127.0.0.1", s.port))
        c.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        socks.append(c)
    deadline = time.monotonic() + 10
    while True:  # until all eight requests are at the server: queued, running or decided
        m = s.metrics()
        started = m["clef_decisions_total"] - before["clef_decisions_total"] + m.get("clef_decisions_running", 0)
        if m.get("clef_queue_depth", 0) + started >= 8:
            break
        assert time.monotonic() < deadline, ("the light requests never reached the queue", m)
        time.sleep(0.002)
    for c in socks:
        c.close()
    for t in ts:
        t.join()
    time.sleep(0.3)
    after = s.metrics()
    assert results == [200, 200, 200]
    cancelled = after["clef_jobs_cancelled_total"] - before["clef_jobs_cancelled_total"]
    decided = after["clef_decisions_total"] - before["clef_decisions_total"]
    assert cancelled + decided == 8
    assert cancelled >= 3, (cancelled, decided)
    # A client that left is logged and counted as 499, never as an overload 503.
    gone = after.get('clef_requests_total{route="/v1/systemone",status="499"}', 0) - \
        before.get('clef_requests_total{route="/v1/systemone",status="499"}', 0)
    assert gone == cancelled
    assert after['clef_overload_total{reason="queue_timeout"}'] == before['clef_overload_total{reason="queue_timeout"}']
    assert after.get('clef_requests_total{route="/v1/systemone",status="503"}', 0) == \
        before.get('clef_requests_total{route="/v1/systemone",status="503"}', 0)


def test_client_gone_while_running_is_stopped(make_server):
    """A client that disconnects while its decision runs: the engine stops at its next prefill chunk
    (the job is counted cancelled and logged 499, never decided), and the next request is answered.
    The long request is 12,588 tokens, ~390 prefill chunks of 32 (about a second of work; the server
    polls every 50 ms), so a decision run to its end would show in clef_decisions_total."""
    s = make_server("-q", "--chunk", "32", "--max-running", "1")
    light = dict(corpus())["alert-triage"]
    body = json.dumps({"state": "".join(f"case {i}, " for i in range(1500)),
                       "questions": {"q": {"type": "noul"}}}).encode()
    before = s.metrics()
    c = socket.create_connection(("127.0.0.1", s.port))
    c.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    for _ in range(200):  # until the engine runs it
        if s.metrics().get("clef_decisions_running", 0) == 1:
            break
        time.sleep(0.01)
    c.close()
    status, _, resp = s.post_json("/v1/systemone", light)
    assert status == 200 and json.loads(resp)["answers"]
    time.sleep(0.2)
    after = s.metrics()
    assert after["clef_jobs_cancelled_total"] - before["clef_jobs_cancelled_total"] == 1
    assert after["clef_decisions_total"] - before["clef_decisions_total"] == 1  # the light one only
    gone = after.get('clef_requests_total{route="/v1/systemone",status="499"}', 0) - \
        before.get('clef_requests_total{route="/v1/systemone",status="499"}', 0)
    assert gone == 1


def test_api_key(make_server):
    s = make_server("-q", extra_env={"CLEF_API_KEY": "s3cret-key"})
    name, req = corpus()[0]
    for headers in [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-key"},
                    {"Authorization": "Bearer s3cret-key2"}, {"Authorization": "Basic s3cret-key"},
                    {"Authorization": "Bearer"}, {"Authorization": "Bearers3cret-key"}]:
        status, h, body = s.post_json("/v1/systemone", req, headers=headers)
        assert status == 401 and h["content-type"] == "application/json"
        j = json.loads(body)
        assert j["detail"]["error_type"] == "authentication_error" and j["detail"]["message"]
        status, _, body = s.post_json("/ai/run/@cf/cloudflare/clef", req, headers=headers)
        j = json.loads(body)
        assert status == 401 and j["success"] is False and j["errors"][0]["code"] == 10000
        status, _, body = s.post_json("/api/alpha/decisions", req, headers=headers)
        assert status == 401 and json.loads(body)["error"]["code"] == 401
        assert s.request("GET", "/v1/models", headers=headers)[0] == 401
        assert s.request("GET", "/metrics", headers=headers)[0] == 401
    good = {"Authorization": "Bearer s3cret-key"}
    assert s.post_json("/v1/systemone", req, headers=good)[0] == 200
    for scheme in ("bearer", "BEARER", "bEaReR"):  # the scheme is case-insensitive (RFC 7235)
        assert s.post_json("/v1/systemone", req, headers={"Authorization": f"{scheme} s3cret-key"})[0] == 200
    # one or more spaces separate scheme and credentials (RFC 9110 §11.4: 1*SP)
    assert s.post_json("/v1/systemone", req, headers={"Authorization": "Bearer   s3cret-key"})[0] == 200
    assert s.post_json("/client/v4/accounts/a/ai/run/@cf/cloudflare/clef", req, headers=good)[0] == 200
    assert s.request("GET", "/v1/models", headers=good)[0] == 200
    assert s.request("GET", "/health")[0] == 200  # probes need no key
    # --api-key overrides the environment
    s2 = make_server("-q", "--api-key", "other", extra_env={"CLEF_API_KEY": "s3cret-key"})
    assert s2.post_json("/v1/systemone", req, headers=good)[0] == 401
    assert s2.post_json("/v1/systemone", req, headers={"Authorization": "Bearer other"})[0] == 200

    # The start-up line says whether a key is required, and where the server listens.
    for server, state in ((s, "on"), (s2, "on")):
        line = next(x for x in server.log.read_text().splitlines() if "listening on" in x)
        assert line.startswith(f"clef serve: listening on http://127.0.0.1:{server.port} (auth {state}"), line
    open_server = make_server("-q")
    log = open_server.log.read_text()
    assert f"listening on http://127.0.0.1:{open_server.port} (auth off: no API key" in log, log
    assert "warning" not in log  # loopback without a key is the normal local setup


def test_empty_api_key_is_an_error(tiny_model):
    """An empty --api-key or CLEF_API_KEY is exit 2 with a clear message, before the model loads (it
    used to turn authentication off without a word); so is a key no client can send."""
    from conftest import clef_bin, env

    def serve(*args: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([clef_bin(), "serve", "-m", str(tiny_model), "--port", "0", *args],
                              capture_output=True, text=True, env={**env(), **extra}, timeout=60)

    r = serve("--api-key", "")
    assert r.returncode == 2 and "--api-key is empty" in r.stderr, r.stderr
    r = serve(CLEF_API_KEY="")
    assert r.returncode == 2 and "CLEF_API_KEY is empty" in r.stderr, r.stderr
    r = serve("--api-key", "", CLEF_API_KEY="s3cret-key")
    assert r.returncode == 2 and "--api-key is empty" in r.stderr, r.stderr
    r = serve("--api-key", " s3cret-key")
    assert r.returncode == 2 and "no client could send it" in r.stderr, r.stderr
    assert "listening" not in r.stderr


def test_public_bind_without_a_key_warns(tiny_model, tmp_path):
    """--host 0.0.0.0 without a key: a warning line before the start-up line (still served: a proxy
    or private network may be the point); with a key, no warning and "auth on". Each server lives
    only until it has printed its start-up line; no traffic is sent to it."""
    from conftest import clef_bin, env

    def start_up_lines(*args: str) -> list:
        log = tmp_path / f"serve{len(args)}.log"
        p = subprocess.Popen([clef_bin(), "serve", "-m", str(tiny_model), "--host", "0.0.0.0", "--port", "0",
                              "--threads", "1", *args], stdout=subprocess.DEVNULL, stderr=open(log, "wb"), env=env())
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and "listening on" not in log.read_text() and p.poll() is None:
                time.sleep(0.02)
        finally:
            p.send_signal(signal.SIGTERM)
            assert p.wait(timeout=60) == 0, log.read_text()
        return [x for x in log.read_text().splitlines() if "listening on" in x or "warning" in x]

    lines = start_up_lines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("clef serve: warning: 0.0.0.0 is not a loopback address and no API key is set"), lines
    assert "--api-key" in lines[0] and "CLEF_API_KEY" in lines[0]
    assert lines[1].startswith("clef serve: listening on http://0.0.0.0:") and "(auth off" in lines[1], lines
    lines = start_up_lines("--api-key", "s3cret-key")
    assert len(lines) == 1 and "(auth on" in lines[0], lines


def test_overload_is_503_with_retry_after(make_server):
    s = make_server("-q", "--queue", "1", "--max-running", "1")
    heavy = dict(corpus())["sixty-four-questions"]
    out = []
    lock = threading.Lock()

    def send():
        status, h, body = s.post_json("/v1/systemone", heavy)
        with lock:
            out.append((status, h, body))

    ts = [threading.Thread(target=send) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    statuses = sorted(o[0] for o in out)
    assert set(statuses) <= {200, 503} and 503 in statuses and statuses.count(200) >= 2, statuses
    for status, h, body in out:
        if status == 503:
            assert h["retry-after"] == "1" and json.loads(body)["detail"]["error_type"] == "overloaded_error"
    m = s.metrics()
    assert m['clef_overload_total{reason="queue_full"}'] == statuses.count(503)


def test_queue_timeout_is_503(make_server):
    s = make_server("-q", "--timeout", "0.05", "--max-running", "1")
    heavy = dict(corpus())["sixty-four-questions"]
    out = []

    def send():
        out.append(s.post_json("/v1/systemone", heavy)[0])

    ts = [threading.Thread(target=send) for _ in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert set(out) <= {200, 503} and 503 in out and 200 in out, out
    assert s.metrics()['clef_overload_total{reason="queue_timeout"}'] == out.count(503)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_graceful_shutdown_finishes_requests_in_flight(make_server, sig):
    s = make_server()
    heavy = dict(corpus())["sixty-four-questions"]
    out = []

    def send():
        out.append(s.post_json("/v1/systemone", heavy))

    ts = [threading.Thread(target=send) for _ in range(4)]
    for t in ts:
        t.start()
    # Signal once all four are in the server (queued, running or answered).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = s.metrics()
        if m["clef_queue_depth"] + m["clef_decisions_running"] + m["clef_decisions_total"] >= 4:
            break
        time.sleep(0.01)
    s.proc.send_signal(sig)
    for t in ts:
        t.join()
    assert s.proc.wait(timeout=30) == 0
    assert [o[0] for o in out] == [200] * 4
    answers = {o[2] for o in out}
    assert len(answers) == 1  # the same request, the same answer
    log = s.log.read_text()
    assert "shutting down" in log and "stopped" in log
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", s.port), timeout=2)


def test_exit_codes(server, tiny_model):
    from conftest import clef_bin, env
    run = lambda *a: subprocess.run([clef_bin(), "serve", *a], capture_output=True, text=True, env=env(), timeout=120)
    # The port is taken: refused (no SO_REUSEPORT sharing of a port with another server).
    r = run("--model", str(tiny_model), "--port", str(server.port))
    assert r.returncode == 5 and "cannot bind" in r.stderr
    assert run("--queue", "0").returncode == 2
    assert run("--no-such-flag").returncode == 2
    assert run("--model", "/nonexistent/clef-model", "--port", "0").returncode == 3
    r = run("--help")
    assert r.returncode == 0 and "Exit codes:" in r.stdout and "/v1/systemone" in r.stdout
