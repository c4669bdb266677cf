"""Token axes of inputs that are not text: image patches (``(row, col)`` cells around CLS/register tokens).

Feeds, generation and the run itself live in :mod:`builders`, :mod:`generate` and :mod:`analyze`.
"""

from __future__ import annotations

import functools

from attnviz.core.attention import PatchGrid, TokenAxis
from attnviz.core.patch_names import in_image, patch_name


def patch_axis(grid: PatchGrid, n: int) -> TokenAxis:
    """The axis of ``n`` image keys on ``grid`` (a fresh axis each call; the labels are worked out once per grid:
    a VLM's 196 patches cost ~0.1 ms a run to label anew)."""
    labels, special = _patch_labels(grid.rows, grid.cols, grid.offset, grid.columns, grid.lead_images, n)
    return TokenAxis(list(labels), list(special))


def patch_axis_each(grids: list[PatchGrid], n: int) -> TokenAxis:
    """The axis of ``n`` vision keys holding one prompt's several images one after another (``grids``: each image's
    among all the keys, in order): each key labelled by its image and its own patch, ``img2(r,c)`` (a tile's
    ``img2·tile 0·(r,c)``: :mod:`attnviz.core.patch_names`)."""
    labels: list[str] = []
    special: list[bool] = []
    at = 0
    for k, g in enumerate(grids):
        own = g.shifted(-at)  # the image's grid over its own keys
        lab, sp = _patch_labels(own.rows, own.cols, own.offset, own.columns, own.lead_images, g.end - at)
        labels += [in_image(k + 1, x) for x in lab]  # img2(r,c), img2·tile 0·(r,c)
        special += sp
        at = g.end
    labels += [f"[{p}]" for p in range(at, n)]
    special += [True] * (n - at)
    return TokenAxis(labels[:n], special[:n])


@functools.lru_cache(maxsize=32)
def _patch_labels(
    rows: int, cols: int, offset: int, columns: tuple[int, ...] | None, lead_images: int, n: int
) -> tuple[tuple[str, ...], tuple[bool, ...]]:
    grid = PatchGrid(rows, cols, offset, columns, lead_images=lead_images)
    labels, special = [], []
    for p in range(n):
        if grid.columns is not None:  # a grid naming each cell's key (Qwen2-VL's patches, merge window by window)
            cell = grid.cell(p)
            labels.append(patch_name(*cell) if cell else f"[{p}]")
            special.append(cell is None)
        elif p < grid.offset and grid.lead_images:  # a VLM's tiles before its global image: tile k's patch (r, c)
            t, k = divmod(p, grid.n)
            r, c = divmod(k, grid.cols)
            labels.append(patch_name(r, c, tile=t))
            special.append(False)
        elif p < grid.offset:
            labels.append("[CLS]" if p == 0 else f"[REG{p}]")
            special.append(True)
        elif p < grid.offset + grid.n:
            labels.append(patch_name(*divmod(p - grid.offset, grid.cols)))
            special.append(False)
        else:
            labels.append(f"[{p}]")
            special.append(True)
    return tuple(labels), tuple(special)
