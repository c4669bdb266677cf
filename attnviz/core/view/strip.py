"""The strip ("Show, Attend and Tell"): one panel per generated word and where it looked.

Over text a panel is a row of the Alignment view; over an image it is that word's Image regions overlay
(:func:`~.overlay.overlay_view`), so the strip reuses both views' rules rather than having its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from attnviz.core import reduce
from attnviz.core.attention import AttentionResult, Block
from attnviz.core.view.colourbar import HIDDEN_NOTE, weight_label
from attnviz.core.view.labels import clean_label
from attnviz.core.view.maps import compute_map
from attnviz.core.view.overview import scale_top
from attnviz.core.view.palette import DEFAULT_SCALE
from attnviz.core.view.patches import block_grid, caption_rows, query_names
from attnviz.core.view.selection import Selection, ViewError, _pad, blk_len, hide_mask, real_rows, result_blocks
from attnviz.core.view.steps import generation_rows, n_steps

# over an image each panel is its word's own overlay, its heat stretched to that word's largest weight (as in Xu et
# al. 2015): one colour bar from 0 to "max" serves every panel, and its label says whose maximum
IMAGE_STRIP_LABEL = "attention weight (each panel stretched to its own maximum)"


def image_strip_label(sel: Selection) -> str:
    """The image strip's colour-bar words: each panel stretched to its own maximum, or (a top set by hand,
    ``sel.vmax``) every panel on the one linear scale 0..vmax (:func:`panel_selection`)."""
    return weight_label(False, vmax=sel.vmax) if sel.vmax else IMAGE_STRIP_LABEL


@dataclass
class StripPanel:
    """One word's panel: the decoder ``row`` that chose ``word`` and its weights over the keys ``k_pos``."""

    word: str
    row: int
    k_pos: np.ndarray
    k_labels: list[str]
    k_special: list[bool]
    weights: np.ndarray
    name: str = ""  # the panel's caption: the word, with its place where another panel bears it too ("a (5)")


@dataclass
class StripView:
    """The strip: one panel per word.  Over an image (``image``) each panel is the word's :func:`overlay_view`
    (``weights`` empty); over text the keys shaded by the word's weights, on one colour scale up to ``vmax``."""

    block_index: int
    block: Block
    image: bool
    panels: list[StripPanel]
    vmax: float
    title: str
    notes: list[str] = field(default_factory=list)
    scale: str = DEFAULT_SCALE


def panel_selection(sel: Selection) -> Selection:
    """An image strip's panel: the word's overlay stretched to its own peak, linear, whatever scale Image regions is
    on, as in Xu et al. (2015): the strip asks where each word looks, not how much (and every strip figure was drawn
    so, its recipe included).  A top set by hand (``sel.vmax``) is kept: then every panel is on that one linear
    scale, and how much each word looks shows too."""
    return sel.with_(image_scale="map", log=False)


def over_image(result: AttentionResult, blk: Block) -> bool:
    """Cross-attention from words to the image's patches (a captioning decoder)."""
    return blk.kind == "cross" and result.image is not None and block_grid(result, blk) is not None


def strip_block(result: AttentionResult, blocks: list[Block], sel: Selection) -> int | None:
    """The block the strip shows: the selected one when it is a decoder's; else cross-attention over the image,
    else the decoder's cross-attention, else its self-attention (a decoder-only model)."""
    if 0 <= sel.block < len(blocks) and blocks[sel.block].stack == "decoder":
        return sel.block
    order = [i for i, b in enumerate(blocks) if over_image(result, b)]
    order += [i for i, b in enumerate(blocks) if b.stack == "decoder" and b.kind == "cross"]
    order += [i for i, b in enumerate(blocks) if b.stack == "decoder" and b.kind == "self"]
    return order[0] if order else None


def strip_view(result: AttentionResult, sel: Selection, blocks: list[Block] | None = None) -> StripView:
    """Each generated word (up to ``sel.step``; over an image the typed caption words first) with where it
    looked.  Over text a panel is a row of the Alignment view: the same row convention (``sel.rows``), special
    keys hidden and rows renormalised, the mass kept; over an image it is the Image regions overlay of that word."""
    blocks = result_blocks(result, sel, blocks)
    b = strip_block(result, blocks, sel)
    if b is None:
        raise ViewError("the strip view needs a decoder: attention from the generated words", param="view")
    blk = blocks[b]
    image = over_image(result, blk)
    base = sel.with_(block=b, step=-1, hide_special=False, keep=1.0)
    if image and sel.mode == "rollout":
        base = base.with_(mode="mean")  # rollout multiplies square self-attention maps
    mv = compute_map(result, base, blocks, keep_pads=True)  # rows and keys by position: pads are skipped below
    g = n_steps(result, blk.batch)
    rows = generation_rows(result, blk) if g else []
    if not image and blk.kind == "cross" and sel.rows == "input":  # Alignment's rows: word k on the row reading it
        rows = [(r + 1, w) for r, w in rows if r + 1 < mv.matrix.shape[0]]
    notes: list[str] = []
    # each panel named as Image regions' query buttons are (a word written twice with its place, "a (5)"),
    # numbered among all the words whatever the step shows, so a panel and its button read alike
    every = real_rows(blk, (caption_rows(result, blk) if image else []) + rows)
    names = {r: n for (r, _), n in zip(every, query_names([(clean_label(w), r) for r, w in every]))}
    if sel.step >= 0 and rows:
        rows = rows[: sel.step + 1]
        notes.append(f"step {min(sel.step + 1, g)}/{g}")
    if image:
        rows = caption_rows(result, blk) + rows
    rows = real_rows(blk, rows)  # a padded batch's row: a panel per word of its own, none per pad
    pad_k = _pad(blk.key_axis, np.arange(blk_len(blk, 1)), blk_len(blk, 1))
    panels: list[StripPanel] = []
    hidden = False
    for row, word in rows:
        cols = np.arange(mv.matrix.shape[1])
        if blk.kind == "self":  # a decoder sees only the tokens up to its own position
            cols = cols[: row + 1]
        cols = cols[~pad_k[cols]]  # keys of the row's own tokens
        w = np.asarray(mv.matrix[row], np.float32)[cols] if not image else np.zeros(0, np.float32)
        special = np.asarray([mv.k_special[j] for j in cols], bool) if mv.k_special else np.zeros(len(cols), bool)
        if not image and sel.hide_special and special.any():
            drop = hide_mask(special)
            cols, w, special = cols[~drop], w[~drop], special[~drop]
            w = w / max(float(w.sum()), 1e-12)
            hidden = hidden or bool(drop.any())
        if not image and sel.keep < 1.0:
            w = reduce.keep_mass(w[None], max(sel.keep, 1e-3))[0]
        word = clean_label(word)
        panels.append(
            StripPanel(word, row, cols, [mv.k_labels[j] for j in cols], special.tolist(), w, names.get(row, word))
        )
    if hidden:
        notes.append(HIDDEN_NOTE)
    if not image and sel.keep < 1.0:
        notes.append(f"top {round(sel.keep * 100)}% mass")
    vmax = max((float(p.weights.max()) for p in panels if p.weights.size), default=0.0)
    # fixed 0–1, the block's top or a top set by hand (over an image each panel is its own overlay)
    # (the row scale: the strip's rows under one colour bar are stretched to the largest of them, as "map" says)
    scale = "map" if sel.scale == "row" else sel.scale
    if scale != "map" or image or sel.vmax:
        vmax = scale_top(result, sel.with_(block=b), b, mv.matrix, blocks)
    title = " · ".join([mv.title, *notes])
    return StripView(b, blk, image, panels, max(vmax, 1e-6), title, notes, scale)
