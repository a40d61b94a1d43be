# SPDX-License-Identifier: MIT
"""A local stand-in for the Hugging Face hub, for the `clef pull` and name-resolution tests.

It serves model repositories held in memory the way the hub's HTTP API answers the requests
huggingface_hub makes (written from reading huggingface_hub's client code and the hub's
documented API; docs/MODELS.md "The hub protocol"):

  GET  /api/models/ORG/REPO/revision/REV      repository information: {"id", "sha", "siblings"}
  GET  /api/models/ORG/REPO/tree/REV?recursive  the file list: [{"type": "file", "path", "size",
                                               "oid" (git blob id), "lfs": {"oid" (sha256), "size",
                                               "pointerSize"}}], paginated with a Link: rel="next"
  HEAD/GET /ORG/REPO/resolve/REV/PATH         a file stored in git: 200 with ETag "<git blob id>";
                                               an LFS file: 302 to the storage host with
                                               X-Linked-Etag "<sha256>" and X-Linked-Size; both carry
                                               X-Repo-Commit
  GET  /cdn/SHA256                            LFS bytes, with Range support (206)

Faults for tests are switched on through the `Hub` object: a token requirement (401 without it),
a connection cut after N bytes of one blob, bytes that do not match their sha256, LFS redirects
to a second server (another host:port), a pause per chunk (so that a kill lands mid-file, or a
dripping server). Misbehaving modes (what a hostile or broken hub may do, for the bounds of
docs/MODELS.md "Bounds"): a blob body longer than its declared size (chunked or with a longer
Content-Length), endless pagination, a padded listing page, extra listed files that do not change
the commit (unsafe names), any revision accepted, 429/503 answers with Retry-After, a redirect loop
on the storage host. Loopback only; every server picks a free port.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import socketserver
import threading
import time
import urllib.parse
from dataclasses import dataclass, field


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Repo:
    repo_id: str
    files: dict[str, bytes]
    commit: str = ""
    lfs_suffixes: tuple[str, ...] = (".safetensors", ".gguf", ".bin")
    extra: dict[str, bytes] = field(default_factory=dict)  # listed and served, not part of the commit id

    def __post_init__(self) -> None:
        if not self.commit:
            h = hashlib.sha1(self.repo_id.encode())
            for p in sorted(self.files):
                h.update(p.encode() + hashlib.sha256(self.files[p]).digest())
            self.commit = h.hexdigest()

    def is_lfs(self, path: str) -> bool:
        return path.endswith(self.lfs_suffixes)


@dataclass
class Hub:
    """Shared state of the servers: repositories, faults and counters."""

    repos: dict[str, Repo] = field(default_factory=dict)
    token: str | None = None                  # when set: 401 without "Authorization: Bearer <token>"
    cut_after: dict[str, int] = field(default_factory=dict)  # sha256 -> bytes sent before the first cut
    corrupt: set[str] = field(default_factory=set)           # sha256 of blobs served with one byte flipped
    chunk_pause: float = 0.0                  # seconds between chunks of a blob
    chunk_size: int = 65536                   # bytes per write of a blob
    page_size: int = 0                        # tree listing page size (0: one page)
    cdn_base: str = ""                        # where LFS redirects point ("" = this server)
    overlong: dict[str, str] = field(default_factory=dict)  # sha256 -> "chunked" | "length": 64 MiB more
    endless_pages: int = 0                    # > 0: every tree page lists this many new entries and a next link
    listing_padding: int = 0                  # bytes of padding in the first tree entry
    lenient_revisions: bool = False           # any revision names the repository's commit
    throttle: dict[str, list[tuple[int, str]]] = field(default_factory=dict)  # "api"/"cdn" -> [(status, Retry-After)]
    redirect_loop: bool = False               # the storage host redirects every blob to itself
    size_lie: dict[str, int] = field(default_factory=dict)  # path -> bytes added to its X-Linked-Size
    blob_bytes_sent: dict[str, int] = field(default_factory=dict)
    requests: list[tuple[str, str, str]] = field(default_factory=list)  # (method, path, authorization)
    times: list[tuple[float, str, str, int]] = field(default_factory=list)  # (monotonic, method, path, status)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, repo: Repo) -> None:
        self.repos[repo.repo_id] = repo

    def blob(self, sha: str) -> bytes | None:
        for r in self.repos.values():
            for data in list(r.files.values()) + list(r.extra.values()):
                if hashlib.sha256(data).hexdigest() == sha:
                    return data
        return None


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: Hub
    base: str

    def log_message(self, *args) -> None:  # quiet
        pass

    # -- helpers ---------------------------------------------------------------------------------
    def send_response(self, code, message=None) -> None:
        with self.hub.lock:
            self.hub.times.append((time.monotonic(), self.command, urllib.parse.urlsplit(self.path).path, code))
        super().send_response(code, message)

    def _throttled(self, kind: str) -> bool:
        """Answers the next queued (status, Retry-After) of `kind`, if any."""
        with self.hub.lock:
            queue = self.hub.throttle.get(kind)
            if not queue:
                return False
            status, after = queue.pop(0)
        self._json(status, {"error": "slow down"}, {"Retry-After": after})
        return True

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None, head: bool = False) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head and body:
            self.wfile.write(body)

    def _json(self, status: int, obj, headers: dict | None = None) -> None:
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        self._send(status, json.dumps(obj).encode(), h)

    def _authorized(self) -> bool:
        if self.hub.token is None:
            return True
        return self.headers.get("Authorization", "") == f"Bearer {self.hub.token}"

    def _repo(self, parts: list[str]) -> tuple[Repo | None, list[str]]:
        if len(parts) < 2:
            return None, parts
        return self.hub.repos.get(parts[0] + "/" + parts[1]), parts[2:]

    def _rev_ok(self, repo: Repo, rev: str) -> bool:
        return self.hub.lenient_revisions or rev in ("main", repo.commit)

    # -- routes ----------------------------------------------------------------------------------
    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    def _route(self, head: bool) -> None:
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/") if p]
        with self.hub.lock:
            self.hub.requests.append((self.command, url.path, self.headers.get("Authorization", "")))
        try:
            if parts[:1] == ["cdn"] and len(parts) == 2:
                if self._throttled("cdn"):
                    return None
                return self._cdn(parts[1], head, url.query)
            if not self._authorized():
                return self._json(401, {"error": "Invalid credentials in Authorization header"},
                                  {"X-Error-Code": "GatedRepo"})
            if parts[:2] == ["api", "models"]:
                if self._throttled("api"):
                    return None
                return self._api(parts[2:], urllib.parse.parse_qs(url.query))
            repo, rest = self._repo(parts)
            if repo is not None and len(rest) >= 3 and rest[0] == "resolve":
                return self._resolve(repo, rest[1], "/".join(rest[2:]), head)
            self._json(404, {"error": "Not Found"}, {"X-Error-Code": "RepoNotFound"})
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _api(self, parts: list[str], query: dict) -> None:
        repo, rest = self._repo(parts)
        if repo is None:
            return self._json(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
        if len(rest) == 2 and rest[0] == "revision":
            if not self._rev_ok(repo, rest[1]):
                return self._json(404, {"error": "Invalid rev id"}, {"X-Error-Code": "RevisionNotFound"})
            return self._json(200, {"id": repo.repo_id, "modelId": repo.repo_id, "sha": repo.commit,
                                    "private": False, "gated": False, "disabled": False, "tags": [],
                                    "siblings": [{"rfilename": p} for p in sorted(repo.files)]})
        if len(rest) >= 2 and rest[0] == "tree":
            if not self._rev_ok(repo, rest[1]):
                return self._json(404, {"error": "Invalid rev id"}, {"X-Error-Code": "RevisionNotFound"})
            entries = []
            files = dict(repo.files, **repo.extra)
            for p in sorted(files):
                data = files[p]
                e = {"type": "file", "oid": git_blob_id(data), "size": len(data), "path": p}
                if repo.is_lfs(p):
                    e["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
                entries.append(e)
            if self.hub.listing_padding:
                entries[0]["padding"] = "x" * self.hub.listing_padding
            start = int(query.get("cursor", ["0"])[0])
            headers = {}
            if self.hub.endless_pages > 0:
                # A new page of new names after every page, forever.
                n = self.hub.endless_pages
                entries = [{"type": "file", "oid": "0" * 40, "size": 1, "path": f"junk/{start + i}.bin"} for i in range(n)]
                nxt = f"{self.base}/api/models/{repo.repo_id}/tree/{rest[1]}?recursive=true&cursor={start + n}"
                headers["Link"] = f'<{nxt}>; rel="next"'
            elif self.hub.page_size > 0:
                end = start + self.hub.page_size
                if end < len(entries):
                    nxt = f"{self.base}/api/models/{repo.repo_id}/tree/{rest[1]}?recursive=true&cursor={end}"
                    headers["Link"] = f'<{nxt}>; rel="next"'
                entries = entries[start:end]
            return self._json(200, entries, headers)
        self._json(404, {"error": "Not Found"})

    def _resolve(self, repo: Repo, rev: str, path: str, head: bool) -> None:
        if not self._rev_ok(repo, rev):
            return self._json(404, {"error": "Invalid rev id"}, {"X-Error-Code": "RevisionNotFound"})
        data = repo.files.get(path, repo.extra.get(path))
        if data is None:
            return self._json(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
        common = {"X-Repo-Commit": repo.commit, "Accept-Ranges": "bytes"}
        if repo.is_lfs(path):
            sha = hashlib.sha256(data).hexdigest()
            # The hub's storage is another host: by default this hub's second listener on 127.0.0.2
            # (another origin than 127.0.0.1, with no name to resolve: a minimal system may have no
            # /etc/hosts entry for "localhost").
            location = f"{self.hub.cdn_base or self.storage_base}/cdn/{sha}"
            size = len(data) + self.hub.size_lie.get(path, 0)
            h = dict(common, **{"Location": location, "X-Linked-Etag": f'"{sha}"', "X-Linked-Size": size,
                                "ETag": f'"{git_blob_id(data)}"', "Content-Length": 0})
            return self._send(302, b"", h, head=True)
        h = dict(common, **{"ETag": f'"{git_blob_id(data)}"', "Content-Type": "application/octet-stream"})
        self._send(200, data, h, head=head)

    def _cdn(self, sha: str, head: bool, query: str = "") -> None:
        if self.hub.redirect_loop:
            hop = int(urllib.parse.parse_qs(query).get("hop", ["0"])[0]) + 1
            return self._send(302, b"", {"Location": f"/cdn/{sha}?hop={hop}"}, head=True)
        data = self.hub.blob(sha)
        if data is None:
            return self._send(404, b"no such blob")
        if sha in self.hub.corrupt:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        start = 0
        rng = self.headers.get("Range", "")
        status = 200
        if rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
            if start >= len(data):
                return self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"}, head=head)
            status = 206
        body = data[start:]
        h = {"Content-Type": "application/octet-stream", "Content-Length": len(body), "Accept-Ranges": "bytes",
             "ETag": f'"{sha}"'}
        if sha in self.hub.overlong and not head:
            return self._overlong(sha, status, h, body, self.hub.overlong[sha])
        if status == 206:
            h["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        self.send_response(status)
        for k, v in h.items():
            self.send_header(k, str(v))
        self.end_headers()
        if head:
            return
        limit = None
        with self.hub.lock:
            if sha in self.hub.cut_after:
                limit = self.hub.cut_after.pop(sha)  # once
        sent = 0
        view = memoryview(body)
        while sent < len(body):
            n = min(self.hub.chunk_size, len(body) - sent)
            if limit is not None and sent + n > limit:
                n = max(0, limit - sent)
            if n == 0:
                break
            self.wfile.write(view[sent:sent + n])
            self.wfile.flush()
            sent += n
            with self.hub.lock:
                self.hub.blob_bytes_sent[sha] = self.hub.blob_bytes_sent.get(sha, 0) + n
            if self.hub.chunk_pause:
                time.sleep(self.hub.chunk_pause)
        if limit is not None:
            self.close_connection = True  # cut: the client saw fewer bytes than Content-Length


    OVERLONG_EXTRA = 64 << 20

    def _overlong(self, sha: str, status: int, h: dict, body: bytes, mode: str) -> None:
        """The blob, then 64 MiB more: chunked (no length said) or with a Content-Length that counts them."""
        extra = self.OVERLONG_EXTRA
        if mode == "chunked":
            del h["Content-Length"]
            h["Transfer-Encoding"] = "chunked"
        else:
            h["Content-Length"] = len(body) + extra
        self.send_response(status)
        for k, v in h.items():
            self.send_header(k, str(v))
        self.end_headers()
        filler = b"\0" * 65536
        for piece in [body] + [filler] * (extra // len(filler)):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if mode == "chunked" else piece)
            with self.hub.lock:
                self.hub.blob_bytes_sent[sha] = self.hub.blob_bytes_sent.get(sha, 0) + len(piece)
        if mode == "chunked":
            self.wfile.write(b"0\r\n\r\n")


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)  # a client that went away is expected here


class HubServer:
    """The hub's API on 127.0.0.1:<free port> and its file storage (where LFS downloads are redirected,
    unless hub.cdn_base says otherwise) on 127.0.0.2:<free port>, both serving `hub`; use as a
    context manager. Linux routes all of 127.0.0.0/8 to the loopback interface."""

    def __init__(self, hub: Hub) -> None:
        handler = type("Handler", (_Handler,), {"hub": hub})
        self.servers = [_Server(("127.0.0.1", 0), handler), _Server(("127.0.0.2", 0), handler)]
        self.url = f"http://127.0.0.1:{self.servers[0].server_address[1]}"
        handler.base = self.url
        handler.storage_base = f"http://127.0.0.2:{self.servers[1].server_address[1]}"
        self.threads = [threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
                        for s in self.servers]

    def __enter__(self) -> "HubServer":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        for s in self.servers:
            s.shutdown()
            s.server_close()
