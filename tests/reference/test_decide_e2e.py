# SPDX-License-Identifier: MIT
"""`clef decide` end to end (tokenizer, encode_record, C++ backbone, C++ head, answers) vs the Python
reference (transformers fp32 backbone + PyTorch head) on the tiny preset, for every corpus request.

Probabilities are compared after the 4-decimal rounding both sides apply: within 1e-4 (one rounding
step, since a value can sit on a rounding boundary), identical choices, and identical structure.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

from conftest import CORPUS, REPO_ROOT


def clef_bin() -> str:
    path = os.environ.get("CLEF_BIN", str(REPO_ROOT / "build" / "release" / "bin" / "clef"))
    if not pathlib.Path(path).exists():
        pytest.fail(f"{path} missing: build the release preset first")
    return path


def numbers_close(a, b, tol, where="$"):
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), where
        for k in a:
            numbers_close(a[k], b[k], tol, f"{where}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            numbers_close(x, y, tol, f"{where}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        # tol is one unit in the last printed decimal; 1e-9 absorbs the binary representation of
        # two 4-decimal numbers (2.6612 - 2.6611 = 1.00000000000002e-4)
        assert abs(a - b) <= tol + 1e-9, (where, a, b)
    else:
        assert a == b, (where, a, b)


N = sum(1 for ln in CORPUS.read_text(encoding="utf-8").splitlines() if ln.strip())


@pytest.mark.parametrize("index", range(N))
def test_decide_matches_reference(ref, tiny_dir, tmp_path, index):
    import reference

    req = reference.load_jsonl_request(CORPUS, index)
    want = ref.run(req)["response"]
    path = tmp_path / "req.json"
    path.write_text(json.dumps(req, ensure_ascii=False))
    r = subprocess.run([clef_bin(), "decide", "--model", str(tiny_dir), "--threads", "1", str(path)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    numbers_close(got, want, 1e-4)
    for qid, a in got["answers"].items():
        if a["type"] == "choice":
            assert a["choice"] == want["answers"][qid]["choice"], qid


def test_chunk_size_does_not_change_the_answer(tiny_dir, tmp_path):
    import reference

    req = reference.load_jsonl_request(CORPUS, 14)  # the long-state request
    path = tmp_path / "req.json"
    path.write_text(json.dumps(req, ensure_ascii=False))
    outs = []
    for chunk in ("1", "64", "4096"):
        r = subprocess.run([clef_bin(), "decide", "-m", str(tiny_dir), "--chunk", chunk, str(path)],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        outs.append(json.loads(r.stdout))
    numbers_close(outs[0], outs[1], 1e-4)
    numbers_close(outs[0], outs[2], 1e-4)


def test_over_long_request_is_refused_unless_truncation_is_asked(tiny_dir, tmp_path):
    import reference

    req = reference.load_jsonl_request(CORPUS, 14)
    path = tmp_path / "req.json"
    path.write_text(json.dumps(req, ensure_ascii=False))
    r = subprocess.run([clef_bin(), "decide", "-m", str(tiny_dir), "--max-tokens", "1000", str(path)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "state: the record needs" in r.stderr and len(r.stderr.splitlines()) == 1
    r = subprocess.run([clef_bin(), "decide", "-m", str(tiny_dir), "--max-tokens", "1000", "--overflow", "truncate",
                        str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    body = json.loads(r.stdout)
    assert body["usage"]["input_tokens"] == 1000 and body["usage"]["state_tokens_dropped"] > 0
