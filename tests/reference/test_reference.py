# SPDX-License-Identifier: MIT
"""reference.py end to end on the tiny model + an independent loop evaluation of the head
(docs/PROTOCOL.md §4.4)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import CORPUS, TOOLS

N_CORPUS = 5


def _corpus_request(i):
    import reference

    return reference.load_jsonl_request(CORPUS, i)


@pytest.mark.parametrize("index", range(N_CORPUS))
def test_corpus_probabilities(ref, index):
    req = _corpus_request(index)
    a = ref.run(req)
    b = ref.run(req)
    assert torch.equal(a["logits"], b["logits"]) and torch.equal(a["hidden"], b["hidden"])
    assert torch.isfinite(a["hidden"]).all() and torch.isfinite(a["logits"]).all()
    start = 0
    for q in a["record"].questions:
        p = a["probs"][start: start + len(q.option_ids)].double()
        start += len(q.option_ids)
        assert abs(p.sum().item() - 1.0) < 1e-6
        assert (p > 0).all()
    resp = a["response"]
    assert resp["model"] == "clef-tiny-random"
    assert list(resp["answers"]) == list(req["questions"])
    assert resp["usage"] == {"input_tokens": len(a["record"].input_ids), "output_tokens": 0}
    for qid, ans in resp["answers"].items():
        q = req["questions"][qid]
        assert ans["type"] == q["type"]
        if q["type"] == "choice":
            assert list(ans["probabilities"]) == list(q["criteria"])
            assert ans["confidence"] == max(ans["probabilities"].values())
        if q["type"] == "score":
            assert list(ans["legend"].values()) == q["criteria"]
            assert abs(ans["score"] - sum(i * p for i, p in enumerate(ans["probabilities"].values()))) < 0.002


def test_cli_outputs(tiny_dir, tmp_path):
    import subprocess
    import sys

    outs = []
    for run in range(2):
        out = tmp_path / f"run{run}"
        r = subprocess.run([sys.executable, str(TOOLS / "reference.py"), "--model", str(tiny_dir), "--jsonl",
                            str(CORPUS), "--index", "1", "--out", str(out)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        outs.append(out)
    names = {"hidden.npy", "input_ids.npy", "spans.json", "logits.npy", "probs.npy", "response.json", "meta.json"}
    assert names <= {p.name for p in outs[0].iterdir()}
    for n in ("hidden.npy", "input_ids.npy", "logits.npy", "probs.npy"):
        assert np.array_equal(np.load(outs[0] / n), np.load(outs[1] / n)), n
    assert (outs[0] / "response.json").read_text() == (outs[1] / "response.json").read_text()
    h = np.load(outs[0] / "hidden.npy")
    ids = np.load(outs[0] / "input_ids.npy")
    assert h.dtype == np.float32 and h.shape == (ids.shape[0], 64) and ids.dtype == np.int64
    meta = json.loads((outs[0] / "meta.json").read_text())
    assert meta["seed"] == 0 and meta["prefix_suffix_tokens"]["ok"]
    # rejected request → exit 2 + error.json
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model": "m", "state": "x", "questions": {}}))
    r = subprocess.run([sys.executable, str(TOOLS / "reference.py"), "--model", str(tiny_dir), "--request", str(bad),
                        "--out", str(tmp_path / "bad")], capture_output=True, text=True)
    assert r.returncode == 2
    assert json.loads((tmp_path / "bad" / "error.json").read_text())["message"] == "at least one question is required"


# ---------------------------------------------------------------------------------------------------
# Independent loop evaluation of docs/PROTOCOL.md §4.4 straight from the state dict (no nn modules).

def _ln(x, sd, p):
    return F.layer_norm(x, (x.shape[-1],), sd[p + ".weight"], sd[p + ".bias"], 1e-5)


def _gelu(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def _mha(q, k, v, sd, p, heads):
    """Single query vector q [W] against keys/values [T, W], explicit per-head loop."""
    Wi, bi = sd[p + ".in_proj_weight"], sd[p + ".in_proj_bias"]
    W = q.shape[-1]
    d = W // heads
    Q = Wi[:W] @ q + bi[:W]
    K = k @ Wi[W:2 * W].T + bi[W:2 * W]
    V = v @ Wi[2 * W:].T + bi[2 * W:]
    outs = []
    for h in range(heads):
        sl = slice(h * d, (h + 1) * d)
        a = torch.softmax((K[:, sl] @ Q[sl]) / math.sqrt(d), dim=0)
        outs.append(a @ V[:, sl])
    return sd[p + ".out_proj.weight"] @ torch.cat(outs) + sd[p + ".out_proj.bias"]


def _loop_head(sd, cfg, hidden, E, ids, record):
    heads = cfg["heads"]
    X = _ln(hidden.double(), sd, "hidden_norm")
    M = X @ sd["memory_projection.weight"].T
    g = X[-1]
    logits = []
    for q in record.questions:
        a, b = q.span
        u = X[a:b].mean(0)
        zs, lexs = [], []
        for s, e in q.option_spans:
            c = X[s:e].mean(0)
            lex = torch.stack([E[int(t)] for t in ids[s:e]]).mean(0)
            z = (sd["option_context_projection.weight"] @ c + sd["option_lexical_projection.weight"] @ lex
                 + sd["option_question_projection.weight"] @ u)
            for i in range(cfg["routing_layers"]):
                p = f"evidence_layers.{i}"
                Mn = _ln(M, sd, p + ".memory_norm")
                z = z + _mha(_ln(z, sd, p + ".query_norm"), Mn, Mn, sd, p + ".attention", heads)
                hdn = _gelu(sd[p + ".feedforward.0.weight"] @ _ln(z, sd, p + ".feedforward_norm") + sd[p + ".feedforward.0.bias"])
                z = z + sd[p + ".feedforward.3.weight"] @ hdn + sd[p + ".feedforward.3.bias"]
            zs.append(z)
            lexs.append(lex)
        f0 = sd["question_projection.weight"] @ u
        W = f0.shape[0]
        scores = torch.stack([torch.dot(z, f0) / math.sqrt(W) for z in zs])
        alpha = torch.softmax(scores, 0)
        s_q = sum(al * z for al, z in zip(alpha, zs))
        fq = f0 + _ln(s_q, sd, "option_summary_norm") + sd["global_projection.weight"] @ g + sd["type_embedding.weight"][q.type_id]
        logits.append((q, u, fq, zs, lexs))
    # field decoder: self-attention across all fields of the record
    Fm = torch.stack([x[2] for x in logits])
    for j in range(cfg["layers"]):
        p = f"layers.{j}"
        n1 = _ln(Fm, sd, p + ".norm1")
        Fm = Fm + torch.stack([_mha(n1[i], n1, n1, sd, p + ".self_attn", heads) for i in range(len(Fm))])
        n2 = _ln(Fm, sd, p + ".norm2")
        Fm = Fm + torch.stack([_mha(n2[i], M, M, sd, p + ".multihead_attn", heads) for i in range(len(Fm))])
        n3 = _ln(Fm, sd, p + ".norm3")
        Fm = Fm + _gelu(n3 @ sd[p + ".linear1.weight"].T + sd[p + ".linear1.bias"]) @ sd[p + ".linear2.weight"].T + sd[p + ".linear2.bias"]
    Fm = _ln(Fm, sd, "field_norm")
    P = math.exp(min(sd["prior_logit_scale"].item(), math.log(100)))
    J = math.exp(min(sd["joint_logit_scale"].item(), math.log(100)))
    gate = 1 / (1 + math.exp(-sd["residual_gate"].item()))
    out = []
    for qi, (q, u, _, zs, lexs) in enumerate(logits):
        fq = Fm[qi]
        anchor = (u + g) / max((u + g).norm().item(), 1e-12)
        for z, lex in zip(zs, lexs):
            o = _ln(z, sd, "option_norm")
            prior = P * torch.dot(lex / max(lex.norm().item(), 1e-12), anchor)
            cos = torch.dot(fq, o) / (fq.norm() * o.norm())
            feat = torch.cat([fq, o, fq * o, (fq - o).abs()])
            r = sd["residual_scorer.3.weight"] @ _gelu(sd["residual_scorer.0.weight"] @ feat + sd["residual_scorer.0.bias"]) + sd["residual_scorer.3.bias"]
            out.append(prior + gate * (J * cos + r[0]))
    return torch.stack(out)


@pytest.mark.parametrize("index", [0, 2])
def test_head_matches_loop_evaluation(ref, tiny_dir, index):
    from safetensors.torch import load_file

    req = _corpus_request(index)
    res = ref.run(req)
    sd = {k: v.double() for k, v in load_file(str(tiny_dir / "joint_head.safetensors")).items()}
    cfg = json.loads((tiny_dir / "joint_head_config.json").read_text())
    E = ref.output_embeddings().detach().double()
    loop = _loop_head(sd, cfg, res["hidden"], E, res["input_ids"], res["record"])
    assert loop.shape == res["logits"].shape
    assert torch.allclose(loop.float(), res["logits"], atol=1e-5, rtol=0), (loop.float() - res["logits"]).abs().max()
    # and the logits are not degenerate
    assert res["logits"].std() > 0.05


def test_reference_with_an_image_follows_the_record_layout(ref):
    """The toolkit's image path (the oracle for clef.cpp's image path): media block right after the 36-token
    prefix (docs/PROTOCOL.md §3.2 step 2, §3.6), pad count = merged grid H*W, and the composite model
    consumes pixel_values without error, giving finite probabilities."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    img = Image.fromarray(np.random.default_rng(0).integers(0, 255, (300, 420, 3)).astype("uint8"))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    req = {"model": "clef-flash", "state": "Is the product damaged?", "images": [url],
           "questions": {"d": {"type": "noul", "instructions": "damaged?"}}}
    out = ref.run(req)
    ids = out["input_ids"].tolist()
    _, grid = ref.preprocess_images([url])
    n = int(grid[0].prod()) // 4
    # Pillow + smart resize: 300x420 -> 288x416 pixels -> 9 x 13 merged tokens.
    assert grid.tolist() == [[1, 18, 26]] and n == 117
    assert ids[36] == 248053 and ids[37:37 + n] == [248056] * n and ids[37 + n] == 248054 and ids[38 + n] == 198
    assert out["record"].prefix_len == 36 + n + 3
    p = out["response"]["answers"]["d"]["noul"]
    assert 0.0 <= p <= 1.0
