"""The one place where files from strangers are opened: regular files only, size and pixel caps, raster images only.

Every reader of user-supplied files (models, tokenizers, images, feeds, maps, recipes, checkpoints) goes through
:func:`regular_file` / :func:`read_bytes`, so a FIFO or device named ``tokenizer.json`` can never block a read,
and through :func:`open_raster` for images, so Pillow never hands content to an interpreter such as Ghostscript
(an EPS file renamed ``.png``).  Failures are :class:`~attnviz.AttnvizError` with one line naming the fix.
"""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

from attnviz import AttnvizError
from attnviz.core import limits

# Pillow format names we decode; everything else (EPS, PDF, PSD, ...) is refused before a plugin sees the bytes
RASTER_FORMATS = ("PNG", "JPEG", "BMP", "TIFF", "WEBP", "GIF")
MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "PNG"), (b"\xff\xd8\xff", "JPEG"), (b"BM", "BMP"), (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"),
    (b"GIF87a", "GIF"), (b"GIF89a", "GIF"),
)


def regular_file(path: str | os.PathLike, what: str = "file") -> Path:
    """``path`` if it names an existing regular file (symlinks followed), else one clear error."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise AttnvizError(f"{what} {p}: no such file") from None
    except OSError as e:
        raise AttnvizError(f"{what} {p}: cannot read it ({e.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise AttnvizError(f"{what} {p}: is a folder; give a file")
    if not stat.S_ISREG(st.st_mode):
        raise AttnvizError(f"{what} {p}: not a regular file (a pipe, socket or device); give a regular file")
    return p


def open_regular(path: str | os.PathLike, what: str = "file"):
    """A binary file object for a regular file; opened non-blocking and re-checked, so a file swapped for a
    FIFO between the check and the open still cannot block."""
    p = regular_file(path, what)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as e:
        raise AttnvizError(f"{what} {p}: cannot read it ({e.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise AttnvizError(f"{what} {p}: not a regular file (a pipe, socket or device); give a regular file")
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_bytes(path: str | os.PathLike, what: str = "file", limit: int | None = None) -> bytes:
    with open_regular(path, what) as f:
        data = f.read(-1 if limit is None else limit + 1)
    if limit is not None and len(data) > limit:
        raise AttnvizError(f"{what} {path}: larger than {limit // 2**20} MB; this is not a {what} attnviz can use")
    return data


def read_text(path: str | os.PathLike, what: str = "file", limit: int | None = 64 * 2**20) -> str:
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise AttnvizError(f"{what} {path}: not UTF-8 text") from None


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
    """Open a raster image with Pillow, restricted to :data:`RASTER_FORMATS`, first frame, pixel-capped.

    Returns a loaded ``PIL.Image`` (the caller converts / resizes it).
    """
    from PIL import Image, UnidentifiedImageError

    cap = max_pixels() if pixel_cap is None else int(pixel_cap)
    p = Path(path)
    with open_regular(p, what) as f:
        head = f.read(16)
        fmt = sniff_raster(head)
        if fmt is None:
            raise AttnvizError(f"{what} {p}: cannot open it as an image: not a PNG, JPEG, BMP, TIFF, WebP or GIF file; convert it to PNG")
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
            raise AttnvizError(f"{what} {p}: too many pixels (a decompression bomb?); raise the limit with ATTNVIZ_MAX_PIXELS") from None
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError, MemoryError) as e:
            raise AttnvizError(f"{what} {p}: cannot decode it as {fmt} ({type(e).__name__}); re-save it as PNG") from None
    return im
