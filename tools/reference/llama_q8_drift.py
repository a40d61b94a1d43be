#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""llama.cpp's own Q8_0 (or K-quant) drift on the head's probabilities: its hidden states through our head.

Usage:
    python tools/reference/llama_q8_drift.py --driver BIN --f32-gguf F32.gguf --q8-gguf Q8_0.gguf
        [--type q8_0|q6_k|q5_k_m|q4_k_m|q4_0|... --made-by TEXT]
        [--llama-src DIR] [--model DIR] [--corpus FILE] [--out FILE] [--threads N] [--ctx N]
        [--kv-type f32|f16] [--requests I,J,...] [--no-reference] [--clef BIN] [--cache DIR]

It measures llama.cpp's Q8_0 drift on the same requests (its hidden states through our
head), to stand beside clef's ``--precision int8`` drift in docs/NUMERICS.md. Nothing of llama.cpp
is committed or imported: the user builds llama.cpp and a tiny driver against its public libllama
API, and points this script at them.

The driver (``--driver``) is any program with this protocol (written for this measurement against
llama.h; ~80 lines, kept out of the repository):
    argv: MODEL.gguf THREADS N_CTX KV_TYPE(f32|f16) SKIP_LM_HEAD(0|1)
    stdin: one line per request, "IDS.bin OUT.bin" (IDS: little-endian int32 token ids)
    it evaluates the ids as ONE batch (n_ctx = n_batch = n_ubatch = N_CTX, one sequence, positions
    0..T-1, no BOS added, every token an output) in a context with ``embeddings = true`` and
    ``pooling_type = LLAMA_POOLING_TYPE_NONE`` (flash attention off, K/V cache of KV_TYPE), writes
    ``llama_get_embeddings_ith(ctx, i)`` for i = 0..T-1 as float32 [T, n_embd] to OUT, clears the
    memory between requests, and prints "ok T SECONDS" (or "err ...") on stdout. For the qwen35
    graph these embeddings are ``res->t_embd``, the output of ``build_norm(..., model.output_norm,
    LLM_NORM_RMS)`` before the LM head (src/models/qwen35.cpp), i.e. the final-norm hidden states
    our head reads. SKIP_LM_HEAD=1 sets a ``cb_eval`` that stops the scheduler after the node named
    "result_norm" so the [T, 248320] logits are never computed (same embeddings bit for bit; the
    LM head would otherwise be ~40% of the work).

Steps, request by request (short ones first):
  1. ``encode_record`` (the Python reference's tokenizer) -> input_ids and the head's spans.
  2. llama.cpp hidden states for exactly those ids from the f32 GGUF and from the Q8_0 GGUF (both
     made by llama.cpp's own ``convert_hf_to_gguf.py --no-mtp --outtype f32|q8_0`` from the same
     release folder).
  3. our joint head in fp32 (clef_ref.head; the lexical table of the GGUF the states came from, see --lexical) on each -> per-question
     softmax (clef_ref.response.question_probabilities), raw float32.
  4. unless --no-reference (or the request is over --reference-max-tokens and not cached): the
     Python reference's own fp32 hidden states
     (ClefReference(folder, "f32").hidden_states) through the same head: the sanity check that
     llama.cpp's f32 is near our reference.
Options compared are test_08b.py's: noul -> p(true), choice -> criteria, score -> levels. Per pair
(q8_0 vs llama f32; llama f32 vs reference fp32; q8_0 vs reference): max |dp| and where, mean |dp|
over options, argmax flips (a question whose top option differs, excluding ties: the baseline's top
two within 2e-4, or a noul p(true) within 1e-4 of 0.5), and the lowest per-token cosine of the
hidden states.

With --clef BIN (optional): ``clef decide --precision fp32`` on the folder, and ``clef decide`` on the
quantized GGUF itself (its own path; ``joint_head.safetensors`` + ``joint_head_config.json`` must be beside
it) on the same (unwrapped) requests (--jsonl, same --threads), compared the same way from the 4-decimal
responses (key ``clef_<type>_vs_clef_fp32``); for q8_0 also the folder in ``--precision int8``
(``clef_int8_vs_clef_fp32``).

Output (default tests/reference/golden/llama_q8_0_drift.json) is rewritten after every request
(``"complete": false`` until the end); hidden states are cached in --cache, one key per GGUF (path,
K/V type, n_ctx, threads), so a rerun skips finished work and the f32 states are shared between types.
A markdown table is printed at the end.

Other quantized types: ``--q8-gguf`` (alias ``--quant-gguf``) takes any GGUF of the same folder, e.g.
one written by llama.cpp's ``llama-quantize BF16.gguf OUT.gguf Q4_K_M``; ``--type`` names it (lower
case, default ``q8_0``): the keys become ``<type>_vs_llama_f32`` / ``<type>_vs_reference``, the default
output ``tests/reference/golden/llama_<type>_drift.json``, and ``--made-by`` records how the file was
made (default: the converter's own ``--outtype q8_0``).
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
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_CORPUS = REPO_ROOT / "tests" / "data" / "requests" / "corpus.jsonl"
GOLDEN = REPO_ROOT / "tests" / "reference" / "golden"
DEFAULT_FOLDER = pathlib.Path("/tmp/clef-0.8b-seed2")
TIE = 2e-4  # the same tie rule as test_08b.py's int8 test


from bf16_drift import option_probabilities, response_probabilities  # noqa: E402  (the same option sets)


def _argmax_flip(pa: Dict[str, float], pb: Dict[str, float]):
    """(flipped, tie) with pa the baseline: test_08b.py's rule."""
    if list(pa) == ["true"]:
        a, b = pa["true"], pb["true"]
        return (a >= 0.5) != (b >= 0.5), abs(a - 0.5) <= TIE / 2
    ranked = sorted(pa, key=lambda o: -pa[o])
    top_b = max(pb, key=lambda o: pb[o])
    tie = len(ranked) > 1 and pa[ranked[0]] - pa[ranked[1]] <= TIE
    return ranked[0] != top_b and pb[top_b] != pb[ranked[0]], tie


def compare(base: Dict[str, Dict[str, float]], other: Dict[str, Dict[str, float]]) -> Dict[str, Any]:
    """max |dp| (and where), mean |dp|, flips outside ties, ties; ``base`` is the baseline."""
    assert list(base) == list(other)
    worst, where, diffs, flips, ties = 0.0, None, [], [], 0
    for qid in base:
        assert sorted(base[qid]) == sorted(other[qid]), qid
        for opt in base[qid]:
            d = abs(base[qid][opt] - other[qid][opt])
            diffs.append(d)
            if d > worst:
                worst, where = d, [qid, opt]
        flipped, tie = _argmax_flip(base[qid], other[qid])
        ties += tie
        if flipped and not tie:
            flips.append(qid)
    return {"max_abs_dp": round(worst, 7), "at": where, "mean_abs_dp": round(float(np.mean(diffs)), 7),
            "sum_abs_dp": float(np.sum(diffs)), "n_options": len(diffs),
            "argmax_flips": flips, "ties": ties}


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    c = (a64 * b64).sum(1) / (np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1))
    return float(c.min())


class Driver:
    """One long-lived driver process on one GGUF (protocol in the module docstring)."""

    def __init__(self, binary: str, gguf: str, threads: int, n_ctx: int, kv_type: str, log: pathlib.Path):
        self.argv = ["nice", "-n", "19", binary, gguf, str(threads), str(n_ctx), kv_type, "1"]
        self.log = open(log, "w")
        self.p = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                  text=True, bufsize=1)

    def hidden(self, ids_path: pathlib.Path, out_path: pathlib.Path, T: int, H: int) -> (np.ndarray, float):
        self.p.stdin.write(f"{ids_path} {out_path}\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline().strip()
        if not line.startswith("ok "):
            raise RuntimeError(f"driver {self.argv}: {line or 'exited (see ' + self.log.name + ')'}")
        _, t, s = line.split()
        assert int(t) == T, (t, T)
        h = np.fromfile(out_path, dtype=np.float32)
        assert h.size == T * H, (h.size, T, H)
        return h.reshape(T, H), float(s)

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=60)
        self.log.close()


def gguf_output_embeddings(path: pathlib.Path, shape) -> "torch.Tensor":
    """[vocab, hidden] float32: the GGUF's output.weight, else token_embd.weight, dequantized by gguf-py."""
    import gguf
    import torch

    reader = gguf.GGUFReader(str(path))
    by_name = {t.name: t for t in reader.tensors}
    t = by_name.get("output.weight") or by_name.get("token_embd.weight")
    if t is None:
        raise ValueError(f"{path}: no output.weight or token_embd.weight")
    w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(tuple(shape))
    return torch.from_numpy(np.ascontiguousarray(w))


def _git(src: Optional[str], *args) -> Optional[str]:
    if not src:
        return None
    try:
        return subprocess.run(["git", "-C", src, *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _lscpu() -> Dict[str, str]:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {"model_name": platform.processor()}
    kv = dict(ln.split(":", 1) for ln in out.splitlines() if ":" in ln)
    kv = {k.strip(): v.strip() for k, v in kv.items()}
    return {"model_name": kv.get("Model name"), "cpus": kv.get("CPU(s)"), "hypervisor": kv.get("Hypervisor vendor"),
            "flags_of_note": " ".join(f for f in kv.get("Flags", "").split()
                                      if f in ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni",
                                               "avx512_bf16", "amx_int8"))}


def _sha256(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def _rel(path: str) -> str:
    try:
        return os.path.relpath(pathlib.Path(path).resolve(), REPO_ROOT)
    except ValueError:
        return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--driver", required=True, help="the libllama driver binary (protocol in this docstring)")
    ap.add_argument("--f32-gguf", required=True)
    ap.add_argument("--q8-gguf", "--quant-gguf", dest="q8_gguf", required=True,
                    help="the quantized GGUF (Q8_0 by default; any type with --type)")
    ap.add_argument("--type", default="q8_0", help="label of the quantized GGUF's type (lower case, e.g. q4_k_m)")
    ap.add_argument("--made-by", default=None, help="how the quantized GGUF was made (recorded in the output)")
    ap.add_argument("--llama-src", default=None, help="llama.cpp checkout (for its commit in the output)")
    ap.add_argument("--model", default=str(DEFAULT_FOLDER), help="release folder the GGUFs were made from")
    ap.add_argument("--corpus", default=str(DEFAULT_CORPUS))
    ap.add_argument("--out", default=None, help="default tests/reference/golden/llama_<type>_drift.json")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=0, help="n_ctx = n_batch = n_ubatch (0: longest request, rounded up to 256)")
    ap.add_argument("--kv-type", choices=["f32", "f16"], default="f32", help="llama.cpp K/V cache type (its default is f16)")
    ap.add_argument("--requests", default=None, help="comma-separated request indices (default: all)")
    ap.add_argument("--no-reference", action="store_true", help="skip the Python reference fp32 hidden states")
    ap.add_argument("--reference-max-tokens", type=int, default=None,
                    help="run the reference only on requests of at most this many tokens (it is the slow part)")
    ap.add_argument("--lexical", choices=["file", "folder"], default="file",
                    help="the head's lexical table for the quantized GGUF's hidden states: the file's own output "
                         "embedding dequantized (default), or the folder's fp32 one")
    ap.add_argument("--clef", default=None, help="clef binary: also clef decide --precision int8 vs fp32")
    ap.add_argument("--cache", default="/tmp/llama-q8-drift-cache", help="hidden-state cache folder")
    a = ap.parse_args(argv)

    import torch
    import tokenizers
    import transformers

    import reference
    from clef_ref.record import encode_record
    from clef_ref.response import question_probabilities
    from clef_ref.head import record_head_inputs

    torch.set_num_threads(a.threads)
    folder = pathlib.Path(a.model)
    corpus = pathlib.Path(a.corpus)
    cache = pathlib.Path(a.cache)
    cache.mkdir(parents=True, exist_ok=True)
    qt = a.type.lower()
    out_path = pathlib.Path(a.out) if a.out else GOLDEN / f"llama_{qt}_drift.json"
    n = sum(1 for ln in corpus.read_text(encoding="utf-8").splitlines() if ln.strip())
    wanted = [int(x) for x in a.requests.split(",")] if a.requests else list(range(n))

    t_load = time.perf_counter()
    ref = reference.ClefReference(folder, "f32")
    load_s = time.perf_counter() - t_load
    table = ref.output_embeddings().detach().float()
    H = table.shape[1]
    # The head's lexical rows come from the output embedding. With --lexical file (default) each GGUF's
    # hidden states go through its own table (output.weight, else token_embd.weight, dequantized by
    # gguf-py from the type the file stores), as a runtime holding only that file computes them (clef
    # does); --lexical folder uses the folder's fp32 table for both (the hidden states' drift alone).
    tables = {"f32": table, qt: table}
    if a.lexical == "file":
        tables[qt] = gguf_output_embeddings(pathlib.Path(a.q8_gguf), table.shape)
    names = [json.loads(ln).get("name") for ln in corpus.read_text(encoding="utf-8").splitlines() if ln.strip()]
    requests = {i: reference.load_jsonl_request(corpus, i) for i in wanted}
    records = {i: encode_record(requests[i], ref.tokenizer) for i in wanted}
    tokens = {i: len(records[i].input_ids) for i in wanted}
    n_ctx = a.ctx or ((max(tokens.values()) + 255) // 256) * 256
    order = sorted(wanted, key=lambda j: tokens[j])
    gguf = {"f32": pathlib.Path(a.f32_gguf), qt: pathlib.Path(a.q8_gguf)}
    keys = {t: hashlib.sha256(json.dumps([str(g.resolve()), a.kv_type, n_ctx, a.threads]).encode()).hexdigest()[:12]
            for t, g in gguf.items()}

    sha_lines = {}
    sums = folder / "SHA256SUMS"
    if sums.exists():
        for ln in sums.read_text().splitlines():
            parts = ln.split()
            if len(parts) == 2:
                sha_lines[parts[1]] = parts[0]
    rw = folder / "random_weights.json"
    rwj = json.loads(rw.read_text()) if rw.exists() else {}
    doc: Dict[str, Any] = {
        "what": f"llama.cpp's own {qt.upper()} drift on the Clef head's probabilities: llama.cpp's per-token "
                f"final-norm hidden states (embeddings on, pooling none) for the reference's token ids, from the "
                f"f32 and the {qt.upper()} GGUF of the same folder, each through our joint head in fp32; "
                f"max |p_{qt} - p_f32(llama)| over every option of every question (noul: p(true); choice/score: "
                "probabilities), with llama f32 vs the Python reference fp32 as the sanity check",
        "quant_type": qt,
        "probabilities": "raw float32 softmax (not rounded); clef's columns come from 4-decimal responses",
        "tie_rule": "a flip is not counted when the baseline's top two are within 2e-4 (noul: p(true) within 1e-4 of 0.5)",
        "command": " ".join(shlex.quote(x) for x in ["nice", "-n", "19", sys.executable, _rel(sys.argv[0]), *sys.argv[1:]]),
        "folder": {"path": str(folder), "preset": rwj.get("preset"), "seed": rwj.get("seed"),
                   "model_safetensors_sha256": sha_lines.get("model.safetensors")},
        "corpus": {"path": os.path.relpath(corpus, REPO_ROOT), "requests": n,
                   "sha256": hashlib.sha256(corpus.read_bytes()).hexdigest()},
        "llama_cpp": {"src": a.llama_src, "commit": _git(a.llama_src, "rev-parse", "HEAD"),
                      "describe": _git(a.llama_src, "log", "-1", "--format=%h %s"),
                      "dirty": bool(_git(a.llama_src, "status", "--porcelain", "--untracked-files=no")),
                      "converter": "convert_hf_to_gguf.py --no-mtp --outtype f32 | q8_0",
                      "made_by": {"f32": "convert_hf_to_gguf.py --no-mtp --outtype f32",
                                  qt: a.made_by or f"convert_hf_to_gguf.py --no-mtp --outtype {qt}"},
                      "gguf": {k: {"path": str(v), "bytes": v.stat().st_size} for k, v in gguf.items()},
                      "context": {"n_ctx": n_ctx, "n_batch": n_ctx, "n_ubatch": n_ctx, "n_seq_max": 1,
                                  "embeddings": True, "pooling": "none", "flash_attn": "disabled",
                                  "kv_type": a.kv_type, "threads": a.threads, "lm_head": "skipped (cb_eval)"},
                      "driver": str(a.driver)},
        "head": "clef_ref.head JointSchemaHead in fp32; lexical table: " + (
            "each GGUF's own output embedding (the quantized file's dequantized by gguf-py)" if a.lexical == "file"
            else "the folder's fp32 table (tied embed_tokens) for both"),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                     "numpy": np.__version__},
        "machine": {"lscpu": _lscpu(), "nice": 19},
        "date": datetime.date.today().isoformat(),
        "load_seconds": round(load_s, 1),
        "complete": False,
        "per_request": [],
    }
    rows: Dict[int, Dict[str, Any]] = {}
    probs: Dict[str, Dict[int, Dict[str, Dict[str, float]]]] = {"f32": {}, qt: {}, "ref": {}}
    hid: Dict[str, Dict[int, np.ndarray]] = {"f32": {}, "ref": {}}

    def head_probs(i: int, hidden: np.ndarray, tag: str = "f32") -> Dict[str, Dict[str, float]]:
        rec = records[i]
        ids = torch.tensor(rec.input_ids, dtype=torch.long)
        with torch.no_grad():
            logits = ref.head(torch.from_numpy(hidden), tables.get(tag, table), ids,
                              **record_head_inputs(rec)).float()
        return option_probabilities(rec, question_probabilities(logits, rec))

    def update(i: int):
        r = rows.setdefault(i, {"index": i, "name": names[i], "tokens": tokens[i],
                                "questions": len(records[i].questions)})
        pairs = [(f"{qt}_vs_llama_f32", "f32", qt), ("llama_f32_vs_reference", "ref", "f32"),
                 (f"{qt}_vs_reference", "ref", qt)]
        for name, b, o in pairs:
            if i in probs[b] and i in probs[o]:
                r[name] = compare(probs[b][i], probs[o][i])
        if i in hid["f32"] and i in hid["ref"]:
            r["hidden_min_cosine_llama_f32_vs_reference"] = round(min_cosine(hid["f32"][i], hid["ref"][i]), 8)

    def summarize():
        out = {}
        for name in (f"{qt}_vs_llama_f32", "llama_f32_vs_reference", f"{qt}_vs_reference", f"clef_{qt}_vs_clef_fp32",
                     "clef_int8_vs_clef_fp32"):
            got = [r for r in rows.values() if name in r]
            if not got:
                continue
            top = max(got, key=lambda r: r[name]["max_abs_dp"])
            out[name] = {"requests": len(got), "max_abs_dp": top[name]["max_abs_dp"], "request": top["index"],
                         "at": top[name]["at"],
                         "mean_abs_dp": round(sum(r[name]["sum_abs_dp"] for r in got) /
                                              max(1, sum(r[name]["n_options"] for r in got)), 7),
                         "argmax_flips": [[r["index"], q] for r in got for q in r[name]["argmax_flips"]],
                         "ties": sum(r[name]["ties"] for r in got)}
        return out

    def write():
        doc["per_request"] = [rows[i] for i in sorted(rows)]
        doc["overall"] = summarize()
        out_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = out_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        tmp.replace(out_path)

    # Request by request (short ones first): llama f32, llama quantized, then the reference, so complete rows come
    # early. Both drivers stay up while requests are short; before a long one (> LONG tokens) every other
    # driver is closed, so at most one large compute buffer (or the reference's activations) is resident.
    LONG = 2048
    drivers: Dict[str, Driver] = {}
    ref_tag = (sha_lines.get("model.safetensors") or "nosha")[:12]

    def close(keep: Optional[str] = None):
        for t in [t for t in drivers if t != keep]:
            drivers.pop(t).close()

    for i in order:
        ids_path = cache / f"ids-{i}.bin"
        np.asarray(records[i].input_ids, dtype="<i4").tofile(ids_path)
        for tag in ("f32", qt):
            hpath = cache / f"{keys[tag]}-{tag}-{i}.f32"
            meta = cache / f"{keys[tag]}-{tag}-{i}.json"
            if meta.exists() and hpath.exists():
                h = np.fromfile(hpath, dtype=np.float32).reshape(tokens[i], H)
                s = json.loads(meta.read_text())["seconds"]
            else:
                if tokens[i] > LONG:
                    close(keep=tag)
                if tag not in drivers:
                    drivers[tag] = Driver(a.driver, str(gguf[tag]), a.threads, n_ctx, a.kv_type,
                                          cache / f"{keys[tag]}-{tag}.log")
                h, s = drivers[tag].hidden(ids_path, hpath, tokens[i], H)
                meta.write_text(json.dumps({"seconds": s}))
            probs[tag][i] = head_probs(i, h, tag)
            if tag == "f32":
                hid["f32"][i] = h
            update(i)
            rows[i][f"seconds_llama_{tag}"] = round(s, 1)
            c = rows[i].get(f"{qt}_vs_llama_f32")
            print(f"llama {tag:4s} request {i:2d} T={tokens[i]:5d}: {s:6.1f}s" +
                  (f"  {qt} vs f32 max|dp| {c['max_abs_dp']:.5f} at {c['at']}, flips {c['argmax_flips']}" if c else ""),
                  file=sys.stderr, flush=True)
            write()
        hpath = cache / f"ref-{ref_tag}-{i}.npy"
        if a.no_reference or (a.reference_max_tokens is not None and tokens[i] > a.reference_max_tokens
                              and not hpath.exists()):
            continue
        if hpath.exists():
            h = np.load(hpath)
            s = None
        else:
            if tokens[i] > LONG:
                close()
            t0 = time.perf_counter()
            h = ref.hidden_states(torch.tensor(records[i].input_ids, dtype=torch.long)).numpy()
            s = round(time.perf_counter() - t0, 1)
            np.save(hpath, h)
        hid["ref"][i] = h
        probs["ref"][i] = head_probs(i, h)
        update(i)
        rows[i]["seconds_reference_fp32"] = s
        c = rows[i]["llama_f32_vs_reference"]
        print(f"reference request {i:2d} T={tokens[i]:5d}: llama f32 vs reference max|dp| {c['max_abs_dp']:.2e}, "
              f"min cos {rows[i]['hidden_min_cosine_llama_f32_vs_reference']:.7f}", file=sys.stderr, flush=True)
        write()
    close()

    if a.clef:
        inp = cache / "clef-in.jsonl"
        inp.write_text("".join(json.dumps(requests[i], ensure_ascii=False) + "\n" for i in wanted), encoding="utf-8")
        answers = {}
        clef_cmds = {}
        # clef fp32 on the folder is the baseline; clef on the quantized GGUF itself (no --precision: a
        # quantized file picks its own path; the head files beside it, as for a backbone-only GGUF);
        # for Q8_0 also the folder in int8 mode (the same arithmetic, weights quantized at load).
        runs = {"fp32": ["--model", str(folder), "--precision", "fp32"],
                qt: ["--model", str(a.q8_gguf)]}
        if qt == "q8_0":
            runs["int8"] = ["--model", str(folder), "--precision", "int8"]
        for prec, model_args in runs.items():
            # one answer file per (binary, arguments, requests): a rerun, or the fp32 baseline of another
            # type over the same requests, is read back instead of recomputed
            key = hashlib.sha256(json.dumps([_sha256(pathlib.Path(a.clef)), model_args, a.threads,
                                             inp.read_text(encoding="utf-8")]).encode()).hexdigest()[:16]
            outp = cache / f"clef-{prec}-{key}.jsonl"
            cmd = ["nice", "-n", "19", a.clef, "decide", *model_args,
                   "--threads", str(a.threads), "--jsonl", str(inp), "--out", str(outp), "--no-progress"]
            clef_cmds[prec] = " ".join(shlex.quote(x) for x in cmd)
            if not outp.exists():
                t0 = time.perf_counter()
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    outp.unlink(missing_ok=True)
                    raise RuntimeError(f"{cmd}: {r.stderr[-2000:]}")
                print(f"clef {prec}: {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
            answers[prec] = [json.loads(ln) for ln in outp.read_text(encoding="utf-8").splitlines()]
        ver = subprocess.run([a.clef, "--version"], capture_output=True, text=True)
        doc["clef"] = {"binary": a.clef, "version": (ver.stdout or ver.stderr).strip(), "commands": clef_cmds}
        for k, i in enumerate(wanted):
            base = response_probabilities(answers["fp32"][k])
            rows[i][f"clef_{qt}_vs_clef_fp32"] = compare(base, response_probabilities(answers[qt][k]))
            if "int8" in answers:
                rows[i]["clef_int8_vs_clef_fp32"] = compare(base, response_probabilities(answers["int8"][k]))
        write()

    doc["complete"] = True
    write()
    print_table(doc)
    return 0


def _fmt(x: float) -> str:
    return f"{x:.4f}" if x >= 1e-3 or x == 0 else f"{x:.1e}"


def print_table(doc: Dict[str, Any]) -> None:
    qt = doc.get("quant_type", "q8_0")
    cols = [(f"{qt}_vs_llama_f32", f"llama {qt} vs llama f32"), ("llama_f32_vs_reference", "llama f32 vs ref fp32"),
            (f"clef_{qt}_vs_clef_fp32", f"clef {qt} file vs clef fp32"),
            ("clef_int8_vs_clef_fp32", "clef int8 vs clef fp32")]
    cols = [c for c in cols if any(c[0] in r for r in doc["per_request"])]
    head = "| req | name | T | " + " | ".join(f"{t}: max \\|dp\\| (at) / mean / flips" for _, t in cols) + " |"
    print(head)
    print("|" + "---|" * (3 + len(cols)))
    for r in doc["per_request"]:
        cells = []
        for k, _ in cols:
            c = r.get(k)
            cells.append("" if c is None else
                         f"{_fmt(c['max_abs_dp'])} ({'/'.join(map(str, c['at'] or []))}) / {_fmt(c['mean_abs_dp'])} / "
                         f"{len(c['argmax_flips'])}")
        print(f"| {r['index']} | {r['name']} | {r['tokens']} | " + " | ".join(cells) + " |")
    cells = []
    for k, _ in cols:
        o = doc["overall"].get(k)
        cells.append("" if o is None else
                     f"**{_fmt(o['max_abs_dp'])}** (req {o['request']} {'/'.join(map(str, o['at'] or []))}) / "
                     f"{_fmt(o['mean_abs_dp'])} / {len(o['argmax_flips'])} (ties {o['ties']})")
    print("| all | | | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
