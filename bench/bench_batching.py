#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Continuous batching vs one decision at a time: `clef serve --scheduler batch` against
`--scheduler serial` on the same model, precision and threads, in one run (docs/PERFORMANCE.md
"Continuous batching"). Not a test. For each precision the two servers are started in turn (the
order alternates between rounds) and each runs:

  cold128   C clients, each sending unique ~128-token requests back to back: requests/s
  cold512   the same with ~512-token requests
  warm      one 4k-token state computed once (not timed), then C clients asking it different
            questions (the state cache's warm path): requests/s
  long      p50/p99 latency of ~128-token requests sent one after another, alone (idle) and while
            one ~16k-token request runs
  cancel    20 clients send ~16k-token requests and hang up after 1 s; then one ~128-token
            request: its latency beside a ~512-token request's alone (one chunk's time), and the
            server's RSS before the burst, at its peak and 2 s after the short answer

Every answer is checked: a request's answer from the batching server must equal the serial
server's, byte for byte (answers are bit-identical by design; see docs/ARCHITECTURE.md).
Prints the CPU (lscpu) and markdown tables with the batch/serial ratios.

  python3 bench/bench_batching.py --model build/models/clef-0.8b-seed2 --precisions bf16,int8
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import pathlib
import platform
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from clef_env import bf16_steady_state  # bench/, beside this script

bf16_steady_state(os.environ)

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
         "quebec romeo sierra tango uniform victor whiskey xray yankee zulu river stone cloud field north south "
         "east west amber cobalt violet silver copper marble cedar maple willow harbor canyon meadow").split()


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))] if xs else float("nan")


class Server:
    """One `clef serve` process on a free port."""

    def __init__(self, args, scheduler, precision, log):
        self.log = log
        cmd = [args.bin, "serve", "--model", args.model, "--port", "0", "--threads", str(args.threads),
               "--precision", precision, "--scheduler", scheduler, "--queue", "512", "--timeout", "3600", "-q",
               "--chunk", str(args.chunk), *(["--max-batch-tokens", str(args.max_batch_tokens)] if scheduler == "batch" else [])]
        self.proc = subprocess.Popen(cmd, stderr=open(log, "wb"), stdout=subprocess.DEVNULL,
                                     env=dict(os.environ, OMP_WAIT_POLICY="passive"))
        for _ in range(2400):
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read_text(errors="replace"))
            if m:
                self.port = int(m.group(1))
                return
            if self.proc.poll() is not None:
                sys.exit(f"clef serve exited: {log.read_text()}")
            time.sleep(0.05)
        sys.exit("clef serve did not start")

    def post(self, body, conn=None):
        c = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=3600)
        c.request("POST", "/v1/systemone", body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        out = r.read()
        if conn is None:
            c.close()
        return r.status, out

    def metric(self, name):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        c.close()
        m = re.search(r"^" + re.escape(name) + r" (\S+)$", text, re.M)
        return float(m.group(1)) if m else float("nan")

    def rss_mib(self):
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=120)


def request(words, rng, questions=None):
    state = " ".join(rng.choice(WORDS) for _ in range(words))
    q = questions or {"q": {"type": "noul"}}
    return json.dumps({"state": state, "questions": q}).encode()


def question(i):
    return {f"q{i}": {"type": "noul", "instructions": f"Is item {i} of the record relevant to case {i * 7}?"}}


def words_for(tokens, per_word, overhead):
    return max(1, round((tokens - overhead) / per_word))


def run_clients(server, bodies, clients):
    """Sends every body once from `clients` threads (one keep-alive connection each). Returns
    (wall seconds, {index: (status, answer, latency)})."""
    results, lock, it = {}, threading.Lock(), iter(range(len(bodies)))

    def client():
        c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=3600)
        while True:
            with lock:
                i = next(it, None)
            if i is None:
                break
            t0 = time.perf_counter()
            st, out = server.post(bodies[i], c)
            with lock:
                results[i] = (st, out, time.perf_counter() - t0)
        c.close()

    t0 = time.perf_counter()
    ts = [threading.Thread(target=client) for _ in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.perf_counter() - t0, results


def hang_up_after(port, body, seconds):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    time.sleep(seconds)
    s.close()


def scenarios(server, args, sets, answers):
    """Runs every scenario on `server`; returns {name: value}; records answers (checked across servers)."""
    r = {}
    for name in [m for m in ("cold128", "cold512", "warm") if m in args.mixes]:
        if name == "warm":
            st, out = server.post(sets["warm_seed"])  # computes the 4k state (not timed)
            assert st == 200, out[:300]
        wall, res = run_clients(server, sets[name], args.clients)
        for i, (st, out, _) in res.items():
            assert st == 200, (name, st, out[:300])
            answers.setdefault((name, i), []).append(out)
        r[name] = len(res) / wall
        r[name + "_tokens"] = statistics.mean(json.loads(out)["usage"]["input_tokens"] for _, out, _ in res.values())
    if "long" not in args.mixes:
        return r
    idle = []
    for body in sets["short"][:args.latency_requests]:
        t0 = time.perf_counter()
        st, out = server.post(body)
        assert st == 200
        idle.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    st, out = server.post(sets["chunk"])  # a ~512-token request alone: one chunk's time
    assert st == 200
    r["chunk_s"] = time.perf_counter() - t0
    busy, done = [], threading.Event()

    def long_one():
        st, out = server.post(sets["long"])
        assert st == 200, out[:300]
        done.set()

    t = threading.Thread(target=long_one)
    t.start()
    time.sleep(0.5)
    k = 0
    while not done.is_set():  # each request sent while the long one runs is timed
        body = sets["short"][(args.latency_requests + k) % len(sets["short"])]
        k += 1
        t0 = time.perf_counter()
        st, out = server.post(body)
        assert st == 200
        busy.append(time.perf_counter() - t0)
    t.join()
    r["idle_p50"], r["idle_p99"] = percentile(idle, 50), percentile(idle, 99)
    r["busy_p50"], r["busy_p99"], r["busy_n"] = percentile(busy, 50), percentile(busy, 99), len(busy)
    if "cancel" not in args.mixes:
        return r
    # Cancellation: 20 long requests whose clients hang up after 1 s, then a short one.
    rss0 = server.rss_mib()
    hs = [threading.Thread(target=hang_up_after, args=(server.port, sets["cancel"][i], 1.0)) for i in range(20)]
    peak = [rss0]
    for h in hs:
        h.start()
    while any(h.is_alive() for h in hs):
        peak[0] = max(peak[0], server.rss_mib())
        time.sleep(0.05)
    t0 = time.perf_counter()
    st, out = server.post(sets["short"][0])
    assert st == 200
    r["cancel_short_s"] = time.perf_counter() - t0
    time.sleep(2)
    r["rss_idle"], r["rss_peak"], r["rss_after"] = rss0, max(peak[0], server.rss_mib()), server.rss_mib()
    r["cancelled"] = server.metric("clef_jobs_cancelled_total")
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(ROOT / "build" / "release" / "bin" / "clef"))
    ap.add_argument("--model", required=True, help="release folder (e.g. the 0.8b random folder)")
    ap.add_argument("--precisions", default="bf16,int8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--max-batch-tokens", type=int, default=0, help="the batching server's step budget (0: --chunk)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=48, help="requests per throughput mix")
    ap.add_argument("--latency-requests", type=int, default=10, help="idle short requests timed")
    ap.add_argument("--long-tokens", type=int, default=16384)
    ap.add_argument("--rounds", type=int, default=1, help="serial/batch rounds (order alternates)")
    ap.add_argument("--mixes", default="cold128,cold512,warm,long,cancel",
                    help="scenarios to run (cancel needs long)")
    args = ap.parse_args()
    args.mixes = set(args.mixes.split(","))

    cpu = next((l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout
                .splitlines() if l.startswith("Model name")), platform.processor())
    print(f"CPU: {cpu} ({os.cpu_count()} CPUs visible), load average {os.getloadavg()[0]:.2f}; model {args.model}, "
          f"threads {args.threads}, chunk {args.chunk}, {args.clients} clients\n")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-batching-"))
    rc = 0
    for precision in args.precisions.split(","):
        # Token calibration on a serial server: tokens per state word and the fixed prompt's tokens.
        srv = Server(args, "serial", precision, tmp / "calibrate.log")
        rng = random.Random(0)
        t = [json.loads(srv.post(request(n, rng))[1])["usage"]["input_tokens"] for n in (100, 300)]
        srv.stop()
        per_word = (t[1] - t[0]) / 200
        overhead = t[0] - 100 * per_word
        rng = random.Random(1)
        w128, w512 = words_for(128, per_word, overhead), words_for(512, per_word, overhead)
        warm_state = " ".join(rng.choice(WORDS) for _ in range(words_for(4096, per_word, overhead)))
        sets = {
            "cold128": [request(w128, rng) for _ in range(args.requests)],
            "cold512": [request(w512, rng) for _ in range(args.requests)],
            "warm_seed": json.dumps({"state": warm_state, "questions": question(10_000)}).encode(),
            "warm": [json.dumps({"state": warm_state, "questions": question(i)}).encode() for i in range(args.requests)],
            "short": [request(w128, rng) for _ in range(200)],
            "chunk": request(w512, rng),
            "long": request(words_for(args.long_tokens, per_word, overhead), rng),
            "cancel": [request(words_for(args.long_tokens, per_word, overhead), rng) for _ in range(20)],
        }
        results, answers = {"serial": [], "batch": []}, {}
        for rnd in range(args.rounds):
            for sched in (("serial", "batch") if rnd % 2 == 0 else ("batch", "serial")):
                srv = Server(args, sched, precision, tmp / f"{precision}-{sched}-{rnd}.log")
                try:
                    results[sched].append(scenarios(srv, args, sets, answers))
                finally:
                    srv.stop()
        bad = [k for k, v in answers.items() if len(set(v)) != 1]
        med = {s: {k: statistics.median(r[k] for r in results[s]) for k in results[s][0]} for s in results}
        S, B = med["serial"], med["batch"]
        print(f"### {precision} ({per_word:.2f} tokens per state word, {overhead:.0f} fixed tokens)\n")
        if bad:
            print(f"MISMATCH: {len(bad)} answers differ between the schedulers: {bad[:5]}\n")
            rc = 1
        else:
            print(f"All {len(answers)} answers identical between the schedulers.\n")
        print("| mix | mean input tokens | serial req/s | batch req/s | batch / serial |")
        print("|---|---:|---:|---:|---:|")
        for k, label in (("cold128", "cold, ~128 tokens"), ("cold512", "cold, ~512 tokens"),
                         ("warm", "warm (4k cached state, new questions)")):
            if k not in S:
                continue
            print(f"| {label} | {S[k + '_tokens']:.0f} | {S[k]:.2f} | {B[k]:.2f} | {B[k] / S[k]:.2f}x |")
        if "long" not in args.mixes:
            continue
        print("\n| ~128-token requests | serial | batch |")
        print("|---|---:|---:|")
        for k, label in (("idle_p50", "idle p50 s"), ("idle_p99", "idle p99 s"), ("busy_p50", "beside a 16k request, p50 s"),
                         ("busy_p99", "beside a 16k request, p99 s"), ("busy_n", "requests timed beside it")):
            print(f"| {label} | {S[k]:.3f} | {B[k]:.3f} |")
        print(f"| p99 beside / p99 idle | {S['busy_p99'] / S['idle_p99']:.1f}x | {B['busy_p99'] / B['idle_p99']:.1f}x |")
        if "cancel" not in args.mixes:
            continue
        print("\n| 20 abandoned 16k requests, then a short one | serial | batch |")
        print("|---|---:|---:|")
        for k, label in (("chunk_s", "a ~512-token request alone (one chunk) s"),
                         ("cancel_short_s", "short request latency s"), ("rss_idle", "RSS before, MiB"),
                         ("rss_peak", "RSS peak, MiB"), ("rss_after", "RSS 2 s after, MiB"),
                         ("cancelled", "jobs cancelled (counter)")):
            print(f"| {label} | {S[k]:.2f} | {B[k]:.2f} |")
        print()
    return rc


if __name__ == "__main__":
    sys.exit(main())
