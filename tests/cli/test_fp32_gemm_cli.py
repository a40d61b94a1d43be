# SPDX-License-Identifier: MIT
"""CLEF_FP32_GEMM end to end at the avx2 level: clef's FMA GEMM is the default there and `clef --version`
says so, `library` hands the fp32 products back to the GEMM library, both answer within the
rounding-order bound of each other (docs/NUMERICS.md "fp32 GEMM with a fixed order (AVX2)"), and a bad
value is a usage error naming the variable; so is a bad CLEF_BF16_PACK (the call of a bf16 weight that packs
it), for every command and whatever the precision."""

from __future__ import annotations

import json
import os
import platform

import pytest

from conftest import REPO_ROOT, run_clef

REQUEST = REPO_ROOT / "examples" / "request.json"
pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="the FMA GEMM is x86-64's avx2 level")


def _env(**kw) -> dict:
    e = dict(os.environ)
    e.pop("CLEF_FP32_GEMM", None)
    e["CLEF_ISA"] = "avx2"
    e.update(kw)
    return e


def _probabilities(body: str) -> list:
    """Every probability of a response, in a fixed order."""
    out = []
    for _, a in sorted(json.loads(body)["answers"].items()):
        out += [a["noul"]] if a["type"] == "noul" else [p for _, p in sorted(a["probabilities"].items())]
    return out


def test_fma_gemm_is_avx2_default_and_library_agrees(cpp_tiny):
    v = run_clef("--version", env=_env())
    assert v.returncode == 0 and "fp32 products: clef FMA GEMM" in v.stdout, v.stdout
    v = run_clef("--version", env=_env(CLEF_FP32_GEMM="library"))
    assert v.returncode == 0 and "fp32 products: clef FMA GEMM" not in v.stdout, v.stdout
    answers = {}
    for gemm in ("clef", "library"):
        for precision in ("fp32", "bf16"):
            r = run_clef("decide", "--model", str(cpp_tiny), "--precision", precision, str(REQUEST),
                         env=_env(CLEF_FP32_GEMM=gemm))
            assert r.returncode == 0, r.stderr
            answers[gemm, precision] = _probabilities(r.stdout)
    # fp32: two summation orders (a few ulp) and the responses' 4 decimals. bf16 rounds every GEMM input to
    # 8 significant bits, so an ulp of difference can become one bf16 step (2^-9 relative) in the next
    # layer: its bound is that step's order, well under bf16's own drift from fp32 (docs/NUMERICS.md).
    for precision, tol in (("fp32", 2e-4), ("bf16", 2e-3)):
        a, b = answers["clef", precision], answers["library", precision]
        assert len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) <= tol, (precision, a, b)


def test_bad_fp32_gemm_value_is_refused(cpp_tiny):
    r = run_clef("decide", "--model", str(cpp_tiny), str(REQUEST), env=_env(CLEF_FP32_GEMM="bogus"))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "CLEF_FP32_GEMM" in r.stderr and "bogus" in r.stderr


@pytest.mark.parametrize("value", ["x", "-1", "1000001", "8 "])
def test_bad_bf16_pack_value_is_refused(cpp_tiny, value):
    r = run_clef("decide", "--model", str(cpp_tiny), str(REQUEST), env=_env(CLEF_BF16_PACK=value))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "CLEF_BF16_PACK" in r.stderr and f'"{value}"' in r.stderr, r.stderr


def test_bf16_pack_values_are_accepted_with_the_same_answers(cpp_tiny):
    """0 (never), 1 (the first call), a leading zero, the largest value and empty (the default) all run, and the
    answers are the same bits whenever the weights are packed (docs/NUMERICS.md)."""
    bodies = set()
    for value in ("", "0", "1", "02", "1000000"):
        r = run_clef("decide", "--model", str(cpp_tiny), "--precision", "bf16", str(REQUEST),
                     env=_env(CLEF_BF16_PACK=value, CLEF_ISA="native"))
        assert r.returncode == 0, (value, r.stderr)
        bodies.add(r.stdout)
    assert len(bodies) == 1, bodies
