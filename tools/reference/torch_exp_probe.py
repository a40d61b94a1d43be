#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Which exp does the reference's A = -exp(A_log) use? Counts, over fp32 inputs, where torch's fp32
exp differs from the alternatives a C++ loader could use.

Usage:  python tools/reference/torch_exp_probe.py [--lo -12] [--hi 4] [--n 2000000] [--seed 0]

Prints, for N uniform fp32 inputs in [lo, hi] (the range of A_log = log(A) for decays A in about
[6e-6, 55]): how many torch.exp results differ from (a) the correctly rounded exp (float64 exp
rounded once to fp32), (b) glibc's expf (called through ctypes on the first 20,000 inputs), (c) the
Sleef-style expf (Cody-Waite reduction by ln 2 in two parts, degree-5 polynomial, fma, as
torch's vectorized Vectorized<float>::exp computes), and whether torch's result changes with the
tensor length or with ATEN_CPU_CAPABILITY (rerun this with ATEN_CPU_CAPABILITY=default|avx2|avx512
and compare the printed digest). docs/GGUF.md "Bit-identical answers" quotes its output.
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib

import numpy as np
import torch


def sleef_style_expf(d: np.ndarray) -> np.ndarray:
    """exp(d) in fp32 by Cody-Waite reduction and a degree-5 polynomial with fused multiply-adds
    (fma emulated in float64: the products of two fp32 are exact there)."""
    f32 = np.float32

    def fma(a, b, c):
        return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(f32)

    def full(v):
        return np.full_like(d, v, dtype=f32)

    q = np.rint(d * f32(1.4426950408889634)).astype(np.int32)
    qf = q.astype(f32)
    s = fma(qf, full(-0.693145751953125), d)
    s = fma(qf, full(-1.428606765330187045e-06), s)
    u = full(0.000198527617612853646278381)
    for c in (0.00139304355252534151077271, 0.00833336077630519866943359, 0.0416664853692054748535156,
              0.166666671633720397949219, 0.5):
        u = fma(u, s, full(c))
    u = f32(1) + fma(s * s, u, s)
    h = q >> 1
    return (u * np.ldexp(np.ones_like(d), h) * np.ldexp(np.ones_like(d), q - h)).astype(f32)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lo", type=float, default=-12.0)
    ap.add_argument("--hi", type=float, default=4.0)
    ap.add_argument("--n", type=int, default=2_000_000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    x = np.random.default_rng(a.seed).uniform(a.lo, a.hi, a.n).astype(np.float32)
    t = torch.from_numpy(x).exp().numpy()
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"MKL {torch.backends.mkl.is_available()}; {a.n} fp32 inputs uniform in [{a.lo}, {a.hi}], seed {a.seed}")
    print(f"digest of torch.exp results: {hashlib.sha256(t.tobytes()).hexdigest()[:16]}")
    cr = np.exp(x.astype(np.float64)).astype(np.float32)
    ulps = t.view(np.int32).astype(np.int64) - cr.view(np.int32)
    print(f"(a) torch != correctly rounded: {np.count_nonzero(ulps)} ({100 * np.count_nonzero(ulps) / a.n:.2f}%), "
          f"max {np.abs(ulps).max()} ulp")
    libm = ctypes.CDLL("libm.so.6")
    libm.expf.restype, libm.expf.argtypes = ctypes.c_float, [ctypes.c_float]
    m = min(a.n, 20_000)
    lm = np.array([libm.expf(float(v)) for v in x[:m]], dtype=np.float32)
    print(f"(b) torch != glibc expf: {np.count_nonzero(t[:m] != lm)} of {m}; "
          f"glibc expf != correctly rounded: {np.count_nonzero(lm != cr[:m])} of {m}")
    sl = sleef_style_expf(x)
    print(f"(c) torch != Sleef-style expf: {np.count_nonzero(t != sl)} ({100 * np.count_nonzero(t != sl) / a.n:.2f}%)")
    lengths = (1, 3, 8, 15, 16, 17, 33, 48)
    same = all(np.array_equal(torch.from_numpy(x[:n].copy()).exp().numpy(), t[:n]) for n in lengths)
    print(f"torch results independent of the tensor length {lengths}: {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
