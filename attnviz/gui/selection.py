"""What the user is looking at, and the map it selects -- plain Python + numpy, no Qt.

A :class:`Selection` is an immutable description (block, layer, head, aggregation, filters,
generation step).  :func:`compute_map` turns it plus an :class:`~attnviz.core.AttentionResult`
into a :class:`MapView`: the 2-D matrix a view draws, with its row/column labels and the
original positions they came from.  Every view, the exports and the tests share this one
function, so what is drawn is what is exported.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from attnviz.core import reduce
from attnviz.core.attention import AttentionResult, Block

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
    """The current focus; change it with ``dataclasses.replace`` (see :meth:`with_`)."""

    block: int = 0  # index into result.blocks()
    layer: int = 0
    head: int = 0
    mode: str = "head"  # one of MODES
    layer_lo: int = 0  # layer range used by the aggregates and rollout (inclusive)
    layer_hi: int = -1  # -1 = last layer
    keep: float = 1.0  # keep, per row, the largest weights holding this fraction of the mass
    log: bool = False  # log colour scale
    hide_special: bool = False  # drop special-token rows/columns and renormalise rows
    step: int = -1  # generated steps shown (-1 = all)

    def with_(self, **changes) -> "Selection":
        return replace(self, **changes)


@dataclass
class MapView:
    """One drawable map: ``matrix[Tq, Tk]`` with labels and original positions."""

    matrix: np.ndarray
    q_labels: list[str]
    k_labels: list[str]
    q_pos: np.ndarray  # original query position of each row
    k_pos: np.ndarray  # original key position of each column
    title: str
    block: Block | None = None
    q_special: list[bool] = field(default_factory=list)
    k_special: list[bool] = field(default_factory=list)

    def value(self, row: int, col: int) -> float:
        return float(self.matrix[row, col])


def clean_label(s: str) -> str:
    """Tokenizer markers to readable text (BertViz' format_special_chars)."""
    s = str(s).replace("Ġ", " ").replace("▁", " ").replace("Ċ", "\\n")
    return s.strip() or s or "␣"


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
    return sel.with_(block=b, layer=layer, head=head, layer_lo=lo, layer_hi=hi)


def n_steps(result: AttentionResult | None) -> int:
    return len(result.generated) if result is not None else 0


def producing_row(result: AttentionResult, tq: int, k: int) -> int:
    """Decoder query row whose output chose generated token ``k`` (0-based).

    The query at decoder position ``p`` predicts the token at ``p + 1``, so token ``k`` was chosen
    by row ``prompt_len - 1 + k``.  Without a known prompt length assume the axis ends with the
    generated tokens except the last (the runtime does not feed the final token back).
    """
    g = n_steps(result)
    if result.prompt_len > 0:
        return result.prompt_len - 1 + k
    return tq - g + k


def step_rows(result: AttentionResult, block: Block, step: int) -> int | None:
    """How many decoder positions are visible at generation step ``step`` (None = all).

    Step ``s`` shows the positions that existed when the ``s``-th generated token was chosen.
    """
    g = n_steps(result)
    if step < 0 or g == 0 or block.stack != "decoder" or step >= g:
        return None
    tq = blk_len(block, 0)
    return max(1, min(tq, producing_row(result, tq, step) + 1))


def compute_map(result: AttentionResult, sel: Selection, blocks: list[Block] | None = None) -> MapView:
    """The matrix ``sel`` points at, after aggregation, step, special-token and mass filters."""
    blocks = blocks if blocks is not None else result.blocks()
    if not blocks:
        raise ValueError("this result has no attention maps")
    sel = clamp(sel, blocks)
    blk = blocks[sel.block]
    lo, hi = layer_range(sel, blk.n_layers)
    if sel.mode == "head":
        m = blk.head(sel.layer, sel.head)
        title = f"{blk.name} · layer {sel.layer} · head {sel.head}"
    elif sel.mode in reduce.HEAD_AGGREGATES:
        per_layer = [blk.layer(i) for i in range(lo, hi + 1)]
        m = reduce.aggregate_heads(np.concatenate(per_layer, axis=0), sel.mode)
        rng = f"layer {lo}" if lo == hi else f"layers {lo}–{hi}"
        title = f"{blk.name} · {rng} · {sel.mode} over heads"
    elif sel.mode == "rollout":
        if blk.kind != "self":
            raise ValueError("rollout needs self-attention; pick an encoder or decoder self-attention block")
        m = reduce.rollout([blk.layer(i) for i in range(lo, hi + 1)])
        title = f"{blk.name} · rollout layers {lo}–{hi}"
    else:
        raise ValueError(f"unknown mode {sel.mode!r}")
    m = np.asarray(m, dtype=np.float32)
    q_ax, k_ax = blk.query_axis, blk.key_axis
    q_pos = np.arange(m.shape[0])
    k_pos = np.arange(m.shape[1])
    n = step_rows(result, blk, sel.step)
    if n is not None:
        q_pos = q_pos[:n]
        if blk.kind == "self":
            k_pos = k_pos[:n]
        m = m[np.ix_(q_pos, k_pos)]
        title += f" · step {sel.step + 1}/{n_steps(result)}"
    q_special = np.array([q_ax.special[i] for i in q_pos], bool) if len(q_ax) == blk_len(blk, 0) else np.zeros(len(q_pos), bool)
    k_special = np.array([k_ax.special[i] for i in k_pos], bool) if len(k_ax) == blk_len(blk, 1) else np.zeros(len(k_pos), bool)
    if sel.hide_special and (q_special.any() or k_special.any()):
        dq = q_special if not q_special.all() else np.zeros_like(q_special)
        dk = k_special if not k_special.all() else np.zeros_like(k_special)
        m = reduce.drop_positions(m, dq, dk, renormalize=True)
        q_pos, k_pos = q_pos[~dq], k_pos[~dk]
        q_special, k_special = q_special[~dq], k_special[~dk]
        title += " · special tokens hidden"
    if sel.keep < 1.0:
        m = reduce.keep_mass(m, max(sel.keep, 1e-3))
        title += f" · top {round(sel.keep * 100)}% mass"
    q_labels = [clean_label(q_ax.labels[i]) for i in q_pos]
    k_labels = [clean_label(k_ax.labels[i]) for i in k_pos]
    return MapView(m, q_labels, k_labels, q_pos, k_pos, title, blk, q_special.tolist(), k_special.tolist())


def blk_len(blk: Block, axis: int) -> int:
    shape = blk.result.maps[blk.sites[0]].shape
    return shape[2 + axis]


def downsample(m: np.ndarray, max_side: int = 64) -> np.ndarray:
    """Max-pool ``[..., Tq, Tk]`` so neither side exceeds ``max_side`` (keeps sharp peaks visible).

    Uses ``np.maximum.reduce`` over strided views, several times faster than a reshape + ``max``
    over two axes for 512-token maps.
    """
    tq, tk = m.shape[-2:]
    fq = -(-tq // max_side)
    fk = -(-tk // max_side)
    if fq == 1 and fk == 1:
        return m
    pq, pk = (-tq) % fq, (-tk) % fk
    if pq or pk:
        pad = [(0, 0)] * (m.ndim - 2) + [(0, pq), (0, pk)]
        m = np.pad(m, pad)
    if fk > 1:
        m = np.maximum.reduce([m[..., j::fk] for j in range(fk)])
    if fq > 1:
        m = np.maximum.reduce([m[..., i::fq, :] for i in range(fq)])
    return m


def thumbnails(result: AttentionResult, step: int = -1, max_side: int = 64, blocks: list[Block] | None = None) -> dict:
    """``{(block, layer, head): [<=max_side, <=max_side]}`` max-pooled maps of every head.

    Runs in the inference worker for a new result (so the GUI thread only uploads small images)
    and again on the GUI thread when the generation step changes.
    """
    blocks = blocks if blocks is not None else result.blocks()
    out = {}
    for bi, blk in enumerate(blocks):
        n = step_rows(result, blk, step)
        for layer in range(blk.n_layers):
            a = blk.layer(layer)  # [H, Tq, Tk]
            if n is not None:
                a = a[:, :n, :n] if blk.kind == "self" else a[:, :n]
            small = downsample(a, max_side)
            for h in range(small.shape[0]):
                out[(bi, layer, h)] = np.ascontiguousarray(small[h])
    return out


def alignment_rows(result: AttentionResult, blk: Block) -> tuple[np.ndarray, list[str]]:
    """Decoder query rows that *produced* each generated token, and those tokens (see :func:`producing_row`).

    Falls back to all rows with their own labels when nothing was generated.
    """
    g = n_steps(result)
    tq = blk_len(blk, 0)
    if g == 0:
        return np.arange(tq), [clean_label(x) for x in blk.query_axis.labels]
    rows, labels = [], []
    for k in range(g):
        r = producing_row(result, tq, k)
        if 0 <= r < tq:
            rows.append(r)
            labels.append(clean_label(result.generated[k]))
    return np.asarray(rows, dtype=int), labels
