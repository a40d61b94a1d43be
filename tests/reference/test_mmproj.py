# SPDX-License-Identifier: MIT
"""Images with a GGUF model: `--mmproj FILE`, the vision tower in a projector GGUF as llama.cpp's
`convert_hf_to_gguf.py --mmproj` writes it for Qwen3.5 (tools/reference/make_mmproj.py writes it the same
way; docs/GGUF.md "The projector file").

The folder is the tiny preset with its Gated DeltaNet A_log rounded to bf16 values (kept fp32), so that
its qwen35 GGUF backbone answers text exactly as the folder (docs/GGUF.md "Bit-identical answers"; the
text-only request among the image requests checks it). Then, against the folder:
  * the tower alone (clef_vision_driver): the GGUF model + an F32 or BF16 projector gives the folder's
    image rows byte for byte in fp32 and bf16 mode;
  * `clef decide` on image requests: the GGUF + F32 / BF16 projector prints the folder's JSON byte for
    byte (fp32 and bf16 mode); F16 and Q8_0 projectors: every probability within Q_TOL;
  * refusals: another projector type, a missing / mis-shaped / unused tensor, a projection_dim that is not
    the model's hidden size, image settings beside the GGUF that disagree with the projector, --mmproj with
    a release folder, the projector given as --model; and images without --mmproj;
  * `clef inspect --mmproj` reports the projector; a folder holding the model and its projector opens.
"""

from __future__ import annotations

import base64
import io
import json
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

from conftest import REPO_ROOT

MODEL_LOAD_EXIT, UNSUPPORTED_EXIT, USAGE_EXIT = 3, 4, 2  # core/error.cc exit_code_for
BESIDE = ("joint_head.safetensors", "joint_head_config.json", "random_weights.json")
# |dp| bound for F16 and Q8_0 projectors of the tiny folder (measured max: see docs/GGUF.md "The projector file")
Q_TOL = 0.01


def clef_bin() -> pathlib.Path:
    import os

    path = pathlib.Path(os.environ.get("CLEF_BIN", str(REPO_ROOT / "build" / "release" / "bin" / "clef")))
    if not path.exists():
        pytest.fail(f"{path} missing: build the release preset first")
    return path


def run(*args, **kw):
    return subprocess.run([str(clef_bin()), *map(str, args)], capture_output=True, timeout=600, **kw)


def data_url(rng, w: int, h: int, fmt: str = "PNG") -> str:
    from PIL import Image

    img = Image.fromarray(rng.integers(0, 256, (h, w, 3)).astype("uint8"))
    b = io.BytesIO()
    img.save(b, fmt)
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(b.getvalue()).decode()


QUESTIONS = {
    "damaged": {"type": "noul", "instructions": "Is the product damaged?"},
    "kind": {"type": "choice", "criteria": {"box": "a cardboard box", "bag": None, "crate": "wooden"}},
    "quality": {"type": "score", "criteria": ["bad", "ok", "good", "great"]},
}


def requests() -> list:
    rng = np.random.default_rng(11)
    return [
        {"model": "m", "state": "Photo from the returns desk.", "images": [data_url(rng, 420, 300)], "questions": QUESTIONS},
        {"model": "m", "state": {"ticket": 17}, "images": [data_url(rng, 64, 64, "JPEG")], "questions": QUESTIONS},
        {"model": "m", "state": ["a", "b"], "images": [data_url(rng, 100, 140), data_url(rng, 300, 90, "WEBP")],
         "questions": QUESTIONS},
        {"model": "m", "state": "no image here", "questions": QUESTIONS},
    ]


@pytest.fixture(scope="module")
def folder(tiny_dir, tmp_path_factory) -> pathlib.Path:
    """The tiny folder with every A_log a bf16 value (stored fp32)."""
    import torch
    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("mmproj-folder") / "model"
    shutil.copytree(tiny_dir, out)
    (out / "SHA256SUMS").unlink(missing_ok=True)
    t = load_file(str(out / "model.safetensors"))
    for k in [k for k in t if k.endswith("linear_attn.A_log")]:
        t[k] = t[k].to(torch.bfloat16).to(t[k].dtype)
    save_file(t, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


@pytest.fixture(scope="module")
def files(folder, tmp_path_factory) -> dict:
    """d/model.gguf (qwen35 layout, BF16, the head files beside it) and d/mmproj-tiny-{F32,F16,BF16,Q8_0}.gguf."""
    import make_gguf
    import make_mmproj

    d = tmp_path_factory.mktemp("mmproj-gguf")
    make_gguf.convert(folder, d / "model.gguf", "bf16")
    for f in BESIDE:
        shutil.copy(folder / f, d / f)
    out = {"model": d / "model.gguf"}
    for t in ("f32", "f16", "bf16", "q8_0"):
        out[t] = d / f"mmproj-tiny-{t.upper()}.gguf"
        make_mmproj.convert(folder, out[t], t)
    return out


def bodies(tmp: pathlib.Path) -> pathlib.Path:
    path = tmp / "bodies.jsonl"
    if not path.exists():
        path.write_text("".join(json.dumps(r) + "\n" for r in requests()), encoding="utf-8")
    return path


_ANSWERS: dict = {}


def decide(tmp: pathlib.Path, model, *extra) -> bytes:
    """The answers to requests(), one JSON line each (cached per model and flags)."""
    key = (str(model), extra)
    if key in _ANSWERS:
        return _ANSWERS[key]
    out = tmp / "answers.jsonl"
    out.unlink(missing_ok=True)
    r = run("decide", "--model", model, "--jsonl", bodies(tmp), "--out", out, "--no-progress", "--threads", "2",
            *extra)
    assert r.returncode == 0, r.stderr.decode()
    answers = out.read_bytes()
    assert answers.count(b'"answers"') == len(requests()), answers[:400]
    _ANSWERS[key] = answers
    return answers


def probabilities(answers: bytes) -> np.ndarray:
    vals = []

    def walk(x, key=""):
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, k)
        elif isinstance(x, list):
            for v in x:
                walk(v, key)
        elif isinstance(x, float):
            vals.append(x)

    for line in answers.decode().splitlines():
        walk(json.loads(line)["answers"])
    return np.asarray(vals)


def tower(tmp: pathlib.Path, model, precision: str, *extra) -> np.ndarray:
    driver = clef_bin().parent / "clef_vision_driver"
    rng = np.random.default_rng(3)
    grids = np.asarray([[1, 4, 6], [1, 2, 2]], dtype=np.int64)
    px = rng.standard_normal((int(np.prod(grids, axis=1).sum()), 1536)).astype(np.float32)
    np.save(tmp / "px.npy", px)
    np.save(tmp / "grids.npy", grids)
    out = tmp / f"out-{precision}.npy"
    r = subprocess.run([str(driver), "tower", "--model", str(model), "--pixels", str(tmp / "px.npy"), "--grids",
                        str(tmp / "grids.npy"), "--out", str(out), "--precision", precision, *map(str, extra)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return np.load(out)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("kind", ["f32", "bf16"])
def test_tower_rows_identical(folder, files, tmp_path, kind, precision):
    want = tower(tmp_path, folder, precision)
    got = tower(tmp_path, files["model"], precision, "--mmproj", files[kind])
    assert got.shape == want.shape and got.tobytes() == want.tobytes(), np.abs(got - want).max()


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("kind", ["f32", "bf16"])
def test_decide_with_images_byte_identical(folder, files, tmp_path, kind, precision):
    want = decide(tmp_path, folder, "--precision", precision)
    got = decide(tmp_path, files["model"], "--precision", precision, "--mmproj", files[kind])
    # The last request has no image: if it differs, the backbone GGUF is at fault, not the projector.
    assert got.splitlines()[-1] == want.splitlines()[-1], "the text-only answer differs: the backbone GGUF"
    assert got == want


@pytest.mark.parametrize("kind", ["f16", "q8_0"])
def test_f16_and_q8_0_projectors_are_close(folder, files, tmp_path, kind):
    want = decide(tmp_path, folder)
    got = decide(tmp_path, files["model"], "--mmproj", files[kind])
    a, b = probabilities(want), probabilities(got)
    assert a.shape == b.shape and a.size > 20
    drift = float(np.abs(a - b).max())
    print(f"{kind}: max |dp| = {drift:.4f} over {a.size} probabilities")
    assert drift <= Q_TOL


def test_images_without_mmproj_are_refused(files, tmp_path):
    req = tmp_path / "img.json"
    req.write_text(json.dumps(requests()[0]), encoding="utf-8")
    r = run("decide", "--model", files["model"], req)
    assert r.returncode == USAGE_EXIT, r.stderr.decode()
    assert "images are refused" in r.stderr.decode() and "--mmproj" in r.stderr.decode(), r.stderr.decode()


def test_mmproj_with_a_release_folder_is_an_error(folder, files, tmp_path):
    r = run("inspect", folder, "--mmproj", files["bf16"])
    assert r.returncode == USAGE_EXIT, r.stderr.decode()
    assert "applies to a GGUF model" in r.stderr.decode() and "release folder" in r.stderr.decode()


def test_projector_given_as_the_model_is_refused(files):
    """The wrong file, not an unsupported one: the model-file exit code, as the model given as --mmproj."""
    r = run("inspect", files["bf16"])
    assert r.returncode == MODEL_LOAD_EXIT, r.stderr.decode()
    assert "projector" in r.stderr.decode() and "--mmproj" in r.stderr.decode(), r.stderr.decode()


def test_inspect_reports_the_projector(files):
    r = run("inspect", files["model"], "--mmproj", files["q8_0"], "--json")
    assert r.returncode == 0, r.stderr.decode()
    j = json.loads(r.stdout)
    m = j["gguf"]["mmproj"]
    assert m["file"] == "mmproj-tiny-Q8_0.gguf" and m["projector_type"] == "qwen3vl_merger"
    assert m["tensor_types"] == {"F32": 24, "Q8_0": 10} and m["file_type"] == 7
    assert j["params"]["vision"] > 0 and j["image_settings"]["source"].startswith("mmproj-tiny-Q8_0.gguf")
    assert j["image_settings"]["min_pixels"] == 65536 and j["image_settings"]["max_pixels"] == 16777216
    text = run("inspect", files["model"], "--mmproj", files["q8_0"]).stdout.decode()
    assert "the projector mmproj-tiny-Q8_0.gguf (qwen3vl_merger" in text


def test_a_folder_holding_model_and_projector_opens(files, tmp_path):
    """find_gguf_model skips mmproj*.gguf: the folder's model is its one other .gguf."""
    r = run("inspect", files["model"].parent, "--mmproj", files["f16"])
    assert r.returncode == 0, r.stderr.decode()


def test_processor_settings_beside_the_gguf(folder, files, tmp_path):
    d = tmp_path / "beside"
    shutil.copytree(files["model"].parent, d)
    shutil.copy(folder / "processor_config.json", d / "processor_config.json")
    r = run("inspect", d / "model.gguf", "--mmproj", d / "mmproj-tiny-BF16.gguf", "--json")
    assert r.returncode == 0, r.stderr.decode()
    assert json.loads(r.stdout)["image_settings"]["source"].startswith("processor_config.json (image_processor)")
    pc = json.loads((d / "processor_config.json").read_text())
    pc["image_processor"]["image_mean"] = [0.25, 0.5, 0.5]
    (d / "processor_config.json").write_text(json.dumps(pc))
    r = run("inspect", d / "model.gguf", "--mmproj", d / "mmproj-tiny-BF16.gguf")
    assert r.returncode == MODEL_LOAD_EXIT, r.stderr.decode()
    assert "disagree on the image normalization" in r.stderr.decode(), r.stderr.decode()


def _drop(name):
    def f(tensors, md):
        del tensors[name]
    return f


def _reshape_mm2(tensors, md):
    arr, qt = tensors["mm.2.weight"]
    tensors["mm.2.weight"] = (np.ascontiguousarray(arr[:-1]), qt)


def _extra(tensors, md):
    tensors["v.deepstack.0.fc1.weight"] = (np.zeros((32, 32), np.float32), tensors["v.blk.0.ln1.weight"][1])


def _set(key, value, vt=None):
    def f(tensors, md):
        md[key] = (value, vt if vt is not None else md[key][1])
    return f


BAD = {
    "projector type": (_set("clip.projector_type", "qwen2vl_merger"), UNSUPPORTED_EXIT,
                       'projector type "qwen2vl_merger"'),
    # the model GGUF given as the projector: the wrong file (model-file exit code), the message says so
    "architecture": (None, MODEL_LOAD_EXIT, 'general.architecture is "qwen35"'),
    "missing tensor": (_drop("v.blk.1.ffn_up.weight"), MODEL_LOAD_EXIT, "missing tensor v.blk.1.ffn_up.weight"),
    "second patch slice": (_drop("v.patch_embd.weight.1"), MODEL_LOAD_EXIT, "missing tensor v.patch_embd.weight.1"),
    "mis-shaped tensor": (_reshape_mm2, MODEL_LOAD_EXIT, "tensor mm.2.weight has shape [63, 128], expected [64, 128]"),
    "unused tensor": (_extra, MODEL_LOAD_EXIT, "unexpected tensor v.deepstack.0.fc1.weight"),
    "projection_dim": (_set("clip.vision.projection_dim", 48), MODEL_LOAD_EXIT,
                       "48 does not match the model's hidden size 64"),
    "deepstack": (_set("clip.vision.is_deepstack_layers", [True, False]), UNSUPPORTED_EXIT, "deepstack"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_projectors_are_refused_by_name(folder, files, tmp_path, case):
    import make_mmproj

    mutate, code, message = BAD[case]
    path = tmp_path / "mmproj-bad.gguf"
    if case == "architecture":
        path = files["model"]  # the model GGUF given as the projector
    else:
        make_mmproj.convert(folder, path, "f32", mutate=mutate)
    r = run("inspect", files["model"], "--mmproj", path)
    assert r.returncode == code, r.stderr.decode()
    err = r.stderr.decode()
    assert message in err and path.name in err, err
