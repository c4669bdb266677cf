"""A tiled image's patch labels, written and read in one place: ``tile 1·(0,4)`` is tile 1's patch at row 0, column
4 of that tile, as the Head map's frame box names the tile ("tile 1 (row 0, col 1)", its place in the split) and
Image regions the patch ("tile 1 patch (0, 4)"); the global image's patches stay ``(r,c)``.  One prompt's several
images put theirs after the image's number: ``img2·tile 0·(0,0)``, ``img2(0,0)``.

Short enough for an axis (a tile's 1,024 patches are drawn a frame at a time, so every label of a frame's axis
starts with the same tile, and the cell is what tells them apart).  Labels written before session 19 named the
tile ``t1(0,4)`` / ``img2.t0(0,0)`` (.npz results, examples.parquet): :func:`canonical` reads those as today's.

Numpy-free: the runtime writes these labels (:mod:`attnviz.runtime.adapters`), the view (frame names) and the
Corpus view (examples.parquet's ``row_patch`` / ``col_patch``) read them.
"""

from __future__ import annotations

import re

SEP = "·"  # between an image, its tile and the patch's cell: reads as one name in an axis, unlike "." or " "
_OLD = re.compile(r"(img\d+)?\.?t(\d+)(\(\d+,\s*\d+\))")  # before session 19: "t1(0,4)", "img2.t0(0,0)"
TILE_PATCH = re.compile(rf"tile (\d+){SEP}\((\d+),(\d+)\)")


def tile_patch(tile: int, row: int, col: int) -> str:
    """Tile ``tile``'s patch at (``row``, ``col``) of that tile: ``tile 1·(0,4)``."""
    return f"tile {tile}{SEP}({row},{col})"


def in_image(image: int, label: str) -> str:
    """``label`` of one prompt's image ``image`` (from 1) among several: ``img2·tile 0·(0,0)``, ``img2(0,0)``."""
    return f"img{image}{'' if label[:1] in '([' else SEP}{label}"


def canonical(label: str) -> str:
    """``label`` in today's form (a label written before session 19, ``t1(0,4)``, reads ``tile 1·(0,4)``); any
    other label unchanged."""
    m = _OLD.fullmatch(label)
    if m is None:
        return label
    own = f"tile {m[2]}{SEP}{m[3]}"
    return in_image(int(m[1][3:]), own) if m[1] else own
