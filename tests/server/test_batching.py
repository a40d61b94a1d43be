# SPDX-License-Identifier: MIT
"""The batching scheduler live (`clef serve --scheduler batch`, the default; docs/ARCHITECTURE.md
"Continuous batching"): a burst of 64 large requests stays within --batch-memory (the admission
counter never passes it, the resident memory grows by no more than it, every request is answered,
several ran at once), and requests whose clients hang up free what they held.

The tiny model's ~3,500-token request is admitted with ~8 MiB (Engine::decision_bytes: its state
with KV room for all its tokens, the head's per-row keys and values); unbounded, 16 of them at once
take ~70 MiB more resident memory than idle, so a 20 MiB budget is a bound the test can see broken.
"""

from __future__ import annotations

import json
import socket
import threading
import time

MIB = 1 << 20
BUDGET_MIB = 20
# Resident memory beyond the budget a burst may add: the 64 request bodies and their token ids
# (~4 MiB), the access log and HTTP buffers, the allocator's slack.
SLACK_MIB = 16


def large(i: int) -> dict:
    return {"state": "".join(f"case {i} {k}, " for k in range(350)), "questions": {"q": {"type": "noul"}}}


def watch(server, stop: threading.Event, peak: dict) -> None:
    while not stop.is_set():
        m = server.metrics()
        peak["reserved"] = max(peak["reserved"], m["clef_batch_memory_reserved_bytes"])
        peak["running"] = max(peak["running"], m["clef_decisions_running"])
        peak["rss"] = max(peak["rss"], server.rss_kib())
        time.sleep(0.005)


def test_a_burst_of_large_requests_stays_within_the_memory_budget(make_server):
    s = make_server("-q", "--batch-memory", str(BUDGET_MIB), "--queue", "128", "--state-cache-mb", "0")
    status, _, body = s.post_json("/v1/systemone", large(0))  # warm-up: pools and buffers touched once
    assert status == 200 and json.loads(body)["usage"]["input_tokens"] > 3000
    rss_idle = s.rss_kib()
    m = s.metrics()
    assert m["clef_batch_memory_budget_bytes"] == BUDGET_MIB * MIB and m["clef_decisions_running_max"] == 16
    peak = {"reserved": 0, "running": 0, "rss": rss_idle}
    stop = threading.Event()
    w = threading.Thread(target=watch, args=(s, stop, peak))
    w.start()
    out = []
    lock = threading.Lock()

    def send(i):
        r = s.post_json("/v1/systemone", large(i), timeout=600)[0]
        with lock:
            out.append(r)

    ts = [threading.Thread(target=send, args=(i,)) for i in range(1, 65)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    stop.set()
    w.join()
    assert out == [200] * 64
    assert 0 < peak["reserved"] <= BUDGET_MIB * MIB, peak
    assert peak["running"] >= 2, "admission never ran two at once"  # two fit the budget, three do not
    grew = (peak["rss"] - rss_idle) / 1024
    assert grew <= BUDGET_MIB + SLACK_MIB, f"resident memory grew {grew:.1f} MiB over idle, budget {BUDGET_MIB} MiB"
    assert s.metrics()["clef_batch_memory_reserved_bytes"] == 0


def test_clients_that_hang_up_free_what_their_decisions_held(make_server):
    s = make_server("-q", "--chunk", "32", "--queue", "64", "--state-cache-mb", "0")
    status, _, _ = s.post_json("/v1/systemone", large(0))
    assert status == 200
    rss_idle = s.rss_kib()
    socks = []
    for i in range(1, 13):
        body = json.dumps(large(i)).encode()
        c = socket.create_connection(("127.0.0.1", s.port))
        c.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        socks.append(c)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and s.metrics()["clef_decisions_running"] < 12:
        time.sleep(0.01)
    assert s.metrics()["clef_decisions_running"] == 12, "the twelve never ran at once"
    for c in socks:
        c.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = s.metrics()
        if m["clef_decisions_running"] == 0:
            break
        time.sleep(0.02)
    m = s.metrics()
    assert m["clef_decisions_running"] == 0 and m["clef_batch_memory_reserved_bytes"] == 0, m
    assert m["clef_jobs_cancelled_total"] == 12, m
    assert m['clef_requests_total{route="/v1/systemone",status="499"}'] == 12, m
    assert m["clef_decisions_total"] == 1, "a stopped decision was counted as answered"
    status, _, _ = s.post_json("/v1/systemone", large(99))
    assert status == 200
    assert (s.rss_kib() - rss_idle) / 1024 <= SLACK_MIB
