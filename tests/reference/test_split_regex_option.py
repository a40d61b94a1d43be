# SPDX-License-Identifier: MIT
"""clef's split-regex choice against the transformers versions that produce each (docs/TOKENIZER.md "Which split
regex").

tests/reference/golden/regex_transformers-<version>.json were written by tools/reference/regex_probe.py under
transformers 5.10.2 (the version the clef-flash model card tests: AutoTokenizer loads ``Qwen2Tokenizer``, which
applies the file's Qwen2 regex) and 5.24.0 (the pinned version: AutoTokenizer loads ``Qwen3_5Tokenizer``, which
applies Qwen3.5's regex whatever the file says). clef's default must give the first set of ids,
``--split-regex qwen35`` the second, on the same regenerated clef-flash tokenizer.json.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

import test_tokenizer_parity_util as U

GOLDEN = U.REPO_ROOT / "tests" / "reference" / "golden"


def golden(version: str) -> dict:
    return json.loads((GOLDEN / f"regex_transformers-{version}.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def flash(tmp_path_factory):
    return U.write_flash_dir(tmp_path_factory.mktemp("flash"))


def test_goldens_record_the_measured_classes():
    old, new = golden("5.10.2"), golden("5.24.0")
    assert (old["auto_processor"]["tokenizer_class"], old["auto_processor"]["regex"]) == ("Qwen2Tokenizer", "qwen2")
    assert (new["auto_processor"]["tokenizer_class"], new["auto_processor"]["regex"]) == ("Qwen3_5Tokenizer", "qwen35")
    assert old["ids"].keys() == new["ids"].keys()
    assert sum(old["ids"][t] != new["ids"][t] for t in old["ids"]) >= 10  # the two really differ
    # the pinned transformers is the one the second golden was made with (regenerate it when the pin moves)
    req = (U.REPO_ROOT / "tools" / "reference" / "requirements.txt").read_text()
    assert f"transformers=={new['transformers']}\n" in req


@pytest.mark.parametrize("flag,version", [(None, "5.10.2"), ("qwen35", "5.24.0")])
def test_clef_ids_match_the_transformers_that_produces_them(flash, flag, version):
    g = golden(version)
    texts = list(g["ids"])
    args = ["--model", str(flash)] + (["--split-regex", flag] if flag else [])
    mine = U.run_batch(args, "encode", [t.encode("utf-8") for t in texts])
    U.assert_same(texts, mine, [g["ids"][t] for t in texts], f"transformers {version}")


def test_cli_flag(flash):
    clef = pathlib.Path(os.environ.get("CLEF_BIN", U.REPO_ROOT / "build" / "release" / "bin" / "clef"))
    text = "สวัสดีครับ"
    ids = {}
    for flag in ("file", "qwen35"):
        out = subprocess.run([str(clef), "tokenize", "--model", str(flash), "--split-regex", flag, text],
                             capture_output=True, check=True, text=True)
        ids[flag] = [int(x) for x in out.stdout.split()]
    assert ids["file"] == golden("5.10.2")["ids"][text]
    assert ids["qwen35"] == golden("5.24.0")["ids"][text]
    bad = subprocess.run([str(clef), "tokenize", "--model", str(flash), "--split-regex", "gpt2", text],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "--split-regex" in bad.stderr
