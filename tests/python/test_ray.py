# SPDX-License-Identifier: MIT
"""clef.ray on a local 2-node Ray cluster: the same lines as `clef decide --jsonl`, in input order,
and requests about a repeated state answered from the state cache of the actor that saw it first."""

from __future__ import annotations

import json

import pytest

ray = pytest.importorskip("ray", reason="the ray extra (pip install '.[ray]') is not installed")

import clef.ray  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of two nodes (a head and a worker node, each its own raylet), 3 logical CPUs
    each: an actor of 2 CPUs fits once per node, so the 2 actors land on different nodes, and each
    node keeps a CPU for the grouping tasks."""
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 3, "include_dashboard": False})
    c.add_node(num_cpus=3)
    ray.init(address=c.address, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    yield
    ray.shutdown()
    c.shutdown()


def test_decide_jsonl_on_ray(cluster, tiny, stream_lines, cli_jsonl, tmp_path):
    (tmp_path / "in.jsonl").write_bytes(b"\n".join(stream_lines) + b"\n")
    counts = clef.ray.decide_jsonl(str(tmp_path / "in.jsonl"), str(tmp_path / "out.jsonl"), str(tiny),
                                   num_actors=2, num_cpus=2, threads=1)
    assert (tmp_path / "out.jsonl").read_bytes().splitlines() == cli_jsonl
    states = {clef.ray.state_group(line) for line in stream_lines[:24]}
    assert counts["lines"] == len(stream_lines) and counts["answered"] == 48
    # Every state's later requests are hits: 48 answered requests over len(states) distinct states.
    assert counts["hits"] == 48 - len(states)


def test_decide_dataset_keeps_columns(cluster, tiny, corpus_lines):
    rows = [{"id": f"r{i}", "request": line.decode()} for i, line in enumerate(corpus_lines[:6])]
    out = clef.ray.decide_dataset(ray.data.from_items(rows), str(tiny), line_column=None, num_actors=2,
                                  num_cpus=2, threads=1).take_all()
    model = clef.Model(str(tiny), threads=1)
    by_id = {r["id"]: r for r in out}
    assert sorted(by_id) == sorted(r["id"] for r in rows)
    for r in rows:
        assert json.loads(by_id[r["id"]]["answer"]) == model.decide(r["request"])
        assert by_id[r["id"]]["error"] is None


def test_request_objects_are_refused(cluster, tiny, corpus_lines):
    """Dicts in the request column are refused by name: Arrow would merge their keys across rows."""
    rows = [{"request": json.loads(line)} for line in corpus_lines[:2]]
    with pytest.raises(Exception, match="not JSON text"):
        clef.ray.decide_dataset(ray.data.from_items(rows), str(tiny), num_actors=1, num_cpus=1, threads=1).take_all()
