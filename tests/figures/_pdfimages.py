"""A PDF's image XObjects decoded from its bytes (no PDF library): size, /Interpolate and pixels.

What matplotlib's PDF writer produces: 8-bit DeviceRGB or DeviceGray, or /Indexed /DeviceRGB with a palette
(1, 2, 4 or 8 bits an index), Flate-compressed with PNG predictors (/Predictor 10: a filter byte a row), or raw.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from _pdftext import _literal, _objects


@dataclass(frozen=True)
class PdfImage:
    width: int
    height: int
    interpolate: bool | None  # None: the key is absent
    rgb: np.ndarray  # [height, width, 3] (or [height, width, 1] grey) uint8, as shown: top row first


def _int(head: bytes, key: bytes) -> int:
    return int(re.search(rb"/" + key + rb" (\d+)", head).group(1))


def _unfilter(raw: bytes, rows: int, row_bytes: int, bpp: int) -> np.ndarray:
    """PNG's per-row filters undone (RFC 2083 §6): ``[rows, row_bytes]`` uint8."""
    src = np.frombuffer(raw, np.uint8).reshape(rows, row_bytes + 1)
    out = np.zeros((rows, row_bytes), np.int32)
    prev = np.zeros(row_bytes, np.int32)
    for r in range(rows):
        kind, line = int(src[r, 0]), src[r, 1:].astype(np.int32)
        cur = np.zeros(row_bytes, np.int32)
        for i in range(row_bytes):
            a = cur[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if kind == 0:
                pred = 0
            elif kind == 1:
                pred = a
            elif kind == 2:
                pred = b
            elif kind == 3:
                pred = (a + b) // 2
            else:  # Paeth
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            cur[i] = (line[i] + pred) & 0xFF
        out[r] = cur
        prev = cur
    return out.astype(np.uint8)


_NUM = rb"(-?[\d.]+)"
_CM = re.compile(rb"\s+".join([_NUM] * 6) + rb"\s+cm")


def _orientation(objs) -> dict[int, tuple[bool, bool]]:
    """image object id -> (flipped left-right, flipped top-bottom) as the page draws it: the product of the
    ``cm`` matrices between the ``q`` before its ``Do`` and the ``Do`` (matplotlib draws an image in one q..Q)."""
    names: dict[bytes, int] = {}
    for head, _ in objs.values():
        for name, ref in re.findall(rb"/(I\d+) (\d+) 0 R", head):
            names[name] = int(ref)
    out = {}
    for _, stream in objs.values():
        if stream is None:
            continue
        for m in re.finditer(rb"/(I\d+) Do", stream):
            start = stream.rfind(b"q", 0, m.start())
            ctm = np.eye(3)
            for cm in _CM.finditer(stream, start, m.start()):
                a, b, c, d, e, f = map(float, cm.groups())
                ctm = np.array([[a, b, 0], [c, d, 0], [e, f, 1]]) @ ctm
            # image space: the first row of samples maps to the unit square's top (y = 1), as shown upright
            out[names[m.group(1)]] = (ctm[0, 0] < 0, ctm[1, 1] < 0)
    return out


def pdf_images(data: bytes) -> list[PdfImage]:
    """Every image XObject of the PDF ``data`` that its pages draw, in object order, as drawn (flips applied)."""
    found = []
    objs = _objects(data)
    shown = _orientation(objs)
    for oid, (head, stream) in objs.items():
        if b"/Subtype /Image" not in head or stream is None or oid not in shown:
            continue
        w, h, bits = _int(head, b"Width"), _int(head, b"Height"), _int(head, b"BitsPerComponent")
        interp = re.search(rb"/Interpolate (true|false)", head)
        palette = None
        if b"/Indexed" in head:
            at = head.index(b"/Indexed")
            palette, _ = _literal(head, head.index(b"(", at) + 1)
            channels = 1
        else:
            channels = 3 if b"/DeviceRGB" in head else 1
        row_bytes = (w * channels * bits + 7) // 8
        if b"/Predictor" in head:
            rows = _unfilter(stream, h, row_bytes, max(1, channels * bits // 8))
        else:
            rows = np.frombuffer(stream, np.uint8)[: h * row_bytes].reshape(h, row_bytes)
        if bits < 8:  # indices packed several a byte, most significant first
            per = 8 // bits
            shifts = np.arange(per - 1, -1, -1) * bits
            values = (rows[..., None] >> shifts) & ((1 << bits) - 1)
            rows = values.reshape(h, -1)[:, :w].astype(np.uint8)
        pixels = rows.reshape(h, w, channels)
        if palette is not None:
            table = np.frombuffer(palette, np.uint8).reshape(-1, 3)
            pixels = table[pixels[..., 0]]
        flip_x, flip_y = shown[oid]
        pixels = pixels[::-1] if flip_y else pixels
        pixels = pixels[:, ::-1] if flip_x else pixels
        found.append(PdfImage(w, h, None if interp is None else interp.group(1) == b"true", pixels))
    return found
