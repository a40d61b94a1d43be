# SPDX-License-Identifier: MIT
"""``encode_record``: SystemOne request → token ids and spans (docs/PROTOCOL.md §3.1-§3.5).

Every piece is tokenized separately with ``tokenizers.Tokenizer`` ``encode(piece,
add_special_tokens=False)`` (special tokens inside pieces are recognised), ids are concatenated, spans
are half-open ``[start, end)`` over the final ``input_ids``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Sequence, Any, Dict, List, Tuple

from .render import render
from .validate import RequestError, option_list

SYSTEM_PROMPT = (
    "Read the complete state and schema. Decide every field jointly. "
    "Each answer must be exactly one of that field's allowed options."
)
PREFIX = "<|im_start|>system\n" + SYSTEM_PROMPT + "<|im_end|>\n<|im_start|>user\nSTATE:\n"
SCHEMA_HEAD = "\n\nSCHEMA FIELDS:\n"
ALLOWED_OPTIONS = "\nALLOWED OPTIONS:\n"
END_FIELD = "END FIELD\n"
SUFFIX = "\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nJOINT SCHEMA DECISIONS:"
TYPE_IDS = {"noul": 0, "choice": 1, "score": 2}
MAX_LENGTH = 16384
#: Token counts of PREFIX / SUFFIX with the official tokenizer (docs/PROTOCOL.md §3.2 golden ids).
EXPECTED_PREFIX_LEN = 36
EXPECTED_SUFFIX_LEN = 18


def field_head(k: int, question_id: str, qtype: str) -> str:
    """FIELD_HEAD text for question k (1-based) (docs/PROTOCOL.md §3.1); id and type inserted raw."""
    return f"\nFIELD {k}\nID: {question_id}\nTYPE: {qtype}\nINSTRUCTION: "


def option_head(j: int) -> str:
    """``OPTION {j}: `` for option j (1-based, model order) (docs/PROTOCOL.md §3.1)."""
    return f"OPTION {j}: "


def option_semantics(option_id: str, description: Any) -> Dict[str, Any]:
    """Option semantics object: ``{"option_id": id}`` plus ``"description"`` unless it is None (§3.4)."""
    sem: Dict[str, Any] = {"option_id": option_id}
    if description is not None:
        sem["description"] = description
    return sem


def instruction_value(question_id: str, question: Dict[str, Any]) -> Any:
    """Instruction value: ``instructions`` unless missing/None/"" → the question id (docs/PROTOCOL.md §1.2)."""
    instr = question.get("instructions")
    if instr is None or instr == "":
        return question_id
    return instr


@dataclasses.dataclass
class QuestionSpan:
    """One question of an encoded record. Spans are half-open [start, end) in input_ids."""

    question_id: str
    type: str
    type_id: int
    span: Tuple[int, int]
    option_ids: List[str]  # model order (§3.4)
    option_spans: List[Tuple[int, int]]
    option_values: List[Any]  # descriptions / level values in model order (raw request values)


@dataclasses.dataclass
class Record:
    """An encoded record (docs/PROTOCOL.md §3.2). ``input_ids``: list[int] of length T."""

    input_ids: List[int]
    questions: List[QuestionSpan]
    prefix_len: int
    state_len: int  # after truncation
    state_len_full: int  # before truncation
    schema_len: int
    suffix_len: int

    @property
    def truncated(self) -> bool:
        """True when the state was cut to fit max_length (§3.2 step 6)."""
        return self.state_len < self.state_len_full

    def to_json(self) -> Dict[str, Any]:
        """JSON-serialisable spans description (written as spans.json by reference.py)."""
        return {
            "T": len(self.input_ids),
            "prefix_len": self.prefix_len,
            "state_len": self.state_len,
            "state_len_full": self.state_len_full,
            "truncated": self.truncated,
            "schema_len": self.schema_len,
            "suffix_len": self.suffix_len,
            "questions": [
                {
                    "id": q.question_id,
                    "type": q.type,
                    "type_id": q.type_id,
                    "span": list(q.span),
                    "options": [
                        {"id": oid, "span": list(sp)} for oid, sp in zip(q.option_ids, q.option_spans)
                    ],
                }
                for q in self.questions
            ],
        }


def load_tokenizer(model_dir: os.PathLike):
    """Load ``<model_dir>/tokenizer.json`` with ``tokenizers.Tokenizer.from_file`` (docs/TOKENIZER.md §1)."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(os.fspath(os.path.join(model_dir, "tokenizer.json")))


def tok(tokenizer, text: str) -> List[int]:
    """Token ids of one piece: ``encode(text, add_special_tokens=False).ids`` (docs/PROTOCOL.md §3.2)."""
    if text == "":
        return []
    return list(tokenizer.encode(text, add_special_tokens=False).ids)


#: One image's placeholder in the media piece; each ``<|image_pad|>`` is expanded to the image's
#: merged-token count (docs/PROTOCOL.md §3.2 step 2, §3.6).
IMAGE_PLACEHOLDER = ("<|vision_start|>", "<|image_pad|>", "<|vision_end|>")


def media_text(image_token_counts: Sequence[int]) -> str:
    """The media piece appended to the prefix: per image vision_start, N pads, vision_end; then "\n"."""
    vs, pad, ve = IMAGE_PLACEHOLDER
    return "".join(vs + pad * int(n) + ve for n in image_token_counts) + "\n"


def encode_record(request: Dict[str, Any], tokenizer, max_length: int = MAX_LENGTH,
                  image_token_counts: Sequence[int] = ()) -> Record:
    """Encode a validated request (docs/PROTOCOL.md §3.2 steps 1-8; images per §3.6).

    Args:
        request: parsed request (already passed ``validate.validate_request``).
        tokenizer: a ``tokenizers.Tokenizer``.
        max_length: token budget; the state is truncated (keeping its beginning) to fit.
        image_token_counts: per image in request order, its ``<|image_pad|>`` count (merged grid
            H·W); the media piece is tokenized as one piece and joins the prefix.
    Returns:
        Record with input_ids (list[int], length T ≤ max_length) and per-question/option spans.
    Raises:
        RequestError: ``schema requires N tokens before state; maximum is M`` (§5.3 item 4).
    """
    schema_ids: List[int] = tok(tokenizer, SCHEMA_HEAD)
    rel: List[Tuple[str, str, Tuple[int, int], List[str], List[Tuple[int, int]], List[Any]]] = []
    for k, (qid, q) in enumerate(request["questions"].items(), start=1):
        qtype = q["type"]
        schema_ids += tok(tokenizer, field_head(k, qid, qtype))
        a = len(schema_ids)
        schema_ids += tok(tokenizer, render(instruction_value(qid, q)))
        qspan = (a, len(schema_ids))
        schema_ids += tok(tokenizer, ALLOWED_OPTIONS)
        oids, ospans, ovals = [], [], []
        for j, (oid, desc) in enumerate(option_list(q), start=1):
            schema_ids += tok(tokenizer, option_head(j))
            s = len(schema_ids)
            schema_ids += tok(tokenizer, render(option_semantics(oid, desc)))
            oids.append(oid)
            ospans.append((s, len(schema_ids)))
            ovals.append(desc)
            schema_ids += tok(tokenizer, "\n")
        schema_ids += tok(tokenizer, END_FIELD)
        rel.append((qid, qtype, qspan, oids, ospans, ovals))
    prefix_ids = tok(tokenizer, PREFIX)
    if image_token_counts:
        prefix_ids += tok(tokenizer, media_text(image_token_counts))
    suffix_ids = tok(tokenizer, SUFFIX)
    state_ids_full = tok(tokenizer, render(request["state"]))
    fixed = len(prefix_ids) + len(schema_ids) + len(suffix_ids)
    if fixed > max_length:
        raise RequestError(f"schema requires {fixed} tokens before state; maximum is {max_length}")
    state_ids = state_ids_full[: max_length - fixed]
    shift = len(prefix_ids) + len(state_ids)
    input_ids = prefix_ids + state_ids + schema_ids + suffix_ids
    questions = [
        QuestionSpan(
            question_id=qid,
            type=qtype,
            type_id=TYPE_IDS[qtype],
            span=(qs[0] + shift, qs[1] + shift),
            option_ids=oids,
            option_spans=[(s + shift, e + shift) for s, e in ospans],
            option_values=ovals,
        )
        for qid, qtype, qs, oids, ospans, ovals in rel
    ]
    return Record(
        input_ids=input_ids,
        questions=questions,
        prefix_len=len(prefix_ids),
        state_len=len(state_ids),
        state_len_full=len(state_ids_full),
        schema_len=len(schema_ids),
        suffix_len=len(suffix_ids),
    )


def check_prefix_suffix(tokenizer) -> Dict[str, int]:
    """Token counts of PREFIX and SUFFIX with this tokenizer; official: 36 and 18 (docs/PROTOCOL.md §3.2).

    Returns {"prefix": n, "suffix": m, "ok": bool}.
    """
    p, s = len(tok(tokenizer, PREFIX)), len(tok(tokenizer, SUFFIX))
    return {"prefix": p, "suffix": s, "ok": p == EXPECTED_PREFIX_LEN and s == EXPECTED_SUFFIX_LEN}
