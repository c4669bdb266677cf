"""Two models compared (File ▸ Compare with…, ``attnviz compare``): B's map of A's selection, and A − B.

Matching A's selection on B (the block of the same stack, kind, stage and tower; the layer with the same number),
the signed difference on a diverging scale, and the colours of the overview's divergence frames.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from attnviz.core.attention import AttentionResult, Block
from attnviz.core.view.colourbar import HIDDEN_NOTE, notes_label
from attnviz.core.view.frame_map import head_map
from attnviz.core.view.maps import MapView
from attnviz.core.view.selection import Selection, ViewError, clamp, result_blocks

DIFF_CMAP = "RdBu_r"  # A − B: blue where B attends more, white where they agree, red where A attends more
# ColorBrewer RdBu (11 classes) from blue to red: the colours matplotlib's RdBu_r interpolates, so the screen
# (pyqtgraph, from these) and the figure (matplotlib's RdBu_r) paint a difference alike
DIFF_COLOURS = (
    "#053061",
    "#2166ac",
    "#4393c3",
    "#92c5de",
    "#d1e5f0",
    "#f7f7f7",
    "#fddbc7",
    "#f4a582",
    "#d6604d",
    "#b2182b",
    "#67001f",
)
DIFF_TITLE = "A − B"
DIFF_FLOOR = 1e-6  # the scale of a difference that is 0 everywhere (a model against itself): ±1e-6, all white


def map_label(mv: MapView, log: bool) -> str:
    """The colour-bar words of a drawn map, screen and figure: a difference says it is one and how it is scaled."""
    if mv.diverging:
        hidden = " (special tokens removed, rows renormalised)" if HIDDEN_NOTE in mv.notes else ""
        if not np.any(mv.matrix):  # the ±DIFF_FLOOR bar of an all-zero difference read as differences of 1e-6
            return f"A − B weight{hidden} (0 everywhere: A and B agree)"
        # which end is which: RdBu_r (style.py, figures) puts a positive difference, A above B, at its red end
        return f"A − B weight{hidden} (±max; red: A > B)"
    return notes_label(mv.notes, log, mv.scale, mv.vmax if mv.by_hand else None, mv.spanned)


def matching_selection(
    result_a: AttentionResult,
    result_b: AttentionResult,
    sel: Selection,
    blocks_a: list[Block] | None = None,
) -> Selection:
    """The selection on ``result_b`` that shows what ``sel`` shows on ``result_a``: the block of the same stack,
    kind, stage and tower, the layer with the same number (sites are matched as ``attnviz compare`` matches
    them); one message when B has no such block or layer."""
    blocks_a = result_blocks(result_a, sel, blocks_a)
    if not blocks_a:
        raise ViewError("this result has no attention maps; nothing to compare", param="model")
    sel = clamp(sel, blocks_a)
    ba = blocks_a[sel.block]
    blocks_b = result_b.blocks(sel.batch)
    j = next(
        (
            i
            for i, b in enumerate(blocks_b)
            if (b.stack, b.kind, b.stage, b.tower) == (ba.stack, ba.kind, ba.stage, ba.tower)
        ),
        None,
    )
    if j is None:
        raise ViewError(f"model B has no {ba.name}; pick a block both models have", param="block")
    bb = blocks_b[j]
    la = [int(result_a.sites[i].layer) for i in ba.sites]
    lb = [int(result_b.sites[i].layer) for i in bb.sites]
    if sel.mode == "head":
        if la[sel.layer] not in lb:
            raise ViewError(f"model B's {bb.name} has no layer {la[sel.layer]}; pick a layer both have", param="layer")
        li = lb.index(la[sel.layer])
        if sel.head >= bb.heads_in(li):
            raise ViewError(f"model B's layer {la[sel.layer]} has {bb.heads_in(li)} heads, no head {sel.head}")
        return sel.with_(block=j, layer=li)
    if la != lb:
        raise ViewError(
            f"model B's {bb.name} has other layers than A's; compare one head (aggregate 'head')", param="aggregate"
        )
    return sel.with_(block=j)


def compute_other_map(
    result_a: AttentionResult, result_b: AttentionResult, sel: Selection, blocks_a: list[Block] | None = None
) -> MapView:
    """Model B's map of what ``sel`` selects on model A (what Head map shows as "B"; a tower's frames: one frame)."""
    return head_map(result_b, matching_selection(result_a, result_b, sel, blocks_a))


def compute_diff_map(
    result_a: AttentionResult, result_b: AttentionResult, sel: Selection, blocks_a: list[Block] | None = None
) -> MapView:
    """A − B for what ``sel`` selects (the same step, hidden tokens and kept mass applied to both), on a
    diverging scale centred on 0 with symmetric limits ±max |A − B|; never on a log scale (it is signed)."""
    sel = sel.with_(log=False)
    a = head_map(result_a, sel, blocks_a)  # a tower's frames: the frame selected, in both
    b = head_map(result_b, matching_selection(result_a, result_b, sel, blocks_a))
    if a.matrix.shape != b.matrix.shape or a.q_labels != b.q_labels or a.k_labels != b.k_labels:
        raise ViewError(
            f"A's map is {list(a.matrix.shape)} and B's {list(b.matrix.shape)} over other tokens: no difference to "
            "draw; compare models that share a tokenizer"
        )
    d = a.matrix.astype(np.float32) - b.matrix.astype(np.float32)
    top = max(float(np.abs(d).max()) if d.size else 0.0, DIFF_FLOOR)
    return replace(a, matrix=d, title=f"{a.title} · {DIFF_TITLE}", vmin=-top, vmax=top, diverging=True)


# the Overview's frame around each compared head: white (no divergence) to dark red (the most divergent head)
DIVERGENCE_COLOURS = DIFF_COLOURS[len(DIFF_COLOURS) // 2 :]


def divergence_colour(js: float, top: float) -> str | None:
    """The frame colour of a head whose JS divergence is ``js`` when the most divergent head has ``top``
    (None: the head did not move, no frame)."""
    if not js > 0 or not top > 0:
        return None
    cols = DIVERGENCE_COLOURS
    x = min(max(js / top, 0.0), 1.0) * (len(cols) - 1)
    i = min(int(x), len(cols) - 2)
    f = x - i
    lo, hi = (np.array([int(c[k : k + 2], 16) for k in (1, 3, 5)], float) for c in (cols[i], cols[i + 1]))
    r, g, b = np.rint(lo + (hi - lo) * f).astype(int)
    return f"#{r:02x}{g:02x}{b:02x}"


@dataclass(frozen=True)
class FramesKey:
    """The key of the Overview's divergence frames (File ▸ Compare with…), the window's and the exported figure's:
    what a frame's colour says and on which scale.  Frames run from white (JS 0, no frame drawn) to the darkest red
    at ``top``, the most divergent head's JS divergence; the scale is that head's, so the key's top number is what
    the darkest red means in this comparison (another comparison's darkest red is another number)."""

    name_b: str
    top: float  # the most divergent head's JS divergence, bits: the darkest frame

    @property
    def title(self) -> str:
        return f"frame colour: JS divergence from {self.name_b}, bits"

    @property
    def note(self) -> str:
        """What the key leaves unsaid: the scale is this comparison's, and a head with no frame did not move."""
        return "darkest red = the most divergent head; no frame: JS 0"

    @property
    def colours(self) -> tuple[str, ...]:
        """The key's colours from JS 0 (left) to ``top`` (right), as :func:`divergence_colour` draws frames."""
        return DIVERGENCE_COLOURS

    def ticks(self) -> list[tuple[float, str]]:
        """The key's numbers: 0, half the top and the top (bits)."""
        if not self.top > 0:
            return [(0.0, "0")]
        return [(0.0, "0"), (self.top / 2, f"{self.top / 2:.3g}"), (self.top, f"{self.top:.3g}")]

    def colour(self, js: float) -> str | None:
        """The frame of a head whose JS divergence is ``js`` on this key's scale (None: no frame)."""
        return divergence_colour(js, self.top)
