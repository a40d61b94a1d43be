#!/usr/bin/env python3
"""Benchmark of exact state reuse (issue 7): one long state asked once cold, then new questions warm.

Not a test. Runs tests/tools/cache_driver.cc (one Engine, many requests) on a release folder
(default: the 0.8b random-weight preset, generated with tools/reference/make_model.py if missing):

  1. a cold request: prefix + state of ~16,384 tokens (``--state-tokens``) and 1 question (the
     record budget is raised above the state so that 10 questions fit too);
  2. ``--rounds`` warm requests of 1 new question each on the same state;
  3. ``--rounds`` warm requests of 10 new questions each;
  4. the cold request again (warm): its logits and body must be bit-identical to the cold ones.

Prints each request's latency (Decision timings), the cold latency, the warm medians, the
speed-up cold / warm (goal: >= 20x for one new question), and the cache's bytes and entries.

    OMP_WAIT_POLICY=passive nice python3 bench/bench_state_cache.py --model /tmp/clef-0.8b --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "reference"))


def log_state(n_lines: int, seed: int) -> str:
    """Deterministic synthetic log text (the shape of a long Clef state)."""
    rng = random.Random(seed)
    hosts = [f"build-{i:02d}" for i in range(40)] + [f"web-{i:02d}" for i in range(40)]
    procs = ["sshd", "sudo", "cron", "nginx", "powershell.exe", "python3", "curl", "systemd", "dockerd", "postgres"]
    verbs = ["accepted key for", "failed password for", "session opened for", "GET /api/v2/items by",
             "spawned child for", "connection reset from", "rotated logs of", "denied write by"]
    lines = []
    for i in range(n_lines):
        ts = f"2026-11-{1 + i // 2000:02d}T{(i // 120) % 24:02d}:{(i // 2) % 60:02d}:{(7 * i) % 60:02d}Z"
        lines.append(f"{ts} {rng.choice(hosts)} {rng.choice(procs)}[{rng.randrange(100, 65000)}]: "
                     f"{rng.choice(verbs)} user svc_{rng.randrange(1, 300)} from 10.{rng.randrange(256)}."
                     f"{rng.randrange(256)}.{rng.randrange(256)} status={rng.choice(['ok', 'fail', 'retry'])}")
    return "\n".join(lines)


def question(k: int) -> dict:
    topics = ["lateral movement", "credential stuffing", "data exfiltration", "a misconfigured cron job",
              "a failing disk", "a deployment rollout", "a denial of service", "privilege escalation"]
    return {"type": "choice",
            "instructions": f"Question {k}: does this log show {topics[k % len(topics)]} on host group {k % 13}?",
            "criteria": {"yes": "clear evidence in the log", "no": "no evidence at all",
                         "unclear": f"some hints, needs review #{k}"}}


def request(state: str, first_q: int, n_q: int) -> dict:
    return {"model": "clef", "state": state,
            "questions": {f"q{first_q + i}": question(first_q + i) for i in range(n_q)}}


def fit_state(model_dir: pathlib.Path, target_tokens: int) -> str:
    """The longest log_state whose own token count stays within target_tokens."""
    from clef_ref.record import load_tokenizer

    tok = load_tokenizer(model_dir)
    count = lambda n: len(tok.encode(log_state(n, 7), add_special_tokens=False).ids)  # noqa: E731
    lo, hi = 1, 64
    while count(hi) <= target_tokens:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count(mid) <= target_tokens:
            lo = mid
        else:
            hi = mid
    return log_state(lo, 7)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="/tmp/clef-0.8b", help="release folder (made with --preset 0.8b if missing)")
    ap.add_argument("--driver", default=str(REPO / "build" / "release" / "bin" / "clef_cache_driver"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", choices=["f32", "bf16"], default="bf16")
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--state-tokens", type=int, default=16384,
                    help="target prefix + state tokens (the part that is cached)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--state-cache-mb", type=int, default=2048)
    ap.add_argument("--json", help="write the raw driver lines and the summary here")
    a = ap.parse_args()

    model = pathlib.Path(a.model)
    if not (model / "config.json").exists():
        print(f"making the 0.8b random-weight preset in {model} ...", flush=True)
        subprocess.run([sys.executable, str(REPO / "tools" / "reference" / "make_model.py"), "--preset", "0.8b",
                        "--out", str(model), "--seed", "2"], check=True)
    state = fit_state(model, a.state_tokens - 36)  # the prefix is 36 tokens
    max_tokens = a.state_tokens + 4096  # room for 10 questions' schema and the suffix
    reqs = [request(state, 0, 1)]
    k = 1
    for _ in range(a.rounds):
        reqs.append(request(state, k, 1))
        k += 1
    for _ in range(a.rounds):
        reqs.append(request(state, k, 10))
        k += 10
    reqs.append(request(state, 0, 1))  # the cold request again, warm: its logits must be the same bits
    cmd = [a.driver, str(model), "--threads", str(a.threads), "--precision", a.precision, "--chunk", str(a.chunk),
           "--max-tokens", str(max_tokens), "--state-cache-mb", str(a.state_cache_mb)]
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    out = []
    for i, r in enumerate(reqs):
        proc.stdin.write(json.dumps(r) + "\n")
        proc.stdin.flush()
        line = json.loads(proc.stdout.readline())
        if "error" in line:
            print(f"request {i} refused: {line}", file=sys.stderr)
            return 1
        out.append(line)
        t = line["timings"]
        kind = "cold" if i == 0 else ("warm 1q" if i <= a.rounds else "warm 10q" if i <= 2 * a.rounds else "re-ask")
        print(f"{i:2d} {kind:8s} {line['cache']:4s} tokens {line['input_tokens']:6d} reused {line['reused_tokens']:6d}  "
              f"total {t['total']:8.3f} s (prefill {t['prefill']:.3f}, head {t['head']:.3f}, "
              f"restore {t['state_restore']:.3f}, tokenize {t['tokenize']:.3f})", flush=True)
    proc.stdin.close()
    proc.wait()
    cold = out[0]["timings"]["total"]
    w1 = statistics.median(o["timings"]["total"] for o in out[1:1 + a.rounds])
    w10 = statistics.median(o["timings"]["total"] for o in out[1 + a.rounds:1 + 2 * a.rounds])
    same_bits = out[-1]["logits"] == out[0]["logits"] and out[-1]["body"] == out[0]["body"]
    st = out[-1]["stats"]
    summary = {
        "model": str(model), "precision": a.precision, "threads": a.threads, "chunk": a.chunk,
        "state_tokens_reused": out[1]["reused_tokens"], "cold_s": cold, "warm_1q_median_s": w1,
        "warm_10q_median_s": w10, "speedup_1q": cold / w1, "speedup_10q": cold / w10,
        "reask_bit_identical": same_bits, "cache_bytes": st["bytes"], "cache_entries": st["entries"], "hits": st["hits"], "misses": st["misses"],
        "load1": os.getloadavg()[0], "wall_s": time.time() - t0,
    }
    print(f"\nprefix+state tokens reused: {summary['state_tokens_reused']}")
    print(f"cold (1 question):           {cold:8.3f} s")
    print(f"warm, 1 new question:        {w1:8.3f} s  (median of {a.rounds})  speed-up {cold / w1:6.1f}x")
    print(f"warm, 10 new questions:      {w10:8.3f} s  (median of {a.rounds})  speed-up {cold / w10:6.1f}x")
    print(f"cold request re-asked warm: {'bit-identical logits and body' if same_bits else 'DIFFERENT'}")
    print(f"cache: {st['bytes'] / 2**20:.1f} MiB in {st['entries']} entries "
          f"({st['bytes'] / max(1, summary['state_tokens_reused']):.0f} bytes per prefix+state token); "
          f"hits {st['hits']}, misses {st['misses']}; load1 {summary['load1']:.1f}")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps({"summary": summary, "lines": out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
