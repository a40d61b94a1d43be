#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""transformers' own bf16 drift on the head's probabilities: the golden bound for clef's bf16 mode.

Usage:
    python tools/reference/bf16_drift.py [--model DIR] [--corpus FILE] [--out FILE]
                                         [--max-tokens N] [--requests I,J,...] [--threads N]

For every request of the corpus (default tests/data/requests/corpus.jsonl) it runs the Python
reference twice on the same release folder, ``ClefReference(model, "f32")`` and
``ClefReference(model, "bf16")`` (reference.py: the transformers backbone in fp32 or in bf16, the
joint head in fp32 either way), and measures max |p_bf16 - p_fp32| over every option of every
question, with the options of tests/reference/test_08b.py's ``_probabilities``: noul -> p(true)
(p(false) = 1 - p(true) drifts by the same amount), choice -> the criteria's probabilities,
score -> the levels' probabilities. It also counts argmax flips (the option with the highest
probability differs; for noul, p(true) >= 0.5 differs).

The drift is computed from the reference's raw float32 per-question softmax (``run()["probs"]``),
not from the response body, whose numbers are rounded with ``round(x, 4)``; the rounded drift is
recorded too. Comparing clef's 4-decimal responses against this raw number needs +1e-4 of slack.

Default folder: the one tests/reference/test_08b.py uses, ``make_model.py --preset 0.8b --seed 2``
(bf16 weights). Without --model it uses $CLEF_08B_DIR, else /tmp/clef-0.8b-seed2, generating it there
when missing (~1 min, 3 GB).

Output (default tests/reference/golden/transformers_bf16_drift.json): the folder's preset and seed,
sha256 of model.safetensors (its SHA256SUMS line), versions, per-request max |dp| with token counts
and where it occurs, the overall max and the request where it occurs, argmax flips, wall times, and
the command line. The file is rewritten after every request (``"complete": false`` until the end),
so a long run can be followed and resumed with --resume.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import pathlib
import platform
import shlex
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_CORPUS = REPO_ROOT / "tests" / "data" / "requests" / "corpus.jsonl"
DEFAULT_OUT = REPO_ROOT / "tests" / "reference" / "golden" / "transformers_bf16_drift.json"
DEFAULT_FOLDER = pathlib.Path("/tmp/clef-0.8b-seed2")
PRESET, SEED = "0.8b", 2


def option_probabilities(record, per_q) -> Dict[str, Dict[str, float]]:
    """question id -> {option -> raw float probability}, the options of test_08b's ``_probabilities``."""
    out: Dict[str, Dict[str, float]] = {}
    for q, p_t in zip(record.questions, per_q):
        p = {oid: float(v) for oid, v in zip(q.option_ids, p_t.tolist())}
        out[q.question_id] = {"true": p["true"]} if q.type == "noul" else p
    return out


def response_probabilities(response: Dict[str, Any]) -> Dict[str, Dict[str, float]]:
    """The same options from a (4-decimal) SystemOne response body."""
    out = {}
    for qid, a in response["answers"].items():
        out[qid] = {"true": float(a["noul"])} if a["type"] == "noul" else {k: float(v) for k, v in
                                                                           a["probabilities"].items()}
    return out


def _argmax(p: Dict[str, float]) -> str:
    if list(p) == ["true"]:
        return "true" if p["true"] >= 0.5 else "false"
    best = max(p.values())
    return next(k for k, v in p.items() if v == best)


def compare(pa: Dict[str, Dict[str, float]], pb: Dict[str, Dict[str, float]]) -> Tuple[float, Optional[list], list]:
    """(max |dp|, [question, option] where it occurs, [[question, argmax_a, argmax_b], ...] flips)."""
    assert list(pa) == list(pb)
    worst, where, flips = 0.0, None, []
    for qid in pa:
        assert sorted(pa[qid]) == sorted(pb[qid]), qid
        for opt in pa[qid]:
            d = abs(pa[qid][opt] - pb[qid][opt])
            if d > worst:
                worst, where = d, [qid, opt]
        a, b = _argmax(pa[qid]), _argmax(pb[qid])
        if a != b:
            flips.append([qid, a, b])
    return worst, where, flips


def folder_identity(folder: pathlib.Path) -> Dict[str, Any]:
    """Preset, seed and model.safetensors sha256 (from SHA256SUMS when present, else hashed)."""
    rw = folder / "random_weights.json"
    info = json.loads(rw.read_text()) if rw.exists() else {}
    sums = folder / "SHA256SUMS"
    line = None
    if sums.exists():
        line = next((ln for ln in sums.read_text().splitlines() if ln.endswith(" model.safetensors")), None)
    if line:
        sha = line.split()[0]
    else:
        h = hashlib.sha256()
        with open(folder / "model.safetensors", "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                h.update(block)
        sha = h.hexdigest()
    return {"preset": info.get("preset"), "seed": info.get("seed"), "dtype": info.get("dtype"),
            "model_safetensors_sha256": sha, "sha256sums_line": line,
            "generator": "tools/reference/make_model.py --preset %s --seed %s" % (info.get("preset"), info.get("seed"))}


def resolve_folder(arg: Optional[str]) -> pathlib.Path:
    if arg:
        return pathlib.Path(arg)
    folder = pathlib.Path(os.environ.get("CLEF_08B_DIR") or DEFAULT_FOLDER)
    if not (folder / "model.safetensors").exists():
        import make_model

        print(f"making {folder} (make_model.py --preset {PRESET} --seed {SEED})", file=sys.stderr, flush=True)
        make_model.make_model(PRESET, folder, seed=SEED, dtype="bf16", verbose=False)
    return folder


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="release folder (default: $CLEF_08B_DIR or %s, made if missing)" % DEFAULT_FOLDER)
    ap.add_argument("--corpus", default=str(DEFAULT_CORPUS))
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--max-tokens", type=int, default=None, help="skip requests longer than this many tokens")
    ap.add_argument("--requests", default=None, help="comma-separated request indices (default: all)")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--resume", action="store_true", help="keep the requests already in --out for this folder")
    a = ap.parse_args(argv)

    import torch
    import tokenizers
    import transformers

    import reference
    from clef_ref.record import encode_record
    from clef_ref.response import question_probabilities

    if a.threads:
        torch.set_num_threads(a.threads)
    folder = resolve_folder(a.model)
    ident = folder_identity(folder)
    if (ident["preset"], ident["seed"]) != (PRESET, SEED):
        print(f"warning: {folder} is preset {ident['preset']} seed {ident['seed']}, not the {PRESET} seed {SEED} "
              "folder test_08b.py uses", file=sys.stderr)
    corpus = pathlib.Path(a.corpus)
    n = sum(1 for ln in corpus.read_text(encoding="utf-8").splitlines() if ln.strip())
    wanted = [int(x) for x in a.requests.split(",")] if a.requests else list(range(n))
    out_path = pathlib.Path(a.out)

    t_load = time.perf_counter()
    ref32 = reference.ClefReference(folder, "f32")
    ref16 = reference.ClefReference(folder, "bf16")
    load_s = time.perf_counter() - t_load

    requests = {i: reference.load_jsonl_request(corpus, i) for i in wanted}
    tokens = {i: len(encode_record(requests[i], ref32.tokenizer).input_ids) for i in wanted}
    skipped = [i for i in wanted if a.max_tokens is not None and tokens[i] > a.max_tokens]
    todo = [i for i in wanted if i not in skipped]

    doc: Dict[str, Any] = {
        "what": "transformers' own bf16 drift on the Clef head's probabilities: max |p_bf16 - p_fp32| over every "
                "option of every question (noul: p(true); choice/score: probabilities), reference.py "
                "ClefReference(folder, 'bf16') vs ClefReference(folder, 'f32'); the bound for clef's bf16 mode"
                ", which stays opt-in while its drift must not exceed this (tests/reference/test_08b.py)",
        "probabilities": "raw float32 softmax of the reference (not rounded); max_abs_dp_rounded uses the "
                         "4-decimal response bodies",
        "command": " ".join(shlex.quote(x) for x in [sys.executable, _rel(sys.argv[0]), *sys.argv[1:]]),
        "folder": {"path": str(folder), **ident},
        "corpus": {"path": os.path.relpath(corpus, REPO_ROOT), "requests": n,
                   "sha256": hashlib.sha256(corpus.read_bytes()).hexdigest()},
        "restriction": None if not (skipped or a.requests) else {
            "max_tokens": a.max_tokens, "requests": a.requests, "skipped": skipped},
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "tokenizers": tokenizers.__version__},
        "machine": {"cpu": _cpu_name(), "torch_threads": torch.get_num_threads()},
        "date": datetime.date.today().isoformat(),
        "load_seconds": round(load_s, 1),
        "complete": False,
        "per_request": [],
    }
    done: Dict[int, Dict[str, Any]] = {}
    if a.resume and out_path.exists():
        old = json.loads(out_path.read_text())
        if old.get("folder", {}).get("model_safetensors_sha256") == ident["model_safetensors_sha256"]:
            done = {r["index"]: r for r in old["per_request"] if r["index"] in todo}

    def write():
        rows = sorted(done.values(), key=lambda r: r["index"])
        doc["per_request"] = rows
        if rows:
            top = max(rows, key=lambda r: r["max_abs_dp"])
            doc["overall"] = {
                "max_abs_dp": top["max_abs_dp"], "request": top["index"], "at": top["at"],
                "tokens": top["tokens"],
                "max_abs_dp_rounded": max(r["max_abs_dp_rounded"] for r in rows),
                "requests": len(rows),
                "argmax_flips": sum(len(r["argmax_flips"]) for r in rows),
                "questions": sum(r["questions"] for r in rows),
                "seconds_fp32": round(sum(r["seconds_fp32"] for r in rows), 1),
                "seconds_bf16": round(sum(r["seconds_bf16"] for r in rows), 1),
            }
        out_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = out_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        tmp.replace(out_path)

    for i in sorted(todo, key=lambda j: tokens[j]):  # short ones first: early numbers, long ones last
        if i in done:
            continue
        req = requests[i]
        t0 = time.perf_counter()
        r32 = ref32.run(req)
        t1 = time.perf_counter()
        r16 = ref16.run(req)
        t2 = time.perf_counter()
        p32 = option_probabilities(r32["record"], question_probabilities(r32["logits"], r32["record"]))
        p16 = option_probabilities(r16["record"], question_probabilities(r16["logits"], r16["record"]))
        worst, where, flips = compare(p32, p16)
        worst_r, _, _ = compare(response_probabilities(r32["response"]), response_probabilities(r16["response"]))
        assert len(r32["input_ids"]) == tokens[i]
        done[i] = {"index": i, "tokens": tokens[i], "questions": len(p32),
                   "options": sum(len(v) for v in p32.values()),
                   "max_abs_dp": round(worst, 7), "at": where, "max_abs_dp_rounded": round(worst_r, 4),
                   "argmax_flips": flips,
                   "seconds_fp32": round(t1 - t0, 1), "seconds_bf16": round(t2 - t1, 1)}
        print(f"request {i:2d} T={tokens[i]:5d}: max|dp| {worst:.5f} at {where} (rounded {worst_r:.4f}), "
              f"flips {len(flips)}, fp32 {t1 - t0:.1f}s bf16 {t2 - t1:.1f}s", file=sys.stderr, flush=True)
        write()
    doc["complete"] = True
    write()
    o = doc.get("overall", {})
    print(f"overall ({o.get('requests')} requests): max |p_bf16 - p_fp32| = {o.get('max_abs_dp', 0):.5f} "
          f"at request {o.get('request')} {o.get('at')}; {o.get('argmax_flips')} argmax flips; -> {out_path}",
          file=sys.stderr)
    return 0


def _rel(path: str) -> str:
    try:
        return os.path.relpath(pathlib.Path(path).resolve(), REPO_ROOT)
    except ValueError:
        return path


def _cpu_name() -> str:
    try:
        for ln in open("/proc/cpuinfo"):
            if ln.startswith("model name"):
                return ln.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
