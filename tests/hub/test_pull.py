# SPDX-License-Identifier: MIT
"""`clef pull`, names in -m and the shared Hugging Face cache, live against a local hub
(tests/hub/local_hub.py) on loopback ports. The local hub is first checked with the reference
client (huggingface_hub.snapshot_download); then clef writes caches that huggingface_hub reads
back, and reads caches that huggingface_hub wrote. docs/MODELS.md describes the behaviour."""

from __future__ import annotations

import hashlib
import os
import pathlib
import random
import signal
import subprocess
import time

import pytest
from conftest import GGUF_REPO, RELEASE_REPO, cache_state, clean_env, clef_bin, hub_env, run_clef
from local_hub import Hub, HubServer, git_blob_id

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
REQUEST = str(REPO_ROOT / "examples" / "request.json")
RELEASE_FILES = {"SHA256SUMS", "config.json", "joint_head.safetensors", "joint_head_config.json", "model.safetensors",
                 "preprocessor_config.json", "random_weights.json", "tokenizer.json", "tokenizer_config.json"}


def hf_download(url: str, cache: pathlib.Path, repo_id: str, **kw) -> str:
    from huggingface_hub import snapshot_download

    return snapshot_download(repo_id, endpoint=url, cache_dir=str(cache), token=False, **kw)


def repo_dir(cache: pathlib.Path, repo_id: str) -> pathlib.Path:
    return cache / ("models--" + repo_id.replace("/", "--"))


def expected_blob(data: bytes, lfs: bool) -> str:
    return hashlib.sha256(data).hexdigest() if lfs else git_blob_id(data)


def test_local_hub_serves_the_reference_client(hub, cache):
    """huggingface_hub.snapshot_download downloads both repositories from the local hub and lays
    them out as models--ORG--REPO/{refs/main, snapshots/<commit>/..., blobs/<etag>}."""
    h, url = hub
    for repo_id in (RELEASE_REPO, GGUF_REPO):
        repo = h.repos[repo_id]
        snap = pathlib.Path(hf_download(url, cache, repo_id))
        rd = repo_dir(cache, repo_id)
        assert (rd / "refs" / "main").read_text() == repo.commit
        assert snap == rd / "snapshots" / repo.commit
        for path, data in repo.files.items():
            link = snap / path
            assert link.is_symlink() and link.read_bytes() == data
            blob = expected_blob(data, repo.is_lfs(path))
            assert (link.resolve()) == (rd / "blobs" / blob).resolve()


def test_pull_release_folder_read_back_by_huggingface_hub(hub, cache):
    """clef pull fetches only the model's files (paginated listing) into a cache that
    huggingface_hub's scan_cache_dir and try_to_load_from_cache read as their own."""
    from huggingface_hub import scan_cache_dir, try_to_load_from_cache

    h, url = hub
    h.page_size = 3
    r = run_clef("pull", RELEASE_REPO, env=hub_env(url, cache))
    assert r.returncode == 0, r.stderr
    repo = h.repos[RELEASE_REPO]
    snap = repo_dir(cache, RELEASE_REPO) / "snapshots" / repo.commit
    assert r.stdout.strip() == str(snap)
    assert {p.name for p in snap.iterdir()} == RELEASE_FILES
    assert (repo_dir(cache, RELEASE_REPO) / "refs" / "main").read_text() == repo.commit
    info = scan_cache_dir(cache)
    assert not info.warnings, info.warnings
    (cached,) = [c for c in info.repos if c.repo_id == RELEASE_REPO]
    (rev,) = cached.revisions
    assert rev.commit_hash == repo.commit and rev.refs == frozenset({"main"})
    assert {f.file_name for f in rev.files} == RELEASE_FILES
    for name in RELEASE_FILES:
        path = try_to_load_from_cache(RELEASE_REPO, name, cache_dir=str(cache))
        assert isinstance(path, str) and pathlib.Path(path).read_bytes() == repo.files[name]
        # Blob names are the ones huggingface_hub gives them (sha256 for LFS files, git id otherwise).
        assert pathlib.Path(path).resolve().name == expected_blob(repo.files[name], repo.is_lfs(name))
        assert os.readlink(snap / name) == "../../blobs/" + pathlib.Path(path).resolve().name
    # By commit id (one file at a time): no ref is written, the same snapshot results.
    by_commit = cache.parent / "by-commit"
    r = run_clef("pull", RELEASE_REPO, "--revision", repo.commit, "--parallel", "1", env=hub_env(url, by_commit))
    assert r.returncode == 0, r.stderr
    assert not (repo_dir(by_commit, RELEASE_REPO) / "refs").exists()
    assert {p.name for p in (repo_dir(by_commit, RELEASE_REPO) / "snapshots" / repo.commit).iterdir()} == RELEASE_FILES
    # A second pull downloads nothing.
    before = len(h.requests)
    r = run_clef("pull", RELEASE_REPO, env=hub_env(url, cache))
    assert r.returncode == 0 and "0 files fetched" in r.stderr
    assert not any(p.startswith("/cdn/") for _, p, _ in h.requests[before:])


def test_huggingface_hub_cache_used_offline_by_name(hub, cache, tiny_folder, tmp_path):
    """A cache written by huggingface_hub is used by `-m ORG/REPO` with HF_HUB_OFFLINE=1 and no
    server: decide, inspect and hidden answer exactly as with the folder's path."""
    _, url = hub
    hf_download(url, cache, RELEASE_REPO)
    env = clean_env(HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9")
    by_name = run_clef("decide", "-m", RELEASE_REPO, REQUEST, env=env)
    by_path = run_clef("decide", "-m", str(tiny_folder), REQUEST, env=env)
    assert by_name.returncode == 0, by_name.stderr
    assert by_name.stdout == by_path.stdout
    a = run_clef("inspect", "--json", "-m", RELEASE_REPO, env=env)
    b = run_clef("inspect", "--json", str(tiny_folder), env=env)
    assert a.returncode == 0, a.stderr
    assert a.stdout.replace(str(repo_dir(cache, RELEASE_REPO)), "X") != "" and len(a.stdout) > 100
    ha = run_clef("hidden", "-m", RELEASE_REPO, "--ids-list", "1,2,3", "--out", str(tmp_path / "a"), env=env)
    hb = run_clef("hidden", "-m", str(tiny_folder), "--ids-list", "1,2,3", "--out", str(tmp_path / "b"), env=env)
    assert ha.returncode == 0, ha.stderr
    assert (tmp_path / "a.chunk512.npy").read_bytes() == (tmp_path / "b.chunk512.npy").read_bytes()
    assert b.returncode == 0
    # --revision by commit id and by the branch name; an unknown revision says how to pull it.
    commit = (repo_dir(cache, RELEASE_REPO) / "refs" / "main").read_text()
    assert run_clef("decide", "-m", RELEASE_REPO, "--revision", commit, REQUEST, env=env).stdout == by_path.stdout
    bad = run_clef("decide", "-m", RELEASE_REPO, "--revision", "v9", REQUEST, env=env)
    assert bad.returncode == 2 and "clef pull clef-test/tiny --revision v9" in bad.stderr
    missing = run_clef("decide", "-m", "clef-test/absent", REQUEST, env=env)
    assert missing.returncode == 2 and "clef pull clef-test/absent" in missing.stderr


def test_gguf_quant_pull_and_decide(hub, cache, gguf_folder):
    """ORG/REPO:QUANT pulls one quant, its projector and the side files; the model answers as the
    GGUF's path; a missing quant is a 404-like refusal listing the quants."""
    h, url = hub
    env = hub_env(url, cache)
    r = run_clef("pull", GGUF_REPO + ":q8_0", env=env)
    assert r.returncode == 0, r.stderr
    snap = repo_dir(cache, GGUF_REPO) / "snapshots" / h.repos[GGUF_REPO].commit
    assert r.stdout.strip() == str(snap / "clef-tiny-Q8_0.gguf")
    assert {p.name for p in snap.iterdir()} == {"clef-tiny-Q8_0.gguf", "mmproj-clef-tiny-F16.gguf", "joint_head.safetensors",
                                                "joint_head_config.json", "random_weights.json"}
    assert "projector mmproj-clef-tiny-F16.gguf" in r.stderr
    off = dict(env, HF_HUB_OFFLINE="1")
    by_name = run_clef("decide", "-m", GGUF_REPO + ":Q8_0", "--precision", "int8", REQUEST, env=off)
    by_path = run_clef("decide", "-m", str(gguf_folder / "clef-tiny-Q8_0.gguf"), "--precision", "int8", REQUEST, env=off)
    assert by_name.returncode == 0, by_name.stderr
    assert by_name.stdout == by_path.stdout
    by_file = run_clef("decide", "-m", GGUF_REPO + "/clef-tiny-Q8_0.gguf", "--precision", "int8", REQUEST, env=off)
    assert by_file.stdout == by_path.stdout
    missing = run_clef("pull", GGUF_REPO + ":Q4_K_M", env=env)
    assert missing.returncode == 2
    assert "has no Q4_K_M GGUF" in missing.stderr and "Q8_0" in missing.stderr and "F32" in missing.stderr


def test_cut_connection_resumes_with_range(hub, cache):
    """A connection cut mid-file is resumed with a Range request: in the same run (retries) and,
    with --retries 0, by the next run from the .incomplete blob; bytes sent < 1.5x the file."""
    h, url = hub
    repo = h.repos[RELEASE_REPO]
    data = repo.files["model.safetensors"]
    sha = hashlib.sha256(data).hexdigest()
    h.cut_after[sha] = len(data) // 2
    r = run_clef("pull", RELEASE_REPO, "--progress", "lines", env=hub_env(url, cache))
    assert r.returncode == 0, r.stderr
    assert "resuming at byte" in r.stderr
    assert h.blob_bytes_sent[sha] < 1.5 * len(data)
    assert any(a == "GET" and p == f"/cdn/{sha}" for a, p, _ in h.requests)

    # Across runs: the first run stops (no retries) and keeps the partial bytes out of sight.
    cache2 = cache.parent / "hub2"
    h.blob_bytes_sent.clear()
    h.cut_after[sha] = len(data) // 3
    r = run_clef("pull", RELEASE_REPO, "--retries", "0", env=hub_env(url, cache2))
    assert r.returncode == 5, r.stderr
    assert "network error" in r.stderr and "files are verified in the cache and kept" in r.stderr
    blobs = repo_dir(cache2, RELEASE_REPO) / "blobs"
    assert (blobs / (sha + ".incomplete")).stat().st_size == len(data) // 3
    assert not (blobs / sha).exists()
    snap = repo_dir(cache2, RELEASE_REPO) / "snapshots" / repo.commit
    assert not (snap / "model.safetensors").exists() and (snap / "config.json").exists()
    r = run_clef("pull", RELEASE_REPO, env=hub_env(url, cache2))
    assert r.returncode == 0, r.stderr
    assert h.blob_bytes_sent[sha] == len(data)  # the rest only: no byte twice
    assert (snap / "model.safetensors").read_bytes() == data


def test_bad_sha256_is_refused(hub, cache):
    """Bytes that do not match the published sha256 never appear under the file's name; the other
    files stay verified in the cache."""
    h, url = hub
    data = h.repos[RELEASE_REPO].files["model.safetensors"]
    sha = hashlib.sha256(data).hexdigest()
    h.corrupt.add(sha)
    r = run_clef("pull", RELEASE_REPO, env=hub_env(url, cache))
    assert r.returncode == 3, r.stderr
    assert "does not match its published sha256" in r.stderr
    rd = repo_dir(cache, RELEASE_REPO)
    snap = rd / "snapshots" / h.repos[RELEASE_REPO].commit
    assert not (rd / "blobs" / sha).exists() and not (rd / "blobs" / (sha + ".incomplete")).exists()
    assert not (snap / "model.safetensors").exists()
    assert (snap / "config.json").exists() and (snap / "joint_head.safetensors").exists()
    h.corrupt.clear()
    assert run_clef("pull", RELEASE_REPO, env=hub_env(url, cache)).returncode == 0


def test_redirect_to_second_host_and_tokens(hub, cache):
    """LFS bytes come from a second host:port after the hub's redirect (no token sent there); a
    token-protected hub answers 401 without a token (the message says how to set one) and works
    with HF_TOKEN or with the token file huggingface_hub writes."""
    h, url = hub
    h.token = "hf_clef_test_token"
    with HubServer(h) as cdn:
        h.cdn_base = cdn.url
        r = run_clef("pull", RELEASE_REPO, env=hub_env(url, cache))
        assert r.returncode == 2
        assert "401" in r.stderr and "HF_TOKEN" in r.stderr and "hf auth login" in r.stderr
        r = run_clef("pull", RELEASE_REPO, env=hub_env(url, cache, HF_TOKEN=h.token))
        assert r.returncode == 0, r.stderr
        cdn_hits = [(p, a) for _, p, a in h.requests if p.startswith("/cdn/")]
        assert len(cdn_hits) >= 2 and all(a == "" for _, a in cdn_hits)
        # The token file under HF_HOME, as `hf auth login` writes it.
        cache2 = cache.parent / "hub2"
        (cache.parent / "token").write_text(h.token)
        r = run_clef("pull", GGUF_REPO + ":F32", env=hub_env(url, cache2))
        assert r.returncode == 0, r.stderr


def test_not_found_and_offline(hub, cache):
    h, url = hub
    r = run_clef("pull", "clef-test/nothing-here", env=hub_env(url, cache))
    assert r.returncode == 2 and "repository not found" in r.stderr and "404" in r.stderr
    r = run_clef("pull", RELEASE_REPO, "--revision", "no-such-branch", env=hub_env(url, cache))
    assert r.returncode == 2 and "revision no-such-branch not found" in r.stderr
    before = len(h.requests)
    r = run_clef("pull", RELEASE_REPO, env=hub_env(url, cache, HF_HUB_OFFLINE="1"))
    assert r.returncode == 2 and "HF_HUB_OFFLINE" in r.stderr
    assert len(h.requests) == before
    r = run_clef("pull", "not a name", env=hub_env(url, cache))
    assert r.returncode == 2


def test_decide_with_pull_and_progress_lines(hub, cache, tiny_folder):
    """--pull on decide fetches what is missing; a log gets plain progress lines."""
    _, url = hub
    env = hub_env(url, cache)
    r = subprocess.run([clef_bin(), "decide", "-m", RELEASE_REPO, "--pull", REQUEST], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == run_clef("decide", "-m", str(tiny_folder), REQUEST).stdout
    assert "clef pull: verified model.safetensors" in r.stderr and "ETA" in r.stderr


def test_progress_bar_on_a_terminal(hub, cache):
    """On a terminal the progress is a redrawn bar with bytes, rate and ETA per file and in total."""
    import pty

    h, url = hub
    h.chunk_pause = 0.05
    master, slave = pty.openpty()
    p = subprocess.Popen([clef_bin(), "pull", RELEASE_REPO], stdout=subprocess.PIPE, stderr=slave,
                         env=hub_env(url, cache))
    os.close(slave)
    out = b""
    p.wait(timeout=120)
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert p.returncode == 0
    text = out.decode(errors="replace")
    assert "\x1b[" in text and "total:" in text and "ETA" in text and "/s" in text
    assert "model.safetensors" in text and "%" in text


def test_sigkill_at_random_points_then_rerun(hub, cache):
    """SIGKILL of clef pull at 10 random moments, then a rerun: the final cache is identical to
    that of an uninterrupted pull (no .incomplete left, same blobs, links and refs)."""
    h, url = hub
    ref_cache = cache.parent / "reference"
    assert run_clef("pull", RELEASE_REPO, "--progress", "none", env=hub_env(url, ref_cache)).returncode == 0
    h.chunk_size, h.chunk_pause = 16384, 0.02  # ~1.2 s for the largest file: kills land mid-file
    rng = random.Random(1234)
    env = hub_env(url, cache)
    partial_seen = 0
    for _ in range(10):
        seen = len(h.requests)
        p = subprocess.Popen([clef_bin(), "pull", RELEASE_REPO, "--progress", "none", "--parallel", "2"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        # The random moment counts from this run's first request, so that a slow start (a loaded
        # machine) does not move every kill before the transfer.
        deadline = time.monotonic() + 30
        while len(h.requests) == seen and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.3))
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
        partial_seen += any(cache.rglob("*.incomplete"))
    h.chunk_pause = 0
    assert partial_seen >= 3, "the kills should land mid-file"
    r = run_clef("pull", RELEASE_REPO, env=env)
    assert r.returncode == 0, r.stderr
    assert cache_state(cache) == cache_state(ref_cache)


def test_write_error_keeps_verified_files_and_resumes(hub, cache):
    """A write that the file system refuses (here a file-size limit, EFBIG; a full disk is ENOSPC
    on the same path) is an I/O error naming the partial file; verified files stay, and a rerun
    resumes from the partial bytes."""
    import resource

    h, url = hub
    data = h.repos[RELEASE_REPO].files["model.safetensors"]
    sha = hashlib.sha256(data).hexdigest()
    limit = 400_000

    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() then fails with EFBIG instead of a signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    r = subprocess.run([clef_bin(), "pull", RELEASE_REPO, "--progress", "none"], capture_output=True, text=True,
                       env=hub_env(url, cache), timeout=120, preexec_fn=limit_file_size)
    assert r.returncode == 5, r.stderr
    assert "while writing" in r.stderr and sha + ".incomplete" in r.stderr and "bytes kept" in r.stderr
    rd = repo_dir(cache, RELEASE_REPO)
    snap = rd / "snapshots" / h.repos[RELEASE_REPO].commit
    assert (snap / "config.json").exists() and not (snap / "model.safetensors").exists()
    kept = (rd / "blobs" / (sha + ".incomplete")).stat().st_size
    assert 0 < kept <= limit
    h.blob_bytes_sent.clear()
    r = run_clef("pull", RELEASE_REPO, env=hub_env(url, cache))
    assert r.returncode == 0, r.stderr
    assert h.blob_bytes_sent[sha] == len(data) - kept  # only the missing bytes
    assert (snap / "model.safetensors").read_bytes() == data


def test_help_lists_every_command():
    r = run_clef("--help")
    assert r.returncode == 0
    commands = r.stdout.split("Subcommands:")[1].split("\n\n")[0]
    for c in ("inspect", "make-model", "tokenize", "decide", "serve", "pull", "mcp", "hidden"):
        assert f"\n  {c} " in commands, c
    for sub in ("pull", "mcp", "hidden"):
        h = run_clef(sub, "--help")
        assert h.returncode == 0 and "--revision" in h.stdout, sub
    h = run_clef("pull", "--help").stdout
    for bound in ("--timeout", "--stall-timeout", "declared size", "100,000 entries", "16 MiB per page", "Retry-After",
                  "'..' component", "git's rules"):
        assert bound in h, bound


# -- Bounds against a misbehaving hub (docs/MODELS.md "Bounds") -----------------------------------


def incomplete_files(cache: pathlib.Path) -> list[pathlib.Path]:
    return sorted(cache.rglob("*.incomplete"))


@pytest.mark.parametrize("mode", ["chunked", "length"])
def test_body_longer_than_declared_is_stopped_and_deleted(hub, cache, mode):
    """A blob body longer than the file's declared size (the hub would send 64 MiB more, chunked or
    with a Content-Length that says so) is cut within one curl buffer (16 KiB) of the declared size,
    its bytes are deleted, the error says the server sent more (not "resume"), and the other files
    are kept."""
    h, url = hub
    repo = h.repos[RELEASE_REPO]
    data = repo.files["joint_head.safetensors"]
    sha = hashlib.sha256(data).hexdigest()
    h.overlong[sha] = mode
    r = run_clef("pull", RELEASE_REPO, "--progress", "none", env=hub_env(url, cache), timeout=60)
    assert r.returncode == 3, r.stderr
    assert f"the server sent more than the declared size of joint_head.safetensors ({len(data)} bytes)" in r.stderr
    assert "resume" not in r.stderr and "deleted" in r.stderr
    if mode == "chunked":
        stopped = int(r.stderr.split("stopped at byte ")[1].split(";")[0])
        assert len(data) < stopped <= len(data) + 16384
    else:
        assert f"it announced {len(data) + (64 << 20)} bytes" in r.stderr
    # The hub did not get to send its 64 MiB: clef closed the connection (socket buffers aside).
    assert h.blob_bytes_sent[sha] < len(data) + (32 << 20)
    rd = repo_dir(cache, RELEASE_REPO)
    assert incomplete_files(cache) == [] and not (rd / "blobs" / sha).exists()
    snap = rd / "snapshots" / repo.commit
    assert not (snap / "joint_head.safetensors").exists() and (snap / "model.safetensors").read_bytes() == \
        repo.files["model.safetensors"]


def test_listing_caps(hub, cache):
    """Endless pagination of new names stops at the 100,000-entry cap of a listing (21 pages of
    5,000 here), endless small pages at the 1,000-page cap, and a page over 16 MiB is refused, each
    with an error naming the cap; nothing is written to the cache."""
    h, url = hub
    h.endless_pages = 5000
    r = run_clef("pull", RELEASE_REPO, env=hub_env(url, cache), timeout=60)
    assert r.returncode == 5, r.stderr
    assert "file list has more than 100000 entries, the cap of a listing" in r.stderr
    pages = [p for _, p, _ in h.requests if "/tree/" in p]
    assert len(pages) == 21  # 20 full pages reach the cap; the 21st passes it
    h.endless_pages = 1  # few entries: the 1,000-page cap comes first
    r = run_clef("pull", RELEASE_REPO, env=hub_env(url, cache), timeout=60)
    assert r.returncode == 5, r.stderr
    assert "file list goes on past 1000 pages, the cap of a listing" in r.stderr
    h.endless_pages = 0
    h.listing_padding = (16 << 20) + 1
    r = run_clef("pull", RELEASE_REPO, env=hub_env(url, cache), timeout=60)
    assert r.returncode == 5, r.stderr
    assert "the hub's answer for the file list is longer than 16 MiB, the cap of one answer" in r.stderr
    assert not repo_dir(cache, RELEASE_REPO).exists()


def test_unsafe_listed_names_are_refused(hub, cache):
    """A listed file name with a NUL (which would name config.json on disk), a '..' component, a
    backslash, a leading '/' or a control character fails the pull before anything is written: no
    link of an earlier pull of the same commit is replaced."""
    h, url = hub
    repo = h.repos[RELEASE_REPO]
    env = hub_env(url, cache)
    assert run_clef("pull", RELEASE_REPO, "--progress", "none", env=env).returncode == 0
    before = cache_state(cache)
    for name, why in [("config.json\0.bak.json", "a NUL character"), ("../../../escape.json", "a '..' path component"),
                      ("sub/../config.json", "a '..' path component"), ("tokenizer\\config.json", "a backslash"),
                      ("/etc/config.json", "an absolute path"), ("config\n.json", "a control character")]:
        repo.extra = {name: b'{"model_type": "not clef"}\n'}
        r = run_clef("pull", RELEASE_REPO, "--progress", "none", env=env)
        assert r.returncode == 5, (name, r.stderr)
        assert f"with {why}; refused" in r.stderr, (name, r.stderr)
        assert cache_state(cache) == before, name
    assert not (cache.parent / "escape.json").exists()


def test_invalid_revision_is_refused(hub, cache, tmp_path):
    """Against a hub that accepts any revision, --revision must still be a commit id or a git ref
    name: `../../../../x` and other names git refuses are refused before any request and nothing is
    written outside the cache (or in it); refs/pr/1 is a valid name and its ref stays inside refs/."""
    h, url = hub
    h.lenient_revisions = True
    env = hub_env(url, cache)

    def tree():
        return {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")}

    before = tree()
    for rev in ("../../../../x", "main/../../x", "x" * 256):
        n = len(h.requests)
        r = run_clef("pull", RELEASE_REPO, "--revision", rev, env=env)
        assert r.returncode == 2, (rev, r.stderr)
        assert "is not a branch, tag or commit id" in r.stderr, (rev, r.stderr)
        assert len(h.requests) == n, rev
    assert tree() == before
    r = run_clef("pull", RELEASE_REPO, "--revision", "refs/pr/1", "--progress", "none", env=env)
    assert r.returncode == 0, r.stderr
    assert (repo_dir(cache, RELEASE_REPO) / "refs" / "refs" / "pr" / "1").read_text() == h.repos[RELEASE_REPO].commit


def test_revision_names_follow_git_check_ref_format(cache):
    """clef accepts a --revision (offline, so the answer is "not in the cache" rather than a refusal)
    exactly when `git check-ref-format` accepts it as a branch name (refs/heads/NAME)."""
    env = clean_env(HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1")
    names = ["main", "v1.0", "refs/pr/1", "feature/x_y", "a@b", "#x", "-x", "ü", "a..b", "x/.y", ".hidden", "x.lock",
             "x.lock/y", "x.", "end/", "/start", "refs//pr", "a b", "a~b", "a^b", "a:b", "a?b", "a*b", "a[b", "a\\b",
             "a@{1}", "tab\tx", "del\x7fx", "a/b.lock/c", "x..", "0" * 40, "A" * 40]
    for name in names:
        git = subprocess.run(["git", "check-ref-format", "refs/heads/" + name], capture_output=True)
        r = run_clef("inspect", "-m", RELEASE_REPO, "--revision", name, env=env)
        assert r.returncode == 2, (name, r.stderr)
        refused = "is not a branch, tag or commit id" in r.stderr
        assert refused == (git.returncode != 0), (name, git.returncode, r.stderr)


def test_retry_after_is_honoured(hub, cache):
    """A 429 from the API and a 503 from the storage host, each with Retry-After: 1, are retried
    after at least that second and the pull succeeds; a Retry-After over 60 s stops it at once."""
    h, url = hub
    h.throttle = {"api": [(429, "1")], "cdn": [(503, "1")]}
    r = run_clef("pull", RELEASE_REPO, "--progress", "none", "--parallel", "1", env=hub_env(url, cache))
    assert r.returncode == 0, r.stderr
    for prefix, status in (("/api/", 429), ("/cdn/", 503)):
        hits = [(t, s) for t, _, p, s in h.times if p.startswith(prefix)]
        (i,) = [k for k, (_, s) in enumerate(hits) if s == status]
        assert hits[i + 1][0] - hits[i][0] >= 0.95, (prefix, hits[i + 1][0] - hits[i][0])
    h.throttle = {"api": [(429, "3600")]}
    start = time.monotonic()
    r = run_clef("pull", RELEASE_REPO, env=hub_env(url, cache.parent / "hub2"))
    assert r.returncode == 5, r.stderr
    assert "Retry-After: 3600 s, longer than clef pull waits (60 s)" in r.stderr
    assert time.monotonic() - start < 30


def test_timeout_and_stall_limit_stop_a_dripping_hub(hub, cache):
    """A storage host that drips 16 bytes every 20 ms: --timeout 2 stops the whole pull within its
    deadline (exit 5, the error names it); --stall-timeout 1 cuts the transfer (under 1 KiB/s) after
    about a second."""
    h, url = hub
    h.chunk_size, h.chunk_pause = 16, 0.02
    start = time.monotonic()
    r = run_clef("pull", RELEASE_REPO, "--timeout", "2", "--progress", "none", env=hub_env(url, cache), timeout=60)
    took = time.monotonic() - start
    assert r.returncode == 5, r.stderr
    assert "clef pull stopped at its --timeout of 2 s" in r.stderr
    assert took < 5, took
    start = time.monotonic()
    r = run_clef("pull", RELEASE_REPO, "--stall-timeout", "1", "--retries", "0", "--progress", "none",
                 env=hub_env(url, cache.parent / "hub2"), timeout=60)
    took = time.monotonic() - start
    assert r.returncode == 5, r.stderr
    assert "too slow" in r.stderr.lower()
    assert took < 5, took


def test_redirect_loop_leaves_no_incomplete_file(hub, cache):
    """A storage host that redirects every blob to itself fails those files at once (not retried)
    and leaves no .incomplete file; the files stored in git are kept."""
    h, url = hub
    h.redirect_loop = True
    start = time.monotonic()
    r = run_clef("pull", RELEASE_REPO, "--progress", "none", env=hub_env(url, cache), timeout=60)
    assert r.returncode == 5, r.stderr
    assert "redirect" in r.stderr.lower()
    assert time.monotonic() - start < 10
    assert incomplete_files(cache) == []
    snap = repo_dir(cache, RELEASE_REPO) / "snapshots" / h.repos[RELEASE_REPO].commit
    assert (snap / "config.json").exists() and not (snap / "model.safetensors").exists()


def test_declared_sizes_empty_file_and_disagreeing_head(hub, cache):
    """An empty listed file is stored (its declared size is 0: nothing to fetch); a HEAD answer whose
    size disagrees with the file list's is refused before any byte of that file is fetched."""
    h, url = hub
    repo = h.repos[RELEASE_REPO]
    repo.extra = {"empty_config.json": b""}
    r = run_clef("pull", RELEASE_REPO, "--progress", "none", env=hub_env(url, cache))
    assert r.returncode == 0, r.stderr
    link = repo_dir(cache, RELEASE_REPO) / "snapshots" / repo.commit / "empty_config.json"
    assert link.is_symlink() and link.read_bytes() == b""
    data = repo.files["model.safetensors"]
    h.size_lie["model.safetensors"] = 1
    cache2 = cache.parent / "hub2"
    before = len(h.requests)
    r = run_clef("pull", RELEASE_REPO, "--progress", "none", env=hub_env(url, cache2))
    assert r.returncode == 5, r.stderr
    assert (f"the hub declares two sizes for model.safetensors: {len(data)} bytes in the file list, "
            f"{len(data) + 1} in its HEAD answer") in r.stderr
    sha = hashlib.sha256(data).hexdigest()
    assert not any(p == f"/cdn/{sha}" for _, p, _ in h.requests[before:])
    assert incomplete_files(cache2) == []
