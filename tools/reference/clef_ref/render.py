# SPDX-License-Identifier: MIT
"""``render(value)``: the text form of a JSON value inside a Clef prompt (docs/PROTOCOL.md §3.3).

Python's ``json`` module is the definition: strings are used verbatim, every other value is
``json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))``. Requests must be
parsed with :func:`parse_request_text` (plain ``json.loads``) so int vs float and big ints survive.
"""

from __future__ import annotations

import json
from typing import Any


def render(value: Any) -> str:
    """Render one JSON value for the prompt (docs/PROTOCOL.md §3.3).

    Args:
        value: a value produced by ``json.loads`` (str, int, float, bool, None, list, dict).
    Returns:
        str: ``value`` itself if it is a str, else its compact, key-sorted JSON with raw non-ASCII.
    Note:
        Non-finite floats render as ``NaN``/``Infinity`` exactly as the reference does; rejecting them
        is the validator's job (``validate.validate_request(strict=True)``).
    """
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def parse_request_text(text: str) -> Any:
    """Parse a request body with Python ``json.loads`` (docs/PROTOCOL.md §3.3: keeps int vs float, big ints,
    last duplicate key wins). Returns the parsed value (any JSON type)."""
    return json.loads(text)
