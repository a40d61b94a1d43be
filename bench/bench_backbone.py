#!/usr/bin/env python3
"""Backbone prefill benchmark (issue 5): clef.cpp vs transformers on one release folder.

Prints a markdown table: for each T and mode, prefill tokens/s, achieved GFLOP/s and the fraction
of the machine's measured peak (fp32 FMA / bf16 vdpbf16ps kernels of clef_bench_ops, measured in
the same run), peak RSS; and transformers (PyTorch CPU, same thread count, fp32 and bf16) on the
same folder and the same ids. Not a timed test.

  python3 bench/bench_backbone.py --model /tmp/clef-0.8b --T 512,1024,4096,16384 --threads 2

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

REPO = pathlib.Path(__file__).resolve().parents[1]


def find_bin(explicit: str | None) -> pathlib.Path:
    if explicit:
        return pathlib.Path(explicit)
    found = sorted(REPO.glob("build/*/bin/clef_backbone_dump"), key=lambda p: p.stat().st_mtime, reverse=True)
    if not found:
        sys.exit("clef_backbone_dump not found; build a preset or pass --bin DIR")
    return found[0].parent


def flops_per_token(cfg: dict, t: int, chunk: int = 64) -> float:
    """Average FLOP per token of a T-token prefill (architecture.md §9): linear layers, causal
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


def measure_peaks(bindir: pathlib.Path, threads: int) -> tuple[float, float, str]:
    exe = bindir / "clef_bench_ops"
    if not exe.exists():
        return 0.0, 0.0, "clef_bench_ops not built"
    r = subprocess.run([str(exe), "--quick", "--threads", str(threads), "--reps", "3", "--m", "512"],
                       capture_output=True, text=True, check=True)
    m = re.search(r"fp32 FMA ([\d.]+) GFLOP/s, bf16 vdpbf16ps ([\d.]+)", r.stdout)
    return (float(m.group(1)), float(m.group(2)), r.stdout) if m else (0.0, 0.0, r.stdout)


def run_clef(bindir, model, t, precision, threads, chunk, repeat):
    cmd = [str(bindir / "clef_backbone_dump"), "--model", str(model), "--random-ids", f"{t}:0",
           "--chunks", str(chunk), "--precision", precision, "--threads", str(threads), "--repeat", str(repeat)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": r.stderr.strip()}
    return json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("{")][0])


TORCH_SNIPPET = r"""
import json, sys, time, resource, torch, numpy as np
from transformers import Qwen3_5ForConditionalGeneration
model, t, dtype, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
torch.set_num_threads(threads)
dt = torch.float32 if dtype == "fp32" else torch.bfloat16
m = Qwen3_5ForConditionalGeneration.from_pretrained(model, dtype=dt).eval()
vocab = m.config.text_config.vocab_size
ids = torch.tensor(np.random.default_rng(0).integers(0, min(vocab, 248000), size=t))[None]
with torch.inference_mode():
    m.model.language_model(input_ids=ids[:, :64], attention_mask=torch.ones_like(ids[:, :64]))
    t0 = time.perf_counter()
    m.model.language_model(input_ids=ids, attention_mask=torch.ones_like(ids))
    s = time.perf_counter() - t0
print(json.dumps({"seconds": s, "tokens_per_s": t / s,
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def run_torch(model, t, dtype, threads, timeout):
    try:
        r = subprocess.run([sys.executable, "-c", TORCH_SNIPPET, str(model), str(t), dtype, str(threads)],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout {timeout}s"}
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--T", default="512,1024,4096,16384")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--modes", default="bf16,fp32")
    ap.add_argument("--bin", default=None)
    ap.add_argument("--torch-max-T", type=int, default=4096, help="skip transformers above this T")
    ap.add_argument("--torch-timeout", type=int, default=1200)
    ap.add_argument("--skip-torch", action="store_true")
    a = ap.parse_args()

    model = pathlib.Path(a.model)
    cfg = json.loads((model / "config.json").read_text())
    weights = sum(p.stat().st_size for p in model.glob("model*.safetensors"))
    bindir = find_bin(a.bin)
    pf, pb, _ = measure_peaks(bindir, a.threads)
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    print(f"machine: {cpu}, {a.threads} threads, {platform.system()} {platform.release()}")
    print(f"measured peak: fp32 {pf:.0f} GFLOP/s, bf16 {pb:.0f} GFLOP/s; weights file {weights / 2**30:.2f} GiB; "
          f"chunk {a.chunk}\n")
    print("| T | engine | mode | tokens/s | GFLOP/s | % of peak | peak RSS (GiB) | RSS - weights (GiB) |")
    print("|---|---|---|---|---|---|---|---|")
    best_torch: dict[int, float] = {}
    clef_bf16: dict[int, float] = {}
    for t in [int(x) for x in a.T.split(",")]:
        fpt = flops_per_token(cfg, t)
        for mode in a.modes.split(","):
            r = run_clef(bindir, model, t, mode, a.threads, a.chunk, a.repeat)
            if "error" in r:
                print(f"| {t} | clef.cpp | {mode} | error: {r['error'][:60]} | | | | |")
                continue
            tps = r["tokens_per_s"]
            gf = tps * fpt / 1e9
            peak = pb if mode == "bf16" else pf
            rss = r["peak_rss_bytes"] / 2**30
            if mode == "bf16":
                clef_bf16[t] = tps
            print(f"| {t} | clef.cpp | {mode} | {tps:.1f} | {gf:.0f} | {100 * gf / peak if peak else 0:.0f}% | "
                  f"{rss:.2f} | {rss - weights / 2**30:+.2f} |", flush=True)
        if a.skip_torch or t > a.torch_max_T:
            continue
        for mode in ("fp32", "bf16"):
            r = run_torch(model, t, mode, a.threads, a.torch_timeout)
            if "error" in r:
                print(f"| {t} | transformers | {mode} | error: {r['error'][:60]} | | | | |")
                continue
            tps = r["tokens_per_s"]
            best_torch[t] = max(best_torch.get(t, 0.0), tps)
            rss = r["peak_rss_bytes"] / 2**30
            print(f"| {t} | transformers | {mode} | {tps:.1f} | {tps * fpt / 1e9:.0f} | | {rss:.2f} | |", flush=True)
    print()
    for t, tps in sorted(clef_bf16.items()):
        if t in best_torch:
            print(f"T={t}: clef.cpp bf16 / best transformers mode = {tps / best_torch[t]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
