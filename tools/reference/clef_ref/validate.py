# SPDX-License-Identifier: MIT
"""Request validation (docs/PROTOCOL.md §5.3, §1.2, §1.3).

Two levels:

* reference rules (default): exactly the ValueErrors the reference ``systemone`` raises, in its order
  (§5.3 items 1-3; item 4, the length check, lives in ``record.encode_record``). The reference *crashes*
  (unhandled AttributeError/TypeError/UnicodeEncodeError) on the §5.3 item-5 inputs; this oracle raises
  :class:`ReferenceCrash` with a clear message instead of imitating the crash. Silent-but-wrong inputs
  (§5.3 item 6) are accepted and processed like the reference does.
* ``strict=True``: additionally the recommended server policy (§5.3 item 6 cases, §1.3 limits, non-finite
  numbers, empty question spans), raised as :class:`PolicyError`.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List

QUESTION_TYPES = ("noul", "choice", "score")


class RequestError(ValueError):
    """A request the reference rejects (ValueError with the reference's message, docs/PROTOCOL.md §5.3)."""


class ReferenceCrash(RequestError):
    """An input on which the reference crashes with an unhandled exception (docs/PROTOCOL.md §5.3 item 5)."""


class PolicyError(RequestError):
    """Rejected only under ``strict=True`` (recommended server policy; docs/PROTOCOL.md §1.3, §5.3 item 6)."""


def _has_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def _has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_non_finite(v) for v in value)
    return False


def validate_request(request: Any, strict: bool = False, allow_images: bool = False) -> None:
    """Validate a parsed SystemOne request (docs/PROTOCOL.md §5.3; §1.3 limits when ``strict``).

    Args:
        request: the parsed JSON body (any type).
        strict: also apply the recommended server policy.
        allow_images: accept a non-empty ``images`` list of strings (ClefReference.run decodes them);
            False keeps the text-only validation the request-parity tests compare against.
    Raises:
        RequestError: reference rejections, with the reference's messages:
            ``model and state are required``, ``at least one question is required``,
            ``<id>: type must be noul, choice, or score``, ``<id>: criteria must not be empty``.
        ReferenceCrash: inputs that crash the reference (question not an object, choice criteria not an
            object, score criteria not iterable, noul criteria not an object, lone surrogates, videos, and
            images unless ``allow_images``).
        PolicyError: strict-mode rejections.
    """
    if not isinstance(request, dict) or not isinstance(request.get("model"), str) or "state" not in request:
        raise RequestError("model and state are required")
    questions = request.get("questions")
    if not isinstance(questions, dict) or not questions:
        raise RequestError("at least one question is required")
    for qid, q in questions.items():
        if not isinstance(q, dict):
            raise ReferenceCrash(f"{qid}: question must be an object (the reference crashes: .get on {type(q).__name__})")
        qtype = q.get("type")
        if qtype not in QUESTION_TYPES:
            raise RequestError(f"{qid}: type must be noul, choice, or score")
        if qtype != "noul" and not q.get("criteria"):
            raise RequestError(f"{qid}: criteria must not be empty")
    # Crash cases (reference raises an unhandled exception inside encode_record)
    for qid, q in questions.items():
        qtype, crit = q["type"], q.get("criteria")
        if qtype == "choice" and not isinstance(crit, dict):
            raise ReferenceCrash(f"{qid}: choice criteria must be an object (the reference crashes: .items() on {type(crit).__name__})")
        if qtype == "score" and not isinstance(crit, (list, dict, str)):
            raise ReferenceCrash(f"{qid}: score criteria must be an array (the reference crashes: {type(crit).__name__} is not iterable)")
        if qtype == "noul" and crit and not isinstance(crit, dict):
            # dict.update accepts some sequences of pairs; anything else crashes. Treat all as crash.
            raise ReferenceCrash(f"{qid}: noul criteria must be an object (the reference dict.update()s it)")
    if request.get("videos") or (request.get("images") and not allow_images):
        raise ReferenceCrash("images/videos are not implemented by this reference oracle"
                             + ("" if allow_images else " (text-only validation; ClefReference.run takes images)"))
    images = request.get("images")
    if images and not (isinstance(images, list) and all(isinstance(u, str) for u in images)):
        raise ReferenceCrash("images must be a list of data-URL strings (the reference's HTTP layer decodes them)")
    if _has_lone_surrogate(request):
        raise ReferenceCrash("lone UTF-16 surrogate in a string (the reference fails to encode it for the tokenizer)")
    if not strict:
        return
    # ---- strict: recommended server policy -------------------------------------------------------
    if _has_non_finite(request):
        raise PolicyError("non-finite number (NaN/Infinity) in request")
    if len(questions) > 64:
        raise PolicyError("questions: at most 64 questions")
    for qid, q in questions.items():
        if qid == "":
            if q.get("instructions") in (None, ""):
                raise PolicyError("question id '' without instructions gives an empty question span (NaN)")
        qtype, crit = q["type"], q.get("criteria")
        if qtype == "choice":
            if not 2 <= len(crit) <= 255:
                raise PolicyError(f"{qid}: choice needs 2..255 options")
        elif qtype == "score":
            if not isinstance(crit, list):
                raise PolicyError(f"{qid}: score criteria must be an array")
            if not 2 <= len(crit) <= 10:
                raise PolicyError(f"{qid}: score needs 2..10 levels")


def option_list(question: Dict[str, Any]) -> List[tuple]:
    """Options of a question in MODEL order as (option_id str, description or None) (docs/PROTOCOL.md §3.4).

    noul: [("true", d_true), ("false", d_false)] with the defaults of §1.2 merged by dict update;
    choice: sorted((str(key), desc)); score: [("0", c[0]), ("1", c[1]), ...] (iterating the criteria
    like the reference: an object gives its keys, a string its characters).
    """
    qtype = question["type"]
    crit = question.get("criteria")
    if qtype == "noul":
        merged = {
            "true": "The proposition is true or the answer is yes.",
            "false": "The proposition is false or the answer is no.",
        }
        if crit:
            merged.update(crit)
        return [("true", merged["true"]), ("false", merged["false"])]
    if qtype == "choice":
        return sorted((str(k), v) for k, v in crit.items())
    return [(str(i), level) for i, level in enumerate(crit)]
