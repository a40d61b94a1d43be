# SPDX-License-Identifier: MIT
"""clef.cpp's default image path against what Cloudflare's reference does with a request (docs/VISION.md "The
torchvision backend").

The reference hands the request's data-URL strings to transformers' ``Qwen2VLImageProcessor`` (the torchvision
backend, which ``AutoProcessor`` loads): it decodes them with ``torchvision.io.decode_image`` (RGB mode: alpha
dropped, palette and grey expanded; EXIF orientation applied to JPEG and PNG), resizes with torchvision's
antialiased bicubic, and rescales + normalizes in one float32 step. Here that processor is called the same way
on images generated with Pillow: RGBA / LA / palette (with and without tRNS) / grey / RGB PNG, RGB / 4:4:4 /
progressive / grey JPEG, lossy / lossless / alpha WebP, JPEG and PNG with each EXIF orientation 1-8 (and WebP with
one, which torchvision leaves as stored), odd sizes, up- and down-scaled. ``clef_image_driver --backend
torchvision`` must give the same decoded RGB (exactly), the same ``image_grid_thw`` and the same ``pixel_values``
(max |delta| 0: the resize is reproduced bit for bit); the resize alone is also checked on random size pairs.
"""

from __future__ import annotations

import io
from typing import Dict, List, Tuple

import numpy as np
import pytest

from test_vision_preprocess import QWEN35, STUDENT, data_url, pixels, run_driver

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
from PIL import Image  # noqa: E402
from torchvision.transforms.v2 import functional as tvF  # noqa: E402
from transformers.image_utils import load_image_as_tensor  # noqa: E402
from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor  # noqa: E402

TV = ["--backend", "torchvision"]


def _save(im: Image.Image, fmt: str, exif: int | None = None, **kw) -> bytes:
    b = io.BytesIO()
    if exif is not None:
        e = Image.Exif()
        e[0x0112] = exif
        kw["exif"] = e.tobytes()
    im.save(b, fmt, **kw)
    return b.getvalue()


def make_images() -> List[Tuple[str, str]]:
    """(name, data URL) pairs."""
    rng = np.random.default_rng(27)
    out: List[Tuple[str, str]] = []
    rgba = pixels(rng, 37, 53, 4)
    rgba[..., 3] = np.where(rng.random((37, 53)) < 0.5, rng.integers(0, 256, (37, 53)), 255)
    out.append(("png_rgba", data_url(_save(Image.fromarray(rgba, "RGBA"), "PNG"), "image/png")))
    out.append(("webp_rgba_lossless", data_url(_save(Image.fromarray(rgba, "RGBA"), "WEBP", lossless=True), "image/webp")))
    out.append(("webp_rgba_lossy", data_url(_save(Image.fromarray(rgba, "RGBA"), "WEBP", quality=80), "image/webp")))
    la = pixels(rng, 29, 31, 2)
    out.append(("png_la", data_url(_save(Image.fromarray(la, "LA"), "PNG"), "image/png")))
    pal = Image.fromarray(pixels(rng, 41, 23, 3)).convert("P", palette=Image.Palette.ADAPTIVE, colors=50)
    out.append(("png_palette", data_url(_save(pal, "PNG"), "image/png")))
    pal.info["transparency"] = 3
    out.append(("png_palette_trns", data_url(_save(pal, "PNG", transparency=3), "image/png")))
    grey = Image.fromarray(pixels(rng, 33, 47, 1)[..., 0], "L")
    out.append(("png_grey", data_url(_save(grey, "PNG"), "image/png")))
    out.append(("jpeg_grey", data_url(_save(grey, "JPEG", quality=90), "image/jpeg")))
    rgb = Image.fromarray(pixels(rng, 61, 45, 3))
    out.append(("jpeg_420", data_url(_save(rgb, "JPEG", quality=85), "image/jpeg")))
    out.append(("jpeg_444", data_url(_save(rgb, "JPEG", quality=95, subsampling=0), "image/jpeg")))
    out.append(("jpeg_progressive", data_url(_save(rgb, "JPEG", quality=85, progressive=True), "image/jpeg")))
    out.append(("webp_lossy", data_url(_save(rgb, "WEBP", quality=75), "image/webp")))
    odd = Image.fromarray(pixels(rng, 13, 7, 3))  # odd, tiny: upscaled to >= 256^2 pixels
    out.append(("png_odd_up", data_url(_save(odd, "PNG"), "image/png")))
    out.append(("png_1x1", data_url(_save(Image.fromarray(pixels(rng, 1, 1, 3)), "PNG"), "image/png")))
    big = Image.fromarray(pixels(rng, 301, 517, 3))  # downscaled under the student cap
    out.append(("png_odd_down", data_url(_save(big, "PNG"), "image/png")))
    tall = Image.fromarray(pixels(rng, 19, 5, 3))  # non-square, EXIF-rotated below
    for o in range(1, 9):
        out.append((f"jpeg_exif{o}", data_url(_save(tall, "JPEG", exif=o, quality=90), "image/jpeg")))
        out.append((f"png_exif{o}", data_url(_save(tall, "PNG", exif=o), "image/png")))
    out.append(("webp_exif6", data_url(_save(tall, "WEBP", exif=6, lossless=True), "image/webp")))
    return out


IMAGES = make_images()


def processor(cfg: Dict[str, int]) -> Qwen2VLImageProcessor:
    return Qwen2VLImageProcessor(size={"shortest_edge": cfg["min_pixels"], "longest_edge": cfg["max_pixels"]},
                                 patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3,
                                 image_std=[0.5] * 3, rescale_factor=1 / 255)


def test_decode_matches_torchvision(tmp_path):
    """Decoded RGB equals transformers' own loader of a data-URL string (torchvision decode_image, RGB mode,
    EXIF orientation applied), pixel for pixel."""
    res = run_driver(tmp_path, "decode", [u for _n, u in IMAGES], TV)
    for (name, url), r in zip(IMAGES, res):
        assert r["ok"], (name, r)
        ref = load_image_as_tensor(url).permute(1, 2, 0).numpy()
        ours = np.load(tmp_path / f"rgb_{r['index']}.npy").astype(np.uint8)
        assert ours.shape == ref.shape, (name, ours.shape, ref.shape)
        assert np.array_equal(ours, ref), (name, int(np.abs(ours.astype(int) - ref).max()))


@pytest.mark.parametrize("cfg", [QWEN35, STUDENT], ids=["qwen35", "student"])
def test_preprocess_matches_torchvision_processor(tmp_path, cfg):
    """pixel_values and image_grid_thw equal the torchvision processor's, called on the data-URL strings."""
    args = TV + ["--min-pixels", str(cfg["min_pixels"]), "--max-pixels", str(cfg["max_pixels"])]
    res = run_driver(tmp_path, "preprocess", [u for _n, u in IMAGES], args)
    proc = processor(cfg)
    for (name, url), r in zip(IMAGES, res):
        assert r["ok"], (name, r)
        ref = proc(images=[url], return_tensors="pt")
        assert r["grid"] == ref["image_grid_thw"][0].tolist(), name
        ours = np.load(tmp_path / f"pixel_values_{r['index']}.npy")
        theirs = ref["pixel_values"].numpy()
        assert ours.shape == theirs.shape, name
        assert float(np.abs(ours - theirs).max()) == 0.0, name


def test_resize_random_sizes_bit_exact(tmp_path):
    """torchvision's uint8 antialiased bicubic (CPU) on random size pairs, up and down, both axes."""
    rng = np.random.default_rng(5)
    urls, sizes, srcs = [], [], []
    for _ in range(60):
        h, w = (int(x) for x in rng.integers(1, 160, 2))
        th, tw = (int(x) for x in rng.integers(1, 160, 2))
        a = pixels(rng, h, w, 3)
        srcs.append(a)
        urls.append(data_url(_save(Image.fromarray(a), "PNG"), "image/png"))
        sizes.append((tw, th))
    lst = tmp_path / "sizes.txt"
    lst.write_text("".join(f"{w} {h}\n" for w, h in sizes))
    res = run_driver(tmp_path, "decode", urls, TV + ["--resize-list", str(lst)])
    for a, (tw, th), r in zip(srcs, sizes, res):
        ref = tvF.resize(torch.from_numpy(a).permute(2, 0, 1).contiguous(), [th, tw],
                         interpolation=tvF.InterpolationMode.BICUBIC, antialias=True).permute(1, 2, 0).numpy()
        ours = np.load(tmp_path / f"rgb_{r['index']}.npy").astype(np.uint8)
        assert np.array_equal(ours, ref), (a.shape, (th, tw), int(np.abs(ours.astype(int) - ref).max()))
