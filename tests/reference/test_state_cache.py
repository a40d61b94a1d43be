# SPDX-License-Identifier: MIT
"""Exact state reuse end to end on the tiny preset, fp32: many requests through ONE engine
(tests/drivers/cache_driver.cc), the state cache on vs off.

The engine always splits its prefill at the end of the state, so a warm request (state restored
from the cache) does the very same arithmetic as a cold one and as the cache-off engine. Checked:
identical response bodies, bit-identical option logits, max |Δp| <= 1e-5 (per-question softmax in
float64), the hit/miss pattern implied by which states were seen before, the same after LRU
eviction and re-insertion under a 1 MiB budget, and a miss for a state one character apart.

Requests: every corpus request, each followed by two generated requests on the same state with
the questions of other corpus requests (48), then re-runs and one-character state edits; at a forced
kernel level (CLEF_ISA) the 21 corpus requests other than the three long ones
(LEVEL_RUN_MAX_REQUEST_BYTES).
"""

from __future__ import annotations

import copy
import json
import math
import os
import pathlib
import subprocess

import pytest

from conftest import CORPUS, REPO_ROOT


def driver_bin() -> str:
    clef = os.environ.get("CLEF_BIN", str(REPO_ROOT / "build" / "release" / "bin" / "clef"))
    path = pathlib.Path(clef).with_name("clef_cache_driver")
    if not path.exists():
        pytest.fail(f"{path} missing: build the release preset first")
    return str(path)


# At a forced kernel level (CLEF_ISA, scripts/test.sh's per-level stages) the sequence is built from
# the corpus requests of up to this many bytes of JSON (UTF-8): all but 12 (255 options), 13 (64 questions)
# and 14 (a 20 KB state), which are three quarters of the corpus' tokens. What depends on the level
# (warm == cold to the bit with that level's kernels, the hit/miss pattern) is the same on the rest;
# the native run uses every request.
LEVEL_RUN_MAX_REQUEST_BYTES = 4000


def corpus_requests_indexed():
    """(corpus line index, request) of the requests this run uses (LEVEL_RUN_MAX_REQUEST_BYTES)."""
    lines = [ln for ln in CORPUS.read_text(encoding="utf-8").splitlines() if ln.strip()]
    out = [(i, json.loads(ln)["request"]) for i, ln in enumerate(lines)]
    if os.environ.get("CLEF_ISA"):
        out = [(i, r) for i, r in out if len(json.dumps(r, ensure_ascii=False).encode()) <= LEVEL_RUN_MAX_REQUEST_BYTES]
    return out


def corpus_requests():
    return [r for _, r in corpus_requests_indexed()]


def state_key(req) -> str:
    return json.dumps(req.get("state"), ensure_ascii=False, sort_keys=False)


def one_char_edit(req):
    """The same request with one character of its state changed (the first letter of a string)."""
    out = copy.deepcopy(req)

    def edit(v):
        if isinstance(v, str):
            for i, ch in enumerate(v):
                if ch.isalpha():
                    return v[:i] + ("x" if ch != "x" else "y") + v[i + 1:], True
            return v, False
        if isinstance(v, dict):
            for k in v:
                v[k], done = edit(v[k])
                if done:
                    return v, True
        if isinstance(v, list):
            for i in range(len(v)):
                v[i], done = edit(v[i])
                if done:
                    return v, True
        return v, False

    out["state"], done = edit(out["state"])
    assert done, "no letter in the state to change"
    return out


def sequence():
    """(label, request) pairs: corpus i, then two variants of it with other requests' questions."""
    indexed = corpus_requests_indexed()
    reqs = [r for _, r in indexed]
    n = len(reqs)
    seq = []
    for k, (i, r) in enumerate(indexed):
        seq.append((f"corpus[{i}]", r))
        for off in (1, 7):
            v = copy.deepcopy(r)
            donor, q = indexed[(k + off) % n]
            v["questions"] = copy.deepcopy(q["questions"])
            seq.append((f"corpus[{i}] with the questions of corpus[{donor}]", v))
    seq.append(("corpus[0] again", reqs[0]))
    seq.append(("corpus[0], one state character changed", one_char_edit(reqs[0])))
    seq.append(("corpus[1], one state character changed", one_char_edit(reqs[1])))
    return seq


def run_driver(model_dir, requests, cache_mb):
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in requests)
    r = subprocess.run([driver_bin(), str(model_dir), "--state-cache-mb", str(cache_mb), "--threads", "1",
                        "--chunk", "64"],
                       input=lines, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr
    out = [json.loads(ln) for ln in r.stdout.splitlines()]
    assert len(out) == len(requests)
    return out


def probabilities(logits, counts):
    p, k = [], 0
    for c in counts:
        g = logits[k:k + c]
        m = max(g)
        e = [math.exp(x - m) for x in g]
        s = sum(e)
        p.extend(x / s for x in e)
        k += c
    assert k == len(logits)
    return p


def assert_same_answers(got, want, label):
    assert ("error" in got) == ("error" in want), label
    if "error" in want:
        assert got["error"] == want["error"] and got["path"] == want["path"], label
        return
    assert got["body"] == want["body"], label
    assert got["option_counts"] == want["option_counts"], label
    pg, pw = probabilities(got["logits"], got["option_counts"]), probabilities(want["logits"], want["option_counts"])
    assert max(abs(a - b) for a, b in zip(pg, pw)) <= 1e-5, label
    # The stronger property the design gives: the very same floats.
    assert got["logits"] == want["logits"], label


@pytest.fixture(scope="module")
def runs(tiny_dir):
    seq = sequence()
    reqs = [r for _, r in seq]
    return {
        "seq": seq,
        "off": run_driver(tiny_dir, reqs, 0),
        "on": run_driver(tiny_dir, reqs, 1024),
        "tiny": run_driver(tiny_dir, reqs, 1),
    }


def test_every_request_is_answered(runs):
    for (label, _), o in zip(runs["seq"], runs["off"]):
        assert "error" not in o, label
        assert o["cache"] == "off" and o["reused_tokens"] == 0, label
        assert o["stats"]["budget"] == 0 and o["stats"]["misses"] == 0, label


def test_cache_on_matches_cache_off(runs):
    for (label, _), on, off in zip(runs["seq"], runs["on"], runs["off"]):
        assert_same_answers(on, off, label)


def test_hits_exactly_for_states_seen_before(runs):
    seen, reused = set(), {}
    for (label, req), on in zip(runs["seq"], runs["on"]):
        k = state_key(req)
        want = "hit" if k in seen else "miss"
        assert on["cache"] == want, label
        if want == "hit":
            assert 36 < on["reused_tokens"] < on["input_tokens"], label
            assert reused.setdefault(k, on["reused_tokens"]) == on["reused_tokens"], label
        else:
            assert on["reused_tokens"] == 0, label
        seen.add(k)
    last = runs["on"][-1]["stats"]
    assert last["hits"] + last["misses"] == len(runs["seq"])
    assert last["misses"] == len(seen)
    assert last["evictions"] == 0 and last["entries"] == len(seen)
    assert 0 < last["bytes"] <= last["budget"] == 1024 << 20


def test_warm_is_bit_identical_to_cold(runs):
    labels = [label for label, _ in runs["seq"]]
    cold, warm = runs["on"][labels.index("corpus[0]")], runs["on"][labels.index("corpus[0] again")]
    assert (cold["cache"], warm["cache"]) == ("miss", "hit")
    assert warm["body"] == cold["body"]
    assert warm["logits"] == cold["logits"]


def test_one_state_character_apart_misses(runs):
    for (label, _), on in zip(runs["seq"], runs["on"]):
        if "one state character changed" in label:
            assert on["cache"] == "miss" and on["reused_tokens"] == 0, label


def test_eviction_and_reinsert_under_a_tiny_budget(runs, tiny_dir):
    # 1 MiB holds one or two tiny-model states (with the room each keeps for later rows): the corpus
    # pass evicts, and the re-run of corpus[0] computes it again. Under 2 MiB, corpus[0] (550 tokens)
    # is kept, evicted by corpus[1..5], computed and published again, and its variant hits the new entry.
    for (label, _), t, off in zip(runs["seq"], runs["tiny"], runs["off"]):
        assert_same_answers(t, off, label)
        assert t["stats"]["bytes"] <= t["stats"]["budget"] == 1 << 20, label
    assert runs["tiny"][-1]["stats"]["evictions"] > 0
    labels = [label for label, _ in runs["seq"]]
    assert runs["tiny"][labels.index("corpus[0] again")]["cache"] == "miss"
    reqs = corpus_requests()
    again = copy.deepcopy(reqs[0])
    again["questions"] = copy.deepcopy(reqs[5]["questions"])
    more = run_driver(tiny_dir, [reqs[0], reqs[1], reqs[2], reqs[3], reqs[4], reqs[5], reqs[0], again], 2)
    assert more[0]["stats"]["entries"] == 1, "corpus[0]'s state should fit a 2 MiB budget"
    base = run_driver(tiny_dir, [again], 0)[0]
    assert more[6]["cache"] == "miss", "corpus[0] should have been evicted by corpus[1..5]"
    assert more[7]["cache"] == "hit"
    assert_same_answers(more[7], base, "re-inserted corpus[0] state with other questions")
    assert more[-1]["stats"]["evictions"] > 0


def test_image_requests_are_answered_and_reuse_their_state(tiny_dir, tmp_path):
    """The driver answers image requests as `clef decide` does (it used to refuse every one, so raw image logits
    could not be compared), and a second question set on the same image state hits the cache with the cold
    logits to the bit."""
    import base64
    import io

    from PIL import Image

    png = io.BytesIO()
    Image.new("RGB", (120, 80), (10, 200, 30)).save(png, "PNG")
    url = "data:image/png;base64," + base64.b64encode(png.getvalue()).decode()
    reqs = corpus_requests()
    first = {"model": "m", "state": "photo of the parcel", "images": [url], "questions": reqs[0]["questions"]}
    second = dict(first, questions=reqs[5]["questions"])
    on = run_driver(tiny_dir, [first, second], 1024)
    off = run_driver(tiny_dir, [first, second], 0)
    assert [o.get("cache") for o in on] == ["miss", "hit"], on
    for got, want in zip(on, off):
        assert_same_answers(got, want, "image request")
    p = tmp_path / "first.json"
    p.write_text(json.dumps(first), encoding="utf-8")
    clef = os.environ.get("CLEF_BIN", str(REPO_ROOT / "build" / "release" / "bin" / "clef"))
    r = subprocess.run([clef, "decide", "-m", str(tiny_dir), "--threads", "1", "--chunk", "64", str(p)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and json.loads(r.stdout) == on[0]["body"], r.stderr
