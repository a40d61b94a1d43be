#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Backbone prefill benchmark (the CPU backbone's speed target): clef.cpp vs transformers on one release folder.

Prints a markdown table: for each T and mode, prefill tokens/s (best of --runs processes, each
best of its --repeat passes, and the spread (best - worst) / best over all timed passes), achieved
GFLOP/s and the fraction of the machine's measured peak (fp32 FMA / bf16 vdpbf16ps kernels of
`clef_bench_ops --peak-only`, measured in the same run, before and after), peak RSS; and
transformers (PyTorch CPU, same thread count, fp32 and bf16, same folder, same ids), with the
ratio clef.cpp / best PyTorch mode. The 1-minute load average is printed per point: run when the
machine is otherwise idle. tokens/CPU-s (tokens per CPU-second of the process; for clef.cpp the
whole process incl. startup, so a lower bound) is the contention-robust column for --threads 1 on
a busy machine. Not a timed test.

  python3 bench/bench_backbone.py --model /tmp/clef-0.8b --T 512,1024,4096,16384 --threads 2

PyTorch is skipped at a T whose estimated time (from the largest T measured so far, scaled by the
prefill FLOPs of docs/MODEL.md §9) exceeds --torch-budget seconds (default 180); the skip and the
estimate are printed.

Binaries come from --bin (default: the newest build/*/bin containing clef_backbone_dump).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import re
import resource
import subprocess
import sys
import time

from clef_env import bf16_steady_state  # bench/, beside this script

REPO = pathlib.Path(__file__).resolve().parents[1]


def find_bin(explicit: str | None) -> pathlib.Path:
    if explicit:
        return pathlib.Path(explicit)
    found = sorted(REPO.glob("build/*/bin/clef_backbone_dump"), key=lambda p: p.stat().st_mtime, reverse=True)
    if not found:
        sys.exit("clef_backbone_dump not found; build a preset or pass --bin DIR")
    return found[0].parent


def flops_per_token(cfg: dict, t: int, chunk: int = 64) -> float:
    """Average FLOP per token of a T-token prefill (docs/MODEL.md §9): linear layers, causal
    attention, chunked GDN state math."""
    tc = cfg.get("text_config", cfg)
    h, inter, nh, nkv, hd = tc["hidden_size"], tc["intermediate_size"], tc["num_attention_heads"], \
        tc["num_key_value_heads"], tc["head_dim"]
    hk, hv, dk, dv = tc["linear_num_key_heads"], tc["linear_num_value_heads"], tc["linear_key_head_dim"], \
        tc["linear_value_head_dim"]
    types = tc["layer_types"]
    n_full = sum(1 for x in types if x == "full_attention")
    n_lin = len(types) - n_full
    attn_params = h * 2 * nh * hd + 2 * h * nkv * hd + nh * hd * h
    gdn_params = h * (2 * hk * dk + hv * dv) + h * hv * dv + 2 * h * hv + hv * dv * h
    mlp_params = 3 * h * inter
    linear = 2.0 * (n_full * attn_params + n_lin * gdn_params + len(types) * mlp_params)
    attention = n_full * 4.0 * nh * hd * (t + 1) / 2.0
    gdn = n_lin * hv * 2.0 * (3 * dk * dv + 4 * chunk * dk)
    return linear + attention + gdn


def load1() -> float:
    try:
        return float(open("/proc/loadavg").read().split()[0])
    except OSError:
        return -1.0


def run_clef(bindir, model, t, precision, threads, chunk, repeat):
    cmd = [str(bindir / "clef_backbone_dump"), "--model", str(model), "--random-ids", f"{t}:0",
           "--chunks", str(chunk), "--precision", precision, "--threads", str(threads), "--repeat", str(repeat)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = bf16_steady_state(dict(os.environ))  # the best of --repeat passes is a packed one
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        return {"error": r.stderr.strip()}
    out = json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("{")][0])
    # CPU seconds of the whole process (startup included, so a lower bound on tokens per CPU-second).
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out["tokens_per_cpu_s"] = t * repeat / cpu if cpu > 0 else 0.0
    return out


def best_of(runs: list[dict]) -> dict:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[0]
    tps = [r["tokens_per_s"] for r in ok]
    best = max(ok, key=lambda r: r["tokens_per_s"])
    out = dict(best)
    out["tokens_per_cpu_s"] = max(r.get("tokens_per_cpu_s", 0.0) for r in ok)
    out["spread"] = (max(tps) - min(tps)) / max(tps)
    out["peak_rss_bytes"] = max(r["peak_rss_bytes"] for r in ok)
    out["samples"] = tps
    return out


TORCH_SNIPPET = r"""
import json, sys, time, resource, torch, numpy as np
from transformers import Qwen3_5ForConditionalGeneration
model, t, dtype, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
torch.set_num_threads(threads)
dt = torch.float32 if dtype == "fp32" else torch.bfloat16
m = Qwen3_5ForConditionalGeneration.from_pretrained(model, dtype=dt).eval()
vocab = m.config.text_config.vocab_size
ids = torch.tensor(np.random.default_rng(0).integers(0, min(vocab, 248000), size=t))[None]
runs = int(sys.argv[5])
times = []
with torch.inference_mode():
    m.model.language_model(input_ids=ids[:, :64], attention_mask=torch.ones_like(ids[:, :64]))
    cpus = []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        m.model.language_model(input_ids=ids, attention_mask=torch.ones_like(ids))
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
s = min(times)
print(json.dumps({"seconds": s, "tokens_per_s": t / s, "samples": [t / x for x in times],
                  "tokens_per_cpu_s": t / min(cpus),
                  "spread": (max(times) - min(times)) / max(times) if len(times) > 1 else 0.0,
                  "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def run_torch(model, t, dtype, threads, timeout, runs):
    try:
        r = subprocess.run([sys.executable, "-c", TORCH_SNIPPET, str(model), str(t), dtype, str(threads), str(runs)],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout {timeout}s"}
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def measure_peaks(bindir, threads):
    exe = bindir / "clef_bench_ops"
    if not exe.exists():
        return 0.0, 0.0
    r = subprocess.run([str(exe), "--peak-only", "--threads", str(threads)], capture_output=True, text=True, check=True)
    m = re.search(r"fp32 FMA ([\d.]+) GFLOP/s, bf16 (?:vdpbf16ps )?([\d.]+)", r.stdout)
    return (float(m.group(1)), float(m.group(2))) if m else (0.0, 0.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--T", default="512,1024,4096,16384")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--runs", type=int, default=2, help="processes per point (best and spread reported)")
    ap.add_argument("--runs-large", type=int, default=1, help="processes per point above T=4096")
    ap.add_argument("--repeat", type=int, default=0,
                    help="timed passes per process (0: 2 up to T=4096, else 1; the first pass pays page faults)")
    ap.add_argument("--modes", default="bf16,fp32")
    ap.add_argument("--bin", default=None)
    ap.add_argument("--torch-budget", type=float, default=180.0, help="skip PyTorch when the estimate exceeds this")
    ap.add_argument("--torch-timeout", type=int, default=1200)
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--json", default=None, help="also write all results to this file")
    a = ap.parse_args()

    model = pathlib.Path(a.model)
    cfg = json.loads((model / "config.json").read_text())
    weights = sum(p.stat().st_size for p in model.glob("model*.safetensors"))
    bindir = find_bin(a.bin)
    pf, pb = measure_peaks(bindir, a.threads)
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    flags = next((ln for ln in open("/proc/cpuinfo") if ln.startswith("flags")), "")
    isa = ",".join(f for f in ("avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16") if f" {f}" in flags)
    mem = next((int(ln.split()[1]) for ln in open("/proc/meminfo") if ln.startswith("MemTotal")), 0) / 2**20
    print(f"machine: {cpu} ({isa}), {os.cpu_count()} logical CPUs, {mem:.0f} GiB RAM, {platform.system()} "
          f"{platform.release()}; {a.threads} threads; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}")
    print(f"model {model} ({weights / 2**30:.2f} GiB weights); chunk {a.chunk}; runs {a.runs}")
    print(f"measured peak (before): fp32 {pf:.0f} GFLOP/s, bf16 {pb:.0f} GFLOP/s\n", flush=True)
    print("| T | engine | mode | tokens/s | spread | GFLOP/s | % of peak | peak RSS (GiB) | RSS - weights (GiB) | "
          "tokens/CPU-s | load1 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    results = []
    best_torch: dict[int, float] = {}
    clef_best: dict[tuple[int, str], float] = {}
    torch_time: dict[str, tuple[int, float]] = {}
    for t in [int(x) for x in a.T.split(",")]:
        fpt = flops_per_token(cfg, t)
        repeat = a.repeat or (2 if t <= 4096 else 1)
        for mode in a.modes.split(","):
            load = load1()
            runs = a.runs if t <= 4096 else a.runs_large
            r = best_of([run_clef(bindir, model, t, mode, a.threads, a.chunk, repeat) for _ in range(runs)])
            if "error" in r:
                print(f"| {t} | clef.cpp | {mode} | error: {r['error'][:60]} | | | | | | | |", flush=True)
                continue
            tps = r["tokens_per_s"]
            gf = tps * fpt / 1e9
            peak = pb if mode == "bf16" else pf
            rss = r["peak_rss_bytes"] / 2**30
            clef_best[(t, mode)] = tps
            results.append({"T": t, "engine": "clef.cpp", "mode": mode, **r, "gflops": gf, "load1": load})
            print(f"| {t} | clef.cpp | {mode} | {tps:.1f} | {100 * r['spread']:.0f}% | {gf:.0f} | "
                  f"{100 * gf / peak if peak else 0:.0f}% | {rss:.2f} | {rss - weights / 2**30:+.2f} | "
                  f"{r.get('tokens_per_cpu_s', 0):.1f} | {load:.1f} |", flush=True)
        if a.skip_torch:
            continue
        for mode in ("fp32", "bf16"):
            if mode in torch_time:
                t0, s0 = torch_time[mode]
                est = s0 * (t * fpt) / (t0 * flops_per_token(cfg, t0))  # FLOP-proportional
                if est > a.torch_budget:
                    print(f"| {t} | transformers | {mode} | skipped: estimated {est:.0f} s > {a.torch_budget:.0f} s "
                          f"| | | | | | | |", flush=True)
                    continue
            load = load1()
            r = run_torch(model, t, mode, a.threads, a.torch_timeout, a.runs if t <= 4096 else a.runs_large)
            if "error" in r:
                print(f"| {t} | transformers | {mode} | error: {r['error'][:60]} | | | | | | | |", flush=True)
                continue
            tps = r["tokens_per_s"]
            torch_time[mode] = (t, r["seconds"])
            best_torch[t] = max(best_torch.get(t, 0.0), tps)
            rss = r["peak_rss_bytes"] / 2**30
            gf = tps * fpt / 1e9
            peak = pb if mode == "bf16" else pf
            results.append({"T": t, "engine": "transformers", "mode": mode, **r, "gflops": gf, "load1": load})
            print(f"| {t} | transformers {r.get('torch', '')} | {mode} | {tps:.1f} | {100 * r['spread']:.0f}% | "
                  f"{gf:.0f} | {100 * gf / peak if peak else 0:.0f}% | {rss:.2f} | {rss - weights / 2**30:+.2f} | "
                  f"{r.get('tokens_per_cpu_s', 0):.1f} | {load:.1f} |", flush=True)
    pf2, pb2 = measure_peaks(bindir, a.threads)
    print(f"\nmeasured peak (after): fp32 {pf2:.0f} GFLOP/s, bf16 {pb2:.0f} GFLOP/s "
          f"(the % columns use the 'before' values)\n")
    for t in sorted({t for t, _ in clef_best}):
        if t in best_torch:
            parts = [f"{m} {clef_best[(t, m)] / best_torch[t]:.2f}x" for m in a.modes.split(",") if (t, m) in clef_best]
            print(f"T={t}: clef.cpp / best transformers mode ({best_torch[t]:.1f} tok/s): " + ", ".join(parts))
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps({"peaks": [pf, pb, pf2, pb2], "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
