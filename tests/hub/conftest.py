# SPDX-License-Identifier: MIT
"""Fixtures of the hub tests: a tiny random release folder and GGUF files, served by a local hub
(tests/hub/local_hub.py) on loopback ports, and an isolated Hugging Face cache per test."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO_ROOT / "tools" / "reference"))

from local_hub import Hub, HubServer, Repo  # noqa: E402

RELEASE_REPO = "clef-test/tiny"
GGUF_REPO = "clef-test/tiny-GGUF"


def clef_bin() -> str:
    path = os.environ.get("CLEF_BIN", str(REPO_ROOT / "build" / "release" / "bin" / "clef"))
    if not pathlib.Path(path).exists():
        pytest.fail(f"clef binary not found at {path}; build it first (cmake --build --preset release)")
    return path


def clean_env(**extra: str) -> dict:
    """The environment without any Hugging Face setting of the machine, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING")) and k != "TRANSFORMERS_OFFLINE"}
    env.update(extra)
    return env


def run_clef(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([clef_bin(), *args], capture_output=True, text=True, env=env or clean_env(), timeout=timeout)


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory) -> pathlib.Path:
    """A random-weight tiny release folder (C++ make-model, seed 7)."""
    out = tmp_path_factory.mktemp("hub-tiny") / "clef-tiny"
    r = run_clef("make-model", "--preset", "tiny", "--seed", "7", "--out", str(out))
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="session")
def gguf_folder(tiny_folder, tmp_path_factory) -> pathlib.Path:
    """The tiny model as GGUF files (F32 and Q8_0, tools/reference/make_gguf.py) with the joint head
    and random_weights.json beside them, and a stand-in projector file."""
    import make_gguf

    out = tmp_path_factory.mktemp("hub-gguf")
    make_gguf.convert(tiny_folder, out / "clef-tiny-F32.gguf", outtype="f32")
    make_gguf.convert(tiny_folder, out / "clef-tiny-Q8_0.gguf", outtype="q8_0")
    (out / "mmproj-clef-tiny-F16.gguf").write_bytes(b"GGUF" + bytes(range(256)) * 40)
    for f in ("joint_head.safetensors", "joint_head_config.json", "random_weights.json"):
        (out / f).write_bytes((tiny_folder / f).read_bytes())
    return out


def release_repo(tiny_folder: pathlib.Path) -> Repo:
    files = {p.name: p.read_bytes() for p in tiny_folder.iterdir() if p.is_file()}
    files["README.md"] = b"# clef-test/tiny\nA random-weight tiny Clef model for tests.\n"
    files[".gitattributes"] = b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"
    files["extras/notes.txt"] = b"not part of the model\n"
    return Repo(RELEASE_REPO, files)


def gguf_repo(gguf_folder: pathlib.Path) -> Repo:
    files = {p.name: p.read_bytes() for p in gguf_folder.iterdir() if p.is_file()}
    files["README.md"] = b"# clef-test/tiny-GGUF\n"
    return Repo(GGUF_REPO, files)


@pytest.fixture()
def hub(tiny_folder, gguf_folder):
    """A Hub holding both repositories, served on a free loopback port: yields (hub, url)."""
    h = Hub()
    h.add(release_repo(tiny_folder))
    h.add(gguf_repo(gguf_folder))
    with HubServer(h) as server:
        yield h, server.url


@pytest.fixture()
def cache(tmp_path) -> pathlib.Path:
    c = tmp_path / "hf-home" / "hub"
    c.mkdir(parents=True)
    return c


def hub_env(url: str, cache: pathlib.Path, **extra: str) -> dict:
    """clef's environment for a pull from `url` into `cache` (HF_HOME beside it, no token)."""
    return clean_env(HF_ENDPOINT=url, HF_HUB_CACHE=str(cache), HF_HOME=str(cache.parent), **extra)


def cache_state(cache: pathlib.Path) -> dict:
    """Everything of a cache but huggingface_hub's lock files: path -> ("link", target) or
    ("file", sha-like digest of the bytes) or ("dir",)."""
    import hashlib

    out = {}
    for p in sorted(cache.rglob("*")):
        rel = p.relative_to(cache).as_posix()
        if rel.startswith(".locks"):
            continue
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p))
        elif p.is_dir():
            out[rel] = ("dir",)
        else:
            out[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
    return out
