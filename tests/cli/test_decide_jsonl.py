# SPDX-License-Identifier: MIT
"""`clef decide --jsonl`: one answer line per request line, error objects for refused lines,
resumption of an interrupted run, and agreement with single-request `clef decide`.

Expected values come from the binary's own single-request path (itself checked against the Python
reference in tests/reference/test_decide_e2e.py) and from Python's json module.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import time

import pytest

from conftest import REPO_ROOT, clef_bin, run_clef

REQUESTS = REPO_ROOT / "tests" / "data" / "requests"


def corpus_requests() -> list:
    import reference

    path = REQUESTS / "corpus.jsonl"
    n = sum(1 for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip())
    return [reference.load_jsonl_request(path, i) for i in range(n)]


def bad_bodies() -> list:
    out = []
    for ln in (REQUESTS / "bad.jsonl").read_text(encoding="utf-8").splitlines():
        if not ln.strip():
            continue
        case = json.loads(ln)
        out.append(case["body"] if isinstance(case.get("body"), str) else json.dumps(case.get("request", case)))
    return out


def write_lines(path: pathlib.Path, lines: list) -> None:
    path.write_text("".join(ln + "\n" for ln in lines), encoding="utf-8")


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, cpp_tiny):
    """Corpus requests interleaved with bad.jsonl bodies, and the single-request answer of each."""
    reqs = [json.dumps(r, ensure_ascii=False) for r in corpus_requests()[:8]]
    bads = [b for b in bad_bodies() if "\n" not in b][:8]
    lines = [x for pair in zip(reqs, bads) for x in pair]
    d = tmp_path_factory.mktemp("jsonl")
    singles = []
    for i, body in enumerate(lines):
        p = d / f"req{i}.json"
        p.write_bytes(body.encode("utf-8"))
        r = run_clef("decide", "-m", str(cpp_tiny), str(p))
        singles.append((r.returncode, r.stdout.strip(), r.stderr))
    return lines, singles, d


def test_jsonl_matches_single_requests_line_by_line(cpp_tiny, mixed, tmp_path):
    lines, singles, _ = mixed
    inp = tmp_path / "in.jsonl"
    write_lines(inp, lines)
    out = tmp_path / "out.jsonl"
    r = run_clef("decide", "-m", str(cpp_tiny), "--jsonl", str(inp), "--out", str(out))
    assert r.returncode == 1, r.stderr  # 1: finished, some lines refused
    got = out.read_text(encoding="utf-8").splitlines()
    assert len(got) == len(lines)
    for n, (line, (rc, body, err)) in enumerate(zip(got, singles), start=1):
        if rc == 0:
            assert line == body, n
        else:
            assert rc == 2, (n, err)
            obj = json.loads(line)
            assert list(obj) == ["error", "line"] and obj["line"] == n
            assert set(obj["error"]) == {"code", "message", "path"}
            # The single-request error line is "clef: error: <path>: <message>" with the same text.
            assert obj["error"]["message"] in err and obj["error"]["code"], (n, obj, err)
    assert "record(s) done" in r.stderr


def test_all_good_lines_exit_0_and_stdout_output(cpp_tiny, tmp_path):
    reqs = [json.dumps(r, ensure_ascii=False) for r in corpus_requests()[:3]]
    inp = tmp_path / "in.jsonl"
    write_lines(inp, reqs)
    r = run_clef("decide", "-m", str(cpp_tiny), "--jsonl", str(inp), "--no-progress")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 3 and all(json.loads(x)["answers"] for x in r.stdout.splitlines())
    assert "record(s) done" not in r.stderr


def test_resume_after_a_kill_redoes_nothing(cpp_tiny, tmp_path):
    reqs = [json.dumps(r, ensure_ascii=False) for r in corpus_requests()]
    inp = tmp_path / "in.jsonl"
    write_lines(inp, reqs)
    full = tmp_path / "full.jsonl"
    assert run_clef("decide", "-m", str(cpp_tiny), "--jsonl", str(inp), "--out", str(full)).returncode == 0
    want = full.read_text(encoding="utf-8")

    # Interrupted run: kill it once a few lines are written, then cut the file mid-line as a torn write would.
    out = tmp_path / "out.jsonl"
    p = subprocess.Popen([clef_bin(), "decide", "-m", str(cpp_tiny), "--threads", "1", "--jsonl", str(inp),
                          "--out", str(out), "--no-progress"], stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and (not out.exists() or out.read_text(encoding="utf-8").count("\n") < 3):
        time.sleep(0.01)
    p.send_signal(signal.SIGKILL)
    p.wait()
    done = out.read_text(encoding="utf-8")
    k = done.count("\n")
    assert 3 <= k and want.startswith(done[: done.rfind("\n") + 1])
    with open(out, "a", encoding="utf-8") as f:
        f.write('{"model":"torn')  # a partial last line
    r = run_clef("decide", "-m", str(cpp_tiny), "--jsonl", str(inp), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert f"resuming: {k} line(s)" in r.stderr
    assert out.read_text(encoding="utf-8") == want
    # The resumed run decided only the remaining lines: its token count is the tail's.
    tail_tokens = sum(json.loads(x)["usage"]["input_tokens"] for x in want.splitlines()[k:])
    assert f", {tail_tokens} tokens," in r.stderr, r.stderr

    # A finished file resumes to itself; --restart redoes everything.
    r = run_clef("decide", "-m", str(cpp_tiny), "--jsonl", str(inp), "--out", str(out), "--no-progress")
    assert r.returncode == 0 and out.read_text(encoding="utf-8") == want
    r = run_clef("decide", "-m", str(cpp_tiny), "--jsonl", str(inp), "--out", str(out), "--restart")
    assert r.returncode == 0 and "resuming" not in r.stderr and out.read_text(encoding="utf-8") == want


def test_output_of_another_input_is_refused(cpp_tiny, tmp_path):
    reqs = [json.dumps(r, ensure_ascii=False) for r in corpus_requests()[:3]]
    inp = tmp_path / "in.jsonl"
    write_lines(inp, reqs)
    out = tmp_path / "out.jsonl"
    write_lines(out, ['{"error":{"code":"x","message":"","path":""},"line":1}'] * 5)
    r = run_clef("decide", "-m", str(cpp_tiny), "--jsonl", str(inp), "--out", str(out))
    assert r.returncode == 2 and "belongs to another input" in r.stderr


@pytest.mark.parametrize("args,msg", [
    (["--out", "{inp}"], "names the input file"),
    (["--out", "{dir}"], "not a regular file"),
    (["{inp}"], "excludes"),
    (["--restart"], "--restart needs --out"),
    (["--out", "{dir}/missing/x.jsonl"], "No such file or directory"),
])
def test_bad_jsonl_invocations(cpp_tiny, tmp_path, args, msg):
    inp = tmp_path / "in.jsonl"
    write_lines(inp, ["{}"])
    args = [a.format(inp=inp, dir=tmp_path) for a in args]
    r = run_clef("decide", "-m", str(cpp_tiny), "--jsonl", str(inp), *args)
    assert r.returncode in (2, 5) and msg in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_missing_input_and_directory_input(cpp_tiny, tmp_path):
    for p in (tmp_path / "nope.jsonl", tmp_path):
        r = run_clef("decide", "-m", str(cpp_tiny), "--jsonl", str(p))
        assert r.returncode == 2 and "not a readable file" in r.stderr


def test_stdin_that_is_the_output_file_is_refused(cpp_tiny, tmp_path):
    f = tmp_path / "same.jsonl"
    write_lines(f, [json.dumps(corpus_requests()[0])])
    before = f.read_bytes()
    for extra in ([], ["--restart"]):
        with open(f, "rb") as stdin:
            r = subprocess.run([clef_bin(), "decide", "-m", str(cpp_tiny), "--jsonl", "-", "--out", str(f), *extra],
                               stdin=stdin, capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and "names the input file" in r.stderr, r.stderr
        assert f.read_bytes() == before


@pytest.mark.parametrize("content", [
    "my notes\nmore notes without newline",         # somebody else's file
    '{"model":"x","answers":{}}\n\n',               # a blank line among answers
    'clef: no --model given; using ...\n',          # stderr text captured into the file
])
def test_output_that_is_not_ours_is_never_overwritten(cpp_tiny, tmp_path, content):
    inp = tmp_path / "in.jsonl"
    write_lines(inp, [json.dumps(r, ensure_ascii=False) for r in corpus_requests()[:3]])
    out = tmp_path / "out.jsonl"
    out.write_text(content, encoding="utf-8")
    r = run_clef("decide", "-m", str(cpp_tiny), "--jsonl", str(inp), "--out", str(out))
    assert r.returncode == 2 and "is not an answer written by clef decide" in r.stderr, r.stderr
    assert out.read_text(encoding="utf-8") == content


def test_a_second_writer_on_the_same_output_is_refused(cpp_tiny, tmp_path):
    reqs = [json.dumps(r, ensure_ascii=False) for r in corpus_requests()] * 3
    inp = tmp_path / "in.jsonl"
    write_lines(inp, reqs)
    out = tmp_path / "out.jsonl"
    first = subprocess.Popen([clef_bin(), "decide", "-m", str(cpp_tiny), "--threads", "1", "--jsonl", str(inp),
                              "--out", str(out), "--no-progress"], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and (not out.exists() or out.stat().st_size == 0):
        time.sleep(0.01)
    r = run_clef("decide", "-m", str(cpp_tiny), "--jsonl", str(inp), "--out", str(out))
    first_rc = first.wait(timeout=600)
    assert first_rc == 0, first.stderr.read()
    assert r.returncode == 2 and "being written by another clef decide" in r.stderr, r.stderr
    assert len(out.read_text(encoding="utf-8").splitlines()) == len(reqs)


def test_pipe_input_and_byte_offsets_in_errors(cpp_tiny, tmp_path):
    good = json.dumps(corpus_requests()[0], ensure_ascii=False)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    p = subprocess.Popen([clef_bin(), "decide", "-m", str(cpp_tiny), "--jsonl", str(fifo), "--no-progress"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with open(fifo, "w", encoding="utf-8") as f:
        f.write(good + "\n" + '{"state": "x", "questions": {' + "\n")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 1, err
    lines = out.splitlines()
    assert json.loads(lines[0])["answers"]
    e = json.loads(lines[1])["error"]
    assert e["code"] == "invalid_json" and "(at byte " in e["message"]


def test_over_long_line_is_an_error_line_not_a_crash(cpp_tiny, tmp_path):
    good = json.dumps(corpus_requests()[0], ensure_ascii=False)
    inp = tmp_path / "in.jsonl"
    with open(inp, "w", encoding="utf-8") as f:
        f.write(good + "\n")
        f.write("[" + " " * (65 << 20) + "]\n")  # 65 MiB line, over the 64 MiB cap
        f.write(good + "\n")
    r = run_clef("decide", "-m", str(cpp_tiny), "--jsonl", str(inp), "--no-progress")
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 3 and lines[0] == lines[2]
    assert json.loads(lines[1]) == {"error": {"code": "request_too_large",
                                              "message": "the line is longer than 64 MiB", "path": ""}, "line": 2}


def test_stdin_input_and_crlf_lines(cpp_tiny, tmp_path):
    reqs = [json.dumps(r, ensure_ascii=False) for r in corpus_requests()[:2]]
    data = "".join(x + "\r\n" for x in reqs)  # CRLF: JSON whitespace, answers unchanged
    r = subprocess.run([clef_bin(), "decide", "-m", str(cpp_tiny), "--jsonl", "-", "--no-progress"],
                       input=data, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    r2 = subprocess.run([clef_bin(), "decide", "-m", str(cpp_tiny), "--jsonl", "-", "--no-progress"],
                        input="".join(x + "\n" for x in reqs), capture_output=True, text=True, timeout=300)
    assert r.stdout == r2.stdout and len(r.stdout.splitlines()) == 2


def test_stray_entries_in_the_model_folder_do_not_break_decide(cpp_tiny, tmp_path):
    """The state cache's model identity lists the folder's files; entries it cannot examine (a
    symlink loop, a dangling link, a FIFO) are skipped, with the cache on or off."""
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(cpp_tiny, folder)
    os.symlink("loop", folder / "loop")
    os.symlink("missing-target", folder / "dangling")
    os.mkfifo(folder / "fifo")
    inp = tmp_path / "in.jsonl"
    write_lines(inp, [json.dumps(r, ensure_ascii=False) for r in corpus_requests()[:2]])
    want = run_clef("decide", "-m", str(cpp_tiny), "--jsonl", str(inp), "--no-progress")
    for mb in ("0", "64"):
        r = run_clef("decide", "-m", str(folder), "--jsonl", str(inp), "--no-progress", "--state-cache-mb", mb)
        assert r.returncode == 0, r.stderr
        assert r.stdout == want.stdout


def test_fp32_resident_weights_give_the_same_answers(cpp_tiny, tmp_path):
    """--fp32-weights resident (fp32 copies of the bf16 checkpoint's linear weights), stream (per-call
    widening) and auto (the default: one of the two by memory) change memory and speed, not answers:
    identical bodies on 8 corpus requests."""
    inp = tmp_path / "in.jsonl"
    write_lines(inp, [json.dumps(r, ensure_ascii=False) for r in corpus_requests()[:8]])
    outs = {}
    for mode in ("stream", "resident", "auto"):
        out = tmp_path / f"{mode}.jsonl"
        r = run_clef("decide", "-m", str(cpp_tiny), "--fp32-weights", mode, "--jsonl", str(inp), "--out", str(out),
                     "--no-progress")
        assert r.returncode == 0, r.stderr
        outs[mode] = out.read_text(encoding="utf-8")
    assert outs["stream"] == outs["resident"] == outs["auto"]
    assert len(outs["stream"].splitlines()) == 8
    r = run_clef("decide", "-m", str(cpp_tiny), "--fp32-weights", "fp16", "-")
    assert r.returncode == 2 and "--fp32-weights" in r.stderr


def test_lines_on_a_pipe_are_answered_as_they_arrive(cpp_tiny):
    """`producer | clef decide --jsonl -`: each line is answered when it arrives, not when the
    input closes or 64 KiB have piled up (the reader uses read(2), not a buffered fread)."""
    import select
    lines = [json.dumps(r, ensure_ascii=False) for r in corpus_requests()[:2]]
    p = subprocess.Popen([clef_bin(), "decide", "-m", str(cpp_tiny), "--threads", "1", "--jsonl", "-", "--no-progress"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        p.stdin.write((lines[0] + "\n").encode())
        p.stdin.flush()
        ready, _, _ = select.select([p.stdout], [], [], 120)
        assert ready, "no answer to the first line while the input stays open"
        first = p.stdout.readline()
        assert json.loads(first)["model"]
        p.stdin.write((lines[1] + "\n").encode())
        p.stdin.close()
        rest = p.stdout.read()
        err = p.stderr.read()
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert len(rest.splitlines()) == 1


def _run_measured(args: list, tmp_path: pathlib.Path) -> tuple:
    """Runs clef with `args` (stdout/stderr to files, so wait4 alone reaps it); returns (exit code,
    stderr, the child's own peak RSS in KiB)."""
    out, err = tmp_path / "m.out", tmp_path / "m.err"
    with open(out, "wb") as o, open(err, "wb") as e:
        p = subprocess.Popen([clef_bin(), *args], stdin=subprocess.DEVNULL, stdout=o, stderr=e)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, err.read_text(errors="replace"), usage.ru_maxrss


def test_over_long_state_is_refused_in_memory_bounded_by_the_limit(cpp_tiny, tmp_path):
    """A 16 MiB state (16M digits: one token each) with --max-tokens 256 is refused input_too_long
    (exit 2, path state) after tokenizing only up to the limit: the child's peak RSS is within 4x
    the state's size of a refused 1,000-digit state (the request text, its parsed string and its
    rendered copy are held; before, every piece end and token id of the whole state was stored
    too, ~8 more bytes per digit)."""
    n = 16 << 20

    def request(digits: int) -> pathlib.Path:
        path = tmp_path / f"state-{digits}.json"
        path.write_text(json.dumps({"state": "1" * digits,
                                    "questions": {"q": {"type": "noul", "instructions": "Is it long?"}}}))
        return path

    runs = {}
    for digits in (1000, n):
        rc, err, rss = _run_measured(["decide", "-m", str(cpp_tiny), "--max-tokens", "256", str(request(digits))],
                                     tmp_path)
        assert rc == 2, err[-2000:]
        assert "state: the record needs" in err and "maximum of 256" in err, err[-2000:]
        runs[digits] = rss
    extra_kib = runs[n] - runs[1000]
    assert extra_kib < 4 * n // 1024, (runs, extra_kib)


@pytest.mark.parametrize("parallel", [1, 4])
def test_interrupt_says_how_far_it_got_and_the_rerun_resumes(cpp_tiny, tmp_path, parallel):
    """SIGINT once the first answer is written: exit 130 and one line "interrupted after N of M
    requests; rerun the same command to resume" with N the file's complete lines; the same command
    then resumes after line N and the file equals an uninterrupted run's (one line at a time, and 4
    at once, batched: 40 lines then, so that the signal comes mid-run). (Before, the process died
    of the signal without a word.)"""
    reqs = [json.dumps(r, ensure_ascii=False) for r in corpus_requests()[:8]] * (1 if parallel == 1 else 5)
    inp = tmp_path / "in.jsonl"
    write_lines(inp, reqs)
    full = tmp_path / "full.jsonl"
    assert run_clef("decide", "-m", str(cpp_tiny), "--jsonl", str(inp), "--out", str(full)).returncode == 0
    want = full.read_text(encoding="utf-8")

    out = tmp_path / "out.jsonl"
    cmd = [clef_bin(), "decide", "-m", str(cpp_tiny), "--threads", "1", "--jsonl", str(inp), "--out", str(out),
           "--no-progress", "--parallel", str(parallel)]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and (not out.exists() or "\n" not in out.read_text(encoding="utf-8")):
        time.sleep(0.005)
    p.send_signal(signal.SIGINT)
    err = p.communicate(timeout=60)[1]
    assert p.returncode == 130, err
    done = out.read_text(encoding="utf-8")
    k = done.count("\n")
    assert 1 <= k < len(reqs) and want.startswith(done), (k, err)
    assert err.strip().splitlines() == [f"clef: interrupted after {k} of {len(reqs)} requests; "
                                        "rerun the same command to resume"], err

    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"resuming: {k} line(s)" in r.stderr
    assert out.read_text(encoding="utf-8") == want
    # The exit-code list says so.
    assert "130/143 decide --jsonl stopped by SIGINT/SIGTERM" in " ".join(run_clef("decide", "--help").stdout.split())


def test_sigterm_on_a_pipe_run_says_it_cannot_resume(cpp_tiny):
    """SIGTERM too ends a --jsonl run, with 143 (128 + SIGTERM) and one line; answers on standard output from a pipe
    have no total and no file to resume, and the line says so."""
    line = json.dumps(corpus_requests()[0], ensure_ascii=False)
    p = subprocess.Popen([clef_bin(), "decide", "-m", str(cpp_tiny), "--threads", "1", "--jsonl", "-", "--no-progress"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        p.stdin.write(line + "\n")
        p.stdin.flush()
        assert json.loads(p.stdout.readline())["model"]
        p.send_signal(signal.SIGTERM)  # the input stays open: the run would wait for more lines
        p.wait(timeout=60)
        err = p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, err
    assert err.strip().splitlines() == ["clef: interrupted after 1 request (answers on standard output; with --out "
                                        "FILE a rerun resumes instead)"], err
