# SPDX-License-Identifier: MIT
"""The image-processor files of a release folder (docs/COMPATIBILITY.md "The real release folder, file by file").

The Cloudflare/clef-flash release ships no ``preprocessor_config.json``; its image settings are the
``image_processor`` object of the transformers-v5 ``processor_config.json`` (transformers reads that object first
and falls back to ``preprocessor_config.json``). The random-weight folders follow the release:
``make_model.py`` writes :func:`processor_config` as ``processor_config.json``, laid out as transformers 5.24
``Qwen3VLProcessor.save_pretrained`` writes it (image processor, processor class, video processor).
"""

from __future__ import annotations

import copy
from typing import Any, Dict

#: The image settings (docs/MODEL.md §6.1): Qwen2VLImageProcessor fields as transformers writes them.
IMAGE_PROCESSOR: Dict[str, Any] = {
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

#: The video settings transformers 5.24 writes for Qwen3VLVideoProcessor (clef.cpp refuses videos; kept so that
#: AutoProcessor loads the folder as it loads the release).
VIDEO_PROCESSOR: Dict[str, Any] = {
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "do_sample_frames": True,
    "fps": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "max_frames": 768,
    "max_video_tokens": 768,
    "merge_size": 2,
    "min_frames": 4,
    "patch_size": 16,
    "resample": 3,
    "rescale_factor": 1 / 255,
    "return_metadata": False,
    "size": {"longest_edge": 786432, "shortest_edge": 131072},
    "temporal_patch_size": 2,
    "video_processor_type": "Qwen3VLVideoProcessor",
}


def processor_config(image_processor: Dict[str, Any] | None = None) -> Dict[str, Any]:
    """The ``processor_config.json`` object: {"image_processor": ..., "processor_class": "Qwen3VLProcessor",
    "video_processor": ...}. ``image_processor`` replaces :data:`IMAGE_PROCESSOR` when given (a deep copy is
    made either way)."""
    return {
        "image_processor": copy.deepcopy(IMAGE_PROCESSOR if image_processor is None else image_processor),
        "processor_class": "Qwen3VLProcessor",
        "video_processor": copy.deepcopy(VIDEO_PROCESSOR),
    }
