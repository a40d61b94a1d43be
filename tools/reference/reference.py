#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Clef reference oracle: request → tokens, spans, hidden states, head logits, SystemOne response.

Usage:
    python tools/reference/reference.py --model DIR --request REQ.json --out OUT_DIR [--dtype f32|bf16] [--strict]
    python tools/reference/reference.py --model DIR --jsonl FILE --index N --out OUT_DIR

A JSONL line may be a bare request, ``{"name": ..., "request": {...}}`` or ``{"name": ..., "body": "<json text>"}``.

Steps (all from the specs): validation (docs/PROTOCOL.md §5.3) → ``encode_record`` (§3) → backbone
``model.model.language_model(input_ids, attention_mask=ones)`` (text-only, docs/MODEL.md §0) →
joint schema head in fp32 (§4.4) → per-question softmax and response (§2.1).

Outputs in OUT_DIR:
    input_ids.npy  [T] int64          hidden.npy  [T, H] float32 (final-norm last_hidden_state)
    spans.json     question/option spans, option model order
    logits.npy     [N] float32 (model order)    probs.npy [N] float32 (per-question softmax, model order)
    response.json  SystemOne body              meta.json versions, seed, config sha256, checks
On a rejected request: error.json ``{"error": <class>, "message": ...}`` and exit status 2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import sys
from typing import Any, Dict, Optional

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from clef_ref.head import load_head, record_head_inputs  # noqa: E402
from clef_ref.record import MAX_LENGTH, check_prefix_suffix, encode_record, load_tokenizer  # noqa: E402
from clef_ref.render import parse_request_text  # noqa: E402
from clef_ref.response import build_response, question_probabilities  # noqa: E402
from clef_ref.validate import RequestError, validate_request  # noqa: E402


def load_request_file(path: os.PathLike) -> Any:
    """Parse a request JSON file with ``json.loads`` (keeps int vs float, docs/PROTOCOL.md §3.3)."""
    return parse_request_text(pathlib.Path(path).read_text(encoding="utf-8"))


def load_jsonl_request(path: os.PathLike, index: int) -> Any:
    """Request at 0-based line ``index`` of a JSONL file; unwraps ``{"request": ...}`` / ``{"body": "..."}``."""
    lines = [ln for ln in pathlib.Path(path).read_text(encoding="utf-8").splitlines() if ln.strip()]
    obj = parse_request_text(lines[index])
    if isinstance(obj, dict) and "questions" not in obj:
        if "request" in obj:
            return obj["request"]
        if "body" in obj and isinstance(obj["body"], str):
            return parse_request_text(obj["body"])
    return obj



def image_settings(model_dir) -> Dict[str, Any]:
    """The folder's image-processor settings as transformers reads them: the ``image_processor`` object of
    processor_config.json, else preprocessor_config.json (docs/COMPATIBILITY.md "The real release folder, file
    by file"). Raises FileNotFoundError naming both files when neither holds them."""
    d = pathlib.Path(model_dir)
    if (d / "processor_config.json").exists():
        nested = json.loads((d / "processor_config.json").read_text()).get("image_processor")
        if nested is not None:
            return nested
    if (d / "preprocessor_config.json").exists():
        return json.loads((d / "preprocessor_config.json").read_text())
    raise FileNotFoundError(f"{d}: neither processor_config.json (image_processor) nor preprocessor_config.json")

class ClefReference:
    """A loaded release folder: tokenizer, fp32 (or bf16) backbone, fp32 joint head.

    Args:
        model_dir: release folder (config.json, weights, joint_head.*, tokenizer.json).
        dtype: "f32" (default; the oracle) or "bf16" backbone; the head is always fp32.
    """

    def __init__(self, model_dir: os.PathLike, dtype: str = "f32"):
        from transformers import Qwen3_5ForConditionalGeneration

        self.model_dir = pathlib.Path(model_dir)
        self.dtype = dtype
        self.tokenizer = load_tokenizer(self.model_dir)
        torch_dtype = torch.float32 if dtype == "f32" else torch.bfloat16
        self.model = Qwen3_5ForConditionalGeneration.from_pretrained(str(self.model_dir), dtype=torch_dtype).eval()
        self.model.config.use_cache = False
        self.head = load_head(self.model_dir)
        rw = self.model_dir / "random_weights.json"
        self.random_weights: Optional[Dict[str, Any]] = json.loads(rw.read_text()) if rw.exists() else None
        self.prefix_suffix = check_prefix_suffix(self.tokenizer)

    def output_embeddings(self) -> torch.Tensor:
        """[V, H] lexical table: lm_head.weight, which is embed_tokens.weight when tied (docs/PROTOCOL.md §4.3)."""
        return self.model.get_output_embeddings().weight

    @torch.no_grad()
    def hidden_states(self, input_ids: torch.Tensor, pixel_values: Optional[torch.Tensor] = None,
                      image_grid_thw: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Final-norm hidden states [T, H] float32 for ``input_ids`` [T] int64 (docs/MODEL.md §0).

        With images: ``pixel_values`` [patches, 1536] and ``image_grid_thw`` [n, 3] from
        ``preprocess_images``; the composite model runs the vision tower, scatters its rows into the
        ``<|image_pad|>`` slots and computes 3-D M-RoPE positions (docs/MODEL.md §6.9, §7.1).
        """
        ids = input_ids.unsqueeze(0)
        if pixel_values is None:
            out = self.model.model.language_model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
            return out.last_hidden_state[0].float()
        mm = (ids == self.model.config.image_token_id).to(torch.int32)
        out = self.model.model(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=pixel_values,
                               image_grid_thw=image_grid_thw, mm_token_type_ids=mm, use_cache=False)
        return out.last_hidden_state[0].float()

    def preprocess_images(self, urls, backend: str = "torchvision"):
        """Data URLs -> (pixel_values [patches, 1536] f32, image_grid_thw [n, 3] int64), configured from the
        folder's image settings (:func:`image_settings`); docs/VISION.md.

        ``backend="torchvision"`` (default): what Cloudflare's reference does with a request: the URL strings go
        to transformers' torchvision ``Qwen2VLImageProcessor``, which decodes them itself (alpha dropped, EXIF
        orientation applied). ``backend="pil"``: Pillow opens each file and transformers'
        ``Qwen2VLImageProcessorPil`` gets the PIL images (alpha composited on white, no EXIF).
        Raises RequestError for anything but base64 data URLs, ValueError for another backend."""
        import base64
        import io

        from PIL import Image
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor

        cfg = image_settings(self.model_dir)
        kwargs = dict(size=cfg["size"], patch_size=cfg["patch_size"], temporal_patch_size=cfg["temporal_patch_size"],
                      merge_size=cfg["merge_size"], image_mean=cfg["image_mean"], image_std=cfg["image_std"],
                      rescale_factor=cfg["rescale_factor"])
        for u in urls:
            head, _, payload = u.partition(",")
            if not (head.startswith("data:image/") and head.endswith(";base64")):
                raise RequestError("images: only base64 data URLs are accepted")
            base64.b64decode(payload, validate=True)
        if backend == "torchvision":
            out = Qwen2VLImageProcessor(**kwargs)(images=list(urls), return_tensors="pt")
        elif backend == "pil":
            images = [Image.open(io.BytesIO(base64.b64decode(u.partition(",")[2], validate=True))) for u in urls]
            out = Qwen2VLImageProcessorPil(**kwargs)(images=images, return_tensors="pt")
        else:
            raise ValueError(f"image backend must be torchvision or pil, got {backend!r}")
        return out["pixel_values"].float(), out["image_grid_thw"]

    @torch.no_grad()
    def run(self, request: Any, strict: bool = False, max_length: int = MAX_LENGTH,
            image_backend: str = "torchvision") -> Dict[str, Any]:
        """Full pipeline for one parsed request.

        Returns dict with record (record.Record), input_ids [T] int64, hidden [T,H] f32, logits [N] f32,
        probs [N] f32 (model order), response (SystemOne body).
        Raises: validate.RequestError (and subclasses) for rejected requests.
        """
        validate_request(request, strict=strict, allow_images=True)
        pixel_values = grid = None
        counts = []
        if request.get("images"):
            pixel_values, grid = self.preprocess_images(request["images"], image_backend)
            merge = self.model.config.vision_config.spatial_merge_size
            counts = [int(t * h * w) // (merge * merge) for t, h, w in grid.tolist()]
        record = encode_record(request, self.tokenizer, max_length=max_length, image_token_counts=counts)
        input_ids = torch.tensor(record.input_ids, dtype=torch.long)
        hidden = self.hidden_states(input_ids, pixel_values, grid)
        logits = self.head(hidden, self.output_embeddings(), input_ids, **record_head_inputs(record)).float()
        per_q = question_probabilities(logits, record)
        model_name = self.random_weights["model_name"] if self.random_weights else request["model"]
        response = build_response(model_name, request, record, per_q)
        return {
            "record": record,
            "input_ids": input_ids,
            "hidden": hidden,
            "logits": logits,
            "probs": torch.cat(per_q),
            "response": response,
        }

    def meta(self) -> Dict[str, Any]:
        """Provenance for meta.json: versions, seed, sha256 of config.json and tokenizer.json, checks."""
        import tokenizers
        import transformers

        def sha(name):
            p = self.model_dir / name
            return hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None

        return {
            "model_dir": str(self.model_dir),
            "config_sha256": sha("config.json"),
            "tokenizer_sha256": sha("tokenizer.json"),
            "joint_head_sha256": sha("joint_head.safetensors"),
            "random_weights": self.random_weights,
            "seed": (self.random_weights or {}).get("seed"),
            "backbone_dtype": self.dtype,
            "head_dtype": "f32",
            "prefix_suffix_tokens": self.prefix_suffix,
            "versions": {
                "python": sys.version.split()[0],
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "tokenizers": tokenizers.__version__,
                "numpy": np.__version__,
            },
        }


def write_outputs(out_dir: os.PathLike, result: Dict[str, Any], meta: Dict[str, Any]) -> None:
    """Write the OUT_DIR files listed in the module docstring."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "input_ids.npy", result["input_ids"].numpy().astype(np.int64))
    np.save(out / "hidden.npy", result["hidden"].numpy().astype(np.float32))
    np.save(out / "logits.npy", result["logits"].numpy().astype(np.float32))
    np.save(out / "probs.npy", result["probs"].numpy().astype(np.float32))
    (out / "spans.json").write_text(json.dumps(result["record"].to_json(), ensure_ascii=False, indent=1) + "\n",
                                    encoding="utf-8")
    (out / "response.json").write_text(json.dumps(result["response"], ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "meta.json").write_text(json.dumps(meta, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def main(argv=None) -> int:
    """CLI entry point; exit 0 on success, 2 on a rejected request (error.json written)."""
    ap = argparse.ArgumentParser(description="Clef reference oracle")
    ap.add_argument("--model", required=True)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--request")
    src.add_argument("--jsonl")
    ap.add_argument("--index", type=int, default=0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--strict", action="store_true", help="also apply the recommended server policy")
    ap.add_argument("--max-length", type=int, default=MAX_LENGTH)
    a = ap.parse_args(argv)
    request = load_request_file(a.request) if a.request else load_jsonl_request(a.jsonl, a.index)
    ref = ClefReference(a.model, a.dtype)
    meta = ref.meta()
    meta["request_source"] = a.request or f"{a.jsonl}#{a.index}"
    if not ref.prefix_suffix["ok"]:
        print(f"warning: PREFIX/SUFFIX tokenize to {ref.prefix_suffix}, expected 36/18", file=sys.stderr)
    try:
        result = ref.run(request, strict=a.strict, max_length=a.max_length)
    except RequestError as e:
        out = pathlib.Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "error.json").write_text(json.dumps({"error": type(e).__name__, "message": str(e)}) + "\n")
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        return 2
    write_outputs(a.out, result, meta)
    print(json.dumps(result["response"], ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
