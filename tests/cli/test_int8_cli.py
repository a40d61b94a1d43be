# SPDX-License-Identifier: MIT
"""`--precision int8` end to end: every int8 kernel this CPU has gives the same response bytes (the
kernels are bit-identical to the scalar oracle, tests/unit/test_int8_gemm.cc), `clef --version` names
the kernel, and a bad CLEF_INT8_KERNEL is a usage error naming the variable."""

from __future__ import annotations

import os
import platform

from conftest import REPO_ROOT, run_clef

REQUEST = REPO_ROOT / "examples" / "request.json"
KERNELS = ("scalar", "avx2", "avxvnni", "avx512vnni")


def _env(**kw) -> dict:
    e = dict(os.environ)
    e.pop("CLEF_INT8_KERNEL", None)
    e.update(kw)
    return e


def test_every_int8_kernel_gives_the_same_answer(cpp_tiny):
    answers, ran = {}, []
    for k in KERNELS:
        r = run_clef("decide", "--model", str(cpp_tiny), "--precision", "int8", str(REQUEST),
                     env=_env(CLEF_INT8_KERNEL=k))
        if r.returncode != 0:
            assert "this CPU cannot run that kernel" in r.stderr, (k, r.stderr)
            continue
        ran.append(k)
        answers[k] = r.stdout
    assert "scalar" in ran, ran
    if platform.machine() == "x86_64":
        assert len(ran) >= 2, ran  # every x86-64 CPU that runs the CI has AVX2 at least
    assert len(set(answers.values())) == 1, {k: v[:200] for k, v in answers.items()}
    fp32 = run_clef("decide", "--model", str(cpp_tiny), str(REQUEST), env=_env())
    assert fp32.returncode == 0 and fp32.stdout != answers["scalar"], "int8 must not silently run fp32"


def test_version_names_the_int8_kernel_and_bad_kernel_is_refused(cpp_tiny):
    r = run_clef("--version", env=_env())
    assert r.returncode == 0 and "int8: clef " in r.stdout, r.stdout
    r = run_clef("decide", "--model", str(cpp_tiny), "--precision", "int8", str(REQUEST),
                 env=_env(CLEF_INT8_KERNEL="bogus"))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "CLEF_INT8_KERNEL" in r.stderr and "bogus" in r.stderr
