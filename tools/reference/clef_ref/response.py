# SPDX-License-Identifier: MIT
"""Per-question softmax and the SystemOne response body (docs/PROTOCOL.md §2.1)."""

from __future__ import annotations

from typing import Any, Dict, List

import torch


def question_probabilities(logits: torch.Tensor, record) -> List[torch.Tensor]:
    """Split [N] logits by question and softmax each in float32 (§2.1 rule 1).

    Returns a list of Q f32 tensors, each [n_options of that question], in model order.
    """
    out, start = [], 0
    for q in record.questions:
        n = len(q.option_ids)
        out.append(logits[start : start + n].float().softmax(-1))
        start += n
    return out


def build_response(model_name: str, request: Dict[str, Any], record, probs: List[torch.Tensor]) -> Dict[str, Any]:
    """SystemOne response body (docs/PROTOCOL.md §2.1 rules 1-5).

    Args:
        model_name: value of ``"model"`` in the body.
        request: the parsed request (question order and choice criteria key order come from it).
        record: the encoded ``record.Record``.
        probs: output of :func:`question_probabilities`.
    Returns:
        dict ``{"model", "answers", "usage"}``; numbers are Python floats rounded with ``round(x, 4)``.
    """
    answers: Dict[str, Any] = {}
    for q, p_t in zip(record.questions, probs):
        p = {oid: float(v) for oid, v in zip(q.option_ids, p_t.tolist())}
        if q.type == "noul":
            answers[q.question_id] = {"type": "noul", "noul": round(p["true"], 4)}
        elif q.type == "choice":
            options = [str(k) for k in request["questions"][q.question_id]["criteria"].keys()]
            best = max(p[o] for o in options)
            choice = next(o for o in options if p[o] == best)
            answers[q.question_id] = {
                "type": "choice",
                "choice": choice,
                "confidence": round(p[choice], 4),
                "probabilities": {o: round(p[o], 4) for o in options},
            }
        else:
            levels = q.option_ids
            answers[q.question_id] = {
                "type": "score",
                "score": round(sum(i * p[lv] for i, lv in enumerate(levels)), 4),
                "confidence": round(max(p.values()), 4),
                "legend": {lv: val for lv, val in zip(levels, q.option_values)},
                "probabilities": {lv: round(p[lv], 4) for lv in levels},
            }
    return {"model": model_name, "answers": answers, "usage": {"input_tokens": len(record.input_ids), "output_tokens": 0}}
