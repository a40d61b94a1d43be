#!/usr/bin/env python3
"""Scale-out benchmark (issue 15): requests/s and p50/p99 latency through HAProxy
(deploy/haproxy/haproxy.cfg, Debian's haproxy 2.6) in front of 1, 2 and 3 `clef serve` replicas,
with the state-cache hit rate and how the states spread over the replicas. Not a test.

For each replica count: start the replicas (`--threads T` each) and HAProxy on loopback ports,
send the corpus once (warm-up: every state's cold prefill), then --rounds rounds of the corpus with
one new question per request per round (same states: warm requests if the balancer keeps each
state on one replica) from --clients threads, shuffled. Every answer must be a 200; the hit rate
is the replicas' /metrics state-cache hits over the measured requests. A row "direct" sends the
same load to one replica without HAProxy (the balancer's own cost). Prints a markdown table with
lscpu's CPU model. A last row balances 3 fresh replicas round robin (the header-only frontend, no
hints sent) to show what affinity buys.

  .venv/bin/python bench/bench_scaleout.py                   # tiny random model, 1/2/3 replicas
  .venv/bin/python bench/bench_scaleout.py --threads 1 --clients 4 --rounds 4 --skip-heavy

On a 2-core machine the point is correctness and affinity, not speed-up: the replicas share the
same cores, so requests/s cannot grow with replicas; what must hold is a hit rate near 100%.
"""

from __future__ import annotations

import argparse
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
    return lambda req: request(port, "POST", "/v1/systemone", json.dumps(req).encode(),
                               {"Content-Type": "application/json"})


def warm_up(port, cases):
    """The corpus once, one at a time: every state's cold prefill."""
    post = make_post(port)
    for _, req in cases:
        status, _, body = post(req)
        if status != 200:
            raise RuntimeError(f"warm-up answered {status}: {body[:200]}")


def measure(port, cases, rounds, clients, seed):
    """The measured rounds. Returns (latencies in ms, wall seconds, {state key: replicas seen})."""
    post = make_post(port)
    work = [with_new_question(req, r) for r in range(1, rounds + 1) for _, req in cases]
    random.Random(seed).shuffle(work)
    lat = []
    where = {}
    lock = threading.Lock()

    def one(req):
        t0 = time.perf_counter()
        status, h, body = post(req)
        ms = (time.perf_counter() - t0) * 1e3
        if status != 200:
            raise RuntimeError(f"answered {status}: {body[:200]}")
        with lock:
            lat.append(ms)
            where.setdefault(h["x-clef-state-key"], set()).add(h.get("x-clef-replica", "direct"))

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as ex:
        list(ex.map(one, work))
    return lat, time.perf_counter() - t0, where


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
            warm_up(port, cases)
            before = [r.lookups() for r in reps]
            lat, wall, where = measure(port, cases, args.rounds, args.clients, seed=15)
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
          f"(one new question each), {args.clients} clients, {args.threads} engine thread(s) per replica\n")
    print("| replicas | requests | wall s | requests/s | p50 ms | p99 ms | cache hits / misses | "
          "hit rate (measured) | one replica per state | states per replica |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, n, wall, rps, p50, p99, hits, misses, rate, sticky, spread in rows:
        sp = ", ".join(f"{k}: {v}" for k, v in sorted(spread.items()))
        print(f"| {name} | {n} | {wall:.2f} | {rps:.1f} | {p50:.1f} | {p99:.1f} | {hits:.0f} / {misses:.0f} | "
              f"{rate:.1%} | {'yes' if sticky else 'NO'} | {sp} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
