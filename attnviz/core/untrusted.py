"""The one place where files from strangers are opened: regular files only, size caps.

Every reader of user-supplied files (models, tokenizers, images, feeds, maps, recipes, checkpoints) goes through
:func:`regular_file` / :func:`open_regular` / :func:`read_bytes`, so a FIFO or device named ``tokenizer.json``
can never block a read.  Images additionally go through :func:`attnviz.runtime.raster.open_raster` (Pillow lives
outside ``core``).  Failures are :class:`~attnviz.AttnvizError` with one line naming the fix.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from attnviz import AttnvizError
from attnviz.core.words import with_article


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


def open_regular(path: str | os.PathLike, what: str = "file") -> BinaryIO:
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
        raise AttnvizError(
            f"{what} {path}: larger than {limit // 2**20} MB; this is not {with_article(what)} attnviz can use"
        )
    return data


def read_text(path: str | os.PathLike, what: str = "file", limit: int | None = 64 * 2**20) -> str:
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise AttnvizError(f"{what} {path}: not UTF-8 text") from None
