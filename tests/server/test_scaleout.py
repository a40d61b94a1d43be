# SPDX-License-Identifier: MIT
"""State affinity for scale-out: the X-Clef-State-Key and X-Clef-Route-Key headers, GET /ready, and three
`clef serve` replicas behind HAProxy (Debian 12's package, started here from the shipped
deploy/haproxy/haproxy.cfg on loopback ports).

Answers through the balancer are compared byte for byte with a single server (the `server`
fixture) and, for the corpus itself, with `clef decide`; cache hit rates come from the replicas'
own /metrics; which replica answered comes from the X-Clef-Replica header the configuration adds."""

from __future__ import annotations

import json
import random
import re
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Tuple

import pytest

from conftest import Server, corpus
from haproxy_cluster import Balancer, haproxy_bin, request

KEY_RE = re.compile(r"[0-9a-f]{64}")
HIT = 'clef_state_cache_lookups_total{result="hit"}'
MISS = 'clef_state_cache_lookups_total{result="miss"}'
RETRYABLE = {502, 503}


def with_new_question(req: Dict[str, Any], r: int) -> Dict[str, Any]:
    """The request with one question no earlier round asked (round 0: the request itself). A
    request at the 64-question limit drops its last question for it. Same state: a warm request."""
    if r == 0:
        return req
    qs = dict(req["questions"])
    if len(qs) >= 64:
        qs.pop(list(qs)[-1])
    qs[f"repeat_{r}"] = {"type": "noul", "instructions": f"Round {r}: does this need a follow-up from a person?"}
    return {**req, "questions": qs}


def post(port: int, req: Dict[str, Any], headers: Dict[str, str] = None) -> Tuple[int, Dict[str, str], bytes]:
    return request(port, "POST", "/v1/systemone", json.dumps(req, ensure_ascii=False).encode("utf-8"),
                   {"Content-Type": "application/json", **(headers or {})})


def post_retrying(port: int, req: Dict[str, Any], tries: int = 20) -> Tuple[List[int], Tuple[int, Dict[str, str], bytes]]:
    """What a client should do behind the balancer: on 502/503 wait (Retry-After when given, at
    most 1 s) and send the same request again. Returns (every status seen, the last answer)."""
    seen: List[int] = []
    for _ in range(tries):
        answer = post(port, req)
        seen.append(answer[0])
        if answer[0] not in RETRYABLE:
            return seen, answer
        time.sleep(min(1.0, float(answer[1].get("retry-after", "0.2"))))
    return seen, answer


def lookups(servers: List[Server]) -> Tuple[float, float]:
    hits = misses = 0.0
    for s in servers:
        m = s.metrics()
        hits += m[HIT]
        misses += m[MISS]
    return hits, misses


def canonical_state(req: Dict[str, Any]) -> str:
    return json.dumps(req.get("state"), sort_keys=True, ensure_ascii=False)


def start_cluster(tiny_model, tmp, *args: str) -> Tuple[List[Server], Balancer]:
    if haproxy_bin() is None:
        pytest.fail("haproxy not found: install Debian's haproxy (bash scripts/setup.sh --dev)")
    replicas = [Server(tiny_model, tmp / f"replica{i}.log", "-q", *args) for i in range(3)]
    lb = Balancer([r.port for r in replicas], tmp / "haproxy.log")
    lb.wait_up()
    return replicas, lb


def stop_cluster(replicas: List[Server], lb: Balancer) -> None:
    lb.stop()
    for r in replicas:
        if r.proc.poll() is None:
            r.stop(signal.SIGKILL)


@pytest.fixture(scope="module")
def cluster(tiny_model, tmp_path_factory):
    replicas, lb = start_cluster(tiny_model, tmp_path_factory.mktemp("scaleout"))
    yield replicas, lb
    stop_cluster(replicas, lb)


CASES = corpus()
# The two schema-heavy corpus requests spend nearly all their time in the head on their own schema
# (255 options; 64 questions: 2.8 s and 1.5 s each on the tiny model on 2 cores, cold or warm), so
# the state cache saves them nothing measurable; they are sent in round 0 only, which keeps the
# file within its time budget. Every other request is repeated.
SCHEMA_HEAVY = {"many-options-255", "sixty-four-questions"}
REPEATED = [(n, r) for n, r in CASES if n not in SCHEMA_HEAVY]


def test_affinity_hit_rate_and_answers_through_haproxy(cluster, server, decide_outputs):
    """The corpus 5 times in shuffled order (the 2 schema-heavy requests once), one new question
    per repeat, 3 clients at once,
    through the body-routed frontend (clients send no hint): every state stays on one replica, the
    repeats hit the cache, and every answer is the single server's (round 0: `clef decide`'s)."""
    replicas, lb = cluster
    hits0, misses0 = lookups(replicas)
    rng = random.Random(15)
    answers: Dict[Tuple[int, str], Tuple[int, Dict[str, str], bytes]] = {}
    requests: Dict[Tuple[int, str], Dict[str, Any]] = {}
    for r in range(5):
        order = list(CASES if r == 0 else REPEATED)
        rng.shuffle(order)
        for name, req in order:
            requests[(r, name)] = with_new_question(req, r)
        with ThreadPoolExecutor(3) as ex:
            futs = {(r, name): ex.submit(post, lb.port, requests[(r, name)]) for name, _ in order}
            for k, f in futs.items():
                answers[k] = f.result()
    hits, misses = lookups(replicas)
    hits, misses = hits - hits0, misses - misses0
    total = len(CASES) + 4 * len(REPEATED)
    assert len(answers) == total and hits + misses == total, (hits, misses)

    for k, (status, _, body) in answers.items():
        assert status == 200, (k, status, body[:300])
    key = {k: h["x-clef-state-key"] for k, (_, h, _) in answers.items()}
    assert all(KEY_RE.fullmatch(v) for v in key.values())
    # Same state, new questions: the same key every round.
    for name, _ in REPEATED:
        assert len({key[(r, name)] for r in range(5)}) == 1, name
    # Different states, different keys (equal states, equal keys).
    by_state: Dict[str, set] = {}
    for name, req in CASES:
        by_state.setdefault(canonical_state(req), set()).add(key[(0, name)])
    assert all(len(v) == 1 for v in by_state.values())
    assert len({next(iter(v)) for v in by_state.values()}) == len(by_state)

    # Affinity: every state was answered by one replica, and the states are spread over replicas.
    replica_of: Dict[str, set] = {}
    for k, (_, h, _) in answers.items():
        replica_of.setdefault(key[k], set()).add(h["x-clef-replica"])
    assert all(len(v) == 1 for v in replica_of.values()), replica_of
    used = {next(iter(v)) for v in replica_of.values()}
    assert len(used) >= 2, used

    distinct = len(replica_of)
    assert misses == distinct, (misses, distinct)  # one cold prefill per state, cluster-wide
    repeat_hit_rate = hits / (total - distinct)
    assert repeat_hit_rate >= 0.9, repeat_hit_rate
    spread = {r: sum(1 for v in replica_of.values() if r in v) for r in sorted(used)}
    print(f"affinity: {distinct} states over replicas {spread}; {hits:.0f} hits, {misses:.0f} misses; "
          f"hit rate on repeats {repeat_hit_rate:.1%}")

    # The answers are the single server's, and round 0 is `clef decide`'s.
    for (r, name), (_, _, body) in answers.items():
        if r == 0:
            assert body == decide_outputs[name], name
        status, h, want = server.post_json("/v1/systemone", requests[(r, name)])
        assert status == 200 and body == want, (r, name)
        assert h["x-clef-state-key"] == key[(r, name)]


def test_header_routing_and_forged_hints(cluster, server):
    """The header-only frontend (`balance hdr(X-Clef-Route-Key)`): a client that echoes the key it
    was given sticks to one replica per state; a hint is only a routing hint, and a wrong one
    (another state's key, a made-up one) routes elsewhere but never changes the answer."""
    replicas, lb = cluster
    names = [n for n, _ in REPEATED]
    reqs = dict(REPEATED)
    first = {n: post(lb.header_port, reqs[n]) for n in names}  # no hint yet: round robin
    assert all(a[0] == 200 for a in first.values())
    key = {n: a[1]["x-clef-route-key"] for n, a in first.items()}
    rounds: List[Dict[str, Tuple[int, Dict[str, str], bytes]]] = []
    hits_before_last = None
    for r in (1, 2, 3):
        if r == 2:
            hits_before_last = lookups(replicas)
        rounds.append({n: post(lb.header_port, with_new_question(reqs[n], 10 + r), {"X-Clef-Route-Key": key[n]})
                       for n in names})
    hits_after = lookups(replicas)
    for n in names:
        seen = {rd[n][1]["x-clef-replica"] for rd in rounds}
        assert len(seen) == 1, (n, seen)
        assert all(rd[n][0] == 200 and rd[n][1]["x-clef-route-key"] == key[n] for rd in rounds)
    # Rounds 2 and 3 went where round 1 had warmed the cache: all hits.
    lookups_late = 2 * len(names)
    hit_rate = (hits_after[0] - hits_before_last[0]) / lookups_late
    assert hit_rate >= 0.9 and hits_after[1] == hits_before_last[1], (hit_rate, hits_after, hits_before_last)

    # Forged hints: another state's key, and a key nobody computed. Same answer, true key.
    a, b = names[0], names[1]
    want = server.post_json("/v1/systemone", reqs[a])
    for forged in (key[b], "0" * 64, "not-a-key", "x" * 300):
        for port in (lb.header_port, lb.port, server.port):
            status, h, body = post(port, reqs[a], {"X-Clef-Route-Key": forged, "X-Clef-State-Key": forged})
            assert status == 200 and body == want[2], (forged, port)
            assert h["x-clef-route-key"] == key[a] and h["x-clef-state-key"] == want[1]["x-clef-state-key"]
    # On the header frontend the forged key routes like the state it names.
    st, h, _ = post(lb.header_port, reqs[a], {"X-Clef-Route-Key": key[b]})
    assert h["x-clef-replica"] == rounds[0][b][1]["x-clef-replica"]
    # The body frontend falls back to the header when the body is larger than HAProxy's buffer
    # (tune.bufsize 256 KiB: clef_state.lua sees a cut body and sets nothing). Same answer.
    padded = json.dumps({**reqs[a], "padding": "x" * (300 << 10)}).encode()  # an unknown field: ignored
    for hint in (key[b], key[a]):
        st, h, body = request(lb.port, "POST", "/v1/systemone", padded,
                              {"Content-Type": "application/json", "X-Clef-Route-Key": hint})
        assert st == 200 and body == want[2] and h["x-clef-route-key"] == key[a]
        hinted = post(lb.header_port, reqs[a], {"X-Clef-Route-Key": hint})[1]["x-clef-replica"]
        assert h["x-clef-replica"] == hinted, (hint == key[a], h["x-clef-replica"], hinted)


def test_one_routing_string_per_state_whichever_route_reads_it(cluster):
    """A state reaches one replica whether the balancer reads its body (plain JSON), its
    X-Clef-Route-Key (a gzip body, which clef_state.lua cannot read; the header-only frontend),
    and the key is the hex SHA-256 of the body's raw state + images text, as docs/DEPLOYMENT.md
    defines it. Also: the corpus's states spread over all three replicas."""
    import gzip
    import hashlib

    replicas, lb = cluster
    home: Dict[str, str] = {}
    for name, req in REPEATED:
        st, h, _ = post(lb.port, req)
        assert st == 200
        text = "state=" + json.dumps(req["state"], ensure_ascii=False) + "\nimages=" + (
            json.dumps(req["images"], ensure_ascii=False) if "images" in req else "")
        assert h["x-clef-route-key"] == hashlib.sha256(text.encode("utf-8")).hexdigest(), name
        home[name] = h["x-clef-replica"]
        hint = {"X-Clef-Route-Key": h["x-clef-route-key"]}
        body = gzip.compress(json.dumps(with_new_question(req, 30), ensure_ascii=False).encode("utf-8"))
        st, hz, _ = request(lb.port, "POST", "/v1/systemone", body,
                            {"Content-Type": "application/json", "Content-Encoding": "gzip", **hint})
        assert st == 200 and hz["x-clef-replica"] == home[name] and hz["x-clef-state-cache"] == "hit", (name, hz)
        assert post(lb.header_port, with_new_question(req, 31), hint)[1]["x-clef-replica"] == home[name], name
    spread = {r: list(home.values()).count(r) for r in sorted(set(home.values()))}
    print(f"{len(home)} states over replicas {spread}")
    assert len(spread) == 3 and max(spread.values()) <= len(home) // 2, spread


def test_replica_loss_mid_run(tiny_model, tmp_path, server):
    """Kill one of three replicas while 4 clients send 3 more rounds of the corpus: every request
    is answered correctly, or with a retryable 502/503 that a retry then answers (none lost), and
    the states of the surviving replicas keep their replica (consistent hashing)."""
    replicas, lb = start_cluster(tiny_model, tmp_path)
    try:
        warm = {n: post(lb.port, req) for n, req in REPEATED}
        assert all(a[0] == 200 for a in warm.values())
        home = {n: a[1]["x-clef-replica"] for n, a in warm.items()}
        counts = {s: list(home.values()).count(s) for s in set(home.values())}
        victim = max(counts, key=counts.get)  # the replica with the most states
        victim_index = int(victim[1:]) - 1  # server names r1..r3 = replicas[0..2]

        work = [(r, n, with_new_question(req, 20 + r)) for r in range(3) for n, req in REPEATED]
        random.Random(7).shuffle(work)
        done = 0
        lock = threading.Lock()
        killed_at: List[int] = []
        kill_time: List[float] = []

        def client(item):
            nonlocal done
            r, n, req = item
            started = time.monotonic()
            out = post_retrying(lb.port, req)
            with lock:
                done += 1
                if done == 12 and not killed_at:
                    replicas[victim_index].proc.send_signal(signal.SIGKILL)
                    killed_at.append(done)
                    kill_time.append(time.monotonic())
            return item, out, started

        with ThreadPoolExecutor(4) as ex:
            results = list(ex.map(client, work))
        assert killed_at and killed_at[0] < len(work)
        assert replicas[victim_index].proc.wait(timeout=10) == -signal.SIGKILL

        retried = 0
        for (r, n, req), (seen, (status, h, body)), _ in results:
            assert set(seen[:-1]) <= RETRYABLE, (n, seen)
            retried += len(seen) > 1
            assert status == 200, (n, seen, body[:200])  # nothing lost: a retry answered it
            _, _, want = server.post_json("/v1/systemone", req)
            assert body == want, n
        # Affinity survives the loss for the other replicas' states.
        moved = 0
        for (r, n, req), (seen, (status, h, body)), started in results:
            if home[n] != victim:
                assert h["x-clef-replica"] == home[n], (n, home[n], h["x-clef-replica"])
            elif started > kill_time[0]:
                assert h["x-clef-replica"] != victim
                moved += 1
        assert moved > 0  # the victim's states were asked about after it died
        # The dead replica is marked down by its failing /ready checks.
        deadline = time.monotonic() + 15
        while lb.servers()[victim].startswith("UP") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert lb.servers()[victim].startswith("DOWN"), lb.servers()
        print(f"replica loss: {victim} killed after {killed_at[0]} of {len(work)} requests; "
              f"{retried} requests needed a client retry")
    finally:
        stop_cluster(replicas, lb)


def test_state_key_header_on_every_answer(server, make_server):
    """Present on every decision answer (every dialect), equal with the cache on and off, absent
    from refused requests."""
    off = make_server("-q", "--state-cache-mb", "0")
    for name, req in REPEATED:
        st, h, body = server.post_json("/v1/systemone", req)
        st_off, h_off, body_off = off.post_json("/v1/systemone", req)
        assert st == st_off == 200 and body == body_off, name
        assert h_off["x-clef-state-cache"] == "off"
        assert KEY_RE.fullmatch(h["x-clef-state-key"]) and h["x-clef-state-key"] == h_off["x-clef-state-key"], name
    req = dict(CASES)["support-routing"]
    key = server.post_json("/v1/systemone", req)[1]["x-clef-state-key"]
    st, h, _ = server.post_json("/ai/run/@cf/cloudflare/clef", req)
    assert st == 200 and h["x-clef-state-key"] == key
    st, h, _ = server.post_json("/api/alpha/decisions", {**req, "model": "cloudflare/clef-flash",
                                                          "state": [req["state"]]})
    assert st == 200 and KEY_RE.fullmatch(h["x-clef-state-key"])
    # Another state, another key; a 4xx carries none.
    assert server.post_json("/v1/systemone", {**req, "state": req["state"] + "!"})[1]["x-clef-state-key"] != key
    st, h, _ = server.post_json("/v1/systemone", {**req, "questions": {}})
    assert 400 <= st < 500 and "x-clef-state-key" not in h


def test_ready_is_200_when_idle_and_503_when_the_queue_is_full(make_server):
    s = make_server("-q", "--queue", "1", "--max-running", "1", "--state-cache-mb", "0", "--api-key", "k")
    st, h, body = s.request("GET", "/ready")  # no key needed: the balancer's check
    assert st == 200 and h["content-type"].startswith("application/json")
    obj = json.loads(body)
    assert obj["status"] == "ready" and obj["queue_capacity"] == 1 and obj["queue_depth"] == 0
    heavy = dict(corpus())["sixty-four-questions"]
    auth = {"Authorization": "Bearer k"}
    stop = threading.Event()
    statuses: List[int] = []

    def load():
        while not stop.is_set():
            statuses.append(s.post_json("/v1/systemone", heavy, headers=auth)[0])

    ts = [threading.Thread(target=load) for _ in range(3)]
    for t in ts:
        t.start()
    seen = None
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            st, h, body = s.request("GET", "/ready")
            if st == 503:
                seen = (h, json.loads(body))
                break
            assert st == 200
            time.sleep(0.002)
    finally:
        stop.set()
        for t in ts:
            t.join()
    assert seen, "never saw /ready 503 with 3 clients on --queue 1"
    h, obj = seen
    assert obj["status"] == "not_ready" and obj["reason"] == "queue_full" and obj["queue_depth"] == 1, obj
    assert h["retry-after"] == "1"
    assert set(statuses) <= {200, 503} and 200 in statuses
    st, _, body = s.request("GET", "/ready")
    assert st == 200 and json.loads(body)["queue_depth"] == 0
    assert s.request("POST", "/ready", b"{}")[0] == 405


def documented_state_key(model_dir, req: Dict[str, Any]) -> str:
    """X-Clef-State-Key recomputed from its definition in docs/DEPLOYMENT.md, independently of the
    C++ code: the Python toolkit's encode_record (tokenizers' own BPE) for the prefix + state ids,
    hashlib for SHA-256. Text-only requests."""
    import hashlib
    import pathlib
    import struct
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools" / "reference"))
    from clef_ref.record import encode_record, load_tokenizer

    lines = []
    for f in pathlib.Path(model_dir).iterdir():
        if not f.is_file():
            continue
        data = f.read_bytes()
        fp = data if len(data) <= 16 << 20 else data[: 1 << 20] + data[-(1 << 20):]
        lines.append(f"file={f.name} size={len(data)} sha256={hashlib.sha256(fp).hexdigest()}\n")
    identity = hashlib.sha256(("clef-routing-v1\n" + "".join(sorted(lines))).encode()).hexdigest()
    rec = encode_record(req, load_tokenizer(model_dir))
    ids = rec.input_ids[: rec.prefix_len + rec.state_len]

    def field(b: bytes) -> bytes:
        return struct.pack("<Q", len(b)) + b

    buf = field(b"clef-state-cache-v1") + field(identity.encode()) + struct.pack("<Q", len(ids))
    buf += b"".join(struct.pack("<i", i) for i in ids) + field(b"")
    return hashlib.sha256(buf).hexdigest()


def test_state_key_is_the_documented_hash(server, tiny_model):
    for name, req in REPEATED:
        st, h, _ = server.post_json("/v1/systemone", req)
        assert st == 200 and h["x-clef-state-key"] == documented_state_key(tiny_model, req), name
