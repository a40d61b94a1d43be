# SPDX-License-Identifier: MIT
"""Small generators of images that cost a decoder far more than their size suggests, for the tests of the image
bounds (docs/COMPATIBILITY.md "limits and guards"): a progressive JPEG made of thousands of tiny scans, a PNG whose
compressed text chunks inflate to gigabytes, an animated WebP. Each is built in memory in well under a second."""

from __future__ import annotations

import base64
import io
import struct
import zlib


def data_url(data: bytes, mime: str) -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


class _Bits:
    """MSB-first bit writer for JPEG entropy-coded data (0xFF bytes stuffed with 0x00, padded with 1 bits)."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.acc = 0
        self.n = 0

    def put(self, value: int, count: int) -> None:
        for i in range(count - 1, -1, -1):
            self.acc = (self.acc << 1) | ((value >> i) & 1)
            self.n += 1
            if self.n == 8:
                self.out.append(self.acc)
                if self.acc == 0xFF:
                    self.out.append(0)
                self.acc, self.n = 0, 0

    def zeros(self, count: int) -> None:
        """`count` zero bits (fast path for long runs)."""
        while self.n and count:
            self.put(0, 1)
            count -= 1
        self.out += bytes(count // 8)
        self.put(0, count % 8)

    def finish(self) -> bytes:
        if self.n:
            self.put((1 << (8 - self.n)) - 1, 8 - self.n)
        return bytes(self.out)


def _segment(marker: int, payload: bytes) -> bytes:
    return struct.pack(">BBH", 0xFF, marker, len(payload) + 2) + payload


def many_scan_jpeg(width: int, height: int, scans: int) -> bytes:
    """A valid grayscale progressive JPEG (flat mid-gray) with `scans` scans: one DC scan, then `scans - 1` AC scans
    of coefficient 63 at bit 13, each a few bytes (end-of-band runs over every block) that still make the decoder
    pass over every coefficient block. The repeated scans are "bogus progression" to libjpeg: a warning, not an
    error, so the file decodes everywhere (djpeg without -maxscans, Pillow, torchvision)."""
    blocks = ((width + 7) // 8) * ((height + 7) // 8)
    head = b"\xff\xd8"
    head += _segment(0xDB, b"\x00" + bytes([1] * 64))  # quantization table 0, all ones
    head += _segment(0xC2, struct.pack(">BHHB", 8, height, width, 1) + b"\x01\x11\x00")  # SOF2, one component
    head += _segment(0xC4, b"\x00" + bytes([1] + [0] * 15) + b"\x00")  # DC table 0: one code "0" -> category 0
    head += _segment(0xC4, b"\x10" + bytes([1] + [0] * 15) + b"\xe0")  # AC table 0: one code "0" -> EOB run 2^14+
    dc = _Bits()
    dc.zeros(blocks)  # every block: DC difference 0
    body = [head, _segment(0xDA, b"\x01\x01\x00\x00\x00\x00"), dc.finish()]
    ac = _Bits()
    left = blocks
    while left > 0:  # EOB runs of 2^14 + 16383 = 32767 blocks
        ac.put(0, 1)
        ac.put(0x3FFF, 14)
        left -= 32767
    ac_scan = _segment(0xDA, b"\x01\x01\x00\x3f\x3f\x0d") + ac.finish()  # Ss = Se = 63, Ah = 0, Al = 13
    body.append(ac_scan * (scans - 1))
    body.append(b"\xff\xd9")
    return b"".join(body)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def itxt_bomb_png(chunks: int, inflated_bytes: int = 7_500_000, side: int = 64) -> bytes:
    """A valid `side` x `side` RGB PNG with `chunks` compressed iTXt chunks before IDAT, each inflating to
    `inflated_bytes` (below libpng's 8,000,000-byte chunk limit); about 7.3 KB per chunk."""
    text = zlib.compress(b"A" * inflated_bytes, 9)
    itxt = _png_chunk(b"iTXt", b"Comment\0\x01\x00\0\0" + text)
    raw = b"".join(b"\0" + bytes(range(side)) * 3 for _ in range(side))
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)) +
            itxt * chunks + _png_chunk(b"IDAT", zlib.compress(raw)) + _png_chunk(b"IEND", b""))


def animated_webp(width: int = 64, height: int = 48, frames: int = 2) -> bytes:
    """An animated (lossless) WebP of `frames` differently coloured frames, written by Pillow."""
    from PIL import Image

    imgs = [Image.new("RGB", (width, height), (40 * i % 256, 200, 90)) for i in range(frames)]
    b = io.BytesIO()
    imgs[0].save(b, "WEBP", save_all=True, append_images=imgs[1:], duration=100, loop=0, lossless=True)
    return b.getvalue()
