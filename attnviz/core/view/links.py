"""Token links: two token columns and the strongest weighted links between them, for one or several heads.

The thresholds (:data:`LINK_MIN`, :data:`LINKS_PER_ROW`) and the opacity rule (:func:`link_alpha`) are shared by
the screen and the figure, so both draw the same links.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnviz.core.attention import AttentionResult, Block
from attnviz.core.view.frame_map import head_map, shown_frame
from attnviz.core.view.palette import HEAD_COLOURS
from attnviz.core.view.selection import MODE_TITLES, Selection, clamp, result_blocks

LINK_MIN = 0.05  # weights below this fraction of the top weight are not drawn (clutter)
LINKS_PER_ROW = 12  # at most this many (the strongest) links per query token and head


def links_key(vmax: float) -> str:
    """What a link's line says, as the figure's key: the lines carried no scale, and the weak links they leave out
    went unsaid."""
    return (
        f"line width and opacity grow with the weight (full at {vmax:.3g}); under {LINK_MIN:.0%} of that, "
        f"or past a token's {LINKS_PER_ROW} strongest: not drawn"
    )


def link_alpha(w: float) -> float:
    """Opacity of a link of relative weight ``w`` in [0, 1] (screen and print)."""
    return 0.08 + 0.8 * w


@dataclass
class LinksView:
    """Two token columns and the weighted links between them; ``items`` are (name, colour, matrix)."""

    q_labels: list[str]
    k_labels: list[str]
    q_special: list[bool]
    k_special: list[bool]
    items: list[tuple[str, str, np.ndarray]]
    links: list[tuple[int, int, int, float]]  # (item, query row, key column, weight / vmax in [0, 1])
    vmax: float
    title: str
    block: Block | None = None
    q_pos: np.ndarray | None = None
    x_titles: tuple[str, str] = ("query", "key")


def strongest_links(
    mats: list[np.ndarray], vmax: float | None = None
) -> tuple[list[tuple[int, int, int, float]], float]:
    """The links worth drawing: per query row and matrix the ``LINKS_PER_ROW`` strongest weights of at
    least ``LINK_MIN`` of the top weight, as ``(matrix, row, column, weight / vmax)``."""
    top = float(vmax) if vmax else max((float(m.max()) for m in mats if m.size), default=1.0) or 1.0
    out = []
    for c, m in enumerate(mats):
        order = np.argsort(-m, axis=1, kind="stable")[:, :LINKS_PER_ROW]
        for i in range(m.shape[0]):
            for j in sorted(order[i].tolist()):
                w = float(m[i, j]) / top
                if w >= LINK_MIN:
                    out.append((c, i, int(j), min(w, 1.0)))
    return out, top


def link_heads(blk: Block, sel: Selection) -> list[int]:
    """The heads token links overlay: none for an aggregate; else the selection's ``heads`` that the layer has,
    or, when it names none, the focused head (the window's first look and the figure's default alike)."""
    if sel.mode != "head":
        return []
    n = blk.heads_in(min(max(sel.layer, 0), blk.n_layers - 1))
    return sorted({int(h) for h in sel.heads if 0 <= h < n}) or [sel.head]


def links_view(
    result: AttentionResult, sel: Selection, heads: list[int] | None = None, blocks: list[Block] | None = None
) -> LinksView:
    """Token links for ``sel``: one head, several heads overlaid (``heads``, else :func:`link_heads`) or the
    selected aggregate; a tower's frames (:func:`head_map`): the Head map's frame alone, never the whole
    block-diagonal map (a 17-frame SmolVLM tower: 17,408 tokens a side, 1.2 GB a head)."""
    blocks = result_blocks(result, sel, blocks)
    sel = clamp(sel, blocks)
    blk = blocks[sel.block]
    if sel.mode == "head":
        hs = link_heads(blk, sel if heads is None else sel.with_(heads=tuple(heads)))
        mvs = [head_map(result, sel.with_(head=h), blocks) for h in hs]
        items = [(f"head {h}", HEAD_COLOURS[h % len(HEAD_COLOURS)], mv.matrix) for h, mv in zip(hs, mvs)]
        what = items[0][0] if len(items) == 1 else f"{len(items)} heads"
        frame = shown_frame(result, sel, blocks)
        title = " · ".join([blk.name, *filter(None, [frame]), f"layer {sel.layer}", what, *mvs[0].notes])
    else:
        mv = head_map(result, sel, blocks)
        mvs = [mv]
        items = [(MODE_TITLES[sel.mode], HEAD_COLOURS[0], mv.matrix)]
        title = mv.title
    links, vmax = strongest_links([m for _, _, m in items])
    mv0 = mvs[0]
    ends = ("target", "source") if blk.kind == "cross" else ("query", "key")
    return LinksView(
        mv0.q_labels, mv0.k_labels, mv0.q_special, mv0.k_special, items, links, vmax, title, blk, mv0.q_pos, ends
    )
