# SPDX-License-Identifier: MIT
"""Batch decisions across a Ray cluster (docs/PYTHON.md "A cluster job on Ray").

    import ray, clef.ray
    ds = ray.data.read_text("requests.jsonl")            # one request per row, JSON text in "text"
    out = clef.ray.decide_dataset(ds, "Cloudflare/clef-flash", request_column="text", num_actors=8, threads=4)

Each actor loads one :class:`clef.Model`. Rows are grouped by their state (a SHA-256 of the request's
state and images), and every group goes whole to one actor, so requests about the same state meet
the exact state cache of the actor that answers them: only the first one pays for the state's
prefill, on a laptop or on a multi-node cluster (KubeRay) alike. The result keeps every input column
(carry an id column to recover the input order; :func:`decide_jsonl` does that for a file) and adds
``answer`` (the answer's JSON text, or None), ``error`` (the error object's JSON text as
``clef decide --jsonl`` writes it, or None; its ``line`` is the row's ``line`` column, else 0),
``state_cache`` ('hit', 'miss', 'off' or '' for a refused request) and ``clef_state``.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, Optional

import numpy as np

from . import InvalidArgument, Model, _request_text

__all__ = ["Decider", "decide_dataset", "decide_jsonl", "state_group"]


def _request_value(request: Any) -> Any:
    """A request cell as sent: JSON text (str or bytes). A dict is refused: Arrow stores the dicts of a
    column as one struct type, the union of every row's keys, so a row comes back with the other
    rows' keys added as None (a question that is null, a criteria that is null): another request."""
    if isinstance(request, (str, bytes)):
        return request
    if isinstance(request, np.bytes_):
        return bytes(request)
    if isinstance(request, np.str_):
        return str(request)
    if request is None or (isinstance(request, (float, np.floating)) and np.isnan(request)):
        raise InvalidArgument("clef.ray: a request cell is empty (None or NaN); every row needs a request")
    raise InvalidArgument(
        f"clef.ray: a request cell is {type(request).__name__}, not JSON text; Ray Data stores objects as one Arrow "
        "struct type whose missing keys come back as None, which changes the request. Store each request as JSON "
        "text (json.dumps when making the rows, or ray.data.read_text on a .jsonl file)")


def state_group(request: Any) -> str:
    """The routing key of a request: a SHA-256 (hex) of its state (SystemOne ``state``, or OpenAI's
    ``input``) and ``images``, as JSON. Requests about the same state share it. A request that is not
    a JSON object gets a key of its own bytes (it is refused or answered alone)."""
    value = request
    if isinstance(request, (str, bytes, bytearray)):
        try:
            value = json.loads(request)
        except ValueError:
            return hashlib.sha256(_request_text(request)).hexdigest()
    if not isinstance(value, dict):
        return hashlib.sha256(_request_text(request if isinstance(request, (str, bytes)) else json.dumps(value))
                              ).hexdigest()
    state = value.get("state", value.get("input"))
    key = json.dumps([state, value.get("images")], sort_keys=False, ensure_ascii=True)
    return hashlib.sha256(key.encode("ascii")).hexdigest()


class Decider:
    """A callable class for ``ray.data`` (``map_batches`` or ``groupby(...).map_groups``): loads one
    Model per actor (``model`` and ``options`` as :class:`clef.Model` takes them) and answers the
    ``request_column`` of each batch in order, adding the columns listed in the module's docs."""

    def __init__(self, model: Optional[str] = None, *, request_column: str = "request",
                 line_column: Optional[str] = "line", **options: Any) -> None:
        self.model = Model(model, **options)
        self.request_column = request_column
        self.line_column = line_column

    def __call__(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        requests = batch[self.request_column]
        lines = batch.get(self.line_column) if self.line_column else None
        answers, errors, cache = [], [], []
        for i, request in enumerate(requests):
            line = int(lines[i]) if lines is not None else 0
            text, decision = self.model._engine.decide_line(_request_text(_request_value(request)), line)
            answers.append(text if decision is not None else None)
            errors.append(text if decision is None else None)
            cache.append(decision.state_cache if decision is not None else "")
        out = dict(batch)
        out["answer"] = np.array(answers, dtype=object)
        out["error"] = np.array(errors, dtype=object)
        out["state_cache"] = np.array(cache, dtype=object)
        return out


def _with_group(batch: Dict[str, np.ndarray], request_column: str) -> Dict[str, np.ndarray]:
    if request_column not in batch:
        raise InvalidArgument(f"clef.ray: the dataset has no column {request_column!r} (its columns: "
                              f"{', '.join(sorted(batch))}); name the requests' column with request_column=")
    batch = dict(batch)
    batch["clef_state"] = np.array([state_group(_request_value(r)) for r in batch[request_column]], dtype=object)
    return batch


def decide_dataset(ds: Any, model: Optional[str] = None, *, request_column: str = "request",
                   line_column: Optional[str] = "line", num_actors: int = 1,
                   num_cpus: Optional[float] = None, **options: Any) -> Any:
    """Answers every row's ``request_column`` (a request as JSON text, str or bytes) of the ray.data Dataset
    ``ds`` with ``num_actors`` actors, each holding one Model (``model`` and ``options`` as
    :class:`clef.Model` takes them; give ``threads`` = the CPUs each actor may use, and ``num_cpus``
    to reserve them in Ray). Rows about the same state go to the same actor (see the module docs).
    Returns the lazy Dataset of the results."""
    if num_actors < 1:
        raise ValueError("num_actors must be at least 1")
    grouped = ds.map_batches(_with_group, fn_kwargs={"request_column": request_column}, batch_format="numpy")
    kwargs: Dict[str, Any] = {}
    if num_cpus is not None:
        kwargs["num_cpus"] = num_cpus
    import ray.data

    return grouped.groupby("clef_state").map_groups(
        Decider, fn_constructor_args=(model,),
        fn_constructor_kwargs={"request_column": request_column, "line_column": line_column, **options},
        batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=num_actors), **kwargs)


def decide_jsonl(input_path: str, output_path: str, model: Optional[str] = None, *, num_actors: int = 1,
                 num_cpus: Optional[float] = None, **options: Any) -> Dict[str, int]:
    """``clef decide --jsonl INPUT --out OUTPUT`` on a Ray cluster: reads the request lines on the
    driver, answers them with :func:`decide_dataset` and writes one line per input line, in input
    order, the same lines the CLI writes (the answer, or the error object with its ``line``).
    Returns {"lines", "answered", "refused", "hits"}. The driver holds the file's lines and answers."""
    import ray

    with open(input_path, "rb") as f:
        rows = [{"line": n, "request": line[:-1] if line.endswith(b"\n") else line}
                for n, line in enumerate(f, start=1)]
    out = decide_dataset(ray.data.from_items(rows), model, num_actors=num_actors, num_cpus=num_cpus, **options)
    results = sorted(out.take_all(), key=lambda r: r["line"])
    counts = {"lines": len(results), "answered": 0, "refused": 0, "hits": 0}
    with open(output_path, "w", encoding="utf-8") as f:
        for r in results:
            ok = r["answer"] is not None
            f.write((r["answer"] if ok else r["error"]) + "\n")
            counts["answered" if ok else "refused"] += 1
            counts["hits"] += r["state_cache"] == "hit"
    return counts
