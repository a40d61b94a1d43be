# SPDX-License-Identifier: MIT
"""The exceptions of the clef package (docs/PYTHON.md "Errors").

Every error the engine reports arrives as one of these, never as a crash of the interpreter. Each
carries ``exit_code``: the exit status ``clef`` gives the same error (docs/CLI.md "Exit codes").
"""
from __future__ import annotations

from typing import Optional


class Error(Exception):
    """Base class of every clef error. ``str(e)`` is one line naming what and where."""

    exit_code = 70
    kind = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(Error, ValueError):
    """Bad input from the caller: an option, a path, token ids (exit code 2)."""

    exit_code = 2
    kind = "invalid_argument"


class RequestError(InvalidArgument):
    """A request the engine refuses (what ``clef serve`` answers with a 4xx).

    ``code`` is the wire code (e.g. ``"empty_criteria"``, ``"invalid_json"``), ``path`` the JSON path
    of the offending value (``""`` for the whole body), ``detail`` the message without the path,
    ``offset`` the byte offset of a syntax error (else None). The same fields as the error objects
    of ``clef decide --jsonl`` and :meth:`clef.Model.decide_many`.
    """

    kind = "request"

    def __init__(self, message: str, *, code: str, path: str, detail: str, offset: Optional[int] = None) -> None:
        super().__init__(message)
        self.code = code
        self.path = path
        self.detail = detail
        self.offset = offset

    def __reduce__(self):  # type: ignore[override]
        # Pickled with its fields (multiprocessing and Ray send exceptions between processes).
        return _rebuild_request_error, (self.message, self.code, self.path, self.detail, self.offset)


def _rebuild_request_error(message: str, code: str, path: str, detail: str, offset: Optional[int]) -> RequestError:
    return RequestError(message, code=code, path=path, detail=detail, offset=offset)


class ModelError(Error):
    """A model file or folder is malformed, missing or inconsistent (exit code 3)."""

    exit_code = 3
    kind = "model_load"


class Unsupported(Error):
    """Well-formed, but not supported by this build: a dtype, an option (exit code 4)."""

    exit_code = 4
    kind = "unsupported"


class IoError(Error, OSError):
    """The operating system or the network refused an operation (exit code 5)."""

    exit_code = 5
    kind = "io"


class InternalError(Error):
    """An invariant only a bug in clef.cpp can break (exit code 70); please report it."""
