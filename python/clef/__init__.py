# SPDX-License-Identifier: MIT
"""clef: Clef decision models in-process, on the clef.cpp engine (docs/PYTHON.md).

    import clef
    model = clef.Model("Cloudflare/clef-flash", precision="bf16")
    answer = model.decide({"state": "...", "questions": {...}})

``Model.decide`` answers exactly what ``clef decide`` prints for the same request bytes (as a dict);
``Model.decide_many`` answers a stream as ``clef decide --jsonl`` does, line for line.
"""
from __future__ import annotations

import json
import numbers
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

if TYPE_CHECKING:
    import numpy
    from numpy.typing import NDArray

from . import _core
from ._errors import Error, InternalError, InvalidArgument, IoError, ModelError, RequestError, Unsupported

__version__: str = _core.__version__

__all__ = [
    "Decision", "Error", "InternalError", "InvalidArgument", "IoError", "Model", "ModelError", "RequestError",
    "Unsupported", "pull", "__version__",
]

Decision = _core.Decision
#: The largest request body decide() takes, as `clef decide` (decide_many answers a longer one with
#: the error object "request_too_large", as `clef decide --jsonl` does).
MAX_REQUEST_BYTES = 64 << 20
Request = Union[Mapping[str, Any], str, bytes]
_UNSET: Any = object()  # "no state= given" (None is a valid state: JSON null)
Progress = Callable[[int, int, float], None]


def _request_text(request: Request) -> bytes:
    """The request body's bytes: JSON text as given (a str as UTF-8; lone surrogates stay invalid
    UTF-8, which the engine refuses with the byte offset), or a mapping written as json.dumps writes
    it (keys in order, floats as repr: the bytes Python's HTTP clients send)."""
    if isinstance(request, str):
        return request.encode("utf-8", "surrogatepass")
    if isinstance(request, (bytes, bytearray, memoryview)):
        return bytes(request)
    if isinstance(request, Mapping):
        try:
            return json.dumps(request, allow_nan=False).encode("ascii")
        except ValueError as e:  # NaN or infinity: not JSON
            raise InvalidArgument(f"the request cannot be written as JSON: {e}") from None
    raise TypeError(f"a request is a dict, JSON text or UTF-8 bytes, not {type(request).__name__}")


#: Model()'s options that are `clef decide` flags taking a value, and those that are on/off switches.
_VALUE_OPTIONS = frozenset({"precision", "threads", "chunk", "max_tokens", "overflow", "confidence", "fp32_weights",
                            "split_regex", "image_backend", "max_image_pixels", "vision_grid", "mmproj", "revision",
                            "state_cache_mb"})
_SWITCH_OPTIONS = frozenset({"jev_legend", "no_images", "pull"})


def _flags(options: Mapping[str, Any]) -> List[str]:
    """Keyword options as `clef decide` flags: precision="bf16" -> --precision bf16, a True switch -> --switch.
    An unknown name or a value of the wrong kind is a TypeError, as for any Python call."""
    args: List[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if key in _SWITCH_OPTIONS:
            if not isinstance(value, bool):
                raise TypeError(f"Model() option {key} is True or False, not {value!r}")
            args += [flag] if value else []
        elif key in _VALUE_OPTIONS:
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (str, int, os.PathLike)):
                raise TypeError(f"Model() option {key} takes a str or int value, not {value!r}")
            args += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
        else:
            raise TypeError(f"Model() got an unexpected keyword argument {key!r}")
    return args


_LOADED_IN_PID: Optional[int] = None  # the process that started the engine (its OpenMP pool)


def _check_process() -> None:
    """Refuses to run the engine in a child fork()ed from a process that already ran it: the OpenMP
    thread pool does not survive fork(), and the child would hang in its first parallel loop."""
    if _LOADED_IN_PID is not None and _LOADED_IN_PID != os.getpid():
        raise Error("clef: this process was fork()ed from one that already ran the engine, whose thread pool does "
                    "not survive fork(); load models in the child only, with multiprocessing's 'spawn' or "
                    "'forkserver' start method (docs/PYTHON.md \"Threads, the GIL, interrupts\")")


class Model:
    """A loaded Clef model: a release folder, a ``.gguf`` file, or a Hugging Face name resolved in the
    shared cache exactly as ``clef -m NAME`` resolves it (docs/MODELS.md "Names"); ``None`` is the
    embedded default model (tiny, random weights: its answers are meaningless).

    Options are ``clef decide``'s flags by their Python names (``precision="bf16"``, ``threads=2``,
    ``chunk=256``, ``max_tokens=...``, ``overflow="truncate"``, ``confidence="jev"``,
    ``fp32_weights=...``, ``split_regex=...``, ``image_backend=...``, ``max_image_pixels=...``,
    ``vision_grid=...``, ``no_images=True``, ``jev_legend=True``), with the same checks and defaults
    (``clef decide --help``). ``state_cache_mb`` sizes the exact state cache (default 2048 MiB; 0 off):
    requests about a state already seen skip its prefill and answer bit-identically. ``pull=True``
    fetches a hub name the cache lacks first. Raises ModelError, InvalidArgument, IoError, Unsupported.

    Thread-safe: calls from several threads are answered one decision at a time (the engine uses all
    its threads for each); parsing a request and decoding its images run concurrently. The engine
    runs without the GIL.
    """

    def __init__(self, model: Optional[str] = None, *, precision: str = "fp32", threads: int = 0,
                 state_cache_mb: int = 2048, revision: Optional[str] = None, mmproj: Optional[str] = None,
                 pull: bool = False, **options: Any) -> None:
        if model is not None and not isinstance(model, (str, bytes)) and not hasattr(model, "__fspath__"):
            raise TypeError(f"model is a path or a hub name, not {type(model).__name__}")
        flags: Dict[str, Any] = {"precision": precision, "threads": threads, "state_cache_mb": state_cache_mb,
                                 "revision": revision, "mmproj": mmproj, "pull": pull, **options}
        args = _flags(flags)
        if model is not None:
            args = ["--model", os.fsdecode(os.fspath(model))] + args
        global _LOADED_IN_PID
        _check_process()
        self._engine = _core.Engine(args)
        if _LOADED_IN_PID is None:
            _LOADED_IN_PID = os.getpid()
        self._options = flags

    @property
    def path(self) -> str:
        """The local folder or file the model was loaded from."""
        return self._engine.path

    @property
    def threads(self) -> int:
        """Threads each decision of this model runs on (``threads=0`` resolved to the usable CPUs),
        whichever Python thread calls it."""
        return self._engine.threads

    @property
    def precision(self) -> str:
        """The precision mode the model was loaded with (``fp32``, ``bf16`` or ``int8``)."""
        return "fp32" if self._options["precision"] == "f32" else str(self._options["precision"])

    @property
    def name(self) -> str:
        """The name answers carry (a random-weight model's ends in ``-random``)."""
        return self._engine.name

    @property
    def random_weights(self) -> bool:
        return self._engine.random_weights

    @property
    def info(self) -> Dict[str, Any]:
        """What ``clef inspect --json`` reports about the model (sizes, dtypes, head, tokenizer, memory)."""
        return json.loads(self._engine.info_json())

    def __repr__(self) -> str:
        return f"clef.Model({self.path!r}, name={self.name!r})"

    def decide(self, request: Optional[Request] = None, *, state: Any = _UNSET,
               questions: Optional[Mapping[str, Any]] = None, **fields: Any) -> Dict[str, Any]:
        """Answers one request and returns the answer as a dict: ``json.dumps(answer,
        separators=(",", ":"), ensure_ascii=False)`` is the line ``clef decide`` prints.

        ``request`` is a SystemOne request (dict, JSON text or UTF-8 bytes) or OpenAI's Decisions
        body, answered in its own contract (docs/PROTOCOL.md). Or give ``state=`` and ``questions=``
        (and any other request field as a keyword) instead. Raises RequestError for a request the
        engine refuses (``code``, ``path``), like a 4xx of ``clef serve``."""
        return json.loads(self.decision(request, state=state, questions=questions, **fields).body)

    def decision(self, request: Optional[Request] = None, *, state: Any = _UNSET,
                 questions: Optional[Mapping[str, Any]] = None, **fields: Any) -> Decision:
        """As :meth:`decide`, returning the engine's Decision: ``body`` (the answer's JSON text),
        ``input_tokens``, ``state_cache`` ('hit', 'miss' or 'off'), ``reused_tokens``, ``state_key``
        and ``seconds`` per stage."""
        if request is None:
            if questions is None:
                raise TypeError("decide() needs a request, or state= and questions=")
            # state=None is a null state (allowed); no state= at all is a request without one (refused).
            request = {**({} if state is _UNSET else {"state": state}), "questions": questions, **fields}
        elif state is not _UNSET or questions is not None or fields:
            raise TypeError("give either a request or state= and questions=, not both")
        _check_process()
        body = _request_text(request)
        if len(body) > MAX_REQUEST_BYTES:
            raise InvalidArgument(f"the request body exceeds {MAX_REQUEST_BYTES >> 20} MiB")
        return self._engine.decide(body)

    def decide_many(self, requests: Iterable[Request], *,
                    progress: Union[bool, Progress, None] = None, parallel: int = 8) -> Iterator[Dict[str, Any]]:
        """Answers a stream of requests in order, one result per request, as ``clef decide --jsonl``
        answers a file line for line: the answer dict, or for a request the engine refuses
        ``{"error": {"code", "message", "path"}, "line": N}`` (N counts from 1), and the stream goes on.
        Requests about a state already seen reuse it through the state cache.

        ``parallel``: requests decided at once (1 to 1024), their prefill chunks batched into shared
        steps (docs/ARCHITECTURE.md "Continuous batching"); the results are the same and come in
        order. ``progress``: True prints a line to stderr every 10 s (requests, tokens/s); a callable
        is called after each request with (requests done, input tokens, seconds). Ctrl-C (or closing
        the iterator) stops after the requests in progress; the model stays usable."""
        if isinstance(requests, (str, bytes, bytearray, memoryview, Mapping)):
            raise TypeError("decide_many() takes an iterable of requests (a list, a generator, a file); "
                            "for one request call decide()")
        requests = iter(requests)  # not iterable: TypeError now, not at the first next()
        report: Optional[Progress]
        if progress is True:
            report = _stderr_progress()
        elif callable(progress):
            report = progress
        elif progress is None or progress is False:
            report = None
        else:
            raise TypeError(f"progress is True, False, None or a callable, not {progress!r}")
        if isinstance(parallel, bool) or not isinstance(parallel, numbers.Integral):
            raise TypeError(f"parallel is a whole number, not {parallel!r}")
        if not 1 <= parallel <= 1024:
            raise InvalidArgument(f"parallel is {parallel}; it must be from 1 to 1024")
        _check_process()
        return self._answer_stream(requests, report, int(parallel))

    def _answer_stream(self, requests: Iterable[Request], report: Optional[Progress],
                       parallel: int) -> Iterator[Dict[str, Any]]:
        t0 = time.monotonic()
        tokens = 0
        done = 0
        pipe = _core.Pipeline(self._engine, parallel)

        def pop() -> Dict[str, Any]:
            nonlocal tokens, done
            text, decision = pipe.pop()
            done += 1
            if decision is not None:
                tokens += decision.input_tokens
            if report is not None:
                report(done, tokens, time.monotonic() - t0)
            return json.loads(text)

        try:
            for n, request in enumerate(requests, start=1):
                body = _request_text(request)
                if body.endswith(b"\n"):  # a file's line: its '\n' is not part of the request (as --jsonl reads it)
                    body = body[:-1]
                # At most 2 x parallel answers wait to be read; the ready ones are handed out at once.
                while pipe.pending() >= 2 * parallel or pipe.front_ready():
                    yield pop()
                pipe.push(body, n)
            while pipe.pending():
                yield pop()
        finally:
            pipe.close()  # an early end (close(), Ctrl-C, an error) waits for the requests in flight

    def tokenize(self, text: str) -> List[int]:
        """Token ids of ``text`` (UTF-8) with the model's tokenizer, as ``clef tokenize`` prints them."""
        if not isinstance(text, str):
            raise TypeError(f"tokenize() takes a str, not {type(text).__name__}")
        return self._engine.tokenize(text.encode("utf-8", "surrogatepass"))

    def hidden(self, ids: Sequence[int]) -> "NDArray[numpy.float32]":
        """The backbone's final-norm hidden states of token ids from a fresh state: a float32
        numpy.ndarray [len(ids), hidden_size], handed over without a copy; what ``clef hidden``
        writes for the same ids, precision, chunk and threads. Raises InvalidArgument for an id
        outside the vocabulary."""
        if isinstance(ids, (str, bytes, bytearray, memoryview)):
            raise InvalidArgument("token ids are a sequence of integers, not text")
        ids = list(ids)
        if not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in ids):
            raise InvalidArgument("token ids are a sequence of integers (list, tuple, NumPy integer array)")
        ids = [int(i) for i in ids]
        if any(i < 0 or i >= 2**31 for i in ids):
            raise InvalidArgument("a token id is negative or not below 2^31")
        _check_process()
        return self._engine.hidden(ids)

    def cache_stats(self) -> Dict[str, int]:
        """State cache counters of this model: {"hits": ..., "misses": ...}."""
        hits, misses = self._engine.cache_counts()
        return {"hits": hits, "misses": misses}


def _stderr_progress() -> Progress:
    last = [0.0]

    def report(done: int, tokens: int, seconds: float) -> None:
        if seconds - last[0] >= 10.0:
            last[0] = seconds
            rate = tokens / seconds if seconds > 0 else 0.0
            print(f"clef: {done} requests, {tokens} tokens, {rate:,.0f} tokens/s", file=sys.stderr, flush=True)

    return report


def pull(name: str, *, revision: Optional[str] = None) -> str:
    """Fetches a Hugging Face model (ORG/REPO, ORG/REPO:QUANT or ORG/REPO/FILE.gguf) into the shared
    cache as ``clef pull`` does (HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE apply) and returns its local
    path. Raises InvalidArgument for a bad name, IoError for network and disk errors."""
    return _core.pull(name, revision or "")
