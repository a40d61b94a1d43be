#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the OpenAI Decisions translation of every System One request of a corpus.

    python tools/reference/to_openai_decisions.py [tests/data/requests/corpus.jsonl] [OUT]

OUT defaults to corpus_openai.jsonl next to the input. One line per input line, in order:
``{"name", "request"}`` with the OpenAI-contract body, or ``{"name", "untranslatable"}`` with the
reason when the System One request uses something OpenAI's contract cannot say. A translation asks
Clef for the very same record (docs/PROTOCOL.md §7.2, §7.3): clef.cpp answers it with the same
tokens and the same probabilities as the System One request (tests/server/test_openai_decisions.py
checks every line).

The rules, System One -> OpenAI:
* ``state``: a string is ``input``; an object or an array of objects is one user message with one
  ``input_json`` part; any other value (null, a number, an array of other values) is ``input`` as
  its rendered JSON text, which is the text Clef reads for it anyway.
* each question ``id -> q`` becomes ``{"name": id, ...}`` in the same order; ``noul`` is a
  ``predicate`` (only with the default criteria: a predicate has no outcome descriptions);
  ``choice`` criteria become ``choices`` ``[{"value": key, "description": text}]`` (string
  descriptions only); ``score`` levels become ``{"label": text}``, or ``{"label", "description"}``
  for an object of exactly those two strings.
* ``instructions``: a non-empty string as is; missing, null or "" is the question id (System One's
  fallback); an object or an array of objects is one ``input_json`` part; any other value is its
  rendered JSON text.
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any, Dict, List, Tuple

DEFAULT_TRUE = "The proposition is true or the answer is yes."
DEFAULT_FALSE = "The proposition is false or the answer is no."


class Untranslatable(Exception):
    """The request uses something OpenAI's Decisions contract cannot express."""


def render(value: Any) -> str:
    """Clef's text of a JSON value (docs/PROTOCOL.md §3.3)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def objects(value: Any) -> bool:
    return isinstance(value, dict) or (isinstance(value, list) and all(isinstance(x, dict) for x in value))


def to_input(state: Any) -> Any:
    if isinstance(state, str):
        return state
    if objects(state) and state != []:
        return [{"role": "user", "content": [{"type": "input_json", "data": state}]}]
    return render(state)


def to_instructions(qid: str, instructions: Any) -> Any:
    if instructions is None or instructions == "":
        return qid
    if isinstance(instructions, str):
        return instructions
    if objects(instructions) and instructions != []:
        return [{"type": "input_json", "data": instructions}]
    return render(instructions)


def to_question(qid: str, q: Dict[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {"type": "", "name": qid, "instructions": to_instructions(qid, q.get("instructions"))}
    criteria = q.get("criteria")
    if q["type"] == "noul":
        merged = {"true": DEFAULT_TRUE, "false": DEFAULT_FALSE, **(criteria or {})}
        if (merged["true"], merged["false"]) != (DEFAULT_TRUE, DEFAULT_FALSE):
            raise Untranslatable(f"question {qid!r}: noul criteria (a predicate has no outcome descriptions)")
        out["type"] = "predicate"
    elif q["type"] == "choice":
        choices = []
        for value, description in criteria.items():
            if description is None:
                choices.append({"value": value})
            elif isinstance(description, str):
                choices.append({"value": value, "description": description})
            else:
                raise Untranslatable(f"question {qid!r}: choice descriptions that are not strings")
        out["type"] = "choice"
        out["choices"] = choices
    elif q["type"] == "score":
        levels = []
        for level in criteria:
            if isinstance(level, str):
                levels.append({"label": level})
            elif (isinstance(level, dict) and set(level) == {"label", "description"}
                  and all(isinstance(v, str) for v in level.values())):
                levels.append({"label": level["label"], "description": level["description"]})
            else:
                raise Untranslatable(f"question {qid!r}: score levels other than a label or {{label, description}}")
        out["type"] = "score"
        out["levels"] = levels
    else:
        raise Untranslatable(f"question {qid!r}: type {q['type']!r}")
    return out


def translate(request: Dict[str, Any]) -> Dict[str, Any]:
    """The OpenAI-contract body for a System One body; raises Untranslatable."""
    extra = sorted(set(request) - {"model", "state", "questions"})
    if extra:
        raise Untranslatable(f"fields without an OpenAI counterpart: {', '.join(extra)}")
    return {"model": request.get("model", "clef-flash"), "input": to_input(request["state"]),
            "questions": [to_question(qid, q) for qid, q in request["questions"].items()]}


def convert(lines: List[str]) -> Tuple[List[Dict[str, Any]], int]:
    out, skipped = [], 0
    for line in filter(None, lines):
        case = json.loads(line)
        try:
            out.append({"name": case["name"], "request": translate(case["request"])})
        except Untranslatable as e:
            out.append({"name": case["name"], "untranslatable": str(e)})
            skipped += 1
    return out, skipped


def main(argv: List[str]) -> int:
    src = pathlib.Path(argv[1]) if len(argv) > 1 else (
        pathlib.Path(__file__).resolve().parents[2] / "tests" / "data" / "requests" / "corpus.jsonl")
    dst = pathlib.Path(argv[2]) if len(argv) > 2 else src.with_name(src.stem + "_openai.jsonl")
    out, skipped = convert(src.read_text(encoding="utf-8").splitlines())
    dst.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in out), encoding="utf-8")
    print(f"{dst}: {len(out) - skipped} translated, {skipped} untranslatable", file=sys.stderr)
    for c in out:
        if "untranslatable" in c:
            print(f"  {c['name']}: {c['untranslatable']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
