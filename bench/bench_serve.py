#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""`clef serve` throughput benchmark: requests/s and latency percentiles for the corpus
(tests/data/requests/corpus.jsonl) with 1, 4, 16 and 64 concurrent clients, then GET /health alone
(the HTTP layer without the engine); with --baseline-bin, a second binary (main's cpp-httplib
server) is measured the same way in the same run. Prints the CPU model (lscpu). Not a test.

Starts `clef serve --port 0` on the given model folder (default: a tiny random-weight model made
with `clef make-model`), sends every corpus request round-robin from N client threads (one
keep-alive connection each) for --requests requests per level, checks every answer is a 200
identical to the request sent alone, and prints a markdown table: clients, requests, wall seconds,
requests/s, input tokens/s, p50 / p90 / p99 / max latency in ms, 503s.

  python3 bench/bench_serve.py                                   # tiny random model
  python3 bench/bench_serve.py --baseline-bin BASELINE_TREE/build/release/bin/clef --threads 2
  python3 bench/bench_serve.py --model /tmp/clef-0.8b --threads 2 --requests 48
  python3 bench/bench_serve.py --skip-heavy                       # drop the 64-question, 255-option
                                                                  # and 3k-word requests
One engine serves requests one at a time using every --threads core, so requests/s is bounded by
the engine and concurrency only adds queueing (latency grows with clients; throughput stays flat).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from clef_env import bf16_steady_state  # bench/, beside this script

bf16_steady_state(os.environ)

ROOT = pathlib.Path(__file__).resolve().parents[1]


def percentile(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))
    return xs[k]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(ROOT / "build" / "release" / "bin" / "clef"))
    ap.add_argument("--model", help="release folder (default: a fresh tiny random model)")
    ap.add_argument("--threads", type=int, default=0, help="engine threads (0: all CPUs)")
    ap.add_argument("--precision", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--baseline-bin", help="a second clef binary (e.g. main's, cpp-httplib) measured in the same run")
    ap.add_argument("--health-requests", type=int, default=4000, help="GET /health requests per concurrency level")
    ap.add_argument("--clients", default="1,4,16,64")
    ap.add_argument("--requests", type=int, default=200, help="requests per concurrency level")
    ap.add_argument("--corpus", default=str(ROOT / "tests" / "data" / "requests" / "corpus.jsonl"))
    ap.add_argument("--skip-heavy", action="store_true", help="only requests under 2,000 bytes")
    ap.add_argument("--state-cache-mb", type=int, default=None,
                    help="the server's state cache budget (default: the server's; 0: every request computed cold; "
                         "with the cache on, the warm-up pass fills it and the measured requests reuse their states)")
    args = ap.parse_args()

    reqs = [(c["name"], json.dumps(c["request"]).encode()) for c in map(json.loads, open(args.corpus, encoding="utf-8"))]
    if args.skip_heavy:
        reqs = [r for r in reqs if len(r[1]) < 2000]
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    tmp = tempfile.TemporaryDirectory(prefix="bench-serve-")
    model = args.model
    if not model:
        model = os.path.join(tmp.name, "tiny")
        subprocess.run([args.bin, "make-model", "--preset", "tiny", "--out", model, "--seed", "1"], check=True,
                       env=env, capture_output=True)
    cpu = next((l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout
                .splitlines() if l.startswith("Model name")), platform.processor())
    print(f"CPU: {cpu} ({os.cpu_count()} CPUs visible), load average {os.getloadavg()[0]:.2f}\n")
    bins = [("new", args.bin)] + ([("baseline", args.baseline_bin)] if args.baseline_bin else [])
    rc = 0
    for label, binary in bins:
        print(f"### {label}: {binary}\n")
        rc |= bench_one(args, binary, model, reqs, env, pathlib.Path(tmp.name) / f"serve-{label}.log")
        print()
    return rc


def bench_one(args, binary, model, reqs, env, log) -> int:
    """Runs one server binary through every concurrency level (decisions, then GET /health)."""
    proc = subprocess.Popen([binary, "serve", "--model", model, "--port", "0", "--threads", str(args.threads),
                             "--precision", args.precision, "--queue", "256", "-q",
                             *([] if args.state_cache_mb is None else ["--state-cache-mb", str(args.state_cache_mb)])],
                            stderr=open(log, "wb"), stdout=subprocess.DEVNULL, env=env)
    try:
        port = None
        for _ in range(1200):
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read_text(errors="replace"))
            if m:
                port = int(m.group(1))
                break
            if proc.poll() is not None:
                sys.exit(f"clef serve exited: {log.read_text()}")
            time.sleep(0.05)

        def post(conn, body):
            conn.request("POST", "/v1/systemone", body=body, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            return r.status, r.read()

        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        alone = {}
        for name, body in reqs:  # warm-up + expected answers
            st, out = post(conn, body)
            assert st == 200, (name, st, out[:200])
            alone[name] = out
        tokens = {name: json.loads(out)["usage"]["input_tokens"] for name, out in alone.items()}
        conn.close()

        print(f"model {model}, threads {args.threads or os.cpu_count()}, precision {args.precision}, "
              f"state cache {'server default' if args.state_cache_mb is None else str(args.state_cache_mb) + ' MiB'}, "
              f"{len(reqs)} distinct requests, mean {statistics.mean(tokens.values()):.0f} input tokens\n")
        print("| clients | requests | wall s | req/s | input tok/s | p50 ms | p90 ms | p99 ms | max ms | 503 |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for n in [int(x) for x in args.clients.split(",")]:
            lat, mismatches, overloads, toks = [], [], [0], [0]
            lock = threading.Lock()
            counter = iter(range(args.requests))

            def client():
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
                while True:
                    with lock:
                        i = next(counter, None)
                    if i is None:
                        break
                    name, body = reqs[i % len(reqs)]
                    t0 = time.perf_counter()
                    try:
                        st, out = post(c, body)
                    except (http.client.HTTPException, OSError):
                        c.close()
                        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
                        st, out = post(c, body)
                    dt = time.perf_counter() - t0
                    with lock:
                        if st == 503:
                            overloads[0] += 1
                        elif st != 200 or out != alone[name]:
                            mismatches.append(name)
                        else:
                            lat.append(dt)
                            toks[0] += tokens[name]
                c.close()

            t0 = time.perf_counter()
            ts = [threading.Thread(target=client) for _ in range(n)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            wall = time.perf_counter() - t0
            ms = [x * 1000 for x in lat]
            print(f"| {n} | {args.requests} | {wall:.2f} | {len(lat) / wall:.1f} | {toks[0] / wall:.0f} | "
                  f"{percentile(ms, 50):.1f} | {percentile(ms, 90):.1f} | {percentile(ms, 99):.1f} | {max(ms):.1f} | "
                  f"{overloads[0]} |", flush=True)
            if mismatches:
                print(f"  MISMATCH: {len(mismatches)} answers differ from the request sent alone: {mismatches[:5]}")
                return 1
        print("\nGET /health (the HTTP layer alone), %d requests per level:\n" % args.health_requests)
        print("| clients | req/s | p50 ms | p99 ms | max ms |")
        print("|---:|---:|---:|---:|---:|")
        for n in [int(x) for x in args.clients.split(",")]:
            lat = []
            lock = threading.Lock()
            counter = iter(range(args.health_requests))

            def hclient():
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                mine = []
                while True:
                    with lock:
                        i = next(counter, None)
                    if i is None:
                        break
                    t0 = time.perf_counter()
                    try:
                        c.request("GET", "/health")
                        r = c.getresponse()
                        r.read()
                    except (http.client.HTTPException, OSError):
                        c.close()
                        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                        c.request("GET", "/health")
                        r = c.getresponse()
                        r.read()
                    assert r.status == 200
                    mine.append(time.perf_counter() - t0)
                c.close()
                with lock:
                    lat.extend(mine)

            t0 = time.perf_counter()
            ts = [threading.Thread(target=hclient) for _ in range(n)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            wall = time.perf_counter() - t0
            ms = [x * 1000 for x in lat]
            print(f"| {n} | {len(lat) / wall:.0f} | {percentile(ms, 50):.2f} | {percentile(ms, 99):.2f} | {max(ms):.2f} |",
                  flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
