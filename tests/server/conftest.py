# SPDX-License-Identifier: MIT
"""Fixtures for the live tests of `clef serve`: a tiny random-weight model made by `clef make-model`
and servers started on free ports (``--port 0``; the bound port is read from the startup line)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import time
from typing import Any, Dict, List, Optional, Tuple

from haproxy_cluster import request as http_request

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
REQUESTS = REPO_ROOT / "tests" / "data" / "requests"


def clef_bin() -> str:
    """Path of the clef binary: $CLEF_BIN, else build/release/bin/clef."""
    path = os.environ.get("CLEF_BIN", str(REPO_ROOT / "build" / "release" / "bin" / "clef"))
    if not pathlib.Path(path).exists():
        pytest.fail(f"clef binary not found at {path}; build it first (cmake --build --preset release)")
    return path


def env() -> Dict[str, str]:
    e = dict(os.environ)
    e.setdefault("OMP_WAIT_POLICY", "passive")
    e.pop("CLEF_API_KEY", None)
    return e


def corpus() -> List[Tuple[str, Dict[str, Any]]]:
    lines = (REQUESTS / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    return [(c["name"], c["request"]) for c in map(json.loads, filter(None, lines))]


def bad_cases() -> List[Tuple[str, str]]:
    lines = (REQUESTS / "bad.jsonl").read_text(encoding="utf-8").splitlines()
    return [(c["name"], c["body"]) for c in map(json.loads, filter(None, lines))]


class Server:
    """A running `clef serve` process; stderr (the access log) goes to a file."""

    def __init__(self, model: pathlib.Path, log: pathlib.Path, *args: str, extra_env: Optional[Dict[str, str]] = None):
        self.log = log
        e = env()
        if extra_env:
            e.update(extra_env)
        self.proc = subprocess.Popen([clef_bin(), "serve", "--model", str(model), "--port", "0", "--threads", "1", *args],
                                     stdout=subprocess.DEVNULL, stderr=open(log, "wb"), env=e)
        deadline = time.monotonic() + 60
        self.port = 0
        while time.monotonic() < deadline:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read_text(errors="replace"))
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                raise AssertionError(f"clef serve exited {self.proc.returncode}: {log.read_text(errors='replace')}")
            time.sleep(0.05)
        assert self.port, "clef serve did not report its port"
        self.url = f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def request(self, method: str, path: str, body: Optional[bytes] = None,
                headers: Optional[Dict[str, str]] = None, timeout: float = 120) -> Tuple[int, Dict[str, str], bytes]:
        """One request on a fresh connection: (status, headers with lower-case names, body)."""
        return http_request(self.port, method, path, body, headers, timeout)

    def post_json(self, path: str, obj: Any, **kw) -> Tuple[int, Dict[str, str], bytes]:
        return self.request("POST", path, json.dumps(obj, ensure_ascii=False).encode("utf-8"),
                            {"Content-Type": "application/json", **kw.pop("headers", {})}, **kw)

    def metrics(self) -> Dict[str, float]:
        """The /metrics samples as {'name{labels}': value}."""
        status, _, body = self.request("GET", "/metrics")
        assert status == 200
        out = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def rss_kib(self) -> int:
        for line in pathlib.Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> pathlib.Path:
    """A tiny random-weight release folder written by `clef make-model --preset tiny` (seed 1)."""
    out = tmp_path_factory.mktemp("serve-tiny") / "model"
    r = subprocess.run([clef_bin(), "make-model", "--preset", "tiny", "--out", str(out), "--seed", "1"],
                       capture_output=True, text=True, env=env(), timeout=300)
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="session")
def server(tiny_model, tmp_path_factory):
    """The shared server (default flags)."""
    s = Server(tiny_model, tmp_path_factory.mktemp("serve-log") / "serve.log")
    yield s
    assert s.stop() == 0, s.log.read_text(errors="replace")[-2000:]


@pytest.fixture()
def make_server(tiny_model, tmp_path):
    """Starts extra servers with given flags; stops them after the test."""
    started: List[Server] = []

    def start(*args: str, extra_env: Optional[Dict[str, str]] = None) -> Server:
        s = Server(tiny_model, tmp_path / f"serve{len(started)}.log", *args, extra_env=extra_env)
        started.append(s)
        return s

    yield start
    for s in started:
        if s.proc.poll() is None:
            s.stop(signal.SIGKILL)


@pytest.fixture(scope="session")
def decide_outputs(tiny_model, tmp_path_factory) -> Dict[str, bytes]:
    """`clef decide` stdout (the SystemOne body) for every corpus request, by name."""
    d = tmp_path_factory.mktemp("decide")
    out = {}
    for name, req in corpus():
        p = d / f"{name}.json"
        p.write_text(json.dumps(req, ensure_ascii=False), encoding="utf-8")
        r = subprocess.run([clef_bin(), "decide", "--model", str(tiny_model), "--threads", "1", str(p)],
                           capture_output=True, env=env(), timeout=300)
        assert r.returncode == 0, r.stderr
        out[name] = r.stdout.rstrip(b"\n")
    return out
