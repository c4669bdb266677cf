"""An image's patch labels, written and read in one place (:func:`patch_name`): ``tile 1·(0,4)`` is tile 1's patch
at row 0, column 4 of that tile, as the Head map's frame box names the tile ("tile 1 (row 0, col 1)", its place in
the split) and Image regions the patch ("tile 1 patch (0, 4)"); the global image's patches, and those of an image
not split, are ``(r,c)`` (Image regions: "global image patch (r, c)" beside tiles).  One prompt's several images
put theirs after the image's number: ``img2·tile 0·(0,0)``, ``img2(0,0)``.

The vision tower's keys and a VLM decoder's image tokens carry the same names, so that a decoder row's image columns
and the tower's patches read alike: Idefics3 / SmolVLM's tile 1 is ``tile 1·…`` in both.  A decoder token's cell is
on the decoder's own feature grid (after Idefics3's pixel shuffle or Qwen2-VL's 2 x 2 merge: coarser than the
tower's patches; LLaVA and PaliGemma keep the patch grid), as Image regions places it.

Short enough for an axis (a tile's 1,024 patches are drawn a frame at a time, so every label of a frame's axis
starts with the same tile, and the cell is what tells them apart).  Labels written before session 19 named the
tower's tile ``t1(0,4)`` / ``img2.t0(0,0)`` (.npz results, examples.parquet), and before session 20 a decoder's
image tokens ``t1[0,4]``, ``g[0,4]``, ``img1.t0[0,4]``, ``img2.g[0,4]`` (Idefics3) and ``img[0,4]``, ``img2[0,4]``
(LLaVA, Qwen2-VL, PaliGemma): :func:`canonical` reads all of those as today's.

Numpy-free: the runtime writes these labels (:mod:`attnviz.runtime.adapters`), the view (frame names) and the
Corpus view (examples.parquet's ``row_patch`` / ``col_patch``) read them.
"""

from __future__ import annotations

import re

SEP = "·"  # between an image, its tile and the patch's cell: reads as one name in an axis, unlike "." or " "
_OLD = re.compile(r"(img\d+)?\.?t(\d+)(\(\d+,\s*\d+\))")  # before session 19: "t1(0,4)", "img2.t0(0,0)"
# a decoder's image token before session 20: "t1[0,4]", "g[0,4]", "img1.t0[0,4]", "img2.g[0,4]", "img[0,4]", "img2[0,4]"
_OLD_TILED = re.compile(r"(?:img(\d+)\.)?(?:t(\d+)|g)\[(\d+),(\d+)\]")  # Idefics3's tiles and global image
_OLD_IMAGE = re.compile(r"img(\d*)\[(\d+),(\d+)\]")  # LLaVA's, Qwen2-VL's, PaliGemma's image
TILE_PATCH = re.compile(rf"tile (\d+){SEP}\((\d+),(\d+)\)")


def patch_name(row: int, col: int, tile: int | None = None, image: int | None = None) -> str:
    """A patch's label, the tower's key's and a decoder's image token's alike: ``(r,c)`` (an image not split, or
    a tiled image's global image), ``tile 1·(0,4)`` (tile ``tile``, reading order), and among one prompt's
    several images (``image`` from 1) ``img2(0,4)``, ``img2·tile 0·(0,4)``."""
    own = f"({row},{col})" if tile is None else tile_patch(tile, row, col)
    return own if image is None else in_image(image, own)


def tile_patch(tile: int, row: int, col: int) -> str:
    """Tile ``tile``'s patch at (``row``, ``col``) of that tile: ``tile 1·(0,4)``."""
    return f"tile {tile}{SEP}({row},{col})"


def in_image(image: int, label: str) -> str:
    """``label`` of one prompt's image ``image`` (from 1) among several: ``img2·tile 0·(0,0)``, ``img2(0,0)``."""
    return f"img{image}{'' if label[:1] in '([' else SEP}{label}"


def canonical(label: str) -> str:
    """``label`` in today's form (the tower's before session 19, ``t1(0,4)``, reads ``tile 1·(0,4)``; a decoder's
    before session 20, ``t1[0,4]`` / ``g[0,4]`` / ``img2[0,4]``, reads ``tile 1·(0,4)`` / ``(0,4)`` /
    ``img2(0,4)``); any other label unchanged."""
    m = _OLD.fullmatch(label)
    if m is not None:
        own = f"tile {m[2]}{SEP}{m[3]}"
        return in_image(int(m[1][3:]), own) if m[1] else own
    m = _OLD_TILED.fullmatch(label)
    if m is not None:
        image, tile, r, c = m.groups()
        return patch_name(int(r), int(c), int(tile) if tile else None, int(image) if image else None)
    m = _OLD_IMAGE.fullmatch(label)
    return label if m is None else patch_name(int(m[2]), int(m[3]), image=int(m[1]) if m[1] else None)
