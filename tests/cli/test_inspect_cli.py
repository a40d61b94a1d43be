"""`clef inspect` and `clef make-model`, black-box: the embedded default model, parameter counts
against transformers (the independent reference), and one clear error line per broken file."""

from __future__ import annotations

import json
import struct

import pytest
import torch

from conftest import run_clef


def inspect_json(folder, *extra):
    r = run_clef("inspect", "--json", str(folder), *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def hf_counts(folder):
    """Parameter counts of the folder according to transformers' Qwen3.5 classes."""
    from transformers import Qwen3_5ForConditionalGeneration

    model, info = Qwen3_5ForConditionalGeneration.from_pretrained(
        str(folder), dtype=torch.float32, output_loading_info=True)
    assert not any(info.values()), f"transformers found missing/unexpected/mismatched keys: {info}"
    text = sum(p.numel() for p in model.model.language_model.parameters())
    if not model.config.tie_word_embeddings:
        text += model.lm_head.weight.numel()
    vision = sum(p.numel() for p in model.model.visual.parameters())
    return text, vision


def test_default_model_is_made_and_inspected(tmp_path):
    r = run_clef("inspect", env={"CLEF_HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert "embedded default model" in r.stderr and "RANDOM WEIGHTS" in r.stderr
    assert "clef-tiny-random" in r.stdout and "layer pattern    LLLF" in r.stdout
    assert (tmp_path / "default-model" / "SHA256SUMS").exists()
    again = run_clef("inspect", env={"CLEF_HOME": str(tmp_path)})  # reuses the folder
    assert again.returncode == 0 and again.stdout == r.stdout


def test_cpp_tiny_is_authentic_for_transformers_and_tokenizers(cpp_tiny):
    import tokenizers
    from transformers import AutoTokenizer

    j = inspect_json(cpp_tiny, "--verify")
    text, vision = hf_counts(cpp_tiny)
    assert j["params"]["text"] == text
    assert j["params"]["vision"] == vision
    assert j["random_weights"] is True and j["model"].endswith("-random")
    tok = tokenizers.Tokenizer.from_file(str(cpp_tiny / "tokenizer.json"))
    assert tok.get_vocab_size(with_added_tokens=True) == j["tokenizer"]["vocab_entries"] + 26
    assert len(AutoTokenizer.from_pretrained(str(cpp_tiny))) == j["tokenizer"]["vocab_entries"] + 33
    assert len(j["verified_files"]) == 8


def test_make_model_is_deterministic(tmp_path):
    for name in ("a", "b"):
        run_clef("make-model", "--preset", "tiny", "--seed", "5", "--out", str(tmp_path / name), check=True)
    assert (tmp_path / "a" / "SHA256SUMS").read_text() == (tmp_path / "b" / "SHA256SUMS").read_text()
    r = run_clef("make-model", "--preset", "tiny", "--out", str(tmp_path / "a"))
    assert r.returncode == 2 and "--force" in r.stderr
    r = run_clef("make-model", "--preset", "huge", "--out", str(tmp_path / "c"))
    assert r.returncode == 2


def test_python_tiny_counts_match_transformers_and_head(tmp_path):
    import make_model
    from clef_ref.head import head_param_count

    out = tmp_path / "py-tiny"
    make_model.make_model("tiny", out, seed=1, dtype="bf16", verbose=False)
    j = inspect_json(out, "--verify")
    text, vision = hf_counts(out)
    assert (j["params"]["text"], j["params"]["vision"]) == (text, vision)
    head_cfg = json.loads((out / "joint_head_config.json").read_text())
    assert j["params"]["head"] == head_param_count(head_cfg)
    assert j["tokenizer"]["vocab_entries"] == 248044 and j["tokenizer"]["added_tokens"] == 33
    assert j["dtypes"]["backbone"].keys() == {"BF16", "F32"}


@pytest.mark.slow
def test_0_8b_preset_counts(tmp_path):
    """The 0.8b preset (~2 GB, written in seconds): about 752M text params incl. embeddings."""
    import make_model

    out = tmp_path / "clef-0.8b"
    make_model.make_model("0.8b", out, seed=0, dtype="bf16", verbose=False)
    j = inspect_json(out)
    assert j["layer_pattern"] == "LLLF" * 6
    assert abs(j["params"]["text"] - 752.4e6) / 752.4e6 < 0.005, j["params"]["text"]
    assert j["tied_lm_head"] is True
    head_cfg = json.loads((out / "joint_head_config.json").read_text())
    assert head_cfg == {"hidden_size": 1024, "width": 1024, "routing_layers": 2, "layers": 2, "heads": 16,
                        "feedforward": 4096}


# --- bad input: one line on stderr naming the file and the problem, exit code 3/4, no crash ----

def _rewrite_header(path, mutate):
    """Replaces the JSON header of a safetensors file by mutate(header_dict) (data unchanged)."""
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    text = json.dumps(mutate(header)).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def _first_tensor(header):
    return next(k for k in header if k != "__metadata__")


def _corrupt(case, d):
    st = d / "model.safetensors"
    if case == "truncated_file":
        st.write_bytes(st.read_bytes()[:-1000])
    elif case == "header_past_eof":
        raw = st.read_bytes()
        st.write_bytes(struct.pack("<Q", len(raw) * 2) + raw[8:])
    elif case == "malformed_header_json":
        raw = st.read_bytes()
        n = struct.unpack("<Q", raw[:8])[0]
        st.write_bytes(raw[:8] + b"{" + b"x" * (n - 1) + raw[8 + n:])
    elif case == "offsets_out_of_range":
        def f(h):
            k = _first_tensor(h)
            h[k]["data_offsets"][1] += 10**9
            return h
        _rewrite_header(st, f)
    elif case == "overlapping_offsets":
        def f(h):
            items = sorted((v["data_offsets"][0], k) for k, v in h.items() if k != "__metadata__")
            off = h[items[1][1]]["data_offsets"]
            h[items[1][1]]["data_offsets"] = [off[0] - 2, off[1] - 2]  # same size, shifted into its neighbour
            return h
        _rewrite_header(st, f)
    elif case == "dtype_shape_mismatch":
        def f(h):
            k = _first_tensor(h)
            h[k]["dtype"] = "F32" if h[k]["dtype"] == "BF16" else "BF16"
            return h
        _rewrite_header(st, f)
    elif case == "missing_shard":
        header_names = json.loads(st.read_bytes()[8:8 + struct.unpack("<Q", st.read_bytes()[:8])[0]])
        names = [k for k in header_names if k != "__metadata__"]
        st.rename(d / "model-00001-of-00002.safetensors")
        wm = {k: "model-00001-of-00002.safetensors" for k in names}
        wm["model.language_model.norm.weight"] = "model-00002-of-00002.safetensors"
        (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
    elif case == "unknown_layer_type":
        cfg = json.loads((d / "config.json").read_text())
        cfg["text_config"]["layer_types"][0] = "mamba2"
        (d / "config.json").write_text(json.dumps(cfg))
    elif case == "no_joint_head":
        (d / "joint_head.safetensors").unlink()
    elif case == "unsupported_model_type":
        cfg = json.loads((d / "config.json").read_text())
        cfg["model_type"] = "llama"
        (d / "config.json").write_text(json.dumps(cfg))
    elif case == "sha256_mismatch":
        p = d / "preprocessor_config.json"
        p.write_text(p.read_text().replace("0.5", "0.6", 1))
    else:
        raise AssertionError(case)


BAD_CASES = {
    # case: (exit code, substrings the single error line must contain)
    "truncated_file": (3, ["model.safetensors", "run past the end of the data section"]),
    "header_past_eof": (3, ["model.safetensors", "header length", "runs past the end of the file"]),
    "malformed_header_json": (3, ["model.safetensors", "malformed header JSON"]),
    "offsets_out_of_range": (3, ["model.safetensors", "data_offsets", "run past the end"]),
    "overlapping_offsets": (3, ["model.safetensors", "overlap"]),
    "dtype_shape_mismatch": (3, ["model.safetensors", "needs", "bytes but data_offsets"]),
    "missing_shard": (3, ["model.safetensors.index.json", "shard model-00002-of-00002.safetensors", "missing"]),
    "unknown_layer_type": (3, ["config.json", "text_config.layer_types[0]", "unknown layer type \"mamba2\""]),
    "no_joint_head": (3, ["joint_head.safetensors", "not a Clef release"]),
    "unsupported_model_type": (4, ["config.json", "model_type", "\"llama\""]),
    "sha256_mismatch": (3, ["preprocessor_config.json", "sha256 mismatch"]),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_input_gives_one_clear_line(case, broken):
    _corrupt(case, broken)
    code, needles = BAD_CASES[case]
    args = ["inspect", str(broken)] + (["--verify"] if case == "sha256_mismatch" else [])
    r = run_clef(*args)
    assert r.returncode == code, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("clef: error: "), r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert r.stdout == ""


def test_usage_errors_exit_2(tmp_path):
    assert run_clef("inspect", "--chunk", "0", str(tmp_path)).returncode == 2
    assert run_clef("frobnicate").returncode == 2
    r = run_clef("inspect", str(tmp_path / "nope"))
    assert r.returncode == 3 and "not a directory" in r.stderr
