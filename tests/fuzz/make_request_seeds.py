#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes one seed file per request body of DIR/corpus.jsonl, DIR/corpus_openai.jsonl (OpenAI's Decisions
translations; untranslatable lines skipped) and DIR/bad.jsonl (tests/data/requests) for fuzz_request."""
import json
import sys
from pathlib import Path


def main() -> None:
    shared, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    for name in ("corpus.jsonl", "corpus_openai.jsonl", "bad.jsonl"):
        for i, line in enumerate((shared / name).read_text(encoding="utf-8").splitlines()):
            if not line.strip():
                continue
            rec = json.loads(line)
            if "body" not in rec and "request" not in rec:
                continue  # an untranslatable corpus request (its reason only)
            body = rec["body"] if "body" in rec else json.dumps(rec["request"], ensure_ascii=False)
            (out / f"{name.split('.')[0]}_{i:03d}").write_text(body, encoding="utf-8")


if __name__ == "__main__":
    main()
