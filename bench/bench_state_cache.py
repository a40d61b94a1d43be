#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Benchmark of exact state reuse: one long state asked once cold, then new questions warm.

Not a test. Runs tests/drivers/cache_driver.cc (one Engine, many requests) on a release folder
(default: the 0.8b random-weight preset, generated with tools/reference/make_model.py if missing):

  1. a cold request: prefix + state of ~16,384 tokens (``--state-tokens``) and 1 question (the
     record budget is raised above the state so that 10 questions fit too);
  2. ``--rounds`` warm requests of 1 new question each on the same state;
  3. ``--rounds`` warm requests of 10 new questions each: first the synthetic question() (about 110
     tokens each), then 10 consecutive questions of the corpus (``--corpus``; the realistic mix,
     median 104 bytes of JSON each) under new ids. The backbone must run every new token, so a warm
     request's floor is the prefill of its new tokens: the 10-question speed-up is bounded by about
     (cached tokens / new tokens), and the table prints the new-token count beside each ratio;
  4. the cold request again (warm): its logits and body must be bit-identical to the cold ones;
  5. with --verify-off, the first warm request again on an engine without cache (bit-identical).

With ``--serve CLEF``, the same state is also asked end to end through ``CLEF serve`` (HTTP on a
loopback port, the latency a client sees: request bytes in, response out): the cold request, then
``--rounds`` warm requests of 1 new question, then the cold request again, whose response body must
be the same bytes as the cold one. Around each request the server's GET /metrics stage sums are
read, so each latency splits into the engine's own time, the queue wait and what is outside both
(HTTP, JSON parsing and writing, scheduling).

for each precision of ``--precision`` (default bf16 then f32, one after the other in one run, so
their ratios share the machine's state). Prints each request's latency (Decision timings), then a
markdown table: cold latency, warm medians, speed-ups cold / warm (goals: >= 50x for one
new question, >= 20x for 10, on a 16k-token state), the bit checks, and the cache's bytes per
prefix+state token with the head's key/value part; and the CPU model (lscpu). Exit 1 when a bit
check fails.

    OMP_WAIT_POLICY=passive nice python3 bench/bench_state_cache.py --model /tmp/clef-0.8b --threads 2
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import pathlib
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time

from clef_env import bf16_steady_state  # bench/, beside this script

bf16_steady_state(os.environ)

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


CORPUS = REPO / "tests" / "data" / "requests" / "corpus.jsonl"


def corpus_questions(path: pathlib.Path) -> list[dict]:
    """Every question object of the corpus, in file order (the realistic question mix: median 104
    bytes of JSON per question, against 233 for question())."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out.extend(json.loads(line)["request"]["questions"].values())
    return out


def request(state: str, first_q: int, n_q: int, pool: list[dict] | None = None) -> dict:
    """A request on `state` with questions q{first_q} .. q{first_q + n_q - 1}: the synthetic
    question() when `pool` is None, else pool[(k - 1) % len(pool)] for question k (new ids, so every
    warm request asks questions the cache has not seen)."""
    def q(k: int) -> dict:
        return question(k) if pool is None else pool[(k - 1) % len(pool)]
    return {"model": "clef", "state": state, "questions": {f"q{first_q + i}": q(first_q + i) for i in range(n_q)}}


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


def cpu_model() -> str:
    """The `Model name` line of lscpu (what PERFORMANCE.md records), or "unknown"."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def head_bytes_per_token(model: pathlib.Path) -> int:
    """Bytes the head's cached keys/values take per prefix+state token: 2 · (R + L) · W · 4."""
    c = json.loads((model / "joint_head_config.json").read_text())
    return 2 * (c["routing_layers"] + c["layers"]) * c["width"] * 4


def run_driver(a, model: pathlib.Path, precision: str, reqs, cache_mb: int, label: str):
    """One engine (one driver process) answering `reqs` in order; returns its output lines."""
    cmd = [a.driver, str(model), "--threads", str(a.threads), "--precision", precision, "--chunk", str(a.chunk),
           "--max-tokens", str(a.state_tokens + 16384), "--state-cache-mb", str(cache_mb)]
    print("$ " + " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    out = []
    for i, r in enumerate(reqs):
        try:
            proc.stdin.write(json.dumps(r) + "\n")
            proc.stdin.flush()
        except BrokenPipeError:
            pass  # the driver exited; reported below
        raw = proc.stdout.readline()
        if not raw:
            raise SystemExit(f"{a.driver} exited (status {proc.wait()}) before answering request {i}; "
                             "its error is above")
        line = json.loads(raw)
        if "error" in line:
            raise SystemExit(f"request {i} refused: {line}")
        out.append(line)
        t = line["timings"]
        print(f"{precision:4s} {i:2d} {label(i):8s} {line['cache']:4s} tokens {line['input_tokens']:6d} "
              f"reused {line['reused_tokens']:6d}  total {t['total']:8.3f} s (prefill {t['prefill']:.3f}, "
              f"head {t['head']:.3f}, restore {t['state_restore']:.3f}, tokenize {t['tokenize']:.3f})", flush=True)
    proc.stdin.close()
    proc.wait()
    return out


def run_precision(a, model: pathlib.Path, precision: str, reqs, labels):
    """Cold, warm 1-question, warm 10-question (synthetic and corpus questions) and re-asked requests
    on one engine (`labels[i]` names request i); optionally the first warm request again on an engine
    without cache (--verify-off). Returns the summary."""
    t0 = time.time()
    out = run_driver(a, model, precision, reqs, a.state_cache_mb, lambda i: labels[i])

    def group(name):
        return [o for o, l in zip(out, labels) if l == name]

    def med(name, key):
        return statistics.median(o["timings"][key] for o in group(name))

    def new_tokens(name):
        return statistics.median(o["input_tokens"] - o["reused_tokens"] for o in group(name))

    cold = out[0]["timings"]["total"]
    w1, w10, w10c = med("warm 1q", "total"), med("warm 10q", "total"), med("corpus 10q", "total")
    same_bits = out[-1]["logits"] == out[0]["logits"] and out[-1]["body"] == out[0]["body"]
    off_same = None
    if a.verify_off:
        off = run_driver(a, model, precision, [reqs[1]], 0, lambda i: "off 1q")
        off_same = off[0]["logits"] == out[1]["logits"] and off[0]["body"] == out[1]["body"]
    st = out[-1]["stats"]
    reused = out[1]["reused_tokens"]
    return {
        "precision": precision, "threads": a.threads, "chunk": a.chunk,
        "state_tokens_reused": reused, "cold_s": cold, "warm_1q_median_s": w1,
        "warm_1q_best_s": min(o["timings"]["total"] for o in group("warm 1q")),
        "warm_10q_median_s": w10, "speedup_1q": cold / w1, "speedup_10q": cold / w10,
        "warm_10q_corpus_median_s": w10c, "speedup_10q_corpus": cold / w10c,
        "warm_1q_new_tokens": new_tokens("warm 1q"), "warm_10q_new_tokens": new_tokens("warm 10q"),
        "warm_10q_corpus_new_tokens": new_tokens("corpus 10q"),
        "warm_10q_prefill_share": med("warm 10q", "prefill") / w10,
        "warm_10q_corpus_prefill_share": med("corpus 10q", "prefill") / w10c,
        "warm_1q_head_s": med("warm 1q", "head"), "warm_1q_prefill_s": med("warm 1q", "prefill"),
        "warm_1q_restore_s": med("warm 1q", "state_restore"),
        "reask_bit_identical": same_bits, "cache_off_bit_identical": off_same,
        "cache_bytes": st["bytes"], "cache_entries": st["entries"], "hits": st["hits"], "misses": st["misses"],
        "bytes_per_token": st["bytes"] / max(1, reused), "head_bytes_per_token": head_bytes_per_token(model),
        "load1": os.getloadavg()[0], "wall_s": time.time() - t0, "lines": out,
    }


def stage_sums(conn: http.client.HTTPConnection) -> dict[str, float]:
    """The server's per-stage seconds so far (the `clef_stage_seconds_sum` lines of GET /metrics); the
    difference across one request is that request's queue wait, tokenize, prefill, head and engine total."""
    conn.request("GET", "/metrics")
    resp = conn.getresponse()
    text = resp.read().decode()
    if resp.status != 200:
        raise SystemExit(f"clef serve answered GET /metrics with {resp.status}")
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r'^clef_stage_seconds_sum\{stage="(\w+)"\} (\S+)$', text, re.M)}


def run_serve(a, model: pathlib.Path, precision: str, reqs, labels):
    """`reqs` (cold, warm 1q rounds, re-ask) through `clef serve` on a loopback port, timed at the client;
    returns the summary. The server gets the driver's engine settings (threads, chunk, budget, cache)."""
    cmd = [a.serve, "serve", "--model", str(model), "--port", "0", "-q", "--threads", str(a.threads),
           "--precision", {"f32": "fp32"}.get(precision, precision), "--chunk", str(a.chunk),
           "--max-tokens", str(a.state_tokens + 16384), "--state-cache-mb", str(a.state_cache_mb),
           "--timeout", "3600"]
    print("$ " + " ".join(cmd), flush=True)
    logdir = tempfile.TemporaryDirectory(prefix="bench_state_cache_")
    log = pathlib.Path(logdir.name) / "serve.log"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    try:
        port = None
        while port is None:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read_text(errors="replace"))
            if m:
                port = int(m.group(1))
            elif proc.poll() is not None:
                raise SystemExit(f"clef serve exited: {log.read_text(errors='replace')}")
            else:
                time.sleep(0.05)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
        seconds, bodies, stages = [], [], []
        for i, r in enumerate(reqs):
            body = json.dumps(r).encode()
            before = stage_sums(conn)
            t = time.perf_counter()
            conn.request("POST", "/v1/systemone", body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            out = resp.read()
            seconds.append(time.perf_counter() - t)
            if resp.status != 200:
                raise SystemExit(f"clef serve answered request {i} with {resp.status}: {out[:300]!r}")
            bodies.append(out)
            after = stage_sums(conn)
            stages.append({k: after[k] - before.get(k, 0.0) for k in after})
            st = stages[-1]
            print(f"{precision:4s} {i:2d} {labels[i]:8s} serve  {len(body):7d} request bytes  total "
                  f"{seconds[-1]:8.3f} s (engine {st.get('total', 0):.3f} = prefill {st.get('prefill', 0):.3f} + head "
                  f"{st.get('head', 0):.3f} + ..., queue {st.get('queue', 0):.3f}, "
                  f"outside both {seconds[-1] - st.get('total', 0) - st.get('queue', 0):.3f})", flush=True)
        conn.close()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        logdir.cleanup()
    warm = [t for t, l in zip(seconds, labels) if l == "warm 1q"]
    warm_stages = [st for st, l in zip(stages, labels) if l == "warm 1q"]

    def warm_med(key):
        return statistics.median(st.get(key, 0.0) for st in warm_stages)
    return {"precision": precision, "cold_s": seconds[0], "warm_1q_median_s": statistics.median(warm),
            "warm_1q_best_s": min(warm), "speedup_1q": seconds[0] / statistics.median(warm),
            "warm_1q_engine_s": warm_med("total"), "warm_1q_queue_s": warm_med("queue"),
            "warm_1q_outside_engine_s": statistics.median(
                t - st.get("total", 0.0) - st.get("queue", 0.0) for t, st in zip(warm, warm_stages)),
            "reask_same_body": bodies[-1] == bodies[0]}


MODEL_FILES = ("config.json", "tokenizer.json", "joint_head_config.json", "joint_head.safetensors")


def model_missing(model: pathlib.Path) -> list[str]:
    """The files of a release folder this benchmark needs that `model` lacks."""
    missing = [f for f in MODEL_FILES if not (model / f).is_file()]
    if not (model / "model.safetensors").is_file() and not (model / "model.safetensors.index.json").is_file():
        missing.append("model.safetensors")
    return missing


def check_executable(ap: argparse.ArgumentParser, flag: str, path: str, hint: str) -> None:
    if os.path.isdir(path):
        ap.error(f"{flag} {path}: a folder, not a program")
    if not os.path.isfile(path):
        ap.error(f"{flag} {path}: no such file{hint}")
    if not os.access(path, os.X_OK):
        ap.error(f"{flag} {path}: not executable")


def check_args(ap: argparse.ArgumentParser, a) -> list[dict]:
    """Rejects bad arguments before any work (the runs take minutes); returns the corpus questions."""
    if a.rounds < 1:
        ap.error(f"--rounds must be at least 1, got {a.rounds}")
    if a.threads < 0:
        ap.error(f"--threads must be 0 (all CPUs) or more, got {a.threads}")
    if a.serve and a.threads > (os.cpu_count() or 1):
        ap.error(f"--threads {a.threads}: clef serve takes at most the CPU count, {os.cpu_count()}")
    if not 1 <= a.chunk <= 1 << 20:
        ap.error(f"--chunk must be in [1, 2^20], got {a.chunk}")
    if not 36 < a.state_tokens <= (1 << 24) - 16384:
        ap.error(f"--state-tokens must be in [37, 2^24 - 16384] (the prefix is 36 tokens), got {a.state_tokens}")
    if not 1 <= a.state_cache_mb <= 1 << 30:
        ap.error(f"--state-cache-mb must be in [1, 2^30] (the cache is what is measured), got {a.state_cache_mb}")
    check_executable(ap, "--driver", a.driver, " (build the clef_cache_driver target, or pass --driver)")
    if a.serve:
        check_executable(ap, "--serve", a.serve, "")
        try:
            v = subprocess.run([a.serve, "--version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as e:
            ap.error(f"--serve {a.serve}: cannot run it: {e}")
        if v.returncode != 0 or not v.stdout.startswith("clef "):
            first = (v.stdout.splitlines() or [""])[0][:60]
            ap.error(f"--serve {a.serve}: not the clef binary ('--version' printed {first!r}, status {v.returncode})")
    if a.json:
        parent = pathlib.Path(a.json).resolve().parent
        if not parent.is_dir():
            ap.error(f"--json {a.json}: folder {parent} does not exist")
    try:
        pool = corpus_questions(pathlib.Path(a.corpus))
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as e:
        ap.error(f"--corpus {a.corpus}: not a requests corpus ({type(e).__name__}: {e})")
    if not pool:
        ap.error(f"--corpus {a.corpus}: no questions")
    model = pathlib.Path(a.model)
    if model.exists() and not model.is_dir():
        ap.error(f"--model {model}: not a folder")
    if not model.exists() and not model.parent.is_dir():
        ap.error(f"--model {model}: no such folder (nor its parent {model.parent}, so it is not generated there)")
    if model.is_dir() and not (model / "config.json").exists() and any(model.iterdir()):
        ap.error(f"--model {model}: not a model folder (no config.json) and not empty, so the preset is not "
                 "generated into it")
    if (model / "config.json").exists() and model_missing(model):
        ap.error(f"--model {model}: incomplete model folder, missing {', '.join(model_missing(model))} (an "
                 "interrupted generation? remove the folder and run again)")
    return pool


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="/tmp/clef-0.8b",
                    help="release folder; a missing (or empty) one is made with make_model.py --preset 0.8b "
                         "--seed 2, which takes minutes (default: %(default)s)")
    ap.add_argument("--driver", default=str(REPO / "build" / "release" / "bin" / "clef_cache_driver"),
                    help="the clef_cache_driver binary (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=2, help="engine threads, 0: all CPUs (default: %(default)s)")
    ap.add_argument("--precision", default="bf16,f32",
                    help="comma-separated list of f32 / bf16, run in this order (default: %(default)s)")
    ap.add_argument("--chunk", type=int, default=512, help="prefill chunk in tokens (default: %(default)s)")
    ap.add_argument("--state-tokens", type=int, default=16384,
                    help="target prefix + state tokens (the part that is cached; default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=5,
                    help="warm requests of each kind: 1 question, 10 questions, 10 corpus questions "
                         "(default: %(default)s)")
    ap.add_argument("--state-cache-mb", type=int, default=2048,
                    help="state cache budget in MiB (default: %(default)s)")
    ap.add_argument("--verify-off", action="store_true",
                    help="also answer the first warm request on an engine with the cache off (one more cold "
                         "run per precision) and check its logits and body are the same bits")
    ap.add_argument("--serve", metavar="CLEF",
                    help="also time the cold, warm 1-question and re-asked requests through CLEF serve (the clef "
                         "binary, e.g. build/release/bin/clef)")
    ap.add_argument("--json", help="write the raw driver lines and the summaries here")
    ap.add_argument("--corpus", default=str(CORPUS), help="corpus.jsonl whose questions the 'corpus 10q' rounds ask")
    a = ap.parse_args()
    precisions = [p.strip() for p in a.precision.split(",") if p.strip()]
    if not precisions or any(p not in ("f32", "bf16") for p in precisions):
        ap.error(f"--precision takes f32 and/or bf16, comma-separated, got {a.precision!r}")
    pool = check_args(ap, a)

    model = pathlib.Path(a.model)
    if not (model / "config.json").exists():
        print(f"making the 0.8b random-weight preset in {model} ...", flush=True)
        if subprocess.run([sys.executable, str(REPO / "tools" / "reference" / "make_model.py"), "--preset", "0.8b",
                           "--out", str(model), "--seed", "2"]).returncode != 0 or model_missing(model):
            raise SystemExit(f"making the preset in {model} failed (its error is above)")
    state = fit_state(model, a.state_tokens - 36)  # the prefix is 36 tokens
    reqs, labels = [request(state, 0, 1)], ["cold"]
    k = 1
    for _ in range(a.rounds):
        reqs.append(request(state, k, 1))
        labels.append("warm 1q")
        k += 1
    for _ in range(a.rounds):
        reqs.append(request(state, k, 10))
        labels.append("warm 10q")
        k += 10
    for j in range(a.rounds):  # 10 consecutive corpus questions per round, under new ids
        reqs.append({"model": "clef", "state": state,
                     "questions": {f"q{k + i}": pool[(10 * j + i) % len(pool)] for i in range(10)}})
        labels.append("corpus 10q")
        k += 10
    reqs.append(request(state, 0, 1))  # the cold request again, warm: its logits must be the same bits
    labels.append("re-ask")
    cpu = cpu_model()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    summaries = [run_precision(a, model, p, reqs, labels) for p in precisions]
    serve_reqs = [r for r, l in zip(reqs, labels) if l in ("cold", "warm 1q", "re-ask")]
    serve_labels = [l for l in labels if l in ("cold", "warm 1q", "re-ask")]
    served = [run_serve(a, model, p, serve_reqs, serve_labels) for p in precisions] if a.serve else []

    print(f"\nCPU: {cpu}; {a.threads} threads, chunk {a.chunk}; started {started}, load1 at the end "
          f"{os.getloadavg()[0]:.1f}; model {model}")
    print("\n| precision | prefix+state tokens | cold, 1 question | warm, 1 new question (median) | speed-up "
          "| warm, 10 new questions (median) | speed-up | warm, 10 new corpus questions (median) | speed-up "
          "| warm == cold bits | cache off == on bits | cache bytes per token (head part) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in summaries:
        off = {None: "not run", True: "yes", False: "**NO**"}[s["cache_off_bit_identical"]]
        print(f"| {s['precision']} | {s['state_tokens_reused']:,} | {s['cold_s']:.1f} s "
              f"| {s['warm_1q_median_s']:.3f} s ({s['warm_1q_new_tokens']:.0f} new tokens) | **{s['speedup_1q']:.1f}x** "
              f"| {s['warm_10q_median_s']:.3f} s ({s['warm_10q_new_tokens']:.0f} new tokens) | **{s['speedup_10q']:.1f}x** "
              f"| {s['warm_10q_corpus_median_s']:.3f} s ({s['warm_10q_corpus_new_tokens']:.0f} new tokens) "
              f"| **{s['speedup_10q_corpus']:.1f}x** "
              f"| {'yes' if s['reask_bit_identical'] else '**NO**'} | {off} "
              f"| {s['bytes_per_token']:,.0f} ({s['head_bytes_per_token']:,}) |")
    for s in summaries:
        print(f"{s['precision']}: warm 1q median prefill {s['warm_1q_prefill_s']:.3f} s, head {s['warm_1q_head_s']:.3f} s, "
              f"state restore {s['warm_1q_restore_s']:.3f} s; prefill share of warm 10q {s['warm_10q_prefill_share']:.0%} "
              f"(corpus {s['warm_10q_corpus_prefill_share']:.0%}); best warm 1q {s['warm_1q_best_s']:.3f} s; "
              f"cache {s['cache_bytes'] / 2**20:.1f} MiB in {s['cache_entries']} entries; load1 {s['load1']:.1f}; "
              f"wall {s['wall_s']:.0f} s")
    if served:
        print("\nThrough clef serve (HTTP, timed at the client):\n")
        print("| precision | cold, 1 question | warm, 1 new question (median; best) | speed-up | of the warm median: "
              "engine, queue, outside both (HTTP, JSON, scheduling; /metrics) | re-ask == cold body |")
        print("|---|---|---|---|---|---|")
        for s in served:
            print(f"| {s['precision']} | {s['cold_s']:.1f} s | {s['warm_1q_median_s']:.3f} s; {s['warm_1q_best_s']:.3f} s "
                  f"| **{s['speedup_1q']:.1f}x** | {s['warm_1q_engine_s']:.3f} s, {s['warm_1q_queue_s']:.3f} s, "
                  f"{s['warm_1q_outside_engine_s']:.3f} s | {'yes' if s['reask_same_body'] else '**NO**'} |")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps({"cpu": cpu, "started": started, "summaries": summaries,
                                                    "serve": served}, indent=1))
    ok = all(s["reask_bit_identical"] and s["cache_off_bit_identical"] in (None, True) for s in summaries)
    ok = ok and all(s["reask_same_body"] for s in served)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
