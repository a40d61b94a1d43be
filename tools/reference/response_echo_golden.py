#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Golden SystemOne response bodies for requests whose answers echo request values.

A response echoes four things from its request (docs/PROTOCOL.md §2.1, the reference's
``systemone_answer``): the ``model`` string, the question ids (answer keys, request order), the
choice option ids (``choice`` and the ``probabilities`` keys, criteria order) and the score levels'
raw values (``legend``). The reference returns them inside a Python dict built from
``json.loads(body)``, so they come back as given: object members in the order sent at every depth
(a repeated key keeps its first position and its last value), numbers as Python re-prints them,
never key-sorted. Only the prompt ``render()`` sorts keys.

This script runs that behaviour with the toolkit (``validate_request`` -> ``encode_record`` ->
``question_probabilities`` -> ``build_response``, then ``json.dumps(ensure_ascii=False,
separators=(",", ":"))``, the compact form clef writes) on a fixed set of request texts and
seeded float32 logits, and writes one JSON line per case:

    {"name": str, "request": <request text, raw: duplicate keys survive>, "logits": [float32 values
     as Python floats, model order], "input_tokens": int, "body": <expected response bytes as str>}

The C++ unit test (tests/unit/test_response_echo.cc) feeds ``request`` and ``logits`` to
``build_response_json`` and compares bytes; tests/reference/test_response_echo.py regenerates the file
with this script and checks it equals the committed one, then runs the live binaries on it.

    python tools/reference/response_echo_golden.py --model /tmp/clef-tiny \\
        --out tests/reference/golden/response_echo.jsonl

``--model`` only provides tokenizer.json (input_tokens = len(input_ids) of the record).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import sys
from typing import Any, Dict, List

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from clef_ref.record import encode_record, load_tokenizer  # noqa: E402
from clef_ref.response import build_response, question_probabilities  # noqa: E402
from clef_ref.validate import validate_request  # noqa: E402

#: (name, raw request text). Written as text, not dicts: duplicate keys and number spellings
#: (1E2, 2.50, -0) must reach both parsers as sent.
CASES: List[tuple] = [
    ("issue_example",
     '{"model":"m","state":"x","questions":{"s":{"type":"score","criteria":[{"b":1,"a":2},"x"]}}}'),
    ("nested_levels",
     '{"model":"m","state":"log","questions":{"lv":{"type":"score","instructions":"How bad?","criteria":['
     '{"z":{"y":[{"b":1,"a":[3,{"d":1,"c":2}]}]},"a":null,"m":{}},'
     '[{"k2":1,"k1":2},[],{}],'
     'null,'
     '{"\\u00e9":1,"e":2,"\\ud83d\\ude00":3,"E":4,"\\u2028":5}'
     ']}}}'),
    ("scalar_levels",
     '{"model":"m","state":"s","questions":{"n":{"type":"score","criteria":['
     '1.5e3,12345678901234567890123,-0,1E-7,2.50,1e16,-0.0,true,false,'
     '"tab\\tnl\\n\\u0001 \\u00e9 \\u2028 \\ud83d\\ude00 \\"q\\" \\\\ /\\u007f"'
     ']}}}'),
    ("duplicate_keys_in_levels",
     '{"model":"m","state":{"b":1,"a":2},"questions":{"d":{"type":"score","criteria":['
     '{"b":1,"a":2,"b":3},{"x":{"q":1,"p":2,"q":[2,{"y":1,"x":0,"y":2}]}},"plain"]}}}'),
    ("choice_ids_in_request_order",
     '{"model":"m","state":"s","questions":{"c":{"type":"choice","instructions":{"z":1,"a":2},"criteria":'
     '{"zeta":"z","alpha":{"d":1,"c":2},"Mid":null,"alpha":"second","10":1,"2":{"y":[1,{"b":0,"a":1}]}}}}}'),
    ("question_ids_and_types_mixed",
     '{"model":"m\\u00e9 \\"x\\"\\n","state":[{"b":1,"a":2}],"questions":{'
     '"q_b":{"type":"noul","criteria":{"false":{"b":1,"a":2}}},'
     '"\\u00e9t\\u00e9 \\"quoted\\"\\t":{"type":"choice","criteria":{"y":"yes","n":{"why":[2,1],"because":0}}},'
     '"q_a":{"type":"score","criteria":[{"level":"low","range":[0,3],"detail":{"unit":"h","max":3}},'
     '{"level":"high","range":[3,null],"detail":{"unit":"h","max":null}}]},'
     '"q_b":{"type":"score","criteria":[{"second":2,"first":1},{"second":4,"first":3}]},'
     '"\\u2028":{"type":"noul"}}}'),
]


def float32_logits(n: int, rng: random.Random) -> List[float]:
    """n seeded logits, each a float32 value held by a Python float (exact in JSON via repr)."""
    return [float(np.float32(rng.uniform(-4.0, 4.0))) for _ in range(n)]


def golden_case(name: str, text: str, tokenizer, rng: random.Random) -> Dict[str, Any]:
    """One golden line: the reference's response body for `text` with seeded logits."""
    request = json.loads(text)
    validate_request(request)
    record = encode_record(request, tokenizer)
    n = sum(len(q.option_ids) for q in record.questions)
    logits = float32_logits(n, rng)
    probs = question_probabilities(torch.tensor(logits, dtype=torch.float32), record)
    # The reference echoes request["model"] (systemone()); the random-weight name is reference.py's.
    body = build_response(request["model"], request, record, probs)
    return {"name": name, "request": text, "logits": logits, "input_tokens": len(record.input_ids),
            "body": json.dumps(body, ensure_ascii=False, separators=(",", ":"))}


def golden_lines(model_dir: pathlib.Path, seed: int = 12) -> List[str]:
    """Every case as one JSON line (ensure_ascii=False, sorted keys), in CASES order."""
    tokenizer = load_tokenizer(model_dir)
    rng = random.Random(seed)
    return [json.dumps(golden_case(name, text, tokenizer, rng), ensure_ascii=False, sort_keys=True)
            for name, text in CASES]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="release folder whose tokenizer.json counts input_tokens")
    ap.add_argument("--out", required=True, help="JSONL file to write")
    a = ap.parse_args(argv)
    lines = golden_lines(pathlib.Path(a.model))
    pathlib.Path(a.out).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    print(f"wrote {len(lines)} cases to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
