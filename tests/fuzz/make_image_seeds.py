# SPDX-License-Identifier: MIT
"""Writes small PNG/JPEG/WebP seed files (every mode the decoders handle) for the fuzz_image target."""

import io
import pathlib
import sys

import numpy as np
from PIL import Image


def main(out: str) -> None:
    d = pathlib.Path(out)
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, size=(9, 13, 4)).astype(np.uint8)
    ims = {
        "rgb": Image.fromarray(a[..., :3], "RGB"),
        "rgba": Image.fromarray(a, "RGBA"),
        "l": Image.fromarray(a[..., 0], "L"),
        "la": Image.fromarray(a[..., :2], "LA"),
        "p": Image.fromarray(a[..., :3], "RGB").quantize(7),
        "cmyk": Image.fromarray(a, "CMYK"),
    }
    n = 0
    for name, im in ims.items():
        for fmt, kw in [("PNG", {}), ("JPEG", {"quality": 80}), ("WEBP", {"quality": 70}), ("WEBP", {"lossless": True})]:
            try:
                buf = io.BytesIO()
                im.save(buf, fmt, **kw)
            except (OSError, ValueError, KeyError):
                continue
            (d / f"{name}_{fmt.lower()}_{n}").write_bytes(buf.getvalue())
            n += 1
    print(f"{n} seeds in {d}")


if __name__ == "__main__":
    main(sys.argv[1])
