"""Untrusted images: raster formats only (PNG, JPEG, BMP, TIFF, WebP, GIF first frame), with a pixel cap.

Pillow picks a decoder from the file's content, and some (EPS) run Ghostscript on it: an EPS file renamed
``photo.png`` would reach ``gs``.  Here the magic bytes choose the one plugin Pillow may use, the pixel count is
checked from the header before decoding, and decompression bombs become one-line errors.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from attnviz import AttnvizError
from attnviz.core import limits
from attnviz.core.untrusted import open_regular

# file names a folder scan or a drop treats as images (the bytes still decide: see MAGIC)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"\xff\xd8\xff", "JPEG"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
)


def sniff_raster(head: bytes) -> str | None:
    """The raster format the first bytes announce, or None."""
    for magic, name in MAGIC:
        if head.startswith(magic):
            return name
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WEBP"
    return None


def max_pixels() -> int:
    """The image pixel cap (``ATTNVIZ_MAX_PIXELS`` raises it)."""
    return limits.limit("pixels")


def open_raster(path: str | os.PathLike, what: str = "image", pixel_cap: int | None = None):
    """Open a raster image with Pillow, restricted to the formats :data:`MAGIC` names, first frame, pixel-capped.

    Returns a loaded ``PIL.Image`` (the caller converts / resizes it).
    """
    from PIL import Image, UnidentifiedImageError

    cap = max_pixels() if pixel_cap is None else int(pixel_cap)
    p = Path(path)
    with open_regular(p, what) as f:
        head = f.read(16)
        fmt = sniff_raster(head)
        if fmt is None:
            raise AttnvizError(
                f"{what} {p}: cannot open it as an image: not a PNG, JPEG, BMP, TIFF, WebP or GIF file; convert it to PNG"
            )
        f.seek(0)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                im = Image.open(f, formats=[fmt])  # only the plugin the magic bytes name: no EPS, no PDF
                w, h = im.size
                if w * h > cap:
                    limits.check("pixels", w * h, f"{what} {p} ({w}×{h})")
                im.seek(0)  # animated GIF / WebP, multi-page TIFF: the first frame
                im.load()
        except AttnvizError:
            raise
        except (Image.DecompressionBombError, Image.DecompressionBombWarning):
            raise AttnvizError(
                f"{what} {p}: too many pixels (a decompression bomb?); raise the limit with ATTNVIZ_MAX_PIXELS"
            ) from None
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError, MemoryError) as e:
            raise AttnvizError(
                f"{what} {p}: cannot decode it as {fmt} ({type(e).__name__}); re-save it as PNG"
            ) from None
    return _upright(_eight_bit(im, f"{what} {p}"))


def _upright(im):
    """The image as a viewer shows it: a camera's EXIF orientation applied (a phone photo taken upright is stored
    sideways with a tag saying so; transformers' ``load_image`` applies it too).  Without it the model saw the
    photo on its side."""
    from PIL import ImageOps

    try:
        return ImageOps.exif_transpose(im) if im.getexif().get(0x0112, 1) in range(2, 9) else im
    except Exception:  # a damaged EXIF block (Pillow's parsers raise many kinds): the pixels as stored
        return im


def _eight_bit(im, named: str):
    """A 16-bit, 32-bit integer or floating-point grey image as 8-bit grey ("L"), scaled by its depth as image
    viewers scale it.  Pillow's ``convert("RGB")`` clips each value at 255: a 16-bit scan came out 99.6 % white,
    a float image in 0..1 black, and the model saw that without a word."""
    if not (im.mode.startswith("I") or im.mode == "F"):
        return im
    import numpy as np
    from PIL import Image

    a = np.asarray(im, dtype=np.float64)
    if not np.isfinite(a).all():
        raise AttnvizError(f"{named}: holds NaN or infinite pixel values; save it as an 8- or 16-bit PNG")
    lo, hi = (float(a.min()), float(a.max())) if a.size else (0.0, 0.0)
    if im.mode == "F" and lo >= 0 and hi <= 1:
        a = a * 255.0  # a float image in 0..1
    elif im.mode.startswith("I;16") or (im.mode == "I" and lo >= 0 and hi <= 65535):
        a = a / 257.0  # 16-bit: 65535 -> 255, as 8-bit = 16-bit >> 8 rounds
    elif not (lo >= 0 and hi <= 255):
        raise AttnvizError(
            f"{named}: {'floating-point' if im.mode == 'F' else '32-bit'} pixel values from {lo:g} to {hi:g}, no "
            "brightness range a viewer agrees on; save it as an 8- or 16-bit PNG"
        )
    return Image.fromarray(np.rint(a).astype(np.uint8))  # 2-D uint8: mode "L"
