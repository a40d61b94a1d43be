# SPDX-License-Identifier: MIT
"""Live parity of clef.cpp's image decoding and preprocessing (src/vision) with
the reference: Pillow 13 opening the file and transformers' ``Qwen2VLImageProcessorPil`` (the PIL
backend of the Qwen2-VL / Qwen3.5 image processor, docs/MODEL.md §6.1-6.2) turning it into
``pixel_values`` and ``image_grid_thw``.

Every image is generated here with Pillow (or, for PNG variants Pillow cannot write, with a small
PNG writer below): several sizes (1x1, tiny, odd, just above/below the pixel bounds, huge aspect
ratios), PNG RGB/RGBA/L/LA/P/1-bit/2-bit/4-bit/16-bit with and without tRNS, JPEG RGB (4:2:0,
4:4:4, progressive)/gray/CMYK, WebP lossy/lossless/alpha. Each is sent to
``build/<preset>/bin/clef_image_driver`` (tests/drivers/image_driver.cc) as a data URL, and compared:

* decoded RGB8 exactly equal to the reference's RGB (``transformers.image_transforms.convert_to_rgb``
  on the PIL image = composite onto white when there is alpha; and ``Image.convert("RGB")`` for
  ``--alpha drop``);
* ``pixel_values`` with max |delta| <= 1e-6 (in practice 0) and identical ``image_grid_thw``, for the
  Qwen3.5 processor config (min 256^2, max 4096^2 pixels), the clef-vision-0.8b training caps
  (16384 / 200704) and the fixed 256/448 grids of the Core AI towers (docs/MODEL.md §14).

Then every refused input (remote/bare/unsupported URLs, bad base64, corrupt/truncated files,
decompression bombs, 0-sized images, aspect ratio, too many images, byte caps) must come back as the
right error code at the right ``images.N`` path, without echoing the payload.
"""

from __future__ import annotations

import base64
import io
import json
import os
import pathlib
import struct
import subprocess
import zlib
from typing import Dict, List, Sequence, Tuple

import numpy as np
import pytest

PIL = pytest.importorskip("PIL")
from PIL import Image  # noqa: E402

transformers = pytest.importorskip("transformers")
from transformers.image_transforms import convert_to_rgb  # noqa: E402
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]

QWEN35 = {"min_pixels": 65536, "max_pixels": 16777216}  # Qwen3.5 / clef-flash preprocessor_config.json
STUDENT = {"min_pixels": 16384, "max_pixels": 200704}   # clef-vision-0.8b training caps (docs/MODEL.md §14)
TOLERANCE = 1e-6
# Pillow 13 (PR #9549) runs the vertical resampling pass first when the height shrinks by more than
# twice as many pixels as the width; Pillow <= 12 always runs the horizontal pass first. The C++
# default follows the pinned Pillow (13); under an older Pillow the driver is told to match it.
PASS_ORDER = [] if int(PIL.__version__.split(".")[0]) >= 13 else ["--horizontal-first"]


# ---------------------------------------------------------------------------------------------
# driver

def driver_binary() -> pathlib.Path:
    """clef_image_driver: $CLEF_IMAGE_DRIVER, else next to $CLEF_BIN, else build/release/bin."""
    env = os.environ.get("CLEF_IMAGE_DRIVER")
    if env:
        return pathlib.Path(env)
    clef_bin = os.environ.get("CLEF_BIN")
    if clef_bin:
        cand = pathlib.Path(clef_bin).parent / "clef_image_driver"
        if cand.exists():
            return cand
    return REPO_ROOT / "build" / "release" / "bin" / "clef_image_driver"


def run_driver(tmp: pathlib.Path, mode: str, urls: Sequence[str], args: Sequence[str] = (),
               each: bool = True) -> List[dict]:
    binary = driver_binary()
    if not binary.exists():
        pytest.fail(f"{binary} not found: build it first (cmake --build --preset release)")
    tmp.mkdir(parents=True, exist_ok=True)
    listing = tmp / "list.txt"
    listing.write_text("".join(u + "\n" for u in urls))
    cmd = [str(binary), *(["--each"] if each else []), *args, mode, str(listing), str(tmp)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    assert proc.returncode == 0, f"driver failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}"
    return [json.loads(line) for line in proc.stdout.decode().splitlines()]


def data_url(data: bytes, mime: str) -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


# ---------------------------------------------------------------------------------------------
# image generation

def pixels(rng: np.random.Generator, h: int, w: int, c: int, dtype=np.uint8) -> np.ndarray:
    """Noise over smooth gradients: exercises the negative lobes and the clipping of bicubic."""
    top = 255 if dtype == np.uint8 else 65535
    yy, xx = np.mgrid[0:h, 0:w]
    base = ((yy * 7 + xx * 3) % (top + 1)).astype(np.float64)
    if h > 1 or w > 1:
        base = base * 0.5 + (np.sin(yy / max(h, 1) * 6.0 + xx / max(w, 1) * 4.0) + 1) * top / 4
    out = np.empty((h, w, c), dtype=np.float64)
    for k in range(c):
        noise = rng.integers(0, top + 1, size=(h, w))
        mask = rng.random((h, w)) < 0.3
        out[..., k] = np.where(mask, noise, base)
    return np.clip(out, 0, top).astype(dtype)


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def raw_png(width: int, height: int, bit_depth: int, color_type: int, rows: Sequence[bytes],
            plte: bytes = b"", trns: bytes = b"") -> bytes:
    """A minimal PNG (filter 0 on every row) for the variants Pillow does not write."""
    out = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0))
    if plte:
        out += png_chunk(b"PLTE", plte)
    if trns:
        out += png_chunk(b"tRNS", trns)
    out += png_chunk(b"IDAT", zlib.compress(b"".join(b"\x00" + r for r in rows)))
    return out + png_chunk(b"IEND", b"")


def raw_png_adam7_rgb(a: np.ndarray) -> bytes:
    """An interlaced (Adam7) 8-bit RGB PNG of `a` [h, w, 3], written by hand (Pillow writes none)."""
    h, w = a.shape[:2]
    data = b""
    for x0, y0, dx, dy in [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]:
        sub = a[y0::dy, x0::dx]
        if sub.size == 0:
            continue
        data += b"".join(b"\x00" + row.tobytes() for row in sub)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 1))
            + png_chunk(b"IDAT", zlib.compress(data)) + png_chunk(b"IEND", b""))


def pack_bits(values: np.ndarray, bits: int) -> bytes:
    """Row of small integers packed MSB first."""
    per = 8 // bits
    padded = np.zeros(((len(values) + per - 1) // per) * per, dtype=np.uint8)
    padded[: len(values)] = values
    out = bytearray()
    for i in range(0, len(padded), per):
        b = 0
        for v in padded[i:i + per]:
            b = (b << bits) | int(v)
        out.append(b)
    return bytes(out)


def save(im: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def make_images() -> List[Tuple[str, bytes, str, Dict[str, int]]]:
    """(name, file bytes, MIME type, processor size config) for every parity case."""
    rng = np.random.default_rng(20261129)
    cases: List[Tuple[str, bytes, str, Dict[str, int]]] = []

    def add(name, data, mime, cfg=QWEN35):
        cases.append((name, data, mime, cfg))

    # PNG RGB over sizes: 1x1, tiny, odd, around the factor, common photo sizes, huge aspect ratios.
    for h, w in [(1, 1), (2, 3), (10, 10), (15, 17), (31, 33), (32, 32), (33, 31), (47, 200), (100, 37),
                 (255, 257), (256, 256), (257, 255), (480, 640), (1, 150), (150, 1), (3, 600), (600, 3),
                 (5, 1000), (1000, 777), (1300, 700)]:
        add(f"png_rgb_{h}x{w}", save(Image.fromarray(pixels(rng, h, w, 3), "RGB"), "PNG"), "image/png")
    # Just below / at / above the student bounds (16384 = 128^2, 200704 = 448^2).
    for h, w in [(127, 128), (128, 128), (129, 128), (64, 256), (447, 448), (448, 448), (449, 448), (448, 452),
                 (700, 500), (90, 2000)]:
        add(f"png_rgb_student_{h}x{w}", save(Image.fromarray(pixels(rng, h, w, 3), "RGB"), "PNG"), "image/png", STUDENT)
    # A large image that the Qwen3.5 config downsamples only with a lowered max (keeps the test fast).
    add("png_rgb_big_maxcap", save(Image.fromarray(pixels(rng, 1536, 2048, 3), "RGB"), "PNG"), "image/png",
        {"min_pixels": 65536, "max_pixels": 1048576})

    # PNG modes Pillow writes.
    rgba = pixels(rng, 70, 90, 4)
    rgba[:10, :, 3] = 0
    rgba[10:20, :, 3] = 255
    add("png_rgba", save(Image.fromarray(rgba, "RGBA"), "PNG"), "image/png")
    add("png_l", save(Image.fromarray(pixels(rng, 81, 53, 1)[..., 0], "L"), "PNG"), "image/png")
    la = pixels(rng, 64, 40, 2)
    la[:5, :, 1] = 0
    add("png_la", save(Image.fromarray(la, "LA"), "PNG"), "image/png")
    bilevel = Image.fromarray(pixels(rng, 45, 77, 1)[..., 0], "L").convert("1")
    add("png_1bit", save(bilevel, "PNG"), "image/png")
    pal = Image.fromarray(pixels(rng, 66, 99, 3), "RGB").quantize(colors=200)
    add("png_p", save(pal, "PNG"), "image/png")
    add("png_p_transparency_index", save(pal, "PNG", transparency=7), "image/png")
    pal_small = Image.fromarray(pixels(rng, 40, 50, 3), "RGB").quantize(colors=13)
    add("png_p_13_colours", save(pal_small, "PNG"), "image/png")
    i16 = pixels(rng, 50, 61, 1, np.uint16)[..., 0]
    i16[0, :20] = np.arange(20)  # some values below 256, which survive the clip
    add("png_gray16", save(Image.frombytes("I;16", (61, 50), i16.astype("<u2").tobytes()), "PNG"), "image/png")

    # PNG variants written by hand.
    h, w = 37, 41
    rgb16 = pixels(rng, h, w, 3, np.uint16)
    add("png_rgb16", raw_png(w, h, 16, 2, [r.astype(">u2").tobytes() for r in rgb16]), "image/png")
    rgba16 = pixels(rng, h, w, 4, np.uint16)
    rgba16[:4, :, 3] = 0
    add("png_rgba16", raw_png(w, h, 16, 6, [r.astype(">u2").tobytes() for r in rgba16]), "image/png")
    la16 = pixels(rng, h, w, 2, np.uint16)
    add("png_la16", raw_png(w, h, 16, 4, [r.astype(">u2").tobytes() for r in la16]), "image/png")
    for bits in (2, 4):
        g = rng.integers(0, 1 << bits, size=(h, w))
        add(f"png_gray{bits}", raw_png(w, h, bits, 0, [pack_bits(r, bits) for r in g]), "image/png")
        add(f"png_gray{bits}_trns", raw_png(w, h, bits, 0, [pack_bits(r, bits) for r in g],
                                            trns=struct.pack(">H", 1)), "image/png")
    g8 = pixels(rng, h, w, 1)[..., 0]
    g8[:, :3] = 77
    add("png_gray8_trns", raw_png(w, h, 8, 0, [r.tobytes() for r in g8], trns=struct.pack(">H", 77)), "image/png")
    g16 = pixels(rng, h, w, 1, np.uint16)[..., 0]
    g16[:, :3] = 200
    add("png_gray16_trns", raw_png(w, h, 16, 0, [r.astype(">u2").tobytes() for r in g16],
                                   trns=struct.pack(">H", 200)), "image/png")
    rgb8 = pixels(rng, h, w, 3)
    rgb8[:3, :] = (10, 20, 30)
    add("png_rgb_trns", raw_png(w, h, 8, 2, [r.tobytes() for r in rgb8], trns=struct.pack(">HHH", 10, 20, 30)),
        "image/png")
    idx = rng.integers(0, 16, size=(h, w)).astype(np.uint8)
    idx[0, :5] = 200  # indices past the 16-entry palette
    plte = rng.integers(0, 256, size=48).astype(np.uint8).tobytes()
    add("png_p_partial_trns", raw_png(w, h, 8, 3, [r.tobytes() for r in idx], plte=plte,
                                      trns=bytes([0, 128, 255, 3, 77])), "image/png")
    idx4 = rng.integers(0, 16, size=(h, w))
    add("png_p4", raw_png(w, h, 4, 3, [pack_bits(r, 4) for r in idx4], plte=plte), "image/png")
    add("png_interlaced", raw_png_adam7_rgb(pixels(rng, 29, 43, 3)), "image/png")
    add("png_interlaced_3x2", raw_png_adam7_rgb(pixels(rng, 3, 2, 3)), "image/png")
    b1 = rng.integers(0, 2, size=(h, w))
    add("png_1bit_trns", raw_png(w, h, 1, 0, [pack_bits(r, 1) for r in b1], trns=struct.pack(">H", 0)), "image/png")

    # JPEG.
    photo = pixels(rng, 300, 410, 3)
    add("jpeg_rgb_420", save(Image.fromarray(photo, "RGB"), "JPEG", quality=85), "image/jpeg")
    add("jpeg_rgb_444", save(Image.fromarray(photo, "RGB"), "JPEG", quality=95, subsampling=0), "image/jpeg")
    add("jpeg_rgb_422_jpg_alias", save(Image.fromarray(photo[:123, :77], "RGB"), "JPEG", quality=70, subsampling=1),
        "image/jpg")
    add("jpeg_progressive", save(Image.fromarray(photo, "RGB"), "JPEG", quality=80, progressive=True), "image/jpeg")
    add("jpeg_rgb_1x1", save(Image.fromarray(photo[:1, :1], "RGB"), "JPEG"), "image/jpeg")
    add("jpeg_gray", save(Image.fromarray(photo[..., 1], "L"), "JPEG", quality=90), "image/jpeg")
    add("jpeg_cmyk", save(Image.fromarray(pixels(rng, 120, 90, 4), "CMYK"), "JPEG", quality=90), "image/jpeg")
    add("jpeg_student_odd", save(Image.fromarray(photo[:299, :401], "RGB"), "JPEG", quality=60), "image/jpeg", STUDENT)

    # WebP.
    wp = pixels(rng, 111, 133, 3)
    add("webp_lossy", save(Image.fromarray(wp, "RGB"), "WEBP", quality=80), "image/webp")
    add("webp_lossless", save(Image.fromarray(wp, "RGB"), "WEBP", lossless=True), "image/webp")
    wa = pixels(rng, 111, 133, 4)
    wa[:10, :, 3] = 0
    add("webp_lossless_alpha", save(Image.fromarray(wa, "RGBA"), "WEBP", lossless=True, exact=True), "image/webp")
    add("webp_lossy_alpha", save(Image.fromarray(wa, "RGBA"), "WEBP", quality=75), "image/webp")
    add("webp_tiny", save(Image.fromarray(wp[:3, :5], "RGB"), "WEBP", quality=90), "image/webp")
    return cases


CASES = make_images()


def processor(cfg: Dict[str, int]) -> Qwen2VLImageProcessorPil:
    return Qwen2VLImageProcessorPil(
        size={"shortest_edge": cfg["min_pixels"], "longest_edge": cfg["max_pixels"]},
        patch_size=16, temporal_patch_size=2, merge_size=2,
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
        rescale_factor=0.00392156862745098)  # the value in preprocessor_config.json


def reference_rgb(data: bytes) -> np.ndarray:
    return convert_to_rgb(Image.open(io.BytesIO(data)), return_numpy=True)


# ---------------------------------------------------------------------------------------------
# parity

def test_case_count():
    assert len(CASES) >= 50, len(CASES)


def test_decode_matches_reference_rgb(tmp_path):
    results = run_driver(tmp_path, "decode", [data_url(d, m) for _, d, m, _ in CASES])
    assert len(results) == len(CASES)
    bad = []
    for (name, data, _, _), r in zip(CASES, results):
        assert r["ok"], (name, r)
        ours = np.load(tmp_path / f"rgb_{r['index']}.npy").astype(np.uint8)
        ref = reference_rgb(data)
        if ours.shape != ref.shape or not np.array_equal(ours, ref):
            diff = np.abs(ours.astype(int) - ref.astype(int)).max() if ours.shape == ref.shape else "shape"
            bad.append((name, ours.shape, ref.shape, diff))
    assert not bad, bad


def test_decode_drop_alpha_matches_pil_convert_rgb(tmp_path):
    results = run_driver(tmp_path, "decode", [data_url(d, m) for _, d, m, _ in CASES], ["--alpha", "drop"])
    bad = []
    for (name, data, _, _), r in zip(CASES, results):
        assert r["ok"], (name, r)
        ours = np.load(tmp_path / f"rgb_{r['index']}.npy").astype(np.uint8)
        ref = np.array(Image.open(io.BytesIO(data)).convert("RGB"))
        if ours.shape != ref.shape or not np.array_equal(ours, ref):
            bad.append(name)
    assert not bad, bad


@pytest.mark.parametrize("cfg", [QWEN35, STUDENT, {"min_pixels": 65536, "max_pixels": 1048576}],
                         ids=["qwen35", "student", "maxcap1m"])
def test_preprocess_matches_processor(tmp_path, cfg):
    cases = [c for c in CASES if c[3] == cfg]
    assert cases
    args = ["--min-pixels", str(cfg["min_pixels"]), "--max-pixels", str(cfg["max_pixels"]), *PASS_ORDER]
    results = run_driver(tmp_path, "preprocess", [data_url(d, m) for _, d, m, _ in cases], args)
    proc = processor(cfg)
    worst = 0.0
    for (name, data, _, _), r in zip(cases, results):
        im = Image.open(io.BytesIO(data))
        w, h = im.size
        if max(h, w) / min(h, w) > 200:
            with pytest.raises(ValueError):
                proc(images=[im], return_tensors="np")
            assert not r["ok"] and r["code"] == "image_aspect_ratio", (name, r)
            continue
        assert r["ok"], (name, r)
        ref = proc(images=[im], return_tensors="np")
        ref_pv = np.asarray(ref["pixel_values"], dtype=np.float32)
        ref_grid = [int(v) for v in np.asarray(ref["image_grid_thw"])[0]]
        assert r["grid"] == ref_grid, (name, r["grid"], ref_grid)
        assert r["tokens"] == ref_grid[0] * (ref_grid[1] // 2) * (ref_grid[2] // 2)
        ours = np.load(tmp_path / f"pixel_values_{r['index']}.npy")
        assert ours.shape == ref_pv.shape, (name, ours.shape, ref_pv.shape)
        delta = float(np.abs(ours - ref_pv).max())
        worst = max(worst, delta)
        assert delta <= TOLERANCE, (name, delta)
    print(f"max |delta| over {len(cases)} images ({cfg}): {worst:.3g}")


@pytest.mark.parametrize("side", [256, 448])
def test_fixed_grid_matches_pillow_resize_then_processor(tmp_path, side):
    """The on-device host preprocessing (docs/MODEL.md §14): Pillow BICUBIC to side x side (aspect not kept), then the
    processor's rescale/normalize/patchify (do_resize=False)."""
    cases = CASES[::4]
    results = run_driver(tmp_path, "preprocess", [data_url(d, m) for _, d, m, _ in cases],
                         ["--fixed-side", str(side), *PASS_ORDER])
    proc = processor(QWEN35)
    for (name, data, _, _), r in zip(cases, results):
        assert r["ok"], (name, r)
        rgb = Image.fromarray(reference_rgb(data), "RGB").resize((side, side), Image.BICUBIC)
        ref = proc(images=[rgb], do_resize=False, return_tensors="np")
        assert r["grid"] == [1, side // 16, side // 16]
        assert [int(v) for v in np.asarray(ref["image_grid_thw"])[0]] == r["grid"]
        ours = np.load(tmp_path / f"pixel_values_{r['index']}.npy")
        assert float(np.abs(ours - np.asarray(ref["pixel_values"], dtype=np.float32)).max()) <= TOLERANCE, name


def test_bicubic_resize_random_sizes(tmp_path):
    """resize_bicubic against Pillow's Image.resize(BICUBIC) on 300 random noise images and random
    targets (up/down on each axis, one-axis-only, 1-pixel sides): exact uint8 equality. This pins
    the coefficients, the fixed-point rounding and Pillow 13's pass order."""
    rng = np.random.default_rng(77)
    urls, targets, sources = [], [], []
    for i in range(300):
        big = i % 10 == 0
        H, W = (int(v) for v in rng.integers(1, 400 if big else 90, 2))
        h, w = (int(v) for v in rng.integers(1, 400 if big else 90, 2))
        if i % 7 == 0:
            w = W  # vertical only
        if i % 11 == 0:
            h = H  # horizontal only
        a = rng.integers(0, 256, size=(H, W, 3)).astype(np.uint8)
        sources.append(a)
        urls.append(data_url(save(Image.fromarray(a, "RGB"), "PNG"), "image/png"))
        targets.append((w, h))
    (tmp_path / "targets.txt").write_text("".join(f"{w} {h}\n" for w, h in targets))
    results = run_driver(tmp_path, "decode", urls, ["--resize-list", str(tmp_path / "targets.txt"), *PASS_ORDER])
    bad = []
    for a, (w, h), r in zip(sources, targets, results):
        assert r["ok"], r
        ours = np.load(tmp_path / f"rgb_{r['index']}.npy").astype(np.uint8)
        ref = np.array(Image.fromarray(a, "RGB").resize((w, h), Image.BICUBIC))
        if ours.shape != ref.shape or not np.array_equal(ours, ref):
            bad.append((a.shape[:2], (h, w)))
    assert not bad, bad


def test_alpha_composite_all_pairs(tmp_path):
    """Every (colour, alpha) pair of an RGBA PNG against Pillow's alpha_composite onto white."""
    a = np.zeros((256, 256, 4), np.uint8)
    a[..., 0] = np.arange(256)[:, None]
    a[..., 1] = 255 - np.arange(256)[:, None]
    a[..., 2] = (np.arange(256)[:, None] * 7) % 256
    a[..., 3] = np.arange(256)[None, :]
    data = save(Image.fromarray(a, "RGBA"), "PNG")
    [r] = run_driver(tmp_path, "decode", [data_url(data, "image/png")])
    assert r["ok"]
    ours = np.load(tmp_path / "rgb_0.npy").astype(np.uint8)
    assert np.array_equal(ours, reference_rgb(data))


# ---------------------------------------------------------------------------------------------
# refusals

def png_with_ihdr(width: int, height: int) -> bytes:
    return raw_png(width, height, 8, 2, [b"\x00\x00\x00"])  # header only matters; data is short


def jpeg_with_size(width: int, height: int) -> bytes:
    data = bytearray(save(Image.new("RGB", (8, 8), (1, 2, 3)), "JPEG"))
    sof = data.find(b"\xff\xc0")
    struct.pack_into(">HH", data, sof + 5, height, width)
    return bytes(data)


def webp_lossless_with_size(width: int, height: int) -> bytes:
    data = bytearray(save(Image.new("RGB", (4, 4), (1, 2, 3)), "WEBP", lossless=True))
    assert data[12:16] == b"VP8L"
    bits = struct.unpack_from("<I", data, 21)[0]
    bits = (bits & ~0x0FFFFFFF) | ((width - 1) & 0x3FFF) | (((height - 1) & 0x3FFF) << 14)
    struct.pack_into("<I", data, 21, bits)
    return bytes(data)


def refusal_cases() -> List[Tuple[str, str, str]]:
    png = save(Image.fromarray(pixels(np.random.default_rng(1), 40, 40, 3), "RGB"), "PNG")
    jpeg = save(Image.fromarray(pixels(np.random.default_rng(2), 40, 40, 3), "RGB"), "JPEG")
    webp = save(Image.fromarray(pixels(np.random.default_rng(3), 40, 40, 3), "RGB"), "WEBP")
    gif = save(Image.new("P", (4, 4)), "GIF")
    b64 = base64.b64encode(png).decode()
    corrupt = bytearray(png)
    idat = corrupt.find(b"IDAT")
    corrupt[idat + 10] ^= 0xFF  # breaks the chunk CRC
    return [
        ("https", "https://example.com/cat.png", "image_url_unsupported"),
        ("http", "http://example.com/cat.png", "image_url_unsupported"),
        ("file", "file:///etc/hosts", "image_url_unsupported"),
        ("bare_base64", b64, "image_url_unsupported"),
        ("not_base64_data_url", "data:image/png," + "x" * 8, "image_url_unsupported"),
        ("extra_param", "data:image/png;name=a.png;base64," + b64, "image_url_unsupported"),
        ("gif_type", data_url(gif, "image/gif"), "image_type_unsupported"),
        ("svg_type", "data:image/svg+xml;base64,PHN2Zz4=", "image_type_unsupported"),
        ("text_type", "data:text/plain;base64,aGVsbG8=", "image_type_unsupported"),
        ("bad_char", "data:image/png;base64," + b64[:40] + "*" + b64[41:], "invalid_base64"),
        ("whitespace", "data:image/png;base64," + b64[:40] + " " + b64[40:], "invalid_base64"),
        ("urlsafe", "data:image/png;base64," + b64[:40] + "-" + b64[41:], "invalid_base64"),
        ("unpadded", "data:image/png;base64," + b64.rstrip("=") + ("A" if len(b64.rstrip("=")) % 4 == 0 else ""),
         "invalid_base64"),
        ("empty_payload", "data:image/png;base64,", "image_invalid"),
        ("gif_bytes_as_png", data_url(gif, "image/png"), "image_invalid"),
        ("text_bytes_as_jpeg", data_url(b"hello world, not an image", "image/jpeg"), "image_invalid"),
        ("truncated_png", data_url(png[: len(png) // 2], "image/png"), "image_invalid"),
        ("truncated_png_header", data_url(png[:20], "image/png"), "image_invalid"),
        ("corrupt_png_crc", data_url(bytes(corrupt), "image/png"), "image_invalid"),
        ("truncated_jpeg", data_url(jpeg[: len(jpeg) // 2], "image/jpeg"), "image_invalid"),
        ("truncated_jpeg_header", data_url(jpeg[:30], "image/jpeg"), "image_invalid"),
        ("truncated_webp", data_url(webp[: len(webp) // 2], "image/webp"), "image_invalid"),
        ("zero_width_png", data_url(png_with_ihdr(0, 10), "image/png"), "image_invalid"),
        ("bomb_png_pixels", data_url(png_with_ihdr(30000, 30000), "image/png"), "image_too_large"),
        ("bomb_png_side", data_url(png_with_ihdr(100000, 1), "image/png"), "image_too_large"),
        ("bomb_jpeg_pixels", data_url(jpeg_with_size(20000, 20000), "image/jpeg"), "image_too_large"),
        ("bomb_jpeg_side", data_url(jpeg_with_size(60000, 10), "image/jpeg"), "image_too_large"),
        ("bomb_webp", data_url(webp_lossless_with_size(16384, 16384), "image/webp"), "image_too_large"),
        ("aspect_201", data_url(save(Image.new("RGB", (402, 2), (9, 9, 9)), "PNG"), "image/png"), "image_aspect_ratio"),
    ]


REFUSALS = refusal_cases()


def test_refusals_have_code_and_path(tmp_path):
    results = run_driver(tmp_path, "preprocess", [u for _, u, _ in REFUSALS])
    assert len(results) == len(REFUSALS)
    for i, ((name, url, code), r) in enumerate(zip(REFUSALS, results)):
        assert not r["ok"], (name, r)
        assert r["code"] == code, (name, r)
        assert r["path"] == f"images.{i}", (name, r)
        payload = url.split(",", 1)[-1]
        if len(payload) >= 16:
            assert payload[:16] not in r["message"], (name, "message echoes the payload")


def test_reference_also_refuses_the_corrupt_files():
    """The files clef.cpp calls image_invalid do not open (or load) in Pillow either, except GIF
    content, which Pillow reads but the wire form (docs/PROTOCOL.md §1.5: PNG/JPEG/WebP) excludes."""
    for name, url, code in REFUSALS:
        if code != "image_invalid" or not url.startswith("data:image/") or name == "gif_bytes_as_png":
            continue
        payload = url.split(",", 1)[1]
        if not payload:
            continue
        with pytest.raises(Exception):
            Image.open(io.BytesIO(base64.b64decode(payload))).load()


def test_request_limits(tmp_path):
    png = data_url(save(Image.new("RGB", (20, 20), (5, 6, 7)), "PNG"), "image/png")
    # Five images: the fifth is refused before anything is decoded.
    [r] = run_driver(tmp_path / "count", "decode", [png] * 5, each=False)
    assert (r["ok"], r["code"], r["path"]) == (False, "too_many_images", "images.4")
    ok = run_driver(tmp_path / "four", "decode", [png] * 4, each=False)
    assert [x["ok"] for x in ok] == [True] * 4
    size = len(base64.b64decode(png.split(",", 1)[1]))
    [r] = run_driver(tmp_path / "total", "decode", [png] * 3, ["--max-total-bytes", str(2 * size)], each=False)
    assert (r["ok"], r["code"], r["path"]) == (False, "image_too_large", "images.2")
    [r] = run_driver(tmp_path / "one", "decode", [png], ["--max-bytes", str(size - 1)], each=False)
    assert (r["ok"], r["code"], r["path"]) == (False, "image_too_large", "images.0")
    [r] = run_driver(tmp_path / "px", "decode", [png], ["--max-image-pixels", "399"], each=False)
    assert (r["ok"], r["code"], r["path"]) == (False, "image_too_large", "images.0")
    [r] = run_driver(tmp_path / "px_ok", "decode", [png], ["--max-image-pixels", "400"], each=False)
    assert r["ok"]


def test_mutated_files_are_refused_or_decoded_never_crash(tmp_path):
    """600 corrupted variants of valid PNG/JPEG/WebP files (byte flips, truncations, inserted and
    zeroed runs): each comes back decoded or as image_invalid / image_too_large; the driver never
    crashes. Decoded ones also preprocess. (tests/fuzz/fuzz_image.cc explores further under ASan.)"""
    rng = np.random.default_rng(4242)
    bases = [d for name, d, _, _ in CASES if name.startswith(("png_p", "png_rgba", "png_gray", "jpeg_", "webp_"))]
    bases = [d for d in bases if len(d) < 200_000]
    urls = []
    for i in range(600):
        b = bytearray(bases[i % len(bases)])
        kind = i % 4
        if kind == 0:
            for _ in range(int(rng.integers(1, 8))):
                b[int(rng.integers(0, len(b)))] ^= int(rng.integers(1, 256))
        elif kind == 1:
            b = b[: int(rng.integers(1, len(b)))]
        elif kind == 2:
            at = int(rng.integers(0, len(b)))
            b[at:at] = rng.integers(0, 256, size=int(rng.integers(1, 64))).astype(np.uint8).tobytes()
        else:
            at = int(rng.integers(8, len(b)))
            b[at:at + int(rng.integers(1, 32))] = b"\x00" * len(b[at:at + 32][: int(rng.integers(1, 32))])
        urls.append(data_url(bytes(b), "image/png"))
    results = run_driver(tmp_path, "preprocess", urls, ["--max-image-pixels", str(1 << 22),
                                                        "--min-pixels", "1024", "--max-pixels", str(1 << 16)])
    assert len(results) == len(urls)
    codes = {r["code"] for r in results if not r["ok"]}
    assert codes <= {"image_invalid", "image_too_large", "image_aspect_ratio"}, codes
    assert any(r["ok"] for r in results) and any(not r["ok"] for r in results)
