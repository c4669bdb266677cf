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
    least ``LINK_MIN`` of the top weight, as ``(matrix, row, column, weight / vmax)``, row by row, each row's
    columns in order.  Of equal weights the leftmost are taken first (a stable sort's choice); NaN is no link."""
    top = float(vmax) if vmax else max((float(m.max()) for m in mats if m.size), default=1.0) or 1.0
    out: list[tuple[int, int, int, float]] = []
    for c, m in enumerate(mats):
        m = np.asarray(m)
        rows, cols = _row_top(m, top)
        w = m[rows, cols].astype(np.float64) / top
        keep = w >= LINK_MIN
        out.extend(
            zip([c] * int(keep.sum()), rows[keep].tolist(), cols[keep].tolist(), np.minimum(w[keep], 1.0).tolist())
        )
    return out, top


def _row_top(m: np.ndarray, top: float) -> tuple[np.ndarray, np.ndarray]:
    """Row and column of each row's ``LINKS_PER_ROW`` largest weights (ties: the leftmost), row-major; where a
    row has no more than that many weights that could be links (at least ``LINK_MIN`` of ``top``), just those,
    which are its largest: a long map's row has a handful.  The full argsort this replaces took 1.6 s of a head
    switch on Token links at 4,096 tokens."""
    if m.ndim != 2 or m.shape[1] <= LINKS_PER_ROW:
        every = np.nonzero(np.ones(m.shape, bool))
        return every[0], every[1]
    if not (0 < top < np.inf):  # no threshold to narrow by (links are then judged on the weights as taken)
        return _top_of_rows(m, np.arange(m.shape[0]))
    near = m >= LINK_MIN * top * (1 - 1e-6)  # a hair below: compared in the map's precision, judged after in f64
    many = np.nonzero(np.count_nonzero(near, axis=1) > LINKS_PER_ROW)[0]
    near[many] = False
    rows, cols = np.nonzero(near)
    if len(many):
        r2, c2 = _top_of_rows(m, many)
        rows, cols = np.concatenate([rows, r2]), np.concatenate([cols, c2])
        order = np.lexsort((cols, rows))
        rows, cols = rows[order], cols[order]
    return rows, cols


def _top_of_rows(m: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ``LINKS_PER_ROW`` largest of each of ``rows`` (ties: the leftmost; NaN last), by a partition per row."""
    n, k = m.shape[1], LINKS_PER_ROW
    v = m[rows]
    v = np.where(np.isnan(v), -np.inf, v)
    kth = np.partition(v, n - k, axis=1)[:, n - k, None]  # each row's k-th largest
    take = v > kth
    tied = v == kth
    # how many of the row's ties at the k-th largest are taken, leftmost first
    room = k - np.count_nonzero(take, axis=1)
    for i in np.nonzero(np.count_nonzero(tied, axis=1) > room)[0]:  # rows with more ties than room (a flat row, zeros)
        tied[i, np.nonzero(tied[i])[0][room[i] :]] = False
    r, c = np.nonzero(take | tied)
    return rows[r], c


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
