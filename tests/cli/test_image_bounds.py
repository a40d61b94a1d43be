# SPDX-License-Identifier: MIT
"""`clef decide` on images whose decoding or vision tower would cost far more than their bytes suggest
(docs/COMPATIBILITY.md "limits and guards", docs/VISION.md): a progressive JPEG of thousands of tiny scans, a PNG
of compressed text chunks, an animated WebP, an image over --max-image-pixels. Each is refused (or decoded) at
once; the inputs are built in memory by tools/reference/clef_ref/hostile_images.py. Before these bounds: the
10,000-scan JPEG was decoded in 12 s, the 300-chunk PNG took 30 s and 2.2 GB, the 2048x2048 PNG 5.6 s on the
tiny model (minutes on 0.8b)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import time

from conftest import clef_bin

from clef_ref.hostile_images import animated_webp, data_url, itxt_bomb_png, many_scan_jpeg

QUESTIONS = {"damaged": {"type": "noul", "instructions": "Is the product damaged?"}}


def request(*urls: str) -> str:
    return json.dumps({"state": "returns desk", "images": list(urls), "questions": QUESTIONS})


def decide_lines(model, tmp_path, bodies, *flags):
    """Runs `clef decide --jsonl` on the bodies; returns (answer objects per line, wall seconds, peak RSS in KiB)."""
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("\n".join(bodies) + "\n", encoding="utf-8")
    out.unlink(missing_ok=True)  # a new input each time, never a resumption
    t0 = time.monotonic()
    with open(tmp_path / "stderr.txt", "wb") as err:
        p = subprocess.Popen([clef_bin(), "decide", "-m", str(model), "--threads", "1", *flags, "--jsonl", str(inp),
                              "--out", str(out)], stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
    took = time.monotonic() - t0
    p.returncode = code = os.waitstatus_to_exitcode(status)
    assert code in (0, 1), (code, (tmp_path / "stderr.txt").read_text(errors="replace"))
    lines = [json.loads(ln) for ln in out.read_text(encoding="utf-8").splitlines()]
    return lines, took, usage.ru_maxrss


def png(w: int, h: int) -> str:
    from PIL import Image

    b = io.BytesIO()
    Image.new("RGB", (w, h), (30, 120, 200)).save(b, "PNG")
    return data_url(b.getvalue(), "image/png")


def test_jpeg_with_thousands_of_scans_is_refused_before_decoding(cpp_tiny, tmp_path):
    bomb = data_url(many_scan_jpeg(2048, 2048, 10_000), "image/jpeg")  # 380 KB
    (got,), took, _ = decide_lines(cpp_tiny, tmp_path, [request(bomb)])  # scans are counted before the size
    assert got["error"]["code"] == "image_too_many_scans" and got["error"]["path"] == "images.0", got
    assert "10000 scans" in got["error"]["message"] and "500" in got["error"]["message"]
    assert took < 2, took  # process start and model load included; the refusal itself takes milliseconds
    # Bytes between segments (libjpeg skips them with a warning) hide no scan from the count.
    raw = many_scan_jpeg(2048, 2048, 10_000)
    sos = raw.index(b"\xff\xda")
    hidden = data_url(raw[:sos] + b"\x00\x01junk" + raw[sos:], "image/jpeg")
    (got,), took, _ = decide_lines(cpp_tiny, tmp_path, [request(hidden)])
    assert got["error"]["code"] == "image_too_many_scans" and took < 2, (got, took)
    # The bound is 500 scans: the same construction with 500 is an image like any other, 501 is refused.
    lines, _, _ = decide_lines(cpp_tiny, tmp_path, [request(data_url(many_scan_jpeg(256, 256, n), "image/jpeg"))
                                                    for n in (2, 500, 501)])
    assert [("error" in ln) for ln in lines] == [False, False, True], lines
    assert lines[0]["answers"] == lines[1]["answers"]  # flat gray either way
    assert lines[2]["error"]["code"] == "image_too_many_scans"


def test_png_text_chunks_are_not_inflated(cpp_tiny, tmp_path):
    plain = data_url(itxt_bomb_png(0), "image/png")
    bomb = data_url(itxt_bomb_png(300), "image/png")  # 2.2 MB; the text chunks inflate to 2.25 GB
    (want,), _, rss_plain = decide_lines(cpp_tiny, tmp_path, [request(plain)])
    (got,), took, rss_bomb = decide_lines(cpp_tiny, tmp_path, [request(bomb)])
    assert "answers" in want and got == want  # the same pixels: the same answer
    assert rss_bomb - rss_plain < 100 * 1024, (rss_plain, rss_bomb)  # KiB; before: +2.2 GB
    assert took < 5, took  # before: 30 s


def test_animated_webp_is_refused_as_the_reference_refuses_it(cpp_tiny, tmp_path):
    from PIL import Image

    anim = animated_webp(64, 48, 3)
    first = io.BytesIO()
    Image.open(io.BytesIO(anim)).convert("RGB").save(first, "WEBP", lossless=True)  # frame 0 alone
    still = data_url(first.getvalue(), "image/webp")
    lines, _, _ = decide_lines(cpp_tiny, tmp_path, [request(data_url(anim, "image/webp")), request(still)])
    assert lines[0]["error"]["code"] == "image_invalid" and lines[0]["error"]["path"] == "images.0", lines[0]
    assert "animated WebP" in lines[0]["error"]["message"]
    assert "answers" in lines[1]
    # --image-backend pil reproduces Pillow, which opens an animated WebP at its first frame.
    lines, _, _ = decide_lines(cpp_tiny, tmp_path, [request(data_url(anim, "image/webp")), request(still)],
                               "--image-backend", "pil")
    assert "answers" in lines[0] and lines[0] == lines[1], lines


def test_max_image_pixels_refuses_what_the_processor_would_keep_larger(cpp_tiny, tmp_path):
    # The processor (max_pixels 4096^2) keeps these sizes; 448^2 = 200,704 is the default bound.
    bodies = [request(png(448, 448)), request(png(480, 480)), request(png(64, 64), png(2048, 2048))]
    lines, took, _ = decide_lines(cpp_tiny, tmp_path, bodies)
    assert "answers" in lines[0], lines[0]
    for ln, where, size in ((lines[1], "images.0", "480x480 = 230400"), (lines[2], "images.1", "2048x2048 = 4194304")):
        err = ln["error"]
        assert err["code"] == "image_over_pixel_limit" and err["path"] == where, ln
        assert size in err["message"] and "200704" in err["message"] and "--max-image-pixels" in err["message"]
    assert took < 3, took  # the 2048x2048 image is refused from its header (before: 5.6 s, 251 MB)
    # Raised, the same images are answered; 0 lifts the bound.
    lines, _, _ = decide_lines(cpp_tiny, tmp_path, bodies[1:2], "--max-image-pixels", "230400")
    assert "answers" in lines[0], lines
    lines, _, _ = decide_lines(cpp_tiny, tmp_path, bodies[1:2], "--max-image-pixels", "230399")
    assert lines[0]["error"]["code"] == "image_over_pixel_limit"
    for cmd in ("decide", "serve"):
        r = subprocess.run([clef_bin(), cmd, "--help"], capture_output=True, text=True, timeout=60)
        assert "--max-image-pixels" in r.stdout and "200704" in r.stdout, r.stdout[-2000:]
