"""The Head map of a tower's frames (Idefics3 / SmolVLM: the processor's tiles and the global image, each a tower run
of its own; :class:`~attnviz.core.frames.FramesMap`): one frame's patch-to-patch map at a time, never the whole
block-diagonal ``[F·P, F·P]`` (17 frames of 1,024 patches: 1.2 GB a head, and a picture of zeros but for 1/F of it).

A patch of one frame attends only to its own frame's patches, so frame ``f``'s ``[P, P]`` is exactly the dense
map's diagonal block at its keys (``f·P … (f+1)·P``; frames of several sizes: :meth:`FramesMap.spans`):
:func:`head_map` reduces that block alone (one head, mean / max / min over heads, rollout:
:func:`~attnviz.core.view.selection.frames_reduction`) and names its rows and columns by their keys in the whole
block (``q_pos`` / ``k_pos``, the labels ``tile 1·(0,4)``), so hover read-outs name the same keys as every other view.
Any other block: :func:`~attnviz.core.view.maps.compute_map`, unchanged.
"""

from __future__ import annotations

import re

import numpy as np

from attnviz.core import reduce
from attnviz.core.attention import AttentionResult, Block, TokenAxis
from attnviz.core.patch_names import SEP, canonical
from attnviz.core.view.colourbar import HIDDEN_NOTE
from attnviz.core.view.labels import clean_labels
from attnviz.core.view.maps import MapView, compute_map
from attnviz.core.view.overview import scale_top
from attnviz.core.view.patches import GLOBAL_PANEL, patch_grid_for, tile_layout
from attnviz.core.view.selection import (
    Selection,
    ViewError,
    _pad,
    _special,
    blk_len,
    clamp,
    frames_reduction,
    head_what,
    result_blocks,
)
from attnviz.core.view.steps import step_rows

_KEY_CELL = re.compile(r"\(\d+,\s*\d+\)$")  # a patch key's cell, "tile 1·(0,4)" -> "tile 1·"
# a frame's first key (core/patch_names.py: labels of before session 19 read as today's) less its cell:
# "img2·tile 0·" (image 2's tile 0), "img2" (its global image, or a whole image), "tile 1·" (a tile), "" (the
# global image, or one image), "img1[CLS]" (LLaVA's: the image's class token first)
_FRAME_KEY = re.compile(rf"(?:img(\d+))?{SEP}?(?:tile (\d+){SEP})?(?:\[CLS\])?")


def tower_frames(result: AttentionResult, sel: Selection, blocks: list[Block] | None = None) -> list[str] | None:
    """The frames of ``sel``'s block, by name ("tile 0 (row 0, col 0)" …, "global image"), where the block is a
    tower's frames drawn one at a time (:func:`head_map`); None for any other block."""
    tower = _tower(result, sel, blocks)
    return None if tower is None else frame_names(result, tower[0], tower[1])


def _tower(
    result: AttentionResult, sel: Selection, blocks: list[Block] | None
) -> tuple[Block, list[tuple[int, int]]] | None:
    """``sel``'s block and its row's frames (``(first key, patches)``), where it is a tower's frames (and no
    generation step, which no tower has), else None."""
    blocks = result_blocks(result, sel, blocks)
    if not blocks:
        return None
    blk = blocks[clamp(sel, blocks).block]
    frames = frames_reduction(blk, sel.with_(mode="head"))
    if frames is None or step_rows(result, blk, sel.step) is not None:
        return None
    return blk, frames[1][0].spans(blk.batch)


def shown_frame(result: AttentionResult, sel: Selection, blocks: list[Block] | None = None) -> str | None:
    """The name of the frame :func:`head_map` draws for ``sel`` (a query's, else ``sel.frame``); None where the
    block is not a tower's frames (the whole map is drawn)."""
    tower = _tower(result, sel, blocks)
    if tower is None:
        return None
    return frame_names(result, tower[0], tower[1])[_frame(sel, tower[1])]


def check_frame(result: AttentionResult, sel: Selection, blocks: list[Block] | None = None) -> None:
    """``sel.frame`` asked for by name (``--frame N``, from 1): refused in one line where ``sel``'s block is not a
    tower's frames or has fewer, naming the frames it has, or where ``sel.query`` is another frame's patch."""
    blocks = result_blocks(result, sel, blocks)
    tower = _tower(result, sel, blocks)
    if tower is None:
        raise ViewError(
            f"--frame {sel.frame + 1}: {blocks[clamp(sel, blocks).block].name} is not a vision tower's frames "
            "(tiles, images) drawn one at a time; leave --frame out or pick the vision block with --block",
            param="frame",
        )
    blk, spans = tower
    names = frame_names(result, blk, spans)
    if not 0 <= sel.frame < len(names):
        raise ViewError(
            f"--frame {sel.frame + 1}: {blk.name} has frames 1–{len(names)} ({names[0]} … {names[-1]}); give one "
            "of them",
            param="frame",
        )
    shown = _frame(sel, spans)
    if shown != sel.frame:  # the query's frame is drawn (its row highlighted)
        raise ViewError(
            f"--frame {sel.frame + 1} and --query {sel.query}: that query is a patch of frame {shown + 1} "
            f"({names[shown]}); give --frame {shown + 1} or leave one out",
            param="frame",
        )


def frame_names(result: AttentionResult, blk: Block, spans: list[tuple[int, int]]) -> list[str]:
    """Each of the row's frames (``(first key, patches)``) by name, read from its first key's label as Image
    regions names patches: a tiled image's tiles ("tile 1·(0,0)": "tile 1 (row 0, col 1)", its place in the split
    where known, :func:`_layouts`) and its global image ("(0,0)" after tiles); one prompt's several images
    ("img2(0,0)": "image 2", "img2·tile 0·(0,0)": "image 2 · tile 0 (row 0, col 0)"); else "frame k of n"."""
    labels = blk.key_axis.labels if len(blk.key_axis) == blk_len(blk, 1) else []
    firsts = [canonical(str(labels[o])) if o < len(labels) else None for o, _ in spans]
    found = [_FRAME_KEY.fullmatch(_KEY_CELL.sub("", k)) if k is not None else None for k in firsts]
    keys = [k for k in found if k is not None]
    if len(keys) < len(spans):
        return [f"frame {f + 1} of {len(spans)}" for f in range(len(spans))]
    tiled = {k[1] for k in keys if k[2] is not None}  # the images split into tiles
    layouts = _layouts(result, blk, spans)
    out = []
    for k in keys:
        image, tile = k[1], k[2]
        part = GLOBAL_PANEL if image in tiled else ""
        if tile is not None:
            part = tile_name(int(tile), layouts.get(image or ""))
        out.append(" · ".join(filter(None, [f"image {image}" if image else "", part])) or "image")
    return out


def tile_name(tile: int, layout: tuple[int, int] | None) -> str:
    """Tile ``tile`` (reading order) by name, with its place in the split where ``layout`` (rows, columns of
    tiles) holds it: "tile 1 (row 0, col 1)"; "tile 1" where the split is not known."""
    if layout and 0 <= tile < layout[0] * layout[1]:
        return f"tile {tile} (row {tile // layout[1]}, col {tile % layout[1]})"
    return f"tile {tile}"


def _layouts(result: AttentionResult, blk: Block, spans: list[tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """Each tiled image's tiles as rows × columns (:func:`tile_layout`), by the image's number in its keys'
    labels ("2" for ``img2·tile 0·(0,0)``; "" for a prompt's one image), where known: the same name for a frame
    whether the tower ran alone or in the whole model."""
    each = result.vision_grids()  # one prompt's several images: each one's own grid, and its tokens'
    if each:
        words = result.image_grids()
        found = {str(k + 1): tile_layout(g, words[k] if k < len(words) else None) for k, g in enumerate(each)}
        return {k: lay for k, lay in found.items() if lay is not None}
    grid = patch_grid_for(result, blk_len(blk, 1), blk.batch)
    if grid is None or len(spans) != grid.lead_images + 1:
        return {}
    layout = tile_layout(grid, result.token_grid_of(blk.batch))
    return {"": layout} if layout is not None else {}


def head_map(result: AttentionResult, sel: Selection, blocks: list[Block] | None = None) -> MapView:
    """The map the Head map draws for ``sel``: a tower's frames' block one frame at a time (the query's frame where
    ``sel.query`` is one of their patches, else ``sel.frame`` clamped to the row's frames), titled with its name;
    any other block (and a tower at a generation step, which no tower has): :func:`compute_map`'s map."""
    blocks = result_blocks(result, sel, blocks)
    names = tower_frames(result, sel, blocks)
    if names is None:
        return compute_map(result, sel, blocks)
    sel = clamp(sel, blocks)
    blk = blocks[sel.block]
    what = head_what(blk, sel)  # an unknown aggregate: its one line
    fn, layers = frames_reduction(blk, sel)  # type: ignore[misc]  # a tower's frames (tower_frames), a known mode
    spans = layers[0].spans(blk.batch)
    f = _frame(sel, spans)
    o, p = spans[f]
    m = np.asarray(fn([layer.frames(blk.batch)[f] for layer in layers]), dtype=np.float32)
    q_pos = np.arange(o, o + p)
    k_pos = q_pos.copy()
    notes: list[str] = []
    if sel.hide_special:
        dq, dk = (_hidden(ax, blk_len(blk, i))[q_pos] for i, ax in enumerate((blk.query_axis, blk.key_axis)))
        if dq.any() or dk.any():
            m = reduce.drop_positions(m, dq, dk, renormalize=True)
            q_pos, k_pos = q_pos[~dq], k_pos[~dk]
            notes.append(HIDDEN_NOTE)
    if sel.keep < 1.0:
        m = reduce.keep_mass(m, max(sel.keep, 1e-3))
    notes += [f"top {round(sel.keep * 100)}% mass"] if sel.keep < 1.0 else []  # one frame: no "images on the diagonal"
    q_sp = _special(blk.query_axis, q_pos, blk_len(blk, 0))
    k_sp = _special(blk.key_axis, k_pos, blk_len(blk, 1))
    short = names[f].split(" (")[0]  # "tile 1", "global image": the axes' titles (the title has its place)
    return MapView(
        m,
        clean_labels(blk.query_axis.labels, q_pos),
        clean_labels(blk.key_axis.labels, k_pos),
        q_pos,
        k_pos,
        " · ".join([blk.name, names[f], what, *notes]),
        blk,
        q_sp.tolist(),
        k_sp.tolist(),
        f"key ({short})",
        f"query ({short})",
        notes,
        scale_top(result, sel, sel.block, m, blocks),
        sel.scale,
        by_hand=bool(sel.vmax),
    )


def _frame(sel: Selection, spans: list[tuple[int, int]]) -> int:
    """The frame drawn: a query's (``attnviz figure --query 40``: its row is highlighted, so its frame is drawn),
    else ``sel.frame`` within the row's frames."""
    if sel.query is not None:
        for f, (o, p) in enumerate(spans):
            if o <= sel.query < o + p:
                return f
    return min(max(sel.frame, 0), len(spans) - 1)


def _hidden(axis: TokenAxis, n: int) -> np.ndarray:
    """Which of the whole axis's ``n`` positions "hide special tokens" drops, by :func:`compute_map`'s rule (over
    the row's positions less its padding: the special ones, unless every one is)."""
    every = np.arange(n)
    sp, pad = _special(axis, every, n), _pad(axis, every, n)
    return sp & ~pad if sp[~pad].size and not sp[~pad].all() else np.zeros(n, bool)
