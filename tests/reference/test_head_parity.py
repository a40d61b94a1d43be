# SPDX-License-Identifier: MIT
"""C++ joint schema head vs the toolkit's PyTorch head (both written from docs/PROTOCOL.md §4.4), live.

Hidden states are fed from files: the reference backbone's real final-norm rows for a few tiny
records, and seeded random rows for every request of tests/data/requests/corpus.jsonl (the head's
math does not care where rows come from). The C++ side streams rows in chunks of 1, 7 and all,
which must not change the result beyond fp32 rounding. Tolerance: max |Δlogit| <= 1e-4 (fp32).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest
import torch

from conftest import CORPUS, REPO_ROOT

TOL = 1e-4


def head_driver() -> str:
    path = os.environ.get("CLEF_HEAD_DRIVER", str(REPO_ROOT / "build" / "release" / "bin" / "clef_head_driver"))
    if not pathlib.Path(path).exists():
        pytest.fail(f"{path} missing: build the release preset first")
    return path


def corpus_requests():
    import reference

    n = sum(1 for ln in CORPUS.read_text(encoding="utf-8").splitlines() if ln.strip())
    return [reference.load_jsonl_request(CORPUS, i) for i in range(n)]


def write_inputs(d: pathlib.Path, hidden: np.ndarray, record) -> None:
    d.mkdir(parents=True, exist_ok=True)
    np.save(d / "hidden.npy", hidden.astype(np.float32))
    np.save(d / "input_ids.npy", np.asarray(record.input_ids, dtype=np.int64))
    (d / "spans.json").write_text(json.dumps(record.to_json()))


def cpp_logits(model_dir, dirs, chunk: int = 0):
    """Runs the C++ head on record folders (one process for all); returns their logits in order."""
    dirs = list(dirs)
    r = subprocess.run([head_driver(), str(model_dir), str(chunk), *map(str, dirs)], capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr
    return [np.load(d / f"cpp_{chunk}.npy") for d in dirs]


def py_logits(head, table, hidden: np.ndarray, record) -> np.ndarray:
    from clef_ref.head import record_head_inputs

    with torch.no_grad():
        out = head(torch.from_numpy(hidden), table, torch.as_tensor(record.input_ids, dtype=torch.long),
                   **record_head_inputs(record))
    return out.numpy()


def output_table(model_dir):
    """The [V, H] lm_head rows (tied: the embedding), as fp32 torch, read with safetensors."""
    from safetensors import safe_open

    cfg = json.loads((pathlib.Path(model_dir) / "config.json").read_text())
    name = "model.language_model.embed_tokens.weight" if cfg.get("tie_word_embeddings") else "lm_head.weight"
    idx = pathlib.Path(model_dir) / "model.safetensors.index.json"
    file = json.loads(idx.read_text())["weight_map"][name] if idx.exists() else "model.safetensors"
    with safe_open(str(pathlib.Path(model_dir) / file), "pt") as f:
        return f.get_tensor(name).float()


def check_corpus(model_dir, tmp_path, chunks=(0,)):
    from clef_ref.head import load_head
    from clef_ref.record import encode_record, load_tokenizer

    head = load_head(model_dir)
    table = output_table(model_dir)
    tok = load_tokenizer(model_dir)
    H = head.config["hidden_size"]
    rng = np.random.default_rng(0)
    cases = []
    for i, req in enumerate(corpus_requests()):
        rec = encode_record(req, tok)
        hidden = rng.standard_normal((len(rec.input_ids), H)).astype(np.float32)
        d = tmp_path / f"r{i}"
        write_inputs(d, hidden, rec)
        cases.append((d, rec, py_logits(head, table, hidden, rec)))
    worst = 0.0
    for c in chunks:
        for (d, rec, want), got in zip(cases, cpp_logits(model_dir, [d for d, _, _ in cases], c)):
            assert got.shape == want.shape
            err = float(np.abs(got - want).max())
            worst = max(worst, err)
            assert err <= TOL, (d.name, c, err)
            # identical answers: the same argmax per question
            start = 0
            for q in rec.questions:
                n = len(q.option_ids)
                assert np.argmax(got[start:start + n]) == np.argmax(want[start:start + n]), (d.name, q.question_id)
                start += n
    return worst


def test_tiny_backbone_hidden_rows(ref, tiny_dir, tmp_path):
    """Real final-norm rows from the reference backbone, streamed in chunks of 1, 7 and all."""
    import reference

    for index in (0, 3):
        a = ref.run(reference.load_jsonl_request(CORPUS, index))
        d = tmp_path / f"b{index}"
        write_inputs(d, a["hidden"].numpy(), a["record"])
        want = a["logits"].numpy()
        for chunk in (1, 7, 0):
            (got,) = cpp_logits(tiny_dir, [d], chunk)
            assert float(np.abs(got - want).max()) <= TOL, (index, chunk)


def test_tiny_whole_corpus_random_rows(tiny_dir, tmp_path):
    worst = check_corpus(tiny_dir, tmp_path, chunks=(0, 64))
    print(f"tiny: worst |dlogit| over the corpus {worst:.3g}")


@pytest.mark.slow
def test_0_8b_whole_corpus_random_rows(folder_08b_shapes, tmp_path):
    """The 0.8b preset's head (W=1024, 16 heads, 2+2 layers) on every corpus request, natively (the
    head's ops give the same bits at every level: tests/unit/test_head_ops.cc checks that per level).
    The head reads random hidden rows, not the backbone's, so the 0.8b-shapes folder (the same head
    shapes, 0.7 GB instead of 2 GB to load) proves what the full 0.8b would."""
    worst = check_corpus(folder_08b_shapes, tmp_path)
    print(f"0.8b-shapes: worst |dlogit| over the corpus {worst:.3g}")


def test_empty_span_is_refused(tiny_dir, tmp_path):
    """An empty question span (the reference's NaN case) is an error, never NaN logits."""
    from clef_ref.record import encode_record, load_tokenizer

    import reference

    rec = encode_record(reference.load_jsonl_request(CORPUS, 0), load_tokenizer(tiny_dir))
    d = tmp_path / "empty"
    write_inputs(d, np.zeros((len(rec.input_ids), 64), np.float32), rec)
    spans = json.loads((d / "spans.json").read_text())
    a = spans["questions"][0]["span"][0]
    spans["questions"][0]["span"] = [a, a]
    (d / "spans.json").write_text(json.dumps(spans))
    r = subprocess.run([head_driver(), str(tiny_dir), "0", str(d)], capture_output=True, text=True)
    assert r.returncode == 1 and "is empty or outside" in r.stderr
