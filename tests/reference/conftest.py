# SPDX-License-Identifier: MIT
"""Shared fixtures for the reference-toolkit tests (tiny preset generated once per session)."""

from __future__ import annotations

import pathlib
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOLS = REPO_ROOT / "tools" / "reference"
REQUESTS = REPO_ROOT / "tests" / "data" / "requests"
CORPUS = REQUESTS / "corpus.jsonl"
BAD = REQUESTS / "bad.jsonl"
sys.path.insert(0, str(TOOLS))


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> pathlib.Path:
    """A tiny random release folder (seed 0), generated once per session."""
    import make_model

    out = tmp_path_factory.mktemp("clef-tiny")
    make_model.make_model("tiny", out, seed=0, dtype="bf16", verbose=False)
    return out


@pytest.fixture(scope="session")
def tokenizer(tiny_dir):
    """tokenizers.Tokenizer loaded from the tiny folder's tokenizer.json."""
    from clef_ref.record import load_tokenizer

    return load_tokenizer(tiny_dir)


@pytest.fixture(scope="session")
def ref(tiny_dir):
    """A loaded ClefReference (fp32) on the tiny folder."""
    import reference

    return reference.ClefReference(tiny_dir, "f32")


def _seed2_folder(preset: str, env_var: str, tmp_path_factory) -> pathlib.Path:
    """The `preset` random release folder with seed 2 (the seed the committed bf16 goldens were measured
    on): the folder named by $env_var when set (scripts/test.sh writes one per run), else made once."""
    import os

    env = os.environ.get(env_var)
    if env:
        return pathlib.Path(env)
    import make_model

    out = tmp_path_factory.mktemp(f"clef-{preset}")
    make_model.make_model(preset, out, seed=2, dtype="bf16", verbose=False)
    return out


@pytest.fixture(scope="session")
def folder_08b(tmp_path_factory) -> pathlib.Path:
    """The 0.8b preset (~15 s, 3 GB) once per session; CLEF_08B_DIR reuses an existing one."""
    return _seed2_folder("0.8b", "CLEF_08B_DIR", tmp_path_factory)


@pytest.fixture(scope="session")
def folder_08b_shapes(tmp_path_factory) -> pathlib.Path:
    """The 0.8b-shapes preset (the 0.8b's layer shapes, one block of each kind; ~0.7 GB) once per
    session; CLEF_08B_SHAPES_DIR reuses an existing one."""
    return _seed2_folder("0.8b-shapes", "CLEF_08B_SHAPES_DIR", tmp_path_factory)


# The live comparisons at the 0.8b's layer shapes run on two folders: the full 0.8b preset (mark
# `slow`: natively, once) and the 0.8b-shapes preset (mark `shapes08b`: natively, and again in the AVX2
# run of scripts/test.sh, where the same kernels with the same blocking suffice). Tests parametrized with
# SHAPES_08B get the folder from `folder_for(request, which)`.
SHAPES_08B = [pytest.param("0.8b", marks=pytest.mark.slow, id="0.8b"),
              pytest.param("0.8b-shapes", marks=pytest.mark.shapes08b, id="0.8b-shapes")]


def folder_for(request, which: str) -> pathlib.Path:
    return request.getfixturevalue({"0.8b": "folder_08b", "0.8b-shapes": "folder_08b_shapes"}[which])
