#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Backbone prefill, clef.cpp vs llama.cpp and ik_llama.cpp in one run, per CPU level (the one-binary CPU
dispatch check).

For each T, each level and each round, runs clef.cpp's `clef_backbone_dump` (CLEF_ISA=<level>, fp32
and bf16 modes), llama.cpp's `llama-bench -p T -n 0 -t THREADS` (the llama build given for that level;
f32, bf16 and Q8_0 GGUFs of the same random folder) and, with --ik-bench, ik_llama.cpp's llama-bench with
the same flags on the same GGUFs. Each round runs every engine once, the order rotated by one per round,
so a drift of the machine's speed hits all of them. Prints a markdown table: T, level, engine, mode,
tokens/s (best over rounds; clef: best of --repeat passes per process; llama.cpp and ik_llama.cpp:
llama-bench's mean of -r repetitions), spread over rounds, GFLOP/s and % of the level's measured peak
(`clef_bench_ops --peak-only` with CLEF_ISA=<level>, measured before and after the timings, the higher of
the two, since noise only lowers a peak: fp32 FMA peak for fp32 / f32, bf16 peak for bf16, the Q8_0
kernel sequence's peak for clef's int8 mode and every engine's Q8_0 rows, the block-quantized kernels'
sequence peak for the 4-6 bit types; every engine's row of a dtype against the same peak), and
the ratio clef.cpp / llama.cpp for the same level and dtype (fp32 vs f32, bf16 vs bf16), plus a column
clef.cpp / ik_llama.cpp when --ik-bench is given. The commits of the engines, the machine and the 1-minute
load average go with the table.

  L=../peers/llama.cpp IK=../peers/ik_llama.cpp
  python3 bench/bench_vs_llama.py --model /tmp/clef-0.8b --gguf-dir /tmp/clef-0.8b-gguf \\
      --isa avx2,avx512bf16 --threads 2 --T 512,1024 \\
      --llama-bench avx2=$L/build-avx2/bin/llama-bench,avx512bf16=$L/build-native/bin/llama-bench \\
      --ik-bench avx2=$IK/build-avx2/bin/llama-bench,avx512bf16=$IK/build-native/bin/llama-bench

llama.cpp and ik_llama.cpp are built beside the project (never inside it) from their public repositories;
the GGUFs come from llama.cpp's own `convert_hf_to_gguf.py --no-mtp --outtype f32|bf16|q8_0` on the release
folder (the backbone only: neither peer runs the Clef head, so this compares backbones), and ik_llama.cpp
runs the same files. The GGUF of each dtype is the file in --gguf-dir named <dtype>.gguf or ending in
-<dtype>.gguf. A level without a peer's build is timed for the other engines only. Both peers get the same
llama-bench flags (--ik-args, by default --llama-args); their defaults are their own (ik_llama.cpp's
llama-bench turns flash attention on and has no --poll), and the lines after the table give what each
reported. llama.cpp's GGML threads poll (`--poll`, default 50), and both peers use OpenMP (GGML_OPENMP, on
by default), as clef.cpp does; set OMP_WAIT_POLICY for all through the environment. Not a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import re
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from bench_backbone import find_bin, flops_per_token, load1  # noqa: E402

from clef_env import bf16_steady_state  # bench/, beside this script

LLAMA_DTYPES = ("f32", "bf16", "q8_0")
SAME_DTYPE = {"fp32": "f32", "fp32-resident": "f32", "fp32-stream": "f32", "bf16": "bf16", "int8": "q8_0"}
# clef modes: a precision with the default --fp32-weights auto (fp32 copies of a bf16 checkpoint's
# linear weights when they take at most 1/4 of the memory: the 0.8b preset on any machine with
# 8 GB), or fp32 with the weights policy forced: fp32-resident (fp32 copies, the memory class of
# llama.cpp's f32 GGUF) / fp32-stream (widened per call; memory = the bf16 file)
CLEF_MODE_FLAGS = {"fp32": ["--precision", "fp32"], "bf16": ["--precision", "bf16"],
                   "fp32-resident": ["--precision", "fp32", "--fp32-weights", "resident"],
                   "fp32-stream": ["--precision", "fp32", "--fp32-weights", "stream"],
                   "int8": ["--precision", "int8"], "file": []}


def env_for(level: str | None) -> dict:
    env = bf16_steady_state(dict(os.environ))  # the best of --repeat passes is a packed one
    if level and level != "default":
        env["CLEF_ISA"] = level
    else:
        env.pop("CLEF_ISA", None)
    return env


def git_desc(path: pathlib.Path) -> str:
    try:
        sha = subprocess.run(["git", "-C", str(path), "log", "-1", "--format=%h %cs %s"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return sha + (" (+ uncommitted changes)" if dirty else "")
    except (subprocess.CalledProcessError, FileNotFoundError):
        return "?"


def llama_source(exe: pathlib.Path) -> pathlib.Path | None:
    """The llama.cpp (or ik_llama.cpp) source tree of a build, from the build folder's CMakeCache.txt."""
    for d in (exe.parent, *exe.parents):
        cache = d / "CMakeCache.txt"
        if cache.exists():
            m = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", cache.read_text(errors="replace"), re.M)
            return pathlib.Path(m.group(1)) if m else None
    return None


def llama_build_flags(exe: pathlib.Path) -> str:
    for d in (exe.parent, *exe.parents):
        cache = d / "CMakeCache.txt"
        if cache.exists():
            txt = cache.read_text(errors="replace")
            keys = ("GGML_NATIVE", "GGML_AVX2", "GGML_AVX512", "GGML_AVX512_BF16")
            vals = {k: m.group(1) for k in keys if (m := re.search(rf"^{k}:BOOL=(\w+)$", txt, re.M))}
            if vals.get("GGML_NATIVE") == "ON":
                return "GGML_NATIVE=ON: -march=native"
            return " ".join(f"{k}={v}" for k, v in vals.items())
    return "?"


def measure_peaks(bindir: pathlib.Path, threads: int, level: str | None,
                  runs: int = 3) -> tuple[float, float, str, float, float]:
    """(fp32 peak, bf16 peak, what the bf16 peak measures, int8 peak, block-quantized peak; GOP/s for the
    last two) of `clef_bench_ops --peak-only` at a level: the int8 peak is that of the level's Q8_0 kernel
    sequence, the block-quantized one that of the K-quant / Q4_0 kernels' sequence (0 when none). The
    best of `runs` processes per field (each takes the best of 3): a shared host's slow minute would
    otherwise lower the peak and inflate every % of the run."""
    exe = bindir / "clef_bench_ops"
    if not exe.exists():
        return 0.0, 0.0, "no clef_bench_ops", 0.0, 0.0
    best = [0.0, 0.0, "vdpbf16ps", 0.0, 0.0]
    for _ in range(runs):
        r = subprocess.run([str(exe), "--peak-only", "--threads", str(threads)], capture_output=True, text=True,
                           env=env_for(level))
        m = re.search(r"fp32 FMA ([\d.]+) GFLOP/s, bf16 (?:vdpbf16ps )?([\d.]+) GFLOP/s(?: \(([^)]*)\))?", r.stdout)
        if r.returncode != 0 or not m:
            return 0.0, 0.0, (r.stderr.strip() or r.stdout.strip())[:80], 0.0, 0.0
        m8 = re.search(r"int8 ([\d.]+) GOP/s", r.stdout)
        mq = re.search(r"block-quantized ([\d.]+) GOP/s", r.stdout)
        best = [max(best[0], float(m.group(1))), max(best[1], float(m.group(2))), m.group(3) or "vdpbf16ps",
                max(best[3], float(m8.group(1)) if m8 else 0.0), max(best[4], float(mq.group(1)) if mq else 0.0)]
    return best[0], best[1], best[2], best[3], best[4]


def clef_level_line(bindir: pathlib.Path, level: str | None) -> str:
    """What the binary says about the level in use (`clef --version`), or the error it gives."""
    exe = bindir / "clef"
    if not exe.exists():
        return "?"
    r = subprocess.run([str(exe), "--version"], capture_output=True, text=True, env=env_for(level))
    out = (r.stdout + r.stderr).strip().replace("\n", "; ")
    return out


def run_clef(bindir, model, t, precision, threads, chunk, repeat, level) -> dict:
    """`precision` is a key of CLEF_MODE_FLAGS; "file" gives no flag (a quantized GGUF picks its own path)."""
    cmd = [str(bindir / "clef_backbone_dump"), "--model", str(model), "--random-ids", f"{t}:0",
           "--chunks", str(chunk), *CLEF_MODE_FLAGS[precision], "--threads", str(threads), "--repeat", str(repeat)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env_for(level))
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        return {"error": (r.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(lines[0])


def run_llama(exe, gguf, t, threads, reps, extra) -> dict:
    cmd = [str(exe), "-m", str(gguf), "-p", str(t), "-n", "0", "-t", str(threads), "-r", str(reps), "-o", "json",
           *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["failed"])[-1]}
    try:
        rows = json.loads(r.stdout)
    except json.JSONDecodeError:
        return {"error": "unparsable llama-bench output"}
    row = rows[0]
    return {"tokens_per_s": row["avg_ts"], "stddev_ts": row.get("stddev_ts", 0.0),
            "samples": row.get("samples_ts", []), "build_commit": row.get("build_commit", "?"),
            "build_number": row.get("build_number", "?"), "model_type": row.get("model_type", "?"),
            "n_batch": row.get("n_batch"), "n_ubatch": row.get("n_ubatch"), "flash_attn": row.get("flash_attn"),
            "poll": row.get("poll"), "cpu_info": row.get("cpu_info", "")}


def parse_map(text: str, option: str) -> dict[str, pathlib.Path]:
    out = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        if "=" not in item:
            sys.exit(f"{option}: expected LEVEL=PATH, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = pathlib.Path(v).expanduser().resolve()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="the Clef release folder (clef.cpp reads it)")
    ap.add_argument("--gguf-dir", default=None, help="folder with *-f32.gguf, *-bf16.gguf, *-q8_0.gguf of --model")
    ap.add_argument("--llama-bench", default="", help="LEVEL=PATH[,LEVEL=PATH]: the llama-bench built for a level")
    ap.add_argument("--ik-bench", default="",
                    help="LEVEL=PATH[,LEVEL=PATH]: ik_llama.cpp's llama-bench built for a level (a third engine, run "
                         "like llama.cpp's on the same GGUFs)")
    ap.add_argument("--isa", default="default",
                    help="clef levels (CLEF_ISA values: baseline, avx2, avx512, avx512bf16, native; 'default' leaves "
                         "CLEF_ISA unset)")
    ap.add_argument("--T", default="512,1024")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--chunk", type=int, default=512, help="clef prefill chunk (llama-bench: -ub 512 by default)")
    ap.add_argument("--modes", default="fp32,fp32-stream,bf16,int8",
                    help="clef modes: fp32 (default weights policy, auto), fp32-resident, fp32-stream "
                         "(--fp32-weights resident|stream), bf16")
    ap.add_argument("--llama-dtypes", default=",".join(LLAMA_DTYPES),
                    help="GGUF types llama.cpp runs, e.g. f32,bf16,q8_0,q6_k,q4_k_m (files DTYPE.gguf or *-DTYPE.gguf)")
    ap.add_argument("--clef-ggufs", default="",
                    help="types of --gguf-dir that clef.cpp also runs from the same file (e.g. q8_0,q6_k,q4_k_m): "
                         "mode gguf:DTYPE, no --precision flag (a quantized file picks its own path), compared "
                         "with the peers on that file")
    ap.add_argument("--rounds", type=int, default=2,
                    help="rounds per point, each running every engine once (the order rotated by one per round)")
    ap.add_argument("--repeat", type=int, default=2, help="clef timed passes per process (best is kept)")
    ap.add_argument("--llama-reps", type=int, default=3, help="llama-bench -r")
    ap.add_argument("--llama-args", default="", help="extra llama-bench arguments, one string (e.g. '--poll 0')")
    ap.add_argument("--ik-args", default=None,
                    help="extra arguments of ik_llama.cpp's llama-bench, one string (default: --llama-args)")
    ap.add_argument("--bin", default=None, help="clef binaries (default: newest build/*/bin)")
    ap.add_argument("--json", default=None, help="also write all results to this file")
    a = ap.parse_args()

    model = pathlib.Path(a.model)
    cfg = json.loads((model / "config.json").read_text())
    bindir = find_bin(a.bin)
    clef_levels = [x.strip() for x in a.isa.split(",") if x.strip()]
    # the peers: engine name -> {level: llama-bench}, and the extra arguments each gets
    peers = {"llama.cpp": parse_map(a.llama_bench, "--llama-bench"),
             "ik_llama.cpp": parse_map(a.ik_bench, "--ik-bench")}
    peer_extra = {"llama.cpp": a.llama_args.split(),
                  "ik_llama.cpp": (a.llama_args if a.ik_args is None else a.ik_args).split()}
    # a clef / peer ratio column per peer: llama.cpp's always (the table's shape without --ik-bench), ik_llama.cpp's
    # when it is given
    ratio_peers = ["llama.cpp"] + (["ik_llama.cpp"] if peers["ik_llama.cpp"] else [])
    levels = list(clef_levels)
    for builds in peers.values():
        levels += [lv for lv in builds if lv not in levels]  # peer-only levels last
    ggufs: dict[str, pathlib.Path] = {}
    if a.gguf_dir:
        for dt in a.llama_dtypes.split(","):
            gdir = pathlib.Path(a.gguf_dir)
            hits = sorted({*gdir.glob(f"{dt}.gguf"), *gdir.glob(f"*-{dt}.gguf")})
            if hits:
                ggufs[dt] = hits[0]
            else:
                print(f"note: no {dt}.gguf or *-{dt}.gguf in {a.gguf_dir}; llama.cpp {dt} skipped")
    clef_ggufs = [dt for dt in filter(None, (x.strip() for x in a.clef_ggufs.split(",")))]
    for dt in clef_ggufs:
        if dt not in ggufs:
            sys.exit(f"--clef-ggufs {dt}: no such GGUF in --gguf-dir (give it in --llama-dtypes too)")
    for eng, opt in (("llama.cpp", "--llama-bench"), ("ik_llama.cpp", "--ik-bench")):
        if peers[eng] and not ggufs:
            sys.exit(f"{opt} needs --gguf-dir with at least one GGUF")

    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    flags = next((ln for ln in open("/proc/cpuinfo") if ln.startswith("flags")), "")
    isa = ",".join(f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16") if f" {f}" in flags)
    mem = next((int(ln.split()[1]) for ln in open("/proc/meminfo") if ln.startswith("MemTotal")), 0) / 2**20
    print(f"machine: {cpu} ({isa}), {os.cpu_count()} logical CPUs, {mem:.0f} GiB RAM, {platform.system()} "
          f"{platform.release()}; {a.threads} threads; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}")
    print(f"clef.cpp: {git_desc(REPO)}; binaries {bindir}")
    print(f"model {model}; clef chunk {a.chunk}, {a.repeat} passes per process, "
          f"CLEF_BF16_PACK={env_for(None)['CLEF_BF16_PACK']}; {a.rounds} rounds, "
          f"the engines' order rotated by one per round")
    for eng, builds in peers.items():
        for lv, exe in builds.items():
            src = llama_source(exe)
            print(f"{eng} [{lv}]: {exe} ({llama_build_flags(exe)}); source {src}: "
                  f"{git_desc(src) if src else '?'}")
    for dt, p in ggufs.items():
        print(f"gguf {dt}: {p} ({p.stat().st_size / 2**30:.2f} GiB)")
    peaks: dict[str, tuple[float, float, str, float, float]] = {}
    for lv in levels:
        peaks[lv] = measure_peaks(bindir, a.threads, None if lv == "default" else lv)
        says = clef_level_line(bindir, None if lv == "default" else lv)
        if lv != "default" and not any(x in says for x in ("baseline", "avx2", "avx512")):
            says += " [no level in --version: a binary without run-time dispatch ignores CLEF_ISA]"
        print(f"level {lv}: clef --version says: {says}; measured peak "
              f"fp32 {peaks[lv][0]:.0f} GFLOP/s, bf16 {peaks[lv][1]:.0f} GFLOP/s ({peaks[lv][2]}), "
              f"int8 {peaks[lv][3]:.0f} GOP/s, block-quantized {peaks[lv][4]:.0f} GOP/s"
              + ("" if lv in clef_levels else "; peers only"))
    print(flush=True)

    results = []
    lines: list = []  # the table's rows, printed once the peaks after the timings are known
    peer_info: dict[str, dict] = {eng: {} for eng in peers}
    for t in [int(x) for x in a.T.split(",")]:
        fpt = flops_per_token(cfg, t)
        for lv in levels:
            samples: dict[tuple[str, str], list[dict]] = {}
            loads = []
            # the first round fixes the rows' order: clef.cpp, llama.cpp, ik_llama.cpp
            engines = (["clef.cpp"] if lv in clef_levels else []) + [e for e, b in peers.items() if lv in b]
            for rnd in range(a.rounds):
                loads.append(load1())
                k = rnd % len(engines)
                for eng in engines[k:] + engines[:k]:
                    if eng == "clef.cpp":
                        for mode in [m for m in a.modes.split(",") if m]:
                            r = run_clef(bindir, model, t, mode, a.threads, a.chunk, a.repeat,
                                         None if lv == "default" else lv)
                            samples.setdefault(("clef.cpp", mode), []).append(r)
                        for dt in clef_ggufs:
                            r = run_clef(bindir, ggufs[dt], t, "file", a.threads, a.chunk, a.repeat,
                                         None if lv == "default" else lv)
                            samples.setdefault(("clef.cpp", f"gguf:{dt}"), []).append(r)
                        continue
                    for dt, g in ggufs.items():
                        r = run_llama(peers[eng][lv], g, t, a.threads, a.llama_reps, peer_extra[eng])
                        samples.setdefault((eng, dt), []).append(r)
                        if "error" not in r:
                            peer_info[eng][lv] = r
            best: dict[tuple[str, str], float] = {}
            rows = []
            for (eng, mode), runs in samples.items():
                ok = [r for r in runs if "error" not in r]
                if not ok:
                    rows.append((eng, mode, None, runs[0]["error"]))
                    continue
                tps = [r["tokens_per_s"] for r in ok]
                best[(eng, mode)] = max(tps)
                rows.append((eng, mode, ok, None))
            for eng, mode, ok, err in rows:
                if err is not None:
                    lines.append(f"| {t} | {lv} | {eng} | {mode} | error: {err[:70]} |" + " |" * (4 + len(ratio_peers)))
                    continue
                tps = [r["tokens_per_s"] for r in ok]
                b = max(tps)
                spread = (b - min(tps)) / b if b else 0.0
                gf = b * fpt / 1e9
                gguf = mode.startswith("gguf:")
                dtype = mode[len("gguf:"):] if gguf else mode
                ratios = {p: "" for p in ratio_peers}
                same = dtype if gguf else SAME_DTYPE.get(mode, "")
                for p in ratio_peers:
                    if eng == "clef.cpp" and (p, same) in best:
                        ratios[p] = f"{b / best[(p, same)]:.2f}x"
                if eng == "clef.cpp" and mode == "int8" and ("clef.cpp", "fp32") in best:
                    ratios["llama.cpp"] += f" ({b / best[('clef.cpp', 'fp32')]:.2f}x clef fp32)"
                name = eng if eng == "clef.cpp" else f"{eng} {ok[0].get('build_commit', '')}"
                lines.append((f"| {t} | {lv} | {name} | {mode} | {b:.1f} | {100 * spread:.0f}% | {gf:.0f} | ",
                              lv, dtype, gf, "".join(f"{ratios[p]} | " for p in ratio_peers) + f"{max(loads):.1f} |"))
                print(f"[T {t}, {lv}] {name} {mode}: {b:.1f} tokens/s", file=sys.stderr, flush=True)
                results.append({"T": t, "level": lv, "engine": eng, "mode": mode, "tokens_per_s": b,
                                "samples": tps, "gflops": gf, "load1": loads, "runs": ok})
    # Every engine's row against the same peak per dtype, the machine's exact sequence for that
    # arithmetic: fp32 FMA for f32, the bf16 peak for bf16, clef's Q8_0 sequence for int8 / Q8_0
    # (signed weights), its block sequence for the 4-6 bit types (unsigned weights, no sign step).
    # Noise only ever lowers a measured peak, so each field is the higher of the runs before and
    # after the timings.
    for lv in levels:
        after = measure_peaks(bindir, a.threads, None if lv == "default" else lv)
        print(f"measured peak after, level {lv}: fp32 {after[0]:.0f} GFLOP/s, bf16 {after[1]:.0f} GFLOP/s, "
              f"int8 {after[3]:.0f} GOP/s, block-quantized {after[4]:.0f} GOP/s")
        before = peaks[lv]
        peaks[lv] = (max(before[0], after[0]), max(before[1], after[1]), before[2], max(before[3], after[3]),
                     max(before[4], after[4]))
    heads = {"llama.cpp": "clef / llama (same dtype)", "ik_llama.cpp": "clef / ik_llama (same dtype)"}
    print(f"\n% of level peak: against the higher of the peaks measured before and after the timings")
    print("| T | level | engine | mode | tokens/s | spread | GFLOP/s | % of level peak | "
          + "".join(f"{heads[p]} | " for p in ratio_peers) + "load1 |")
    print("|---" * (9 + len(ratio_peers)) + "|")
    for line in lines:
        if isinstance(line, str):
            print(line)
            continue
        head, lv, dtype, gf, tail = line
        pf, pb, _, p8, pq = peaks[lv]
        fp32_like = dtype == "f32" or dtype.startswith("fp32")
        peak = pb if dtype == "bf16" else pf if fp32_like else p8 if dtype in ("int8", "q8_0") else pq
        print(head + (f"{100 * gf / peak:.0f}%" if peak else "–") + " | " + tail)
    for r in results:
        r["peak"] = peaks[r["level"]]
    print()
    for eng, infos in peer_info.items():
        for lv, info in infos.items():
            print(f"{eng} [{lv}]: build {info['build_commit']} ({info['build_number']}), model {info['model_type']}, "
                  f"n_batch {info['n_batch']}, n_ubatch {info['n_ubatch']}, flash_attn {info['flash_attn']}, "
                  f"poll {'–' if info['poll'] is None else info['poll']}, -r {a.llama_reps}"
                  f"{''.join(' ' + x for x in peer_extra[eng])}; CPU as {eng} saw it: {info['cpu_info']}")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps({"peaks": peaks, "results": results, "llama": peer_info["llama.cpp"],
                                                    "ik_llama": peer_info["ik_llama.cpp"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
