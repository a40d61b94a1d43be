# SPDX-License-Identifier: MIT
"""One client must not stall `clef serve`, crowd everyone else out, or keep its memory
(docs/COMPATIBILITY.md "limits and guards"): a pipelining client that reads nothing while its
requests ask for `100 Continue`, more slow connections from one address than --max-connections,
a thousand stalled uploads, and 32 compression bombs at once. Loopback only (the crowd comes from
127.0.0.2), bounded loops and waits."""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import socket
import threading
import time

import pytest

from test_http_layer import SMALL, connect, raise_nofile, read_until_close

HEALTH = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def health_latencies(port: int, seconds: float, timeout: float = 1.0) -> list:
    """GET /health on fresh connections, one after the other, for `seconds`: each latency in
    seconds (a failed or timed-out probe counts as `timeout`)."""
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end and len(out) < 1000:
        t0 = time.monotonic()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=timeout) as c:
                c.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                data = read_until_close(c, limit=timeout)
            ok = data.startswith(b"HTTP/1.1 200 ")
        except (OSError, AssertionError):
            ok = False
        out.append(time.monotonic() - t0 if ok else timeout)
    return out


def p99(values: list) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(len(v) * 0.99))]


def status_of(pid: int, key: str) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {key}")


@pytest.mark.parametrize("connections", [30, 200])
def test_a_client_that_reads_nothing_stalls_only_itself(make_server, connections):
    # Each connection pipelines two /metrics answers (several KiB each), then small requests
    # that each ask for `100 Continue`, into a 2 KiB receive window it never reads; a
    # 536-byte MSS keeps the server's send buffer small (tens of KiB), so an interim answer meets
    # a full send buffer. /health from another client must keep answering at once.
    raise_nofile(connections + 200)
    s = make_server("-q")
    metrics = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    expect = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx"
    attackers = []
    try:
        for _ in range(connections):
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 536)
            c.settimeout(5)
            c.connect(("127.0.0.1", s.port))
            c.sendall(metrics * 2 + expect * 97)
            attackers.append(c)
        lat = health_latencies(s.port, seconds=2.0)
    finally:
        for c in attackers:
            c.close()
    print(f"{connections} non-reading pipelining clients: /health p99 {p99(lat) * 1000:.1f} ms over {len(lat)} probes")
    assert len(lat) >= 10 and p99(lat) < 0.1, f"/health p99 {p99(lat) * 1000:.1f} ms, {len(lat)} probes"


def test_one_address_cannot_crowd_out_another(make_server):
    # 1,100 connections from 127.0.0.2 that never finish their headers (more than the default
    # --max-connections 1024, reopened as they are shed) vs one client on 127.0.0.1.
    raise_nofile(2600)
    s = make_server("-q")
    crowd = []
    lock = threading.Lock()
    stop = threading.Event()

    def open_one() -> socket.socket:
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        c.bind(("127.0.0.2", 0))
        c.settimeout(5)
        c.connect(("127.0.0.1", s.port))
        c.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        return c

    for _ in range(1100):
        crowd.append(open_one())

    def trickle():
        # One header byte per connection per round; a shed connection is replaced at once.
        for _ in range(200):
            if stop.is_set():
                return
            for i in range(len(crowd)):
                if stop.is_set():
                    return
                try:
                    crowd[i].send(b"a")
                except OSError:
                    crowd[i].close()
                    try:
                        crowd[i] = open_one()
                    except OSError:
                        pass
            stop.wait(0.05)

    t = threading.Thread(target=trickle)
    t.start()
    answered = 0
    try:
        for _ in range(200):
            try:
                with socket.create_connection(("127.0.0.1", s.port), timeout=5) as c:
                    c.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                    answered += read_until_close(c, limit=5).startswith(b"HTTP/1.1 200 ")
            except (OSError, AssertionError):
                pass
    finally:
        stop.set()
        t.join(timeout=30)
        for c in crowd:
            c.close()
    print(f"1,100 slow connections from 127.0.0.2: {answered}/200 requests of 127.0.0.1 answered")
    assert answered >= 198, f"only {answered}/200 answered"
    shed = s.metrics()["clef_connections_shed_total"]
    print(f"{shed:.0f} connections shed")
    assert shed >= 76  # the crowd was over the limit, and the oldest waiting connections made room


def test_memory_of_stalled_uploads_is_returned(make_server):
    # 1,000 connections send their headers and 4 body bytes, then stall; then they end.
    raise_nofile(2400)
    s = make_server("-q", "--body-timeout", "60")
    for _, req in SMALL:  # warm-up: the engine's buffers are not the HTTP layer's
        assert s.post_json("/v1/systemone", req)[0] == 200
    idle = s.rss_kib()
    fds0 = len(os.listdir(f"/proc/{s.pid}/fd"))
    stalled = []
    try:
        for _ in range(1000):
            c = connect(s.port)
            c.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 1000\r\n\r\n{\"st")
            stalled.append(c)
        deadline = time.monotonic() + 20
        while len(os.listdir(f"/proc/{s.pid}/fd")) < fds0 + 1000 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.request("GET", "/health")[0] == 200
        during = s.rss_kib()
    finally:
        for c in stalled:
            c.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        after = s.rss_kib()
        if after <= idle + 16 * 1024 and len(os.listdir(f"/proc/{s.pid}/fd")) <= fds0 + 5:
            break
        time.sleep(0.1)
    print(f"1,000 stalled uploads: RSS {idle} KiB idle -> {during} KiB during -> {after} KiB after")
    assert after <= idle + 16 * 1024, f"RSS {idle} KiB idle -> {after} KiB after the stalled uploads ended"


def test_compression_bombs_stay_within_the_body_budget(make_server):
    # 32 gzip bodies of ~64 KiB that each decode past --max-body (64 MiB), all at once, against a
    # 128 MiB body budget (the default is 256 MiB; a smaller one shows the bound more sharply).
    s = make_server("-q", "--body-budget", "128")
    bomb = gzip.compress(b"\0" * ((64 << 20) + 1), 9)
    assert s.request("GET", "/health")[0] == 200
    idle = s.rss_kib()
    pathlib.Path(f"/proc/{s.pid}/clear_refs").write_text("5")  # resets the peak (VmHWM) to now
    head = (f"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Encoding: gzip\r\nContent-Length: {len(bomb)}\r\n\r\n").encode()
    answers = []
    lock = threading.Lock()

    def bomber():
        with socket.create_connection(("127.0.0.1", s.port), timeout=60) as c:
            try:
                c.sendall(head + bomb)
            except OSError:
                pass
            data = read_until_close(c, limit=60)
        with lock:
            answers.append(data.split(b"\r\n\r\n", 1)[0])

    ts = [threading.Thread(target=bomber) for _ in range(32)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    peak = status_of(s.pid, "VmHWM")
    statuses = sorted(a.split(b" ")[1].decode() for a in answers)
    print(f"32 gzip bombs: peak RSS {peak} KiB (idle {idle} KiB), answers {statuses}")
    assert len(answers) == 32 and set(statuses) <= {"413", "503"}, statuses
    assert all(b"Retry-After: 1" in a for a in answers if a.startswith(b"HTTP/1.1 503"))
    # docs/COMPATIBILITY.md: peak RSS stays below idle + --body-budget + 16 MiB.
    assert peak - idle < (128 + 16) * 1024, f"peak RSS {peak} KiB, idle {idle} KiB"
    assert s.request("GET", "/health")[0] == 200
