"""What the user looks at: :class:`Selection`, and what it picks out of a result.

The selection's modes, clamping its indices to a result's shape, the blocks of its batch row, and the ``[Tq, Tk]``
matrix of one head, an aggregate over heads or rollout (:func:`head_matrix`).  Every view reads these; they read
nothing of the views, so this module sits at the bottom of the view model (with :mod:`.palette`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from attnviz import AttnvizError
from attnviz.core import reduce
from attnviz.core.attention import AttentionResult, Block, TokenAxis
from attnviz.core.frames import FramesMap, frames_of
from attnviz.core.numbers import AsTyped, decimal
from attnviz.core.quoted import quoted
from attnviz.core.view.link_cut import DEFAULT_LINK_CUT
from attnviz.core.view.palette import DEFAULT_SCALE, IMAGE_DEFAULT_SCALE


class ViewError(AttnvizError, ValueError):
    """A selection the view model cannot draw (rollout over cross-attention, no image, ...)."""


# "head" shows one head; the others reduce over heads (and layers in the layer range)
MODES = ("head", "mean", "max", "min", "rollout")
MODE_TITLES = {
    "head": "single head",
    "mean": "mean over heads",
    "max": "max over heads",
    "min": "min over heads",
    "rollout": "attention rollout",
}


@dataclass(frozen=True)
class Selection:
    """The current focus; change it with :meth:`with_` (it is immutable, so it can key caches)."""

    block: int = 0  # index into result.blocks(batch)
    layer: int = 0
    head: int = 0
    mode: str = "head"  # one of MODES
    layer_lo: int = 0  # layer range used by the aggregates and rollout (inclusive)
    layer_hi: int = -1  # -1 = last layer
    keep: float = 1.0  # keep, per row, the largest weights holding this fraction of the mass
    log: bool = False  # log colour scale
    hide_special: bool = False  # drop special-token rows/columns and renormalise rows
    step: int = -1  # generated steps shown (-1 = all)
    batch: int = 0  # batch row
    query: int | None = None  # a query position of interest (image regions, links focus, heatmap mark)
    rows: str = "predict"  # alignment rows: "predict" = the decoder row that chose a word, "input" = the row reading it
    image_base: str = "grey"  # image regions: what lies under the heat, one of IMAGE_BASES
    heads: tuple[int, ...] = ()  # token links: heads overlaid in head mode; () = the focused head (link_heads)
    scale: str = DEFAULT_SCALE  # the colour scale's top, one of SCALES
    image_scale: str = IMAGE_DEFAULT_SCALE  # image regions' own (its default differs: palette.IMAGE_DEFAULT_SCALE)
    picture: int = 0  # image regions: which of one prompt's several images is drawn (0-based; 0 for one image)
    # image regions: whose attention lies over the picture, the words' or the vision tower's own (IMAGE_FROM)
    image_from: str = "words"
    # head map of a tower's frames (Idefics3's tiles, then the global image): which frame's map is drawn (0-based)
    frame: int = 0
    # token links: what a link's weight is measured against, each query row's strongest or the map's top (LINK_CUTS)
    link_cut: str = DEFAULT_LINK_CUT
    # the colour scale's top set by hand (`figure --vmax`, the window's "top" box), whatever ``scale`` /
    # ``image_scale`` say; None: the scale's own top.  Held here alone: every view that draws a colour scale reads it
    # from the selection, on screen and in figures (check_vmax refuses a bad one)
    vmax: float | None = None
    # a speech model's maps: draw the encoder frames after the clip too, the padding of the model's window (Whisper
    # pads every clip to 30 s); False: each frame axis ends with the clip (core.view.clip)
    padding: bool = False
    # the overview draws its kind of model's own scale where it has one (a speech model's: a top per block,
    # core.view.overview_scale); False once a scale is chosen in the colour-scale box or by --scale, which then wins
    kind_scale: bool = True

    def with_(self, **changes: Any) -> Selection:
        return replace(self, **changes)


# the smallest top set by hand: every automatic top stops here (colour_range, an all-zero map's scale), and the window's
# colour bar did the same to a top set by hand where a figure drew the exact number; refused instead, so a figure and
# the screen never disagree (a weight below a millionth is the log scale's business, not a linear top's)
VMAX_MIN = 1e-6
VMAX_MIN_TEXT = "0.000001"  # as a user types it (Python writes 1e-06)


def check_vmax(value: Any, name: str = "vmax") -> float | None:
    """The colour scale's top as typed (the window's box, a flag, a recipe): None for none (empty, None), else a
    finite number >= :data:`VMAX_MIN`; ViewError naming the fix for anything else (0, negative, NaN, text, 1e-9).
    ``name``: where it was given, as the user wrote it (``--vmax``, the box ``colour top``, ``view.vmax``)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:  # typed text reads ASCII digits only, as every number flag does (core.numbers: float() took '٣' and '1_0')
        top = decimal(value) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        top = float("nan")
    if isinstance(value, bool) or not (np.isfinite(top) and top >= VMAX_MIN):
        raise ViewError(
            f"{name} {_as_given(value)}: the colour scale's top must be a number > 0 (at least {VMAX_MIN_TEXT}; e.g. 0.5), "
            f"or none for the scale's own top",
            param="vmax",
        )
    return top


def _as_given(value: Any) -> str:
    """A top as the user wrote it: a flag's number as typed (argparse made ``--vmax 0`` the float 0.0), text
    quoted (the box's ``abc``), anything else as JSON shows it."""
    if isinstance(value, AsTyped):  # a flag's or a recipe's number as written (0.0000001, not 1e-07)
        return value.text
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str):
        return quoted(value)
    return json.dumps(value) if isinstance(value, (int, list, dict, bool)) else repr(value)


def layer_range(sel: Selection, n_layers: int) -> tuple[int, int]:
    hi = n_layers - 1 if sel.layer_hi < 0 else min(sel.layer_hi, n_layers - 1)
    lo = max(0, min(sel.layer_lo, hi))
    return lo, hi


def clamp(sel: Selection, blocks: list[Block]) -> Selection:
    """Keep indices inside the result's shape."""
    if not blocks:
        return sel
    b = min(max(sel.block, 0), len(blocks) - 1)
    blk = blocks[b]
    layer = min(max(sel.layer, 0), blk.n_layers - 1)
    head = min(max(sel.head, 0), blk.heads_in(layer) - 1)
    lo = min(max(sel.layer_lo, 0), blk.n_layers - 1)
    hi = sel.layer_hi if sel.layer_hi < 0 else min(max(sel.layer_hi, lo), blk.n_layers - 1)
    picture = min(max(sel.picture, 0), max(1, len(blk.result.image_grids())) - 1)  # one prompt's several images
    return sel.with_(block=b, layer=layer, head=head, layer_lo=lo, layer_hi=hi, picture=picture)


def blk_len(blk: Block, axis: int) -> int:
    shape = blk.result.maps[blk.sites[0]].shape
    return int(shape[2 + axis])


def result_blocks(result: AttentionResult, sel: Selection, blocks: list[Block] | None = None) -> list[Block]:
    if blocks is None or (blocks and blocks[0].batch != sel.batch):
        if not 0 <= sel.batch < max(1, result.batch_size):
            raise ViewError(
                f"batch row {sel.batch} is out of range; this result has rows 0..{result.batch_size - 1}",
                param="batch",
            )
        blocks = result.blocks(sel.batch)
    for blk in blocks:
        check_not_empty(blk)
    return blocks


def check_not_empty(blk: Block) -> None:
    """Refuse a block with no heads or no tokens: every mean, pooling factor and colour range divides by them."""
    for i in blk.sites:
        shape = tuple(blk.result.maps[i].shape)
        if 0 in shape[1:]:
            raise ViewError(
                f"{blk.name} has an empty map {list(shape)} [B, H, Tq, Tk]: no heads or tokens to show",
                param="model",
            )


def head_matrix(blk: Block, sel: Selection) -> tuple[np.ndarray, str]:
    """``[Tq, Tk]`` for one head, a head aggregate over the layer range, or rollout; and what it is."""
    what = head_what(blk, sel)
    if sel.mode == "head":
        return blk.head(sel.layer, sel.head), what
    frames = frames_reduction(blk, sel)
    if frames is not None:  # a tower's frames: each frame's block reduced and laid out, never the whole layers
        fn, layers = frames
        return layers[0].lay_out(blk.batch, fn, layers), what
    lo, hi = layer_range(sel, blk.n_layers)
    if sel.mode in reduce.HEAD_AGGREGATES:
        per_layer = [blk.layer(i) for i in range(lo, hi + 1)]
        heads = per_layer[0] if len(per_layer) == 1 else np.concatenate(per_layer, axis=0)  # one layer: no copy
        return reduce.aggregate_heads(heads, sel.mode), what
    if blk.kind != "self" or blk_len(blk, 0) != blk_len(blk, 1):
        raise ViewError(
            "rollout needs self-attention over one sequence (square maps); pick an encoder or decoder "
            "self-attention block or a mean/max/min aggregate",
            param="aggregate",
        )
    return reduce.rollout([blk.layer(i) for i in range(lo, hi + 1)]), what


def head_what(blk: Block, sel: Selection) -> str:
    """What :func:`head_matrix` draws, in the title's words ("layer 2 · head 3", "layers 0–3 · mean over heads");
    an unknown mode is refused in one line."""
    lo, hi = layer_range(sel, blk.n_layers)
    rng = f"layer {lo}" if lo == hi else f"layers {lo}–{hi}"
    if sel.mode == "head":
        return f"layer {sel.layer} · head {sel.head}"
    if sel.mode == "rollout":
        return f"rollout {rng}"
    if sel.mode in reduce.HEAD_AGGREGATES:
        return f"{rng} · {sel.mode} over heads"
    raise ViewError(f"unknown aggregate {sel.mode!r}; use one of {', '.join(MODES)}", param="aggregate")


def frames_reduction(
    blk: Block, sel: Selection
) -> tuple[Callable[[list[np.ndarray]], np.ndarray], list[FramesMap]] | None:
    """A tower's frames (:class:`~attnviz.core.frames.FramesMap`): what :func:`head_matrix` makes of each frame's
    block (one head, the aggregate or rollout over the layer range) and the layers' maps it reads, so that a view
    may lay the blocks out (:meth:`FramesMap.lay_out`) or read rows of them (:meth:`FramesMap.row_sum`); None for
    any other map (or an unknown mode: :func:`head_matrix` refuses it)."""
    if sel.mode == "head":
        layers = frames_of([blk.result.maps[blk.sites[sel.layer]]])
        return (functools.partial(_one_head, sel.head), layers) if layers is not None else None
    if sel.mode != "rollout" and sel.mode not in reduce.HEAD_AGGREGATES:
        return None
    lo, hi = layer_range(sel, blk.n_layers)
    layers = frames_of([blk.result.maps[blk.sites[i]] for i in range(lo, hi + 1)])
    return (_per_block(sel.mode), layers) if layers is not None else None


def _one_head(h: int, layers: list[np.ndarray]) -> np.ndarray:
    return layers[0][h]


def _per_block(mode: str) -> Callable[[list[np.ndarray]], np.ndarray]:
    """``mode``'s reduction of several layers' ``[H, P, P]`` to one ``[P, P]``, as :func:`head_matrix` reduces the
    whole layers (both are block-separable: :mod:`attnviz.core.frames`)."""
    if mode == "rollout":
        return reduce.rollout
    return lambda layers: reduce.aggregate_heads(layers[0] if len(layers) == 1 else np.concatenate(layers), mode)


def _special(axis: TokenAxis, positions: np.ndarray, n_full: int) -> np.ndarray:
    if len(axis) != n_full:  # axis labels do not describe this map (e.g. unlabelled positions)
        return np.zeros(len(positions), bool)
    return np.asarray(axis.special, bool)[positions]


def _pad(axis: TokenAxis, positions: np.ndarray, n_full: int) -> np.ndarray:
    """Which of ``positions`` are the row's padding (a padded batch): no token of the row, so never a query, a label
    or a key to show, whatever "hide special tokens" says (a pad's query row is no one's attention, and its key
    gets no weight)."""
    if axis.pad is None or len(axis) != n_full:
        return np.zeros(len(positions), bool)
    return np.asarray(axis.pad, bool)[positions]


def real_rows(blk: Block, rows: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """``rows`` (query row, word) less the padded batch row's padding: the query choices a row offers."""
    pad = _pad(blk.query_axis, np.arange(blk_len(blk, 0)), blk_len(blk, 0))
    return [(r, w) for r, w in rows if not (0 <= r < len(pad) and pad[r])]


def hide_mask(special: np.ndarray) -> np.ndarray:
    """Which positions "hide special tokens" drops: the special ones, unless that would drop all of them."""
    return special if not special.all() else np.zeros_like(special)


def map_inputs(sel: Selection) -> Selection:
    """``sel`` less what :func:`compute_map` does not read: selections with equal inputs give the same map, so
    a cache keyed on this redraws nothing when only those change (a head switch under "mean over heads")."""
    sel = sel.with_(
        query=None, rows="predict", image_base="grey", heads=(), image_from="words", link_cut=DEFAULT_LINK_CUT
    )
    return sel if sel.mode == "head" else sel.with_(layer=0, head=0)
