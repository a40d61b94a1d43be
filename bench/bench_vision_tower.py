#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Vision tower benchmark: clef.cpp's VisionTower vs transformers' Qwen3_5VisionModel
on one release folder, per image, for square images whose patch grid comes from the processor's
smart_resize rule (docs/MODEL.md §6.1: factor 32, min_pixels 256^2, max_pixels 4096^2).

Prints a markdown table: image size, patch grid, merged tokens, and per mode the best wall time
of one tower call (clef.cpp: best of --repeat calls inside one process, model load excluded;
PyTorch: best of --repeat calls, same thread count, same pixel_values), plus tokens/s and the
ratio PyTorch / clef.cpp. Not a timed test.

  OMP_WAIT_POLICY=passive python3 bench/bench_vision_tower.py --model /tmp/clef-0.8b --threads 2

The driver comes from --driver (default: the newest build/*/bin/clef_vision_driver).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

from clef_env import bf16_steady_state  # bench/, beside this script

bf16_steady_state(os.environ)

REPO = pathlib.Path(__file__).resolve().parents[1]


def smart_resize(height: int, width: int, factor: int = 32, min_pixels: int = 256 * 256,
                 max_pixels: int = 4096 * 4096) -> tuple[int, int]:
    """Target size of Qwen2VLImageProcessor (docs/MODEL.md §6.1)."""
    h = round(height / factor) * factor
    w = round(width / factor) * factor
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = math.floor(height / beta / factor) * factor
        w = math.floor(width / beta / factor) * factor
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w


def find_driver(explicit: str | None) -> pathlib.Path:
    if explicit:
        return pathlib.Path(explicit)
    found = sorted(REPO.glob("build/*/bin/clef_vision_driver"), key=lambda p: p.stat().st_mtime, reverse=True)
    if not found:
        sys.exit("clef_vision_driver not found; build a preset or pass --driver")
    return found[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--sizes", default="256,448,1024", help="square image sides in pixels")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--driver")
    ap.add_argument("--no-torch", action="store_true")
    a = ap.parse_args()

    driver = find_driver(a.driver)
    folder = pathlib.Path(a.model)
    vcfg = json.loads((folder / "config.json").read_text())["vision_config"]
    dim = vcfg.get("in_channels", 3) * vcfg["temporal_patch_size"] * vcfg["patch_size"] ** 2
    model = None
    if not a.no_torch:
        import torch
        from transformers import Qwen3_5ForConditionalGeneration

        torch.set_num_threads(a.threads)
        model = Qwen3_5ForConditionalGeneration.from_pretrained(str(folder), dtype=torch.float32).eval()
        model16 = Qwen3_5ForConditionalGeneration.from_pretrained(str(folder), dtype=torch.bfloat16).eval()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for side in [int(s) for s in a.sizes.split(",")]:
            h, w = smart_resize(side, side)
            grid = (1, h // 16, w // 16)
            n = grid[1] * grid[2]
            px = np.random.default_rng(side).uniform(-1, 1, size=(n, dim)).astype(np.float32)
            np.save(f"{tmp}/px.npy", px)
            np.save(f"{tmp}/g.npy", np.asarray([grid], dtype=np.int64))
            row = {"side": side, "grid": f"{grid[1]}x{grid[2]}", "tokens": n // 4}
            for prec in ("fp32", "bf16"):
                r = subprocess.run([str(driver), "tower", "--model", str(folder), "--pixels", f"{tmp}/px.npy",
                                    "--grids", f"{tmp}/g.npy", "--precision", prec, "--threads", str(a.threads),
                                    "--repeat", str(a.repeat)], capture_output=True, text=True)
                if r.returncode != 0:
                    sys.exit(r.stderr)
                row[f"clef_{prec}"] = json.loads(r.stdout)["seconds"]
            if model is not None:
                import torch

                for prec, m, dt in (("fp32", model, torch.float32), ("bf16", model16, torch.bfloat16)):
                    x = torch.from_numpy(px).to(dt)
                    g = torch.tensor([grid])
                    best = 1e30
                    with torch.no_grad():
                        for _ in range(a.repeat):
                            t0 = time.perf_counter()
                            m.model.visual(x, grid_thw=g)
                            best = min(best, time.perf_counter() - t0)
                    row[f"torch_{prec}"] = best
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)

    print(f"\nthreads {a.threads}, best of {a.repeat}; load average {os.getloadavg()[0]:.1f}\n")
    print("| image | patch grid | tokens | clef fp32 s | clef bf16 s | torch fp32 s | torch bf16 s | "
          "torch best / clef best |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        cb = min(r["clef_fp32"], r["clef_bf16"])
        tf, tb = r.get("torch_fp32"), r.get("torch_bf16")
        ratio = f"{min(tf, tb) / cb:.2f}x" if tf is not None else "-"
        fmt = lambda v: f"{v:.3f}" if v is not None else "-"  # noqa: E731
        print(f"| {r['side']}x{r['side']} | {r['grid']} | {r['tokens']} | {r['clef_fp32']:.3f} | "
              f"{r['clef_bf16']:.3f} | {fmt(tf)} | {fmt(tb)} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
