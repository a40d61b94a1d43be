# SPDX-License-Identifier: MIT
"""`clef serve` with images and the exact state cache: answers equal `clef decide`
on the same model (itself checked against transformers in tests/reference/test_decide_images.py and
test_state_cache.py), OpenRouter image parts, bad images as 4xx in every dialect, and the cache's
per-request headers and /metrics counters."""

from __future__ import annotations

import base64
import io
import json
import subprocess

import numpy as np
import pytest

from conftest import clef_bin, env

RNG = np.random.default_rng(11)


def data_url(w: int, h: int, fmt: str = "PNG") -> str:
    from PIL import Image

    b = io.BytesIO()
    Image.fromarray(RNG.integers(0, 256, (h, w, 3)).astype("uint8")).save(b, fmt)
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(b.getvalue()).decode()


QUESTIONS = {"damaged": {"type": "noul", "instructions": "Is the product damaged?"},
             "kind": {"type": "choice", "criteria": {"box": None, "bag": "plastic"}}}


def decide(model, req, tmp_path, *extra) -> bytes:
    p = tmp_path / "req.json"
    p.write_text(json.dumps(req), encoding="utf-8")
    r = subprocess.run([clef_bin(), "decide", "--model", str(model), "--threads", "1", *extra, str(p)],
                       capture_output=True, env=env(), timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.rstrip(b"\n")


def test_images_on_every_dialect_equal_clef_decide(server, tiny_model, tmp_path):
    urls = [data_url(200, 150), data_url(64, 96, "JPEG")]
    req = {"model": "clef-flash", "state": "returns desk", "images": urls, "questions": QUESTIONS}
    want = decide(tiny_model, req, tmp_path)
    status, headers, body = server.post_json("/v1/systemone", req)
    assert status == 200 and body == want, body[:300]
    status, _, body = server.post_json("/ai/run/@cf/cloudflare/clef-flash", req)
    assert status == 200 and json.dumps(json.loads(body)["result"], separators=(",", ":"),
                                        ensure_ascii=False).encode() == want
    # OpenRouter: the images travel as image_url parts inside the state array; the other items stay
    # the state. Equal to the SystemOne request with state ["returns desk"] and the same images.
    orq = {"model": "cloudflare/clef-flash", "questions": QUESTIONS,
           "state": [{"type": "image_url", "image_url": {"url": urls[0]}}, "returns desk",
                     {"type": "image_url", "image_url": {"url": urls[1], "detail": "auto"}}]}
    status, _, body = server.post_json("/api/alpha/decisions", orq)
    assert status == 200, body
    same = decide(tiny_model, {"model": "cloudflare/clef-flash", "state": ["returns desk"], "images": urls,
                               "questions": QUESTIONS}, tmp_path)
    assert json.loads(body)["answers"] == json.loads(same)["answers"]


@pytest.mark.parametrize("route,status,field", [
    ("/v1/systemone", 422, "detail"),
    ("/ai/run/@cf/cloudflare/clef", 422, "errors"),
    ("/api/alpha/decisions", 422, "error"),
])
def test_bad_image_is_a_4xx_in_each_dialect(server, route, status, field):
    payload = base64.b64encode(b"\x89PNG\r\n\x1a\nSECRET-PIXELS").decode()
    bad = "data:image/png;base64," + payload
    if route == "/api/alpha/decisions":
        req = {"model": "m", "questions": QUESTIONS, "state": [{"type": "image_url", "image_url": {"url": bad}}]}
    else:
        req = {"model": "clef", "state": "s", "images": [bad], "questions": QUESTIONS}
    st, headers, body = server.post_json(route, req)
    assert st == status, (st, body)
    assert headers["content-type"].startswith("application/json")
    obj = json.loads(body)
    assert field in obj and payload.encode() not in body and b"SECRET" not in body


def test_state_cache_headers_and_metrics(server):
    state = {"ticket": "cache-test", "text": "a long enough state " * 20}
    before = server.metrics()
    st1, h1, b1 = server.post_json("/v1/systemone", {"model": "clef", "state": state, "questions": QUESTIONS})
    q2 = {"other": {"type": "noul", "instructions": "Is it urgent?"}}
    st2, h2, b2 = server.post_json("/v1/systemone", {"model": "clef", "state": state, "questions": q2})
    assert st1 == 200 and st2 == 200
    assert h1["x-clef-state-cache"] == "miss" and h1["x-clef-reused-tokens"] == "0"
    assert h2["x-clef-state-cache"] == "hit" and int(h2["x-clef-reused-tokens"]) > 100
    assert b"cache" not in b1 and b"cache" not in b2  # never in the strict SystemOne body
    after = server.metrics()
    hit, miss = 'clef_state_cache_lookups_total{result="hit"}', 'clef_state_cache_lookups_total{result="miss"}'
    assert after[hit] - before[hit] == 1 and after[miss] - before[miss] == 1
    assert after["clef_state_cache_bytes"] > 0 and after["clef_state_cache_budget_bytes"] == 2048 * 2 ** 20
    assert after["clef_state_cache_reused_tokens_total"] - before["clef_state_cache_reused_tokens_total"] == \
        int(h2["x-clef-reused-tokens"])


def test_state_cache_off_and_answers_identical(make_server, server):
    off = make_server("--state-cache-mb", "0")
    state = "identical either way " * 30
    for q in (QUESTIONS, {"x": {"type": "score", "criteria": ["a", "b", "c"]}}):
        req = {"model": "clef", "state": state, "questions": q}
        s1, h1, b1 = off.post_json("/v1/systemone", req)
        s2, h2, b2 = server.post_json("/v1/systemone", req)
        assert s1 == s2 == 200 and b1 == b2
        assert h1["x-clef-state-cache"] == "off"
    assert off.metrics()["clef_state_cache_budget_bytes"] == 0


def hostile_images():
    """(name, data URL, expected error code): images whose decoding or tower cost is bounded
    (tools/reference/clef_ref/hostile_images.py; tests/cli/test_image_bounds.py checks each in `clef decide`)."""
    import sys

    from conftest import REPO_ROOT

    sys.path.insert(0, str(REPO_ROOT / "tools" / "reference"))
    from clef_ref.hostile_images import animated_webp, data_url as url_of, many_scan_jpeg

    from PIL import Image

    flat = io.BytesIO()
    Image.new("RGB", (2048, 2048), (90, 60, 30)).save(flat, "PNG")
    return [("10,000 scans", url_of(many_scan_jpeg(2048, 2048, 10_000), "image/jpeg"), "image_too_many_scans"),
            ("2048x2048", url_of(flat.getvalue(), "image/png"), "image_over_pixel_limit"),
            ("animated", url_of(animated_webp(), "image/webp"), "image_invalid")]


def test_image_refusals_never_wait_for_the_running_decision(make_server):
    """Images are decoded on the validators pool, never on the engine thread: a refused image is answered at once
    while a decision runs and the queue is full (before: each was queued behind it, here answered 503 queue full;
    the 10,000-scan JPEG then held the engine thread 12 s)."""
    import time

    from conftest import corpus
    from test_http_layer import connect, post_head, read_answers

    s = make_server("-q", "--queue", "1", "--max-running", "1", "--state-cache-mb", "0")
    cases = hostile_images()
    heavy = json.dumps(dict(corpus())["sixty-four-questions"]).encode()
    hs = []
    for want in ("clef_decisions_running", "clef_queue_depth"):  # one running, then one queued: the queue (1) is full
        h = connect(s.port, timeout=60)
        h.sendall((post_head() + f"Content-Length: {len(heavy)}\r\n\r\n").encode() + heavy)
        hs.append(h)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and s.metrics()[want] != 1:
            time.sleep(0.002)
        assert s.metrics()[want] == 1
    for name, url, code in cases:
        t0 = time.monotonic()
        status, _, body = s.post_json("/v1/systemone", {"state": "x", "images": [url], "questions": QUESTIONS})
        took = time.monotonic() - t0
        assert status == 422 and json.loads(body)["detail"][0]["type"] == code, (name, status, body[:300])
        assert took < 1, (name, took)
        assert s.request("GET", "/health")[0] == 200
    for h in hs:
        assert read_answers(h, 1, limit=120)[0][0] == 200
        h.close()
    # An idle server: the scan bomb and a short decision sent together; the decision is answered within its idle
    # latency + 2 s (before: after the 12 s the bomb's decoding held the engine thread).
    short = {"state": "returns desk", "questions": QUESTIONS}
    t0 = time.monotonic()
    assert s.post_json("/v1/systemone", short)[0] == 200
    idle = time.monotonic() - t0
    bomb = json.dumps({"state": "x", "images": [cases[0][1]], "questions": QUESTIONS}).encode()
    b = connect(s.port, timeout=60)
    b.sendall((post_head() + f"Content-Length: {len(bomb)}\r\n\r\n").encode() + bomb)
    t0 = time.monotonic()
    assert s.post_json("/v1/systemone", short)[0] == 200
    took = time.monotonic() - t0
    assert read_answers(b, 1, limit=120)[0][0] == 422
    b.close()
    assert took < idle + 2, (idle, took)
