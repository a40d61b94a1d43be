# SPDX-License-Identifier: MIT
"""Fixtures for black-box tests of the `clef` binary (built by scripts/test.sh or by hand)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tools" / "reference"))


def clef_bin() -> str:
    """Path of the clef binary: $CLEF_BIN, else build/release/bin/clef."""
    path = os.environ.get("CLEF_BIN", str(REPO_ROOT / "build" / "release" / "bin" / "clef"))
    if not pathlib.Path(path).exists():
        pytest.fail(f"clef binary not found at {path}; build it first (cmake --build --preset release)")
    return path


def run_clef(*args: str, env: dict | None = None, check: bool = False) -> subprocess.CompletedProcess:
    """Runs clef with the given arguments; returns the completed process (text mode)."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    r = subprocess.run([clef_bin(), *args], capture_output=True, text=True, env=full_env, timeout=600)
    if check and r.returncode != 0:
        raise AssertionError(f"clef {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r


@pytest.fixture(scope="session")
def cpp_tiny(tmp_path_factory) -> pathlib.Path:
    """A tiny random release folder written by the C++ `clef make-model` (seed 0)."""
    out = tmp_path_factory.mktemp("cpp-tiny") / "model"
    run_clef("make-model", "--preset", "tiny", "--out", str(out), check=True)
    return out


@pytest.fixture()
def broken(cpp_tiny, tmp_path) -> pathlib.Path:
    """A private copy of the C++ tiny folder that a test may corrupt."""
    dst = tmp_path / "broken"
    shutil.copytree(cpp_tiny, dst)
    return dst
