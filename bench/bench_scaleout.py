#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Scale-out benchmark: requests/s and p50/p99 latency through HAProxy
(deploy/haproxy/haproxy.cfg, Debian's haproxy 2.6) in front of 1, 2 and 3 `clef serve` replicas,
with the state-cache hit rate and how the states spread over the replicas. Not a test.

For each replica count: start the replicas (`--threads T` each) and HAProxy on loopback ports,
send the corpus once (warm-up: every state's cold prefill), then --rounds rounds of the corpus with
one new question per request per round (same states: warm requests if the balancer keeps each
state on one replica) from --clients threads, shuffled. Every answer must be a 200; the hit rate
is the replicas' /metrics state-cache hits over the measured requests. A row "direct" sends the
same load to one replica without HAProxy (the balancer's own cost). Prints a markdown table with
lscpu's CPU model. A last row balances 3 fresh replicas round robin (the header-only frontend, no
hints sent) to show what affinity buys. With --gzip-share F, that fraction of the measured requests is
sent gzip-compressed with the X-Clef-Route-Key of its state's warm-up answer (the balancer cannot read a
compressed body: "one replica per state" then shows that both routes agree). With --loss, a last run
kills one of 3 replicas after a quarter of the measured requests and reports the latencies after the
kill and how long HAProxy took to mark the replica DOWN.

  .venv/bin/python bench/bench_scaleout.py                   # tiny random model, 1/2/3 replicas
  .venv/bin/python bench/bench_scaleout.py --threads 1 --clients 4 --rounds 4 --skip-heavy

On a 2-core machine the point is correctness and affinity, not speed-up: the replicas share the
same cores, so requests/s cannot grow with replicas; what must hold is a hit rate near 100%.
"""

from __future__ import annotations

import argparse
import gzip
import json
import pathlib
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "server"))

from haproxy_cluster import Balancer, request  # noqa: E402

from bench_serve import percentile  # noqa: E402  (bench/, beside this script)


def cpu_model() -> str:
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


class Replica:
    """One `clef serve --port 0` process."""

    def __init__(self, binary: str, model: str, log: pathlib.Path, threads: int):
        self.log = log
        self.proc = subprocess.Popen([binary, "serve", "--model", model, "--port", "0", "--threads", str(threads), "-q"],
                                     stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
        deadline = time.monotonic() + 120
        self.port = 0
        while time.monotonic() < deadline and not self.port:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read_text(errors="replace"))
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None:
                raise RuntimeError(f"clef serve exited: {log.read_text(errors='replace')}")
            else:
                time.sleep(0.05)
        if not self.port:
            raise RuntimeError("clef serve did not report its port")

    def lookups(self):
        _, _, body = request(self.port, "GET", "/metrics")
        m = dict(line.rsplit(" ", 1) for line in body.decode().splitlines() if line and not line.startswith("#"))
        return (float(m['clef_state_cache_lookups_total{result="hit"}']),
                float(m['clef_state_cache_lookups_total{result="miss"}']))

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def with_new_question(req, r):
    qs = dict(req["questions"])
    if len(qs) >= 64:
        qs.pop(list(qs)[-1])
    qs[f"bench_round_{r}"] = {"type": "noul", "instructions": f"Round {r}: does this need a follow-up?"}
    return {**req, "questions": qs}


def make_post(port):
    def post(req, route_key=None):
        body = json.dumps(req).encode()
        headers = {"Content-Type": "application/json"}
        if route_key is not None:
            body = gzip.compress(body)
            headers.update({"Content-Encoding": "gzip", "X-Clef-Route-Key": route_key})
        return request(port, "POST", "/v1/systemone", body, headers)
    return post


def warm_up(port, cases):
    """The corpus once, one at a time: every state's cold prefill. Returns {name: X-Clef-Route-Key}."""
    post = make_post(port)
    keys = {}
    for name, req in cases:
        status, h, body = post(req)
        if status != 200:
            raise RuntimeError(f"warm-up answered {status}: {body[:200]}")
        keys[name] = h.get("x-clef-route-key")
    return keys


def measure(port, cases, rounds, clients, seed, keys=None, gzip_share=0.0, on_progress=None):
    """The measured rounds. Returns (latencies in ms, wall seconds, {state key: replicas seen},
    [(start time, ms)]). A `gzip_share` of the requests go gzip-compressed with their route key."""
    post = make_post(port)
    work = [(name, with_new_question(req, r)) for r in range(1, rounds + 1) for name, req in cases]
    random.Random(seed).shuffle(work)
    zipped = set(random.Random(seed + 1).sample(range(len(work)), int(len(work) * gzip_share)))
    lat = []
    timed = []
    where = {}
    lock = threading.Lock()

    def one(item):
        i, (name, req) = item
        t0 = time.perf_counter()
        status, h, body = post(req, keys[name] if i in zipped else None)
        ms = (time.perf_counter() - t0) * 1e3
        if status != 200:
            raise RuntimeError(f"answered {status}: {body[:200]}")
        with lock:
            lat.append(ms)
            timed.append((t0, ms))
            where.setdefault(h["x-clef-state-key"], set()).add(h.get("x-clef-replica", "direct"))
            if on_progress:
                on_progress(len(lat), len(work))

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as ex:
        list(ex.map(one, enumerate(work)))
    return lat, time.perf_counter() - t0, where, timed


def loss_run(args, model, tmp, cases):
    """3 replicas; one is SIGKILLed after a quarter of the measured requests. Prints the latencies
    of the requests sent after the kill and when HAProxy marked the replica DOWN."""
    reps = [Replica(args.bin, model, tmp / f"rloss-{i}.log", args.threads) for i in range(3)]
    lb = Balancer([r.port for r in reps], tmp / "haproxy-loss.log")
    try:
        lb.wait_up()
        keys = warm_up(lb.port, cases)
        killed = []

        def progress(done, total):
            if not killed and done >= total // 4:
                reps[0].proc.kill()
                killed.append(time.perf_counter())

        down_at = []

        def watch():
            deadline = time.monotonic() + 60
            while not down_at and time.monotonic() < deadline:
                if killed and lb.servers().get("r1", "").startswith("DOWN"):
                    down_at.append(time.perf_counter())
                time.sleep(0.02)

        w = threading.Thread(target=watch)
        w.start()
        lat, wall, where, timed = measure(lb.port, cases, args.rounds, args.clients, 16, keys, on_progress=progress)
        w.join()
        after = sorted(ms for t, ms in timed if killed and t >= killed[0]) or [0.0]
        slow = sum(1 for ms in after if ms > 1000)
        detect = f"{down_at[0] - killed[0]:.2f} s" if down_at else "not within 60 s"
        print(f"\nreplica loss (3 replicas, r1 SIGKILLed after {len(lat) // 4} of {len(lat)} requests): after the kill "
              f"{len(after)} requests, p50 {percentile(after, 50):.1f} ms, p99 {percentile(after, 99):.1f} ms, "
              f"max {after[-1]:.1f} ms, {slow} over 1 s; HAProxy marked r1 DOWN after {detect}")
    finally:
        lb.stop()
        for r in reps[1:]:
            r.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(ROOT / "build" / "release" / "bin" / "clef"))
    ap.add_argument("--model", help="release folder (default: a fresh tiny random model)")
    ap.add_argument("--threads", type=int, default=1, help="engine threads per replica")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=4, help="measured rounds of the corpus")
    ap.add_argument("--replicas", default="1,2,3")
    ap.add_argument("--corpus", default=str(ROOT / "tests" / "data" / "requests" / "corpus.jsonl"))
    ap.add_argument("--skip-heavy", action="store_true", help="only requests under 2,000 bytes")
    ap.add_argument("--gzip-share", type=float, default=0.0,
                    help="fraction of measured requests sent gzip-compressed with X-Clef-Route-Key (0..1)")
    ap.add_argument("--loss", action="store_true", help="add the replica-loss run (3 replicas, one killed)")
    ap.add_argument("--loss-only", action="store_true", help="only the replica-loss run")
    ap.add_argument("--no-round-robin", action="store_true",
                    help="skip the comparison row: 3 replicas balanced round robin (no affinity)")
    args = ap.parse_args()

    cases = [(c["name"], c["request"]) for c in map(json.loads, open(args.corpus, encoding="utf-8"))]
    if args.skip_heavy:
        cases = [(n, r) for n, r in cases if len(json.dumps(r)) < 2000]
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="clef-bench-scaleout-"))
    model = args.model
    if model is None:
        model = str(tmp / "tiny")
        subprocess.run([args.bin, "make-model", "--preset", "tiny", "--out", model, "--seed", "1"], check=True,
                       capture_output=True)

    if args.loss_only:
        loss_run(args, model, tmp, cases)
        return 0
    rows = []
    levels = ["direct"] + [int(x) for x in args.replicas.split(",")]
    if not args.no_round_robin:
        levels.append("rr")
    for level in levels:
        n = 1 if level == "direct" else 3 if level == "rr" else level
        reps = [Replica(args.bin, model, tmp / f"r{level}-{i}.log", args.threads) for i in range(n)]
        lb = None
        try:
            port = reps[0].port
            if level != "direct":
                lb = Balancer([r.port for r in reps], tmp / f"haproxy{level}.log")
                lb.wait_up()
                # "rr": the header-only frontend without hints balances round robin (no affinity).
                port = lb.header_port if level == "rr" else lb.port
            keys = warm_up(port, cases)
            before = [r.lookups() for r in reps]
            share = args.gzip_share if level != "rr" else 0.0
            lat, wall, where, _ = measure(port, cases, args.rounds, args.clients, 15, keys, share)
            after = [r.lookups() for r in reps]
            hits = sum(x[0] - y[0] for x, y in zip(after, before))
            misses = sum(x[1] - y[1] for x, y in zip(after, before))
            measured = len(lat)
            hit_rate = hits / measured
            spread = {}
            for reps_of_key in where.values():
                for s in reps_of_key:
                    spread[s] = spread.get(s, 0) + 1
            sticky = all(len(v) == 1 for v in where.values())
            label = {"direct": "1, direct (no HAProxy)", "rr": "3 (HAProxy, round robin)"}.get(level, f"{level} (HAProxy)")
            rows.append((label, measured, wall,
                         measured / wall, percentile(lat, 50), percentile(lat, 99),
                         hits, misses, hit_rate, sticky, spread))
        finally:
            if lb:
                lb.stop()
            for r in reps:
                r.stop()

    print(f"CPU: {cpu_model()}; {len(cases)} corpus requests, warm-up pass + {args.rounds} measured rounds "
          f"(one new question each; {args.gzip_share:.0%} gzip + X-Clef-Route-Key), {args.clients} clients, "
          f"{args.threads} engine thread(s) per replica\n")
    print("| replicas | requests | wall s | requests/s | p50 ms | p99 ms | cache hits / misses | "
          "hit rate (measured) | one replica per state | states per replica |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, n, wall, rps, p50, p99, hits, misses, rate, sticky, spread in rows:
        sp = ", ".join(f"{k}: {v}" for k, v in sorted(spread.items()))
        print(f"| {name} | {n} | {wall:.2f} | {rps:.1f} | {p50:.1f} | {p99:.1f} | {hits:.0f} / {misses:.0f} | "
              f"{rate:.1%} | {'yes' if sticky else 'NO'} | {sp} |")
    if args.loss:
        loss_run(args, model, tmp, cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
