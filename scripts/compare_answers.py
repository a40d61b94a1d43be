#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Compares the answers of two `clef` binaries byte for byte on the request corpus.

For a change that must not move a bit of any answer (a refactor): both binaries answer every line of
tests/data/requests/{corpus,corpus_openai,bad}.jsonl through `clef decide --jsonl` and through
`clef serve` (every decision route: /v1/systemone, /v1/decisions, a Cloudflare path, OpenRouter's;
each body sent compact and pretty-printed, which changes the route key's raw text), and the outputs
must be equal: decide's stdout and exit code; serve's status, body and X-Clef-* headers. Prints one
line per model with the counts and exits 1 at the first difference (naming it).
Standard library only. Usage:
  python3 scripts/compare_answers.py --old OLD/bin/clef --new build/release/bin/clef --model DIR [--model DIR2 ...]
(--model "" is the embedded default model; --threads sets both engines' threads, default 2.)
"""
import argparse
import http.client
import json
import pathlib
import socket
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "requests"
HEADERS = ("x-clef-state-cache", "x-clef-reused-tokens", "x-clef-state-key", "x-clef-route-key", "content-type")


def bodies():
    """(name, request body text) of every corpus line: the wrapped `request`, compact and pretty-printed."""
    out = []
    for f in ("corpus.jsonl", "corpus_openai.jsonl", "bad.jsonl"):
        for i, line in enumerate((CORPUS / f).read_text(encoding="utf-8").splitlines()):
            if not line.strip():
                continue
            obj = json.loads(line)
            req = obj.get("request", obj) if isinstance(obj, dict) else obj
            name = f"{f}:{i + 1}"
            out.append((name, json.dumps(req, ensure_ascii=False, separators=(",", ":"))))
            out.append((name + ":pretty", json.dumps(req, ensure_ascii=False, indent=1)))
    return out


def model_args(model):
    return ["--model", model] if model else []


def decide_all(clef, model, threads, text):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", encoding="utf-8", delete=False) as f:
        f.write(text)
        path = f.name
    r = subprocess.run([clef, "decide", *model_args(model), "--threads", str(threads), "--jsonl", path,
                        "--no-progress"], capture_output=True, timeout=3600)
    pathlib.Path(path).unlink()
    return r.returncode, r.stdout


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, clef, model, threads):
        self.port = free_port()
        self.proc = subprocess.Popen([clef, "serve", *model_args(model), "--threads", str(threads), "--port",
                                      str(self.port), "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.time() + 600
        while time.time() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"compare_answers: {clef} serve exited: {self.proc.stderr.read().decode()[-2000:]}")
            try:
                if self.post("GET", "/health", None)[0] == 200:
                    return
            except OSError:
                time.sleep(0.2)
        sys.exit(f"compare_answers: {clef} serve did not start")

    def post(self, method, path, body):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        c.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
        r = c.getresponse()
        data = r.read()
        got = (r.status, data, tuple((h, r.getheader(h)) for h in HEADERS))
        c.close()
        return got

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="the reference binary")
    ap.add_argument("--new", required=True, help="the binary under test")
    ap.add_argument("--model", action="append", required=True, help='model folder or file ("": the default)')
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-serve", action="store_true", help="compare clef decide only")
    args = ap.parse_args()
    cases = bodies()
    text = "".join(b + "\n" for _, b in cases if "\n" not in b)
    routes = ["/v1/systemone", "/v1/decisions", "/ai/run/@cf/cloudflare/clef-flash", "/api/alpha/decisions"]
    for model in args.model:
        old, new = decide_all(args.old, model, args.threads, text), decide_all(args.new, model, args.threads, text)
        if old != new:
            a, b = old[1].splitlines(), new[1].splitlines()
            first = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
            print(f"compare_answers: {model or 'default'}: clef decide differs (exit {old[0]} vs {new[0]}) "
                  f"at answer line {first + 1}")
            return 1
        n_lines = len(old[1].splitlines())
        served = 0
        if not args.no_serve:
            servers = [Server(args.old, model, args.threads), Server(args.new, model, args.threads)]
            try:
                for name, body in cases:
                    for route in routes:
                        got = [s.post("POST", route, body.encode("utf-8")) for s in servers]
                        if got[0] != got[1]:
                            print(f"compare_answers: {model or 'default'}: serve differs on {name} at {route}: "
                                  f"{got[0][0]} {got[0][2]} vs {got[1][0]} {got[1][2]}")
                            return 1
                        served += 1
            finally:
                for s in servers:
                    s.stop()
        print(f"compare_answers: {model or 'default'}: {n_lines} decide answers (exit {old[0]}) and {served} served "
              "answers byte-identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
