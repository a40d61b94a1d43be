# SPDX-License-Identifier: MIT
"""Request values echoed in a response (model, question ids, choice option ids, score
legends) come back as the reference returns them, byte for byte, never key-sorted.

The expected bytes come from tools/reference/response_echo_golden.py (the toolkit's reference
behaviour); the committed golden file must be exactly that script's output, and both the answers
code (clef_decision_driver respond) and `clef decide` end to end must reproduce it.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

from conftest import REPO_ROOT

GOLDEN = REPO_ROOT / "tests" / "reference" / "golden" / "response_echo.jsonl"


def _bin(name: str, env: str) -> str:
    path = os.environ.get(env, str(REPO_ROOT / "build" / "release" / "bin" / name))
    if not pathlib.Path(path).exists():
        pytest.fail(f"{path} missing: build the release preset first")
    return path


def golden():
    # split("\n"), not splitlines(): the lines hold raw U+2028 (json.dumps with ensure_ascii=False)
    return [json.loads(ln) for ln in GOLDEN.read_text(encoding="utf-8").split("\n") if ln.strip()]


def test_golden_file_is_the_reference_scripts_output(tiny_dir):
    import response_echo_golden

    want = response_echo_golden.golden_lines(tiny_dir)
    assert GOLDEN.read_text(encoding="utf-8") == "".join(line + "\n" for line in want)


def test_golden_covers_object_levels_and_order():
    """The cases really exercise what sorting would change (a golden of sorted keys cannot pass)."""
    bodies = {c["name"]: c["body"] for c in golden()}
    assert '"legend":{"0":{"b":1,"a":2},"1":"x"}' in bodies["issue_example"]  # the example
    assert '{"b":3,"a":2}' in bodies["duplicate_keys_in_levels"]               # first position, last value
    assert '"probabilities":{"zeta":' in bodies["choice_ids_in_request_order"]
    for c in golden():
        req = json.loads(c["request"])
        assert list(json.loads(c["body"])["answers"]) == list(req["questions"])


@pytest.mark.parametrize("case", [c["name"] for c in golden()])
def test_answers_code_writes_the_reference_bytes(tmp_path, case):
    c = next(g for g in golden() if g["name"] == case)
    (tmp_path / "req.json").write_text(c["request"], encoding="utf-8")
    np.save(tmp_path / "logits.npy", np.array(c["logits"], dtype=np.float32))
    model = json.loads(c["request"])["model"]
    r = subprocess.run([_bin("clef_decision_driver", "CLEF_DECISION_DRIVER"), "respond", model,
                        str(tmp_path / "req.json"), str(tmp_path / "logits.npy"), str(c["input_tokens"])],
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode("utf-8").removesuffix("\n") == c["body"]


@pytest.mark.parametrize("case", ["issue_example", "nested_levels", "duplicate_keys_in_levels",
                                  "question_ids_and_types_mixed"])
def test_decide_echoes_like_the_reference(ref, tiny_dir, tmp_path, case):
    """`clef decide` vs the full reference (fp32 backbone + head) on the tiny folder: the echoed
    parts are the same bytes, numbers within one rounding step, every key order the same."""
    from test_decide_e2e import numbers_close

    c = next(g for g in golden() if g["name"] == case)
    want = ref.run(json.loads(c["request"]))["response"]
    (tmp_path / "req.json").write_text(c["request"], encoding="utf-8")
    r = subprocess.run([_bin("clef", "CLEF_BIN"), "decide", "--model", str(tiny_dir), "--threads", "1",
                        str(tmp_path / "req.json")], capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr
    text = r.stdout.decode("utf-8")
    got = json.loads(text)
    numbers_close(got, want, 1e-4)
    for qid, a in want["answers"].items():
        if a["type"] == "score":  # the legend's raw bytes, as the reference's dict serialises
            assert '"legend":' + json.dumps(a["legend"], ensure_ascii=False, separators=(",", ":")) in text, qid
