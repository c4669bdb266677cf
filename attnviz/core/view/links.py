"""Token links: two token columns and the strongest weighted links between them, for one or several heads.

The thresholds (:data:`LINK_MIN`, :data:`LINKS_PER_ROW`), what they are measured against (the selection's
``link_cut``, :data:`~attnviz.core.view.link_cut.LINK_CUTS`) and the opacity rule (:func:`link_alpha`) are
shared by the screen and the figure, so both draw the same links.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnviz.core.attention import AttentionResult, Block
from attnviz.core.view.frame_map import head_map, shown_frame
from attnviz.core.view.link_cut import DEFAULT_LINK_CUT, check_link_cut
from attnviz.core.view.palette import HEAD_COLOURS
from attnviz.core.view.selection import MODE_TITLES, Selection, clamp, result_blocks

LINK_MIN = 0.05  # weights below this fraction of the cut's reference (LINK_CUTS) are not drawn (clutter)
LINKS_PER_ROW = 12  # at most this many (the strongest) links per query token and head


def links_key(vmax: float, cut: str = DEFAULT_LINK_CUT, per_row: int = LINKS_PER_ROW, outside: int = 0) -> str:
    """What a link's line says, as the figure's key: the lines carried no scale, and the weak links they leave out
    went unsaid.  Against the map's top the key names it (``vmax``); against each row's strongest there is no
    one number to name.  ``per_row``: the links a token keeps (a long figure's fewer, :func:`page_links`);
    ``outside``: the window's links to keys outside it (:func:`~attnviz.core.view.span.span_links`), not drawn."""
    entry = check_link_cut(cut)
    strongest = f"{per_row} strongest" if per_row != 1 else "strongest link"
    if entry.name == "map":  # as the key read before there was a choice
        said = (
            f"line width and opacity grow with the weight (full at {vmax:.3g}); under {LINK_MIN:.0%} of that, "
            f"or past a token's {strongest}: not drawn"
        )
    else:
        said = (
            f"line width and opacity grow with {entry.shaded}; under {LINK_MIN:.0%} of {entry.against}, "
            f"or past its {strongest}: not drawn"
        )
    if outside:
        said += f"; {outside:,} link{'s' if outside != 1 else ''} to keys outside the window: not drawn"
    return said


# A page of links holds at most about this many lines: 12 a token up to 512 tokens (a 16-in page: rows 2.25 pt
# apart).  Past that, 24,000 lines of a 2,000-token input drew a solid blob (and a 1.6 MB PDF); each token keeps
# its strongest few instead (one past 3,072 tokens), so every token still has its link and the page its shape.
LINKS_PER_PAGE = 512 * LINKS_PER_ROW


def page_links(n_rows: int) -> int:
    """How many links each of ``n_rows`` query tokens keeps on a figure's page (:data:`LINKS_PER_PAGE`)."""
    return max(1, min(LINKS_PER_ROW, LINKS_PER_PAGE // max(n_rows, 1)))


def keep_strongest(links: list[tuple[int, int, int, float]], per_row: int) -> list[tuple[int, int, int, float]]:
    """Of ``links`` (:func:`strongest_links`' order: row by row, columns in order) each (matrix, row)'s ``per_row``
    of the largest shade (the shade grows with the weight in a row; of equal ones the leftmost), order kept."""
    if per_row >= LINKS_PER_ROW:
        return links
    groups: dict[tuple[int, int], list[int]] = {}
    for n, (c, i, _, _) in enumerate(links):
        groups.setdefault((c, i), []).append(n)
    keep = sorted(n for at in groups.values() for n in sorted(at, key=lambda n: -links[n][3])[:per_row])
    return [links[n] for n in keep]


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
    links: list[tuple[int, int, int, float]]  # (item, query row, key column, shade in [0, 1]: LINK_CUTS)
    vmax: float  # the largest weight drawn (the "map" cut's reference)
    title: str
    block: Block | None = None
    q_pos: np.ndarray | None = None
    x_titles: tuple[str, str] = ("query", "key")
    cut: str = DEFAULT_LINK_CUT  # what the links' weights are relative to (LINK_CUTS)
    k_pos: np.ndarray | None = None  # the key column's positions (q_pos's, for keys: what --key-span counts)
    notes: tuple[str, ...] = ()  # the maps' notes (a speech clip's cut: core.view.clip), as MapView.notes
    outside: int = 0  # a window's (core.view.span.span_links) links to keys outside it, not drawn


def strongest_links(
    mats: list[np.ndarray], vmax: float | None = None, cut: str = DEFAULT_LINK_CUT
) -> tuple[list[tuple[int, int, int, float]], float]:
    """The links worth drawing: per query row and matrix the ``LINKS_PER_ROW`` strongest weights of at
    least ``LINK_MIN`` of the cut's reference (:data:`LINK_CUTS`: the row's own largest weight, or the top
    weight of all ``mats`` / ``vmax``), as ``(matrix, row, column, shade)``, row by row, each row's columns in
    order; and the top weight.  The shade, in [0, 1], is the weight over the cut's shade reference (the row's
    sum, or the top weight).  Of equal weights the leftmost are taken first (a stable sort's choice); NaN is no
    link, nor is any weight of a row whose reference is not a positive number."""
    entry = check_link_cut(cut)
    top = float(vmax) if vmax else max((float(m.max()) for m in mats if m.size), default=1.0) or 1.0
    out: list[tuple[int, int, int, float]] = []
    for c, (m, ref, shade) in enumerate(zip(mats, entry.tops(mats, vmax), entry.shades(mats, vmax))):
        m = np.asarray(m)
        ref = ref[:, 0]
        if entry.name == "row":  # a row of zeros (padding) or NaN has nothing to be relative to
            ref = np.where((ref > 0) & (ref < np.inf), ref, np.nan)
        rows, cols = _row_top(m, ref)
        weights = m[rows, cols].astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            keep = weights / ref[rows] >= LINK_MIN
            w = np.minimum(weights[keep] / shade[rows[keep], 0], 1.0)
        out.extend(zip([c] * int(keep.sum()), rows[keep].tolist(), cols[keep].tolist(), w.tolist()))
    return out, top


BLOCK = 16  # columns a block in _row_top's first look (a row's block j: every (n // BLOCK)-th column from j)


def _row_top(m: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row and column of each row's ``LINKS_PER_ROW`` largest weights of at least ``LINK_MIN`` of its reference
    ``ref[row]`` (ties: the leftmost; NaN never), row-major, each row's columns in order; a row whose reference is
    not a positive number: its largest weights as they are (the caller judges them).

    A full argsort took 1.6 s of a head switch on Token links at 4,096 tokens, a partition of each row 1.2 s, and a
    threshold, a count and a ``nonzero`` over the whole map, then block maxima of 16 adjacent columns (an inner
    axis of 16: slow in numpy), ~0.19 s.  Now the map is read twice: the maxima of :data:`BLOCK` blocks a row, each
    block every ``n // BLOCK``-th column (a reduction over the middle axis of ``[T, BLOCK, n // BLOCK]``: ~9 ms at
    4,096 tokens), then only the blocks that can hold a link.  Any partition of a row's columns works: the k-th
    largest of its block maxima is at most its k-th largest weight (k blocks each hold a weight that large), so
    only weights at or over it (and the cut) can be among the k, in the blocks whose maximum reaches it, a few
    dozen weights a row; those are sorted (by weight, then column) and each row's first k taken."""
    k, (t, n) = LINKS_PER_ROW, (m.shape if m.ndim == 2 else (0, 0))
    if m.ndim != 2 or n <= k:
        every = np.nonzero(np.ones(m.shape, bool))
        return every[0], every[1]
    ok = (0 < ref) & (ref < np.inf)  # else no threshold to narrow by (links are judged on the weights as taken)
    # a hair below the cut: compared in the map's precision, judged in f64 by the caller
    low = np.where(ok, LINK_MIN * np.where(ok, ref, 0.0) * (1 - 1e-6), -np.inf)
    nb = n // BLOCK
    wide = m[:, : nb * BLOCK].reshape(t, BLOCK, nb)  # block j of a row: its columns j, j + nb, j + 2 nb, ...
    tail = m[:, nb * BLOCK :]  # the last n % BLOCK columns: a block of their own
    if nb + (tail.shape[1] > 0) < k:  # a short row (under ~200 keys): every weight over the cut is a candidate
        low = low.astype(m.dtype) if np.issubdtype(m.dtype, np.floating) else low
        rows, cols = np.nonzero(m >= low[:, None])
    else:
        blocks = _nan_max(wide, 1)
        if tail.shape[1]:
            blocks = np.concatenate([blocks, _nan_max(tail, 1)[:, None]], axis=1)
        blocks = np.where(np.isnan(blocks), -np.inf, blocks)
        kth = np.partition(blocks, blocks.shape[1] - k, axis=1)[:, blocks.shape[1] - k]
        low = np.maximum(low, kth)
        low = low.astype(m.dtype) if np.issubdtype(m.dtype, np.floating) else low
        br, bj = np.nonzero(blocks[:, :nb] >= low[:, None])  # the blocks that can hold a link
        hit, at = np.nonzero(wide[br, :, bj] >= low[br, None])  # [blocks, BLOCK]: NaN never
        tr, tc = np.nonzero(tail >= low[:, None])
        rows, cols = np.concatenate([br[hit], tr]), np.concatenate([at * nb + bj[hit], tc + nb * BLOCK])
    order = _by_row_weight(rows, cols, m[rows, cols], t, n)
    rows, cols = rows[order], cols[order]
    starts = np.searchsorted(rows, rows, side="left")  # each candidate's row's first candidate
    take = np.arange(len(rows)) - starts < k
    rows, cols = rows[take], cols[take]
    order = np.argsort(rows.astype(np.int64) * n + cols)  # row-major (each pair once: no ties)
    return rows[order], cols[order]


def _by_row_weight(rows: np.ndarray, cols: np.ndarray, v: np.ndarray, t: int, n: int) -> np.ndarray:
    """The order of the candidates by row, then weight (largest first), then column (the leftmost of equal ones).
    A float32 (or float16) map's: one argsort of a 64-bit key (16 bits of row, the weight's 32 in an order-keeping
    form, 16 bits of column), where ``np.lexsort`` of the three took ~40 ms of 160,000 candidates at 4,096 tokens."""
    if v.dtype not in (np.float32, np.float16) or t > 1 << 16 or n > 1 << 16:
        return np.lexsort((cols, -v, rows))
    bits = (v.astype(np.float32) + np.float32(0)).view(np.uint32).astype(np.uint64)  # (+0: -0.0 is 0.0)
    # IEEE bits in the numbers' order: a negative's flipped, a positive's with the sign bit set
    bits = np.where(bits >> np.uint64(31), ~bits & np.uint64(0xFFFFFFFF), bits | np.uint64(0x80000000))
    key = rows.astype(np.uint64) << np.uint64(48) | (np.uint64(0xFFFFFFFF) - bits) << np.uint64(16)
    return np.argsort(key | cols.astype(np.uint64))


def _nan_max(a: np.ndarray, axis: int) -> np.ndarray:
    """``a``'s largest numbers along ``axis`` (NaN passed over; all NaN: NaN): ``max`` first, as a map seldom holds
    a NaN and ``fmax`` takes twice its time."""
    top = a.max(axis=axis)
    if np.isnan(top).any():
        with np.errstate(invalid="ignore"):
            top = np.fmax.reduce(a, axis=axis)
    return top


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
    links, vmax = strongest_links([m for _, _, m in items], cut=sel.link_cut)
    mv0 = mvs[0]
    ends = ("target", "source") if blk.kind == "cross" else ("query", "key")
    return LinksView(
        mv0.q_labels,
        mv0.k_labels,
        mv0.q_special,
        mv0.k_special,
        items,
        links,
        vmax,
        title,
        blk,
        mv0.q_pos,
        ends,
        sel.link_cut,
        mv0.k_pos,
        tuple(mv0.notes),
    )
