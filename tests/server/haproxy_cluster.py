# SPDX-License-Identifier: MIT
"""HAProxy (Debian 12's `haproxy` 2.6) in front of `clef serve` replicas, started from the shipped
configuration deploy/haproxy/haproxy.cfg with loopback ports filled in through its environment
variables. Used by tests/server/test_scaleout.py and bench/bench_scaleout.py; no pytest here."""

from __future__ import annotations

import http.client
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import time
from typing import Dict, List, Optional, Tuple

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
HAPROXY_DIR = REPO_ROOT / "deploy" / "haproxy"


def haproxy_bin() -> Optional[str]:
    """Path of the haproxy binary ($HAPROXY, else the one on PATH, else /usr/sbin/haproxy), or None."""
    for p in (os.environ.get("HAPROXY"), shutil.which("haproxy"), "/usr/sbin/haproxy"):
        if p and pathlib.Path(p).exists():
            return p
    return None


def free_port() -> int:
    """A loopback TCP port that was free a moment ago (bound to port 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port: int, method: str, path: str, body: Optional[bytes] = None,
            headers: Optional[Dict[str, str]] = None, timeout: float = 120) -> Tuple[int, Dict[str, str], bytes]:
    """One HTTP request on a fresh loopback connection: (status, lower-case headers, body)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


class Balancer:
    """A running haproxy on deploy/haproxy/haproxy.cfg in front of one to three replica ports.

    The configuration names three servers (r1..r3); with fewer replicas the others point at
    loopback ports nobody listens on, and HAProxy's checks keep them DOWN (no traffic).
    `port` is the body-state-routed frontend (backend clef_replicas), `header_port` the header-only
    one (clef_replicas_by_header), `stats_port` HAProxy's stats page (CSV at /;csv)."""

    def __init__(self, replica_ports: List[int], log: pathlib.Path, binary: Optional[str] = None):
        if not 1 <= len(replica_ports) <= 3:
            raise ValueError("deploy/haproxy/haproxy.cfg names three replicas (1 to 3 may be live)")
        self.live = len(replica_ports)
        replica_ports = list(replica_ports) + [free_port() for _ in range(3 - len(replica_ports))]
        binary = binary or haproxy_bin()
        if binary is None:
            raise FileNotFoundError("haproxy not found (Debian: apt-get install haproxy; scripts/setup.sh --dev)")
        self.port, self.header_port, self.stats_port = free_port(), free_port(), free_port()
        env = dict(os.environ)
        env.update({
            "CLEF_HAPROXY_DIR": str(HAPROXY_DIR),
            "CLEF_LISTEN": f"127.0.0.1:{self.port}",
            "CLEF_LISTEN_HDR": f"127.0.0.1:{self.header_port}",
            "CLEF_STATS": f"127.0.0.1:{self.stats_port}",
        })
        for i, p in enumerate(replica_ports, 1):
            env[f"CLEF_REPLICA_{i}"] = f"127.0.0.1:{p}"
        self.log = log
        # -db: stay in the foreground; -W is not used (no master process to clean up).
        self.proc = subprocess.Popen([binary, "-db", "-f", str(HAPROXY_DIR / "haproxy.cfg")],
                                     stdout=subprocess.DEVNULL, stderr=open(log, "wb"), env=env)

    def servers(self, backend: str = "clef_replicas") -> Dict[str, str]:
        """{server name: status} of a backend from the stats CSV ("UP", "DOWN", "UP 1/2", ...)."""
        status, _, body = request(self.stats_port, "GET", "/;csv", timeout=5)
        if status != 200:
            raise RuntimeError(f"haproxy stats answered {status}")
        lines = body.decode().splitlines()
        cols = lines[0].lstrip("# ").split(",")
        out = {}
        for line in lines[1:]:
            row = dict(zip(cols, line.split(",")))
            if row.get("pxname") == backend and row.get("svname") not in ("FRONTEND", "BACKEND"):
                out[row["svname"]] = row["status"]
        return out

    def wait_up(self, timeout: float = 30, backends=("clef_replicas", "clef_replicas_by_header")) -> None:
        """Waits until the live replicas of each backend pass their /ready checks and the others
        are DOWN."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"haproxy exited {self.proc.returncode}: {self.log.read_text(errors='replace')}")
            try:
                last = {b: self.servers(b) for b in backends}
                if all(sum(1 for s in v.values() if s == "UP") == self.live and
                       sum(1 for s in v.values() if s.startswith("DOWN")) == 3 - self.live for v in last.values()):
                    return
            except (OSError, RuntimeError):
                pass
            time.sleep(0.1)
        raise TimeoutError(f"haproxy servers not up: {last}; log: {self.log.read_text(errors='replace')[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
