# SPDX-License-Identifier: MIT
"""Requests with images through `clef decide` vs the Python reference, live.

The reference (tools/reference/reference.py) hands the data URLs to transformers' torchvision
`Qwen2VLImageProcessor` as Cloudflare's reference does (or, for `--image-backend pil`, Pillow + the PIL
processor), configured from the folder's processor_config.json, builds the media
block after the prefix, and runs the composite `Qwen3_5ForConditionalGeneration.model` (vision tower,
image rows scattered into the `<|image_pad|>` slots, `get_rope_index` M-RoPE positions) in fp32, then
the PyTorch joint head. clef.cpp runs its own decoder, preprocessing, tower, positions and backbone.
Probabilities are compared after both sides' 4-decimal rounding: within 1e-4 (the image-path goal:
|dp| <= 1e-4 in fp32 mode), identical choices.
"""

from __future__ import annotations

import base64
import io
import json
import subprocess

import numpy as np
import pytest

from test_decide_e2e import clef_bin, numbers_close

RNG = np.random.default_rng(7)


def data_url(w: int, h: int, fmt: str = "PNG", mode: str = "RGB", exif: int | None = None) -> str:
    from PIL import Image

    img = Image.fromarray(RNG.integers(0, 256, (h, w, 3)).astype("uint8")).convert(mode)
    if mode == "RGBA":
        a = np.array(img)
        a[..., 3] = RNG.integers(0, 256, (h, w))
        img = Image.fromarray(a, "RGBA")
    b = io.BytesIO()
    kw = {}
    if exif is not None:
        e = Image.Exif()
        e[0x0112] = exif
        kw["exif"] = e.tobytes()
    img.save(b, fmt, **kw)
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(b.getvalue()).decode()


QUESTIONS = {
    "damaged": {"type": "noul", "instructions": "Is the product damaged?"},
    "kind": {"type": "choice", "criteria": {"box": "a cardboard box", "bag": None, "crate": "wooden"}},
    "quality": {"type": "score", "criteria": ["bad", "ok", "good", "great"]},
}

CASES = {
    "one_png": {"state": "Photo from the returns desk.", "images": [data_url(420, 300)]},
    "jpeg_small": {"state": {"ticket": 17, "note": "see photo"}, "images": [data_url(64, 64, "JPEG")]},
    "rgba_wide": {"state": "alpha", "images": [data_url(500, 120, "PNG", "RGBA")]},
    "webp_gray": {"state": "gray", "images": [data_url(200, 260, "WEBP", "L")]},
    "jpeg_exif6": {"state": "rotated", "images": [data_url(90, 40, "JPEG", exif=6)]},
    "two": {"state": "two photos", "images": [data_url(100, 140), data_url(300, 90, "JPEG")]},
    "four": {"state": ["a", "b"], "images": [data_url(33, 40), data_url(64, 64, "WEBP"), data_url(90, 30),
                                             data_url(128, 256, "JPEG")]},
}


def run_decide(model_dir, req, tmp_path, *extra):
    path = tmp_path / "req.json"
    path.write_text(json.dumps(req, ensure_ascii=False))
    return subprocess.run([clef_bin(), "decide", "--model", str(model_dir), "--threads", "1", *extra, str(path)],
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("name,backend", [(n, "torchvision") for n in sorted(CASES)] +
                         [("rgba_wide", "pil"), ("jpeg_exif6", "pil")])
def test_decide_with_images_matches_reference(ref, tiny_dir, tmp_path, name, backend):
    req = {"model": "clef-flash", **CASES[name], "questions": QUESTIONS}
    want = ref.run(req, image_backend=backend)["response"]
    r = run_decide(tiny_dir, req, tmp_path, "--image-backend", backend)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    numbers_close(got, want, 1e-4)
    assert got["answers"]["kind"]["choice"] == want["answers"]["kind"]["choice"]
    assert got["usage"]["input_tokens"] == want["usage"]["input_tokens"]


@pytest.mark.parametrize("grid", [8, 14])
def test_fixed_grid_mode_matches_reference_on_pre_resized_images(ref, tiny_dir, tmp_path, grid):
    """--vision-grid 8|14 (docs/MODEL.md §14): every image resized to 256/448 px square, aspect not kept.
    Reference: Pillow BICUBIC resize to that square first; the processor then keeps it (a multiple
    of 32 within its pixel bounds)."""
    from PIL import Image

    side = grid * 32
    urls = [data_url(420, 300), data_url(90, 200, "JPEG")]
    resized = []
    for u in urls:
        img = Image.open(io.BytesIO(base64.b64decode(u.split(",", 1)[1]))).convert("RGB")
        b = io.BytesIO()
        img.resize((side, side), Image.BICUBIC).save(b, "PNG")
        resized.append("data:image/png;base64," + base64.b64encode(b.getvalue()).decode())
    want = ref.run({"model": "m", "state": "fixed", "images": resized, "questions": QUESTIONS},
                   image_backend="pil")["response"]
    r = run_decide(tiny_dir, {"model": "m", "state": "fixed", "images": urls, "questions": QUESTIONS}, tmp_path,
                   "--vision-grid", str(grid), "--image-backend", "pil")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    numbers_close(got, want, 1e-4)
    text_only = json.loads(run_decide(tiny_dir, {"model": "m", "state": "fixed", "questions": QUESTIONS},
                                      tmp_path).stdout)
    # Each image adds grid*grid pads plus vision_start and vision_end; the media block adds one "\n".
    assert got["usage"]["input_tokens"] == text_only["usage"]["input_tokens"] + 2 * (grid * grid + 2) + 1


def test_state_cache_keys_on_the_image(tiny_dir, tmp_path):
    """State cache with images: the image bytes are part of the cache key; a hit is exact."""
    a, b = data_url(120, 80), data_url(120, 80)
    q2 = {"other": {"type": "noul", "instructions": "Is it blue?"}}
    lines = [
        {"model": "m", "state": "s", "images": [a], "questions": QUESTIONS},
        {"model": "m", "state": "s", "images": [a], "questions": q2},   # same state and image: hit
        {"model": "m", "state": "s", "images": [b], "questions": q2},   # other image: miss
        {"model": "m", "state": "s", "questions": q2},                  # no image: miss
    ]
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(x) + "\n" for x in lines))
    outs = {}
    for mb in ("0", "256"):
        # One line at a time: lines deciding at once may find which of them computes a shared state in either
        # order (the answers are the same).
        r = subprocess.run([clef_bin(), "decide", "-m", str(tiny_dir), "--threads", "1", "--jsonl", str(inp),
                            "--state-cache-mb", mb, "--timings", "--no-progress", "--parallel", "1"],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        outs[mb] = r.stdout
        uses = [ln.split("state cache ")[1].split(" ")[0] for ln in r.stderr.splitlines() if "state cache" in ln]
        assert uses == (["off"] * 4 if mb == "0" else ["miss", "hit", "miss", "miss"]), uses
    assert outs["0"] == outs["256"]


@pytest.mark.parametrize("images,code,path", [
    (["https://example.com/a.png"], "image_url_unsupported", "images.0"),
    (["iVBORw0KGgo="], "image_url_unsupported", "images.0"),
    (["data:image/png;base64,!!!!"], "invalid_base64", "images.0"),
    (["data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\nbroken").decode()], "image_invalid", "images.0"),
    ([data_url(10, 10)] * 5, "too_many_images", "images.4"),
    ("not-a-list", "invalid_type", "images"),
])
def test_bad_images_are_refused_with_a_code_and_path(tiny_dir, tmp_path, images, code, path):
    r = run_decide(tiny_dir, {"model": "m", "state": "s", "images": images, "questions": QUESTIONS}, tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.startswith(f"clef: error: {path}") and len(r.stderr.splitlines()) == 1, r.stderr
    for secret in ("iVBORw0KGgo", "!!!!", "example.com", "broken"):  # no request content echoed
        assert secret not in r.stderr, r.stderr
    inp = tmp_path / "one.jsonl"
    inp.write_text(json.dumps({"model": "m", "state": "s", "images": images, "questions": QUESTIONS}) + "\n")
    r = subprocess.run([clef_bin(), "decide", "-m", str(tiny_dir), "--jsonl", str(inp), "--no-progress"],
                       capture_output=True, text=True, timeout=600)
    err = json.loads(r.stdout)["error"]
    assert (err["code"], err["path"]) == (code, path), err


def test_no_images_flag_refuses(tiny_dir, tmp_path):
    r = run_decide(tiny_dir, {"model": "m", "state": "s", "images": [data_url(10, 10)], "questions": QUESTIONS},
                   tmp_path, "--no-images")
    assert r.returncode == 2 and "images" in r.stderr


def test_images_that_cannot_fit_are_refused_from_the_header(tiny_dir, tmp_path):
    """A small file declaring a huge image (4096 x 4096 zeros: ~49 KB of PNG, 16,384 image tokens) is
    refused from its header with input_too_long before any pixel is decoded; with several images the
    running total counts."""
    from PIL import Image

    b = io.BytesIO()
    Image.new("RGB", (4096, 4096)).save(b, "PNG", compress_level=9)
    big = "data:image/png;base64," + base64.b64encode(b.getvalue()).decode()
    # --max-image-pixels 0: the token budget alone (the default pixel bound would refuse these first).
    r = run_decide(tiny_dir, {"model": "m", "state": "s", "images": [big], "questions": QUESTIONS}, tmp_path,
                   "--max-image-pixels", "0")
    assert r.returncode == 2 and r.stderr.startswith("clef: error: images.0: image is 4096x4096 pixels"), r.stderr
    assert "image tokens" in r.stderr, r.stderr
    # (that message comes only from the header check, src/vision/image.cc check_dimensions)
    b = io.BytesIO()
    Image.new("RGB", (1500, 1500)).save(b, "PNG")
    mid = "data:image/png;base64," + base64.b64encode(b.getvalue()).decode()  # 47 x 47 = 2,209 tokens
    r = run_decide(tiny_dir, {"model": "m", "state": "s", "images": [mid] * 4, "questions": QUESTIONS}, tmp_path,
                   "--max-tokens", "6000", "--max-image-pixels", "0")
    assert r.returncode == 2 and r.stderr.startswith("clef: error: images.2: ") and "4418 before it" in r.stderr, \
        r.stderr


def test_folder_without_image_settings_refuses_images_by_name(tiny_dir, tmp_path):
    """Neither processor_config.json nor preprocessor_config.json: text requests work, image requests are
    refused with images_unsupported naming both files (no guessed defaults); `clef inspect` says so."""
    import shutil

    d = tmp_path / "no-image-settings"
    shutil.copytree(tiny_dir, d)
    (d / "processor_config.json").unlink()
    (d / "SHA256SUMS").unlink()
    assert not (d / "preprocessor_config.json").exists()
    r = run_decide(d, {"model": "m", "state": "s", "questions": QUESTIONS}, tmp_path)
    assert r.returncode == 0, r.stderr
    r = run_decide(d, {"model": "m", "state": "s", "images": [data_url(10, 10)], "questions": QUESTIONS}, tmp_path)
    assert r.returncode == 2
    assert "processor_config.json" in r.stderr and "preprocessor_config.json" in r.stderr, r.stderr
    out = subprocess.run([clef_bin(), "inspect", str(d)], capture_output=True, text=True, timeout=600).stdout
    assert "preprocessor none" in out
    out = subprocess.run([clef_bin(), "inspect", str(tiny_dir)], capture_output=True, text=True, timeout=600).stdout
    assert "image settings   from processor_config.json (image_processor)" in out
