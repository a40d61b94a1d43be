#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Benchmark of the Python package's overhead: `Model.decide_many` and `Model.decide` in-process
against `clef decide --jsonl` on the same requests, model and threads.

Not a test. Run it with the interpreter the package is installed in (``pip install .``):

    OMP_WAIT_POLICY=passive build/pyvenv/bin/python bench/bench_python.py --model DIR [--model DIR2 ...] --threads 2

For each model, in ``--rounds`` interleaved rounds (the median is reported):
  * the CLI: `clef decide --jsonl` over the N requests twice, and once; the CLI's per-request wall
    time is the difference / N, a warm pass (the first decision of each shape in a process sets up
    its GEMM primitives; loading the model and the first pass cancel out);
  * Python: one loaded Model that answered every request once (neither is timed), then
    ``decide_many`` over the same request lines and ``decide`` on each line; per-request wall time =
    elapsed / N.
Both run with the state cache off (``--state-cache-mb 0``), so every round computes every request.
Besides the wall-time difference, the ``decide`` row prints the time spent outside the engine per
request: wall time minus the engine's own total (Decision.seconds["total"], measured in the same
call): the binding, the GIL, JSON parsing of the answer and the interpreter. The requests are the corpus's (tests/data/requests) up
to ``--max-bytes`` each. Prints a markdown table and the CPU (lscpu).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import clef

from clef_env import bf16_steady_state  # bench/, beside this script

bf16_steady_state(os.environ)

REPO = pathlib.Path(__file__).resolve().parents[1]


def cpu_name() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} CPUs)"
    return "?"


def requests(max_bytes: int) -> list[bytes]:
    corpus = REPO / "tests" / "data" / "requests" / "corpus.jsonl"
    lines = [json.dumps(json.loads(line)["request"]).encode() for line in corpus.read_bytes().splitlines()]
    return [line for line in lines if len(line) <= max_bytes]


def time_cli(args: argparse.Namespace, model: str, path: pathlib.Path, out: pathlib.Path) -> float:
    t0 = time.perf_counter()
    subprocess.run([args.clef, "decide", "-m", model, "--threads", str(args.threads), "--precision", args.precision,
                    "--state-cache-mb", "0",
                    "--no-progress", "--jsonl", str(path), "--out", str(out), "--restart"],
                   check=True, capture_output=True)
    return time.perf_counter() - t0


def bench_model(args: argparse.Namespace, model_dir: str, lines: list[bytes], tmp: pathlib.Path) -> list[str]:
    n = len(lines)
    # Both sides are timed warm: the first decision of each shape in a process sets up its GEMM primitives
    # (oneDNN's JIT) and the first one the thread pool. The CLI runs the requests twice and once; the
    # difference is the second pass. Python runs them once before the timed rounds.
    (tmp / "twice.jsonl").write_bytes(b"\n".join(lines + lines) + b"\n")
    (tmp / "once.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    model = clef.Model(model_dir, threads=args.threads, precision=args.precision, state_cache_mb=0)
    tokens = sum(model.decision(line).input_tokens for line in lines)  # warm-up, and the token count
    cli, many, single, single_out = [], [], [], []
    for _ in range(args.rounds):
        twice = time_cli(args, model_dir, tmp / "twice.jsonl", tmp / "out2.jsonl")
        once = time_cli(args, model_dir, tmp / "once.jsonl", tmp / "out1.jsonl")
        cli.append((twice - once) / n)
        t0 = time.perf_counter()
        answers = list(model.decide_many(lines))
        many.append((time.perf_counter() - t0) / n)
        assert all("error" not in a for a in answers)
        # decide() timed one by one, so that the engine's own total can be taken off.
        wall = engine = 0.0
        for line in lines:
            t0 = time.perf_counter()
            d = model.decision(line)
            json.loads(d.body)  # what decide() adds to decision()
            wall += time.perf_counter() - t0
            engine += d.seconds["total"]
        single.append(wall / n)
        single_out.append((wall - engine) / n)
    c, m, s = statistics.median(cli), statistics.median(many), statistics.median(single)
    name = pathlib.Path(model_dir).name
    rows = []
    for label, t, outside in (("`clef decide --jsonl`", c, None), ("`Model.decide_many`", m, None),
                              ("`Model.decide`", s, statistics.median(single_out))):
        rows.append(f"| {name} | {label} | {n} | {t * 1e3:.2f} | {tokens / n / t:,.0f} | "
                    f"{(t - c) * 1e3:+.2f} | {'' if outside is None else f'{outside * 1e3:.3f}'} |")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True, help="release folder or GGUF (repeatable)")
    ap.add_argument("--clef", default=os.environ.get("CLEF_BIN", str(REPO / "build" / "release" / "bin" / "clef")))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", default="bf16", help="fp32, bf16 or int8 (both sides)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-bytes", type=int, default=3000, help="skip corpus requests longer than this")
    args = ap.parse_args()
    lines = requests(args.max_bytes)
    print(f"CPU: {cpu_name()}; clef {clef.__version__}; {args.precision}, threads {args.threads}; "
          f"{len(lines)} corpus requests up to {args.max_bytes} bytes; {args.rounds} rounds (median)\n")
    print("| model | path | requests | ms / request | tokens/s | vs CLI, ms / request | outside the engine, ms / request |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as d:
        for model_dir in args.model:
            for row in bench_model(args, model_dir, lines, pathlib.Path(d)):
                print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
