# SPDX-License-Identifier: MIT
"""0.8b-preset checks of the precision modes, live in CI (a 0.8B-parameter random-weight folder in the real format).

  * Backbone parity at T = 1024: fp32 mode per-position cosine >= 0.99999 against transformers fp32
    (`Qwen3_5ForConditionalGeneration(...).model.language_model`, the same oracle as test_backbone.py);
    bf16 mode reported and bounded (lowest cosine >= 0.99, a sanity floor).
  * bf16 drift on the head's probabilities: `clef decide --precision bf16` against `clef decide
    --precision fp32` on the requests of tests/data/requests/corpus.jsonl that the bf16 golden
    covers, every option of every question: on the full 0.8b the 6 requests up to 170 tokens
    (FULL_08B_MAX_TOKENS: 24 blocks deep; request 15, the golden's second-largest drift, among them),
    on the 0.8b-shapes folder 23 (the long ones: 13 with 5,303 tokens and 64 questions, 14 with 3,350;
    SHAPES_08B_MAX_TOKENS). The fp32 side is tied to
    transformers by the cosine test above and, on the tiny preset, by test_decide_e2e.py (full
    pipeline vs the Python reference).
    The default precision must be the fastest mode with |dp| <= 5e-3 against fp32; bf16 is not
    within that bound on this random-weight folder (the error is spread over every
    projection, docs/NUMERICS.md), so fp32 stays the default. A later decision set the bf16
    bound: bf16 stays opt-in and its drift must stay at or below transformers' own bf16 drift on the
    same requests, at every ISA level (CLEF_ISA). That bound is not typed here: it is the golden file
    golden/transformers_bf16_drift.json, written by tools/reference/bf16_drift.py (the Python
    reference, ClefReference(folder, "bf16") vs "f32", on every corpus request; 43 min on two shared
    cores, so it is committed rather than re-run; on the folder as written since 2026-12-02, the same
    on every CPU: 0.0211 at request 13, over the 23 requests up to 6000 tokens).
    This test enforces: our max |dp| over the requests the golden covers <= the golden's max over
    them (+1e-4: our responses carry 4-decimal probabilities, the golden is computed from the
    reference's raw floats); the golden belongs to this folder and corpus (same model.safetensors
    and corpus sha256); and while our drift exceeds 5e-3 the default precision must be fp32 (an
    answer without --precision is byte-identical to the fp32 answer).

The folder is generated once per session with tools/reference/make_model.py (seed 2, ~15 s, 3 GB);
set CLEF_08B_DIR to reuse an existing one (scripts/test.sh writes one for every session).

The parity and bf16 tests also run on the 0.8b-shapes preset (the 0.8b's layer shapes, one block of
each kind; mark `shapes08b`): scripts/test.sh runs those natively and again at the AVX2 level, where
the same kernels with the same blocking prove what the full preset proves at the native level, in a
fraction of the time. Its bf16 bound is its own golden, golden/transformers_bf16_drift_0.8b-shapes.json
(the same script on that folder). The int8 drift runs once, natively, on the 0.8b-shapes folder (the
drift test's 23 requests, the long ones included). The T = 1024 bf16 sanity floor runs on 0.8b-shapes too: on the full
preset the fp32 parity is what depth adds, and the bf16 drift test covers bf16 there.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

from conftest import CORPUS, REPO_ROOT, SHAPES_08B, folder_for
from test_backbone import _hf_hidden, _ids_for, _run_dump, dump_bin  # noqa: F401  (fixture)


BF16_PROB_BOUND = 5e-3   # the bound a mode must meet to be the default
ROUNDING = 1e-4          # our responses carry 4-decimal probabilities (the golden is raw floats)
# transformers' own bf16 drift on this folder (bf16's bound); regenerate with
# `python tools/reference/bf16_drift.py` when the folder, the corpus or the reference changes.
GOLDEN = pathlib.Path(__file__).resolve().parent / "golden"
TRANSFORMERS_BF16_DRIFT = {"0.8b": GOLDEN / "transformers_bf16_drift.json",
                           "0.8b-shapes": GOLDEN / "transformers_bf16_drift_0.8b-shapes.json"}
THREADS = os.environ.get("CLEF_TEST_THREADS", "2")
# The drift tests' requests per folder: on the full 0.8b (24 blocks) the golden's requests up to this
# many tokens (6 of its 23, 949 tokens: 8, 9, 15, 17, 18, 22; request 15 has the golden's largest drift
# after the 5,303-token request 13), where depth is what is tested; on the 0.8b-shapes folder every
# request its golden covers up to SHAPES_08B_MAX_TOKENS (23 of 24, the long 13 with 5,303 tokens and
# 64 questions and 14 with 3,350 included), where length is. Request 12 (6,771 tokens, a third of the
# corpus's tokens) is left out there: transformers' own bf16 drift on it is 2.9e-5, the smallest but
# one, so it bounds nothing the other two long requests do not. Both folders run natively in
# scripts/test.sh (CI's 45 minutes: docs/TESTING.md).
FULL_08B_MAX_TOKENS = 170
SHAPES_08B_MAX_TOKENS = 6000


@pytest.mark.parametrize("which", SHAPES_08B)
def test_08b_parity_t1024(dump_bin, which, request, tmp_path):  # noqa: F811
    folder_08b = folder_for(request, which)
    ids = _ids_for(folder_08b, 1024, seed=3)
    want = _hf_hidden(folder_08b, ids)

    def cos(a, b):
        return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))

    prefix, _ = _run_dump(dump_bin, folder_08b, ids, tmp_path, ["--chunks", "512"])
    got = np.load(f"{prefix}.chunk512.npy")
    c32 = float(cos(got, want).min())
    rel = float((np.abs(got - want).max(1) / np.abs(want).max(1)).max())
    print(f"{which} T=1024: fp32 min cosine {c32:.8f}, max|dh|/max|h| {rel:.3g}")
    assert c32 >= 0.99999, f"fp32 mode: lowest per-position cosine {c32:.8f}"
    if which != "0.8b-shapes":
        return  # the bf16 floor: on the layer shapes only (module docstring)
    prefix16, _ = _run_dump(dump_bin, folder_08b, ids, tmp_path, ["--chunks", "512", "--precision", "bf16"])
    c16 = float(cos(np.load(f"{prefix16}.chunk512.npy"), want).min())
    print(f"{which} T=1024: bf16 min cosine {c16:.6f}")
    # A sanity floor, not the bf16 bound (that is the drift test below, against transformers' own bf16):
    # a broken bf16 kernel drops cosines far lower. The seed-2 0.8b folder as every CPU writes it since
    # 2026-12-02 gives 0.9947 at AVX2 (0.995 was set on the old folder); 0.8b-shapes is one block of
    # each kind, so its floor is no looser a check.
    assert c16 >= 0.99, f"bf16 mode: lowest per-position cosine {c16:.6f}"


def _probabilities(answer: dict) -> dict:
    """Option -> probability for one answer of a SystemOne response (noul/choice/score)."""
    if answer["type"] == "noul":  # p(true); p(false) = 1 - p(true) drifts by the same amount
        return {"true": answer["noul"]}
    return dict(answer["probabilities"])


def _decide_all(clef: pathlib.Path, folder: pathlib.Path, requests: list, precision, tmp: pathlib.Path):
    inp = tmp / f"in-{precision}.jsonl"
    flags = ["--precision", precision] if precision else []
    inp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in requests), encoding="utf-8")
    out = tmp / f"out-{precision}.jsonl"
    r = subprocess.run([str(clef), "decide", "--model", str(folder), *flags, "--threads", THREADS,
                        "--jsonl", str(inp), "--out", str(out), "--no-progress"],
                       capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stderr
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(requests)
    return [json.loads(ln) for ln in lines]


def _model_sha256(folder: pathlib.Path) -> str:
    """sha256 of the folder's model.safetensors, from its SHA256SUMS line (make_model.py writes it)."""
    for ln in (folder / "SHA256SUMS").read_text().splitlines():
        if ln.endswith(" model.safetensors"):
            return ln.split()[0]
    raise AssertionError(f"{folder}/SHA256SUMS has no model.safetensors line")


def _drift_requests(which: str, golden: dict) -> list:
    """The golden's per-request entries that the drift tests use on this preset (FULL_08B_MAX_TOKENS,
    SHAPES_08B_MAX_TOKENS)."""
    cap = FULL_08B_MAX_TOKENS if which == "0.8b" else SHAPES_08B_MAX_TOKENS
    return [r for r in golden["per_request"] if r["tokens"] <= cap]


def _transformers_bf16_drift(which: str, folder: pathlib.Path) -> dict:
    """The golden: overall max and per-request max |p_bf16 - p_fp32| of the reference on ``folder``."""
    path = TRANSFORMERS_BF16_DRIFT[which]
    golden = json.loads(path.read_text(encoding="utf-8"))
    assert golden["complete"], f"{path} is a partial run"
    assert golden["folder"]["preset"] == which, (path, golden["folder"])
    assert golden["folder"]["model_safetensors_sha256"] == _model_sha256(folder), (
        f"{path} was measured on another folder "
        f"({golden['folder']['preset']} seed {golden['folder']['seed']}); regenerate it with "
        f"tools/reference/bf16_drift.py --model {folder} --out {path}")
    assert golden["corpus"]["sha256"] == hashlib.sha256(CORPUS.read_bytes()).hexdigest(), (
        f"{CORPUS} changed since {path}; regenerate it with tools/reference/bf16_drift.py")
    return golden


@pytest.fixture(scope="module")
def corpus_fp32_by_folder(dump_bin, tmp_path_factory):  # noqa: F811
    """(which, folder) -> (indices, requests, fp32 answers) of the corpus requests the drift tests use on
    that preset (_drift_requests: on the 0.8b the golden's requests up to FULL_08B_MAX_TOKENS tokens, on
    0.8b-shapes all of them), computed once per folder and shared by the drift tests."""
    import reference

    cache = {}

    def get(which: str, folder: pathlib.Path):
        if folder not in cache:
            indices = sorted(r["index"] for r in _drift_requests(which, _transformers_bf16_drift(which, folder)))
            requests = [reference.load_jsonl_request(CORPUS, i) for i in indices]
            clef = dump_bin.parent / "clef"
            cache[folder] = indices, requests, _decide_all(clef, folder, requests, "fp32",
                                                           tmp_path_factory.mktemp("fp32"))
        return cache[folder]
    return get


@pytest.mark.parametrize("which", SHAPES_08B)
def test_bf16_head_probabilities_within_5e3_on_corpus(dump_bin, which, request, corpus_fp32_by_folder,  # noqa: F811
                                                      tmp_path):
    folder_08b = folder_for(request, which)
    golden = _transformers_bf16_drift(which, folder_08b)
    indices, requests, fp32 = corpus_fp32_by_folder(which, folder_08b)
    # transformers' own bf16 drift on the very requests compared here
    theirs_at = max(_drift_requests(which, golden), key=lambda r: r["max_abs_dp"])
    theirs = theirs_at["max_abs_dp"]
    clef = dump_bin.parent / "clef"
    bf16 = _decide_all(clef, folder_08b, requests, "bf16", tmp_path)
    worst = (0.0, None)
    for i, a, b in zip(indices, fp32, bf16):
        assert "answers" in a and "answers" in b, (i, a, b)
        assert list(a["answers"]) == list(b["answers"])
        for qid in a["answers"]:
            pa, pb = _probabilities(a["answers"][qid]), _probabilities(b["answers"][qid])
            assert list(pa) == list(pb), (i, qid)
            for opt in pa:
                d = abs(float(pa[opt]) - float(pb[opt]))
                if d > worst[0]:
                    worst = (d, (i, qid, opt))
    print(f"{which} corpus, the {len(indices)} requests of the golden: max |p_bf16 - p_fp32| = {worst[0]:.4f} at "
          f"{worst[1]}; transformers' own bf16 drift {theirs:.4f} at request {theirs_at['index']}")
    assert worst[0] <= theirs + ROUNDING, (
        f"bf16 drift {worst[0]:.4f} at {worst[1]} exceeds transformers' own bf16 drift "
        f"{theirs:.4f} on the same requests ({TRANSFORMERS_BF16_DRIFT[which].name})")
    if worst[0] > BF16_PROB_BOUND + ROUNDING:
        # Not within the bound: the default must be the parity mode.
        default = _decide_all(clef, folder_08b, requests[:2], None, tmp_path)
        assert default == fp32[:2], "bf16 exceeds the 5e-3 bound, so the default precision must be fp32"


INT8_PROB_BOUND = 0.02   # the int8 goal: int8 mode's max |dp| against fp32 on the corpus
TIE = 2e-4               # top-two fp32 probabilities this close (4-decimal responses) are a tie


def _argmax_flip(pa: dict, pb: dict):
    """(flipped, tie): whether the top option differs, and whether fp32's top two are a tie."""
    if list(pa) == ["true"]:
        a, b = float(pa["true"]), float(pb["true"])
        return (a >= 0.5) != (b >= 0.5), abs(a - 0.5) <= TIE / 2
    ranked = sorted(pa, key=lambda o: -float(pa[o]))
    top_b = max(pb, key=lambda o: float(pb[o]))
    tie = len(ranked) > 1 and float(pa[ranked[0]]) - float(pa[ranked[1]]) <= TIE
    return ranked[0] != top_b and float(pb[top_b]) != float(pb[ranked[0]]), tie


class Int8BoundMissed(AssertionError):
    """The int8 goal (max |dp| <= INT8_PROB_BOUND, no argmax flip outside ties) is missed. The strict xfail
    below expects exactly this; any other failure (a crash, answers of another shape) fails the test."""


# The int8 goal is missed today: a strict xfail that accepts only Int8BoundMissed, so it turns red both
# when a change meets the goal and on any other error (a crash, answers of another shape). It runs on the
# 0.8b-shapes folder's drift requests (the long ones 13 and 14 included); the full 0.8b missed it too on its
# 21 requests up to 600 tokens (max |dp| 0.0343 at request 3, 3 argmax flips outside ties; docs/NUMERICS.md),
# and that case left CI for time (docs/TESTING.md).
INT8_CASES = [
    pytest.param("0.8b-shapes", id="0.8b-shapes", marks=[pytest.mark.shapes08b, pytest.mark.xfail(
        strict=True, raises=Int8BoundMissed,
        reason="the int8 goal is not met on the 0.8b-shapes folder: max |dp| 0.0074 (request 13) is within 0.02, "
               "but 3 argmax flips outside ties on its 23 drift requests")]),
]


@pytest.mark.skipif(bool(os.environ.get("CLEF_ISA")), reason="int8 GEMM kernels are bit-identical at every level "
                    "(tests/unit/test_int8_gemm.cc) and its attention / delta rule differ between levels only "
                    "in summation order (per-level tests in tests/unit/test_ops.cc), so the corpus drift is "
                    "measured once, at the native level")
@pytest.mark.parametrize("which", INT8_CASES)
def test_int8_head_probabilities_on_corpus(dump_bin, which, request, corpus_fp32_by_folder, tmp_path):  # noqa: F811
    """--precision int8 (Q8_0 weights made at load, dynamic per-block activations) against fp32 on the
    requests of the bf16 drift test on 0.8b-shapes (23): the same questions and options, max |dp| <= 0.02
    and no argmax flip outside ties (Int8BoundMissed)."""
    folder = folder_for(request, which)
    indices, requests, fp32 = corpus_fp32_by_folder(which, folder)
    clef = dump_bin.parent / "clef"
    int8 = _decide_all(clef, folder, requests, "int8", tmp_path)
    worst, flips, ties, total, diffs = (0.0, None), [], 0, 0, []
    for i, a, b in zip(indices, fp32, int8):
        assert "answers" in a and "answers" in b, (i, a, b)
        assert list(a["answers"]) == list(b["answers"])
        for qid in a["answers"]:
            pa, pb = _probabilities(a["answers"][qid]), _probabilities(b["answers"][qid])
            assert list(pa) == list(pb), (i, qid)
            total += 1
            for opt in pa:
                d = abs(float(pa[opt]) - float(pb[opt]))
                diffs.append(d)
                if d > worst[0]:
                    worst = (d, (i, qid, opt))
            flipped, tie = _argmax_flip(pa, pb)
            ties += tie
            if flipped and not tie:
                flips.append((i, qid))
    print(f"{which} corpus ({len(requests)} requests, {total} questions): int8 max |p_int8 - p_fp32| = "
          f"{worst[0]:.4f} at {worst[1]}, mean {np.mean(diffs):.5f}; {len(flips)} argmax flips outside {ties} ties")
    if worst[0] > INT8_PROB_BOUND:
        raise Int8BoundMissed(f"int8 drift {worst[0]:.4f} at {worst[1]} exceeds {INT8_PROB_BOUND}")
    if flips:
        raise Int8BoundMissed(f"int8 flips the answer of {flips}")
