# SPDX-License-Identifier: MIT
"""Vision tower and M-RoPE positions: the C++ engine against transformers, live.

Tower: `clef_vision_driver tower` (tests/drivers/vision_driver.cc) on random pixel_values for
several patch grids, one and several images per call, against
`Qwen3_5ForConditionalGeneration.from_pretrained(DIR, dtype=float32).model.visual(
pixel_values, grid_thw=grid_thw).pooler_output` (transformers 5.24: Qwen3_5VisionModel.forward
returns BaseModelOutputWithPooling; pooler_output is the merger output, [merged tokens, out_hidden]).
  * fp32 mode: max |d| <= 1e-4 * max |ref| over the whole output;
  * bf16 mode: max |d| <= 5e-2 * max |ref| (fp32 reference; bf16 GEMM/attention operands).
The 0.8b preset (12 blocks, D 768) runs on a 16x16-patch grid, on the session's 0.8b folder
(conftest.py `folder_08b`; CLEF_08B_DIR reuses an existing one).

Positions: `clef_vision_driver positions` against `model.model.get_rope_index(input_ids,
mm_token_type_ids, image_grid_thw)` for sequences with 0, 1, 2 and 4 images of different grids
with text before, between and after; and `clef_vision_driver shift` (the seed-000 rope-shift
form, docs/MODEL.md §7.4) against get_rope_index on the Clef layout (one image after the
36-token prefix).

Set CLEF_VISION_DRIVER to the driver's path; else the one beside $CLEF_BIN, else build/release/bin's
is used; the tests skip when no driver is found. CLEF_TEST_THREADS (default 1) sets its threads.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

from conftest import SHAPES_08B, folder_for  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
THREADS = os.environ.get("CLEF_TEST_THREADS", "1")
FP32_REL = 1e-4
BF16_REL = 5e-2
IMAGE_PAD, VISION_START, VISION_END = 248056, 248053, 248054

# (t, h, w) in patches; every h, w a multiple of the merge size 2 (what the processor emits).
TINY_GRIDS = [
    [(1, 2, 2)],
    [(1, 4, 4)],
    [(1, 4, 6)],
    [(1, 16, 16)],
    [(1, 8, 12)],
    [(1, 48, 48)],
    [(1, 64, 32)],
    [(1, 4, 6), (1, 8, 4)],
    [(1, 16, 16), (1, 2, 2), (1, 6, 10)],
    [(2, 4, 4)],
]


def _driver() -> pathlib.Path:
    env = os.environ.get("CLEF_VISION_DRIVER")
    if env:
        return pathlib.Path(env)
    # Beside $CLEF_BIN, else build/release/bin (never another preset's newer build: ASan, arm64).
    clef_bin = os.environ.get("CLEF_BIN")
    p = pathlib.Path(clef_bin).parent / "clef_vision_driver" if clef_bin else None
    if p is None or not p.exists():
        p = REPO_ROOT / "build" / "release" / "bin" / "clef_vision_driver"
    if not p.exists():
        pytest.skip("clef_vision_driver not built (set CLEF_VISION_DRIVER or build the release preset)")
    return p


@pytest.fixture(scope="session")
def driver() -> pathlib.Path:
    return _driver()


_HF: dict = {}


def _hf_model(folder: pathlib.Path, dtype: str = "float32"):
    key = (str(folder), dtype)
    if key not in _HF:
        import torch
        from transformers import Qwen3_5ForConditionalGeneration

        _HF[key] = Qwen3_5ForConditionalGeneration.from_pretrained(str(folder), dtype=getattr(torch, dtype)).eval()
    return _HF[key]


def _hf_tower(folder: pathlib.Path, pixels: np.ndarray, grids, dtype: str = "float32") -> np.ndarray:
    """transformers' tower output; dtype "bfloat16" is HF's own bf16 run (pixels cast to bf16 by
    the patch embedding), reported next to clef's bf16 mode for context."""
    import torch

    m = _hf_model(folder, dtype)
    with torch.no_grad():
        out = m.model.visual(torch.from_numpy(pixels), grid_thw=torch.tensor(grids, dtype=torch.long))
    return out.pooler_output.float().numpy()


def _cpp_tower(driver, folder, pixels, grids, tmp_path, precision="fp32") -> np.ndarray:
    px, gr, out = tmp_path / "px.npy", tmp_path / "grids.npy", tmp_path / f"out-{precision}.npy"
    np.save(px, pixels.astype(np.float32))
    np.save(gr, np.asarray(grids, dtype=np.int64))
    r = subprocess.run([str(driver), "tower", "--model", str(folder), "--pixels", str(px), "--grids", str(gr),
                        "--out", str(out), "--precision", precision, "--threads", THREADS],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return np.load(out)


def _pixels(folder: pathlib.Path, grids, seed: int) -> np.ndarray:
    v = json.loads((folder / "config.json").read_text())["vision_config"]
    dim = v.get("in_channels", 3) * v["temporal_patch_size"] * v["patch_size"] ** 2
    n = sum(t * h * w for t, h, w in grids)
    # Normalized pixels lie in [-1, 1] (docs/MODEL.md §6.1).
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=(n, dim)).astype(np.float32)


def _rel(a: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(a - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("grids", TINY_GRIDS, ids=lambda g: "+".join(f"{t}x{h}x{w}" for t, h, w in g))
def test_tower_tiny_matches_transformers(driver, tiny_dir, tmp_path, grids):
    px = _pixels(tiny_dir, grids, seed=len(grids) * 1000 + grids[0][1] * 10 + grids[0][2])
    ref = _hf_tower(tiny_dir, px, grids)
    got = _cpp_tower(driver, tiny_dir, px, grids, tmp_path)
    assert got.shape == ref.shape
    rel = _rel(got, ref)
    got16 = _cpp_tower(driver, tiny_dir, px, grids, tmp_path, "bf16")
    rel16 = _rel(got16, ref)
    hf16 = _rel(_hf_tower(tiny_dir, px, grids, "bfloat16"), ref)
    print(f"tiny {grids}: fp32 max|d|/max|ref| {rel:.3g}; bf16 {rel16:.3g} (transformers bf16: {hf16:.3g})")
    assert rel <= FP32_REL
    assert rel16 <= BF16_REL


@pytest.mark.parametrize("which", SHAPES_08B)
def test_tower_0_8b_matches_transformers(driver, which, request, tmp_path):
    folder = folder_for(request, which)
    grids = [(1, 16, 16)]
    px = _pixels(folder, grids, seed=8)
    ref = _hf_tower(folder, px, grids)
    got = _cpp_tower(driver, folder, px, grids, tmp_path)
    got16 = _cpp_tower(driver, folder, px, grids, tmp_path, "bf16")
    rel, rel16 = _rel(got, ref), _rel(got16, ref)
    hf16 = _rel(_hf_tower(folder, px, grids, "bfloat16"), ref)
    print(f"0.8b {grids}: fp32 max|d|/max|ref| {rel:.3g}; bf16 {rel16:.3g} (transformers bf16: {hf16:.3g})")
    assert rel <= FP32_REL
    assert rel16 <= BF16_REL


# ---------------------------------------------------------------------------------------------
# Positions


def _sequence(parts, rng):
    """parts: ints (that many random text ids) or (t, h, w) grids (one image block each)."""
    ids, grids = [], []
    for p in parts:
        if isinstance(p, int):
            ids += rng.integers(0, 240000, size=p).tolist()
        else:
            t, h, w = p
            ids += [VISION_START] + [IMAGE_PAD] * (t * (h // 2) * (w // 2)) + [VISION_END]
            grids.append(p)
    return np.asarray(ids, dtype=np.int64), grids


def _hf_positions(folder, ids: np.ndarray, grids):
    import torch

    m = _hf_model(folder)
    x = torch.from_numpy(ids)[None]
    tt = (x == IMAGE_PAD).to(torch.int32)
    g = torch.tensor(grids, dtype=torch.long) if grids else None
    pos, delta = m.model.get_rope_index(x, tt, image_grid_thw=g, attention_mask=torch.ones_like(x))
    return pos[:, 0].numpy(), int(delta.reshape(-1)[0])


def _cpp_positions(driver, ids, grids, tmp_path):
    np.save(tmp_path / "ids.npy", ids)
    cmd = [str(driver), "positions", "--ids", str(tmp_path / "ids.npy"), "--image-token", str(IMAGE_PAD)]
    if grids:
        np.save(tmp_path / "g.npy", np.asarray(grids, dtype=np.int64))
        cmd += ["--grids", str(tmp_path / "g.npy")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    return np.asarray(j["pos"], dtype=np.int64), j["rope_delta"]


SEQUENCES = {
    "text-only": [25],
    "one-image": [36, (1, 16, 16), 40],
    "image-first": [(1, 6, 10)],
    "two-images": [5, (1, 4, 12), 3, (1, 20, 8), 7],
    "two-adjacent-blocks": [2, (1, 8, 8), (1, 2, 2), 1],
    "four-images": [1, (1, 2, 2), 9, (1, 28, 28), 4, (1, 10, 6), 2, (1, 64, 32), 11],
    "clip": [3, (2, 4, 6), 5],
}


@pytest.mark.parametrize("name", list(SEQUENCES))
def test_positions_match_get_rope_index(driver, tiny_dir, tmp_path, name):
    ids, grids = _sequence(SEQUENCES[name], np.random.default_rng(len(name)))
    ref, ref_delta = _hf_positions(tiny_dir, ids, grids)
    got, delta = _cpp_positions(driver, ids, grids, tmp_path)
    assert got.shape == ref.shape == (3, len(ids))
    np.testing.assert_array_equal(got, ref)
    assert delta == ref_delta


@pytest.mark.parametrize("merged", [(8, 8), (14, 14), (3, 7), (10, 2), (1, 1)])
def test_seed_rope_shift_matches_get_rope_index(driver, tiny_dir, merged):
    """Seed 000's fixed layout: 36-token prefix, <|vision_start|>, N pads, <|vision_end|>, text."""
    H, W = merged
    rng = np.random.default_rng(H * 100 + W)
    ids, grids = _sequence([36, (1, 2 * H, 2 * W), 30], rng)
    ref, _ = _hf_positions(tiny_dir, ids, grids)
    r = subprocess.run([str(driver), "shift", "--tokens", str(len(ids)), "--merged", str(H), str(W)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["rope_shift_start"] == 37 + H * W and j["rope_shift_amount"] == H * W - max(H, W)
    np.testing.assert_array_equal(np.asarray(j["pos"], dtype=np.int64), ref)
