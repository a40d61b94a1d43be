# SPDX-License-Identifier: MIT
"""The Python package against the CLI (docs/PYTHON.md): the same answers byte for byte, the same
refusals, the same hidden states, token ids and model report; errors as typed exceptions; threads."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import threading

import numpy as np
import pytest

import clef
from conftest import dumps, run_clef


def test_decide_equals_clef_decide(model, tiny, corpus_lines):
    """Every corpus request, given as JSON text and as a dict, answers what `clef decide` prints."""
    for i, line in enumerate(corpus_lines):
        cli = run_clef("decide", "-m", str(tiny), "--threads", "1", "-", stdin=line).stdout.rstrip(b"\n")
        assert dumps(model.decide(line)) == cli, f"corpus line {i + 1} (text)"
        assert dumps(model.decide(json.loads(line))) == cli, f"corpus line {i + 1} (dict)"


@pytest.mark.parametrize("parallel", [8, 1])
def test_decide_many_equals_jsonl(model, stream_lines, cli_jsonl, parallel):
    """decide_many over corpus + bad + corpus, 8 requests batched at once (the default) or one at a
    time, yields what `clef decide --jsonl --parallel 1` writes, line for line, refused requests as
    error objects in place; the repeated states hit the state cache."""
    before = model.cache_stats()
    got = list(model.decide_many((line + b"\n" for line in stream_lines), parallel=parallel))  # as a file's lines
    assert len(got) == len(cli_jsonl)
    for n, (answer, cli) in enumerate(zip(got, cli_jsonl), start=1):
        assert answer == json.loads(cli), f"line {n}"
        assert dumps(answer) == cli, f"line {n}"
    refused = [a for a in got if "error" in a]
    assert len(refused) == len(stream_lines) - 48 and all(a["line"] > 24 for a in refused)
    assert model.cache_stats()["hits"] - before["hits"] >= 24


def test_state_and_questions_keywords(model, corpus_lines):
    request = json.loads(corpus_lines[0])
    assert model.decide(state=request["state"], questions=request["questions"]) == model.decide(
        {"state": request["state"], "questions": request["questions"]})
    with pytest.raises(TypeError):
        model.decide(request, state="x")
    with pytest.raises(clef.RequestError) as e:  # no state= is a request without a state, as a dict would be
        model.decide(questions=request["questions"])
    assert e.value.path == "state"
    with pytest.raises(TypeError):  # one request is not a stream of them
        model.decide_many(corpus_lines[0])
    with pytest.raises(TypeError):  # refused at the call, not at the first next()
        model.decide_many(None)
    for bad in (2.0, True, "8"):
        with pytest.raises(TypeError):
            model.decide_many(corpus_lines, parallel=bad)
    for bad in (0, -1, 1025):
        with pytest.raises(clef.InvalidArgument):
            model.decide_many(corpus_lines, parallel=bad)


def test_request_errors_carry_code_and_path(model, tiny):
    """A refused request raises RequestError with the wire code and JSON path the CLI reports."""
    bad = {"state": "s", "questions": {"q": {"type": "choice", "instructions": "pick", "criteria": {}}}}
    cli = json.loads(run_clef("decide", "-m", str(tiny), "--no-progress", "--jsonl", "-",
                              stdin=json.dumps(bad).encode() + b"\n").stdout)
    with pytest.raises(clef.RequestError) as e:
        model.decide(bad)
    assert (e.value.code, e.value.path) == (cli["error"]["code"], cli["error"]["path"])
    assert e.value.exit_code == 2 and isinstance(e.value, ValueError)
    # Exceptions cross process boundaries (multiprocessing, Ray) pickled: the fields survive.
    again = pickle.loads(pickle.dumps(e.value))
    assert type(again) is clef.RequestError and (again.code, again.path, str(again)) == (
        e.value.code, e.value.path, str(e.value))
    with pytest.raises(clef.RequestError) as e:
        model.decide(b'{"state": "s", "questions": ')
    assert e.value.code == "invalid_json" and e.value.offset is not None
    with pytest.raises(clef.RequestError) as e:
        model.decide(b'{"state": "\xff"}')  # invalid UTF-8 reaches the engine's check
    assert e.value.offset is not None
    with pytest.raises(clef.InvalidArgument):
        model.decide({"state": float("nan"), "questions": {}})
    with pytest.raises(TypeError):
        model.decide(42)


def test_model_errors(tmp_path, tiny):
    with pytest.raises(clef.ModelError) as e:
        clef.Model(str(tmp_path))  # an empty folder
    assert e.value.exit_code == 3 and str(tmp_path) in str(e.value)
    with pytest.raises(clef.InvalidArgument) as e:
        clef.Model(str(tiny), precision="fp16")
    assert "--precision" in str(e.value)
    with pytest.raises(clef.InvalidArgument):
        clef.Model(str(tiny), threads=-1)
    with pytest.raises(TypeError):
        clef.Model(str(tiny), no_such_option=1)
    with pytest.raises(TypeError):
        clef.Model(str(tiny), threads=True)
    with pytest.raises(clef.InvalidArgument) as e:
        clef.Model("NoSuchOrg/no-such-model")  # a hub name the cache lacks: says how to pull it
    assert "clef pull" in str(e.value)


def test_threads_get_sequential_answers(model, tiny, corpus_lines):
    """8 Python threads calling one Model get exactly the sequential answers; 2 more threads call a
    second Model (bf16) at the same time, which decides beside the first and answers as it does alone."""
    lines = corpus_lines[:8]
    other = clef.Model(str(tiny), threads=1, precision="bf16")
    want = {id(model): [model.decide(line) for line in lines], id(other): [other.decide(line) for line in lines]}
    got: dict[tuple[int, int], dict] = {}
    errors: list[BaseException] = []

    def work(t: int) -> None:
        m = model if t < 8 else other
        try:
            for k in range(len(lines)):
                i = (k + t) % len(lines)
                got[(t, i)] = m.decide(lines[i])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(got) == 80
    assert all(got[(t, i)] == want[id(model if t < 8 else other)][i] for (t, i) in got)
    # The pool size is the model's on every calling thread (OpenMP keeps it per thread).
    seen: list[str] = []
    worker = threading.Thread(target=lambda: seen.append(model.info["runtime"]["gemm"]))
    worker.start()
    worker.join()
    assert model.threads == 1 and "1 threads" in seen[0], seen


def test_two_models_at_once(model, tiny):
    """Two Models called from two threads at the same time compute what each computes alone: the
    engines run at once (a lock per Model, none per process), with the same GEMM shapes."""
    other = clef.Model(str(tiny), threads=1)
    ids = list(range(1, 500)) * 4
    want = model.hidden(ids)
    out: dict[int, np.ndarray] = {}
    threads = [threading.Thread(target=lambda k=k, m=m: out.__setitem__(k, m.hidden(ids)))
               for k, m in enumerate((model, other, model, other))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(out) == 4 and all(np.array_equal(h, want) for h in out.values())


def test_hidden_equals_clef_hidden(model, tiny, tmp_path):
    """Model.hidden returns the rows `clef hidden` writes, bit for bit (same threads, chunk 512)."""
    ids = model.tokenize("The customer was charged twice for the same order.") * 3
    h = model.hidden(ids)
    assert h.dtype == np.float32 and h.shape[0] == len(ids) and h.flags["C_CONTIGUOUS"]
    run_clef("hidden", "-m", str(tiny), "--threads", "1", "--ids-list", ",".join(map(str, ids)),
             "--out", str(tmp_path / "h"))
    np.testing.assert_array_equal(h, np.load(tmp_path / "h.chunk512.npy"))
    with pytest.raises(clef.InvalidArgument):
        model.hidden([])
    with pytest.raises(clef.InvalidArgument):
        model.hidden([10**9])
    with pytest.raises(clef.InvalidArgument):
        model.hidden([1.5, 2.0])
    with pytest.raises(clef.InvalidArgument):
        model.tokenize("\udc80")  # a lone surrogate is not UTF-8


def test_tokenize_and_info_equal_the_cli(model, tiny):
    text = "naïve café 東京 🚀 <|im_start|>"
    cli = run_clef("tokenize", "-m", str(tiny), text).stdout.decode()
    assert model.tokenize(text) == [int(t) for t in cli.replace(",", " ").split()]
    info, cli_info = model.info, json.loads(run_clef("inspect", "--json", str(tiny)).stdout)
    # The runtime section names the engine pool's threads: 1 here, all CPUs in `clef inspect`.
    assert info.pop("runtime")["isa"] == cli_info.pop("runtime")["isa"]
    assert info == cli_info
    assert model.name.endswith("-random") and model.random_weights and model.precision == "fp32"


def test_ctrl_c_stops_decide_many_cleanly(tiny, tmp_path):
    """SIGINT during decide_many ends it with KeyboardInterrupt after the request in progress; the
    answers before it stand and the Model answers again afterwards."""
    script = tmp_path / "run.py"
    script.write_text(f"""
import os, signal, sys, clef
signal.signal(signal.SIGINT, signal.default_int_handler)  # a parent started in the background may ignore it
m = clef.Model({str(tiny)!r}, threads=1)
req = {{"state": "a long state " * 200, "questions": {{"q": {{"type": "noul", "instructions": "ok?"}}}}}}
n = 0
try:
    for answer in m.decide_many(dict(req, state=req["state"] + str(i)) for i in range(10**6)):
        n += 1
        if n == 3:
            os.kill(os.getpid(), signal.SIGINT)
except KeyboardInterrupt:
    print("interrupted after", n, m.decide(req)["answers"]["q"]["type"])
""")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("interrupted after ") and r.stdout.split()[3] == "noul"
    assert 3 <= int(r.stdout.split()[2]) <= 4


def test_a_fork_child_is_refused(tiny, tmp_path):
    """A child fork()ed after the engine ran gets an error instead of hanging in the thread pool."""
    script = tmp_path / "fork.py"
    script.write_text(f"""
import os, clef
m = clef.Model({str(tiny)!r}, threads=1)
m.decide({{"state": "s", "questions": {{"q": {{"type": "noul", "instructions": "ok?"}}}}}})
pid = os.fork()
if pid == 0:
    try:
        clef.Model({str(tiny)!r}, threads=1)
    except clef.Error as e:
        os._exit(3 if "fork" in str(e) else 4)
    os._exit(5)
print(os.waitpid(pid, 0)[1] >> 8)
""")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "3", (r.stdout, r.stderr)
