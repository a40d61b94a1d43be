# SPDX-License-Identifier: MIT
"""Fixtures for the Python package's tests (tests/python): the installed `clef` package (pip install .)
checked against the `clef` binary of the same tree ($CLEF_BIN, else build/release/bin/clef)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = REPO_ROOT / "tests" / "data" / "requests" / "corpus.jsonl"
BAD = REPO_ROOT / "tests" / "data" / "requests" / "bad.jsonl"


def clef_bin() -> str:
    path = os.environ.get("CLEF_BIN", str(REPO_ROOT / "build" / "release" / "bin" / "clef"))
    if not pathlib.Path(path).exists():
        pytest.fail(f"clef binary not found at {path}; build it first (cmake --build --preset release)")
    return path


def run_clef(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """Runs the clef binary; fails the test on a non-zero exit (answers are compared byte for byte)."""
    r = subprocess.run([clef_bin(), *args], input=stdin, capture_output=True, timeout=600)
    assert r.returncode in (0, 1), f"clef {' '.join(args)} exited {r.returncode}: {r.stderr.decode(errors='replace')}"
    return r


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> pathlib.Path:
    """A tiny random release folder (C++ `clef make-model`, seed 0)."""
    out = tmp_path_factory.mktemp("tiny") / "model"
    run_clef("make-model", "--preset", "tiny", "--out", str(out))
    return out


@pytest.fixture(scope="session")
def corpus_lines() -> list[bytes]:
    """The corpus's 24 request bodies (its "request" members, as json.dumps writes them)."""
    return [json.dumps(json.loads(line)["request"]).encode() for line in CORPUS.read_bytes().splitlines()]


@pytest.fixture(scope="session")
def bad_lines() -> list[bytes]:
    """bad.jsonl's request bodies as sent (its "body" members: broken JSON, bad fields)."""
    return [json.loads(line)["body"].encode() for line in BAD.read_bytes().splitlines()]


@pytest.fixture(scope="session")
def stream_lines(corpus_lines, bad_lines) -> list[bytes]:
    """The corpus, then the refused requests of bad.jsonl, then the corpus again (its states repeat)."""
    return corpus_lines + bad_lines + corpus_lines


@pytest.fixture(scope="session")
def cli_jsonl(tiny, stream_lines, tmp_path_factory) -> list[bytes]:
    """`clef decide --jsonl` over stream_lines with one thread, one line at a time (--parallel 1): one
    output line per input line."""
    d = tmp_path_factory.mktemp("jsonl")
    (d / "in.jsonl").write_bytes(b"\n".join(stream_lines) + b"\n")
    run_clef("decide", "-m", str(tiny), "--threads", "1", "--no-progress", "--parallel", "1", "--jsonl",
             str(d / "in.jsonl"), "--out", str(d / "out.jsonl"))
    out = (d / "out.jsonl").read_bytes().splitlines()
    assert len(out) == len(stream_lines)
    return out


@pytest.fixture(scope="session")
def model(tiny):
    import clef

    return clef.Model(str(tiny), threads=1)


def dumps(value) -> bytes:
    """An answer dict as `clef` prints it (compact, UTF-8 as is)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
