"""What every reduction path ends in: a batch's per-head statistics become a :class:`Partial`.

Both paths, maps reduced in numpy (:func:`attnviz.corpus.reduce.reduce_maps`) and statistics reduced inside
onnxruntime (:mod:`attnviz.corpus.graph_reduce`), build per-item :class:`~attnviz.core.row_sums.ItemStats` and
hand them to :func:`fold_items`, so a partial does not depend on which path made it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from attnviz import AttnvizError
from attnviz.core.row_sums import ItemStats
from attnviz.core.score_direction import direction
from attnviz.core.stats import ROW_STATS

S = len(ROW_STATS)


def signs(kind: str) -> list[int]:
    """Per statistic (ROW_STATS order) +1 where high values are the interesting end on ``kind``, -1 where low."""
    return list(_signs(kind))


@functools.cache
def _signs(kind: str) -> tuple[int, ...]:
    return tuple(direction(name, kind).sign for name in ROW_STATS)


@functools.lru_cache(maxsize=16)
def _head_signs(groups: tuple[tuple[str, int], ...]) -> np.ndarray:
    """[NH, S] ``signs`` of each head of the groups ``(kind, heads)`` (read-only: a worker's every batch shares
    it; the kinds' directions were looked up per statistic and per group in each batch: ~0.05 ms of ~1 ms)."""
    out = np.concatenate([np.broadcast_to(np.array(_signs(kind)), (heads, S)) for kind, heads in groups])
    out.flags.writeable = False
    return out


@dataclass(frozen=True)
class HeadGroup:
    """One attention site (self or cross): its place in the model and where its heads start in the flat head index."""

    site: int  # index into AttentionResult.maps
    stack: str
    kind: str
    layer: int
    heads: int
    offset: int


def layout(sites) -> list[HeadGroup]:
    out, off = [], 0
    for i, s in enumerate(sites):
        if s.kind not in ("self", "cross"):
            continue
        out.append(HeadGroup(i, s.stack, s.kind, s.layer, int(s.heads), off))
        off += int(s.heads)
    return out


def sites_layout(sites) -> list[HeadGroup]:
    """:func:`layout`'s groups before the heads are counted (0 heads each): which sites a reducer covers."""
    return [HeadGroup(i, s.stack, s.kind, s.layer, 0, 0) for i, s in enumerate(sites) if s.kind in ("self", "cross")]


@dataclass
class Partial:
    batch_id: int
    items: int
    tokens: int
    sums: np.ndarray  # [NH, S] float64: per-row statistic summed over the batch's counted rows
    counts: np.ndarray  # [NH, S] int64: counted rows
    # [S, NH, kb] float64 per-item mean times its direction's sign (signs(kind)): the ranking key, highest first
    top_value: np.ndarray
    top_item: np.ndarray  # [S, NH, kb] int64 Item.index
    top_row: np.ndarray  # [S, NH, kb] query position that scored highest in that item
    top_col: np.ndarray  # [S, NH, kb] key position it looked at
    # encoder-decoder without targets: the generated tokens (labels, end token included) of the items named above
    generated: dict[int, list[str]] = field(default_factory=dict)
    # --gold-column: [heads + cross sites + 1, 4] int64 link counts (corpus/gold.py), summed like ``sums``
    gold: np.ndarray | None = None
    # per head the items it aligns worst (corpus/gold.py worst_items): item AER [NH, kb] and Item.index [NH, kb]
    gold_top_value: np.ndarray | None = None
    gold_top_item: np.ndarray | None = None
    # --audio-dir with --gold-dir: boundary counts [1 + cross heads, 7] (corpus/audio_items.py), summed like ``sums``
    audio: np.ndarray | None = None
    # --audio-dir: each recording's word times (Item.index -> the words TSV's bytes), written by the driver
    words: dict[int, bytes] = field(default_factory=dict)
    # a VLM's vision file alone (corpus/tower.py): the images named above, Item.index -> (frames, a frame's patch
    # rows, its patch columns, the processor's tile rows, its tile columns: 0, 0 unsplit), so that an example's row,
    # key and frame are named as the view names them
    frames: dict[int, FrameShape] = field(default_factory=dict)
    # a worker's task of several batches folded into one partial (reduce.combine): ``batches`` consecutive batches
    # from ``batch_id``, and each one's ``sums`` [batches, NH, S] for the driver to add one by one, in batch order
    # (float64 sums added in another grouping differ in their last bits: the results' bytes would depend on the
    # task size); ``sums`` above is then their sum in that order
    batches: int = 1
    batch_sums: np.ndarray | None = None


FrameShape = tuple[int, int, int, int, int]  # Partial.frames: (frames, patch rows, patch cols, tile rows, tile cols)


def key_columns(
    stat: str, p: np.ndarray, rows: np.ndarray, real: np.ndarray, special: np.ndarray, diag: np.ndarray | None = None
) -> np.ndarray:
    """Key column that goes with each scoring row; p [B, H, Tq, Tk] for the chosen (b, h) pairs via rows [B, H].
    ``diag [B, Tq]``: the key of each query's diagonal (cross-attention's monotone one; None: the same position)."""
    fixed = {"prev": -1, "next": 1, "diag": 0}
    if stat in fixed:
        base = rows if diag is None else np.take_along_axis(diag, rows, 1)
        return base + fixed[stat]
    if stat == "first":
        return np.zeros_like(rows)
    b, h = np.meshgrid(np.arange(p.shape[0]), np.arange(p.shape[1]), indexing="ij")
    r = p[b, h, rows]  # [B, H, T]
    keep = real if stat not in ("special", "special_other") else (special & real)
    if stat == "special_other":
        keep = keep.copy()
        keep[:, 0] = False
    return np.where(keep[:, None, :], r, -1.0).argmax(-1)


def fold_items(
    parts: list[tuple[HeadGroup, ItemStats]], items: list[int], k: int, batch_id: int, tokens: int
) -> Partial:
    """A batch's :class:`Partial` from each head group's per-item statistics: per head the sums and counts over
    the batch's items (added item by item, in batch order) and, per statistic, the ``k`` items whose mean is
    furthest toward the statistic's interesting end (``signs``; ties to the earlier item id, so engines agree)
    with their best row and key.  Every path ends here:
    maps reduced by numpy (``reduce_maps``) and statistics reduced in the graph (``graph_reduce``)."""
    parts = sorted(parts, key=lambda e: e[0].offset)
    nh = 0
    for g, _ in parts:
        if g.offset != nh:
            raise AttnvizError("internal: head groups do not tile the head index")
        nh += g.heads
    b = len(items)
    kb = min(k, b)
    isum = np.concatenate([st.sums for _, st in parts], 1)  # [B, NH, S]
    shared = parts[0][1].counts if parts else None
    if shared is not None and all(st.counts is shared for _, st in parts):
        # the statistics session's groups share one [B, S] (each site's rows count alike): the per-item means
        # divide by it broadcast over the heads instead of by a [B, NH, S] copy (the same float64 divisions)
        n = shared[:, None]
        counted = np.broadcast_to(shared.sum(0), (nh, S)).copy()
    else:
        n = np.concatenate([np.broadcast_to(st.counts[:, None], st.sums.shape) for _, st in parts], 1)
        counted = n.sum(0)
    sign = _head_signs(tuple((g.kind, g.heads) for g, _ in parts))  # [NH, S]
    with np.errstate(invalid="ignore", divide="ignore"):  # an item with no counted row ranks last either way
        per_item = np.where(n > 0, sign * isum / np.maximum(n, 1), -np.inf)
    item_ids = np.asarray(items, np.int64)
    # highest per-item mean first; ties go to the earlier item (deterministic across engines): a stable sort of
    # the items taken in id order, each (head, statistic) a contiguous row (measured 1.6x faster than lexsort)
    by_id = np.argsort(item_ids, kind="stable")
    key = np.ascontiguousarray(-per_item[by_id].reshape(b, -1).T)  # [NH·S, B]
    order = by_id[stable_smallest(key, kb).T.reshape(kb, *per_item.shape[1:])]

    def top(a: np.ndarray) -> np.ndarray:
        return np.take_along_axis(a, order, 0).transpose(2, 1, 0)  # [S, NH, kb]

    return Partial(
        batch_id,
        b,
        tokens,
        isum.sum(0),
        counted,
        top(per_item),
        item_ids[order].transpose(2, 1, 0),
        top(np.concatenate([st.rows for _, st in parts], 1)),
        top(np.concatenate([st.keys for _, st in parts], 1)),
    )


def stable_smallest(key: np.ndarray, kb: int) -> np.ndarray:
    """``np.argsort(key, axis=-1, kind="stable")[:, :kb]`` of ``key [R, B]`` without sorting whole rows: each row's
    ``kb`` smallest are found by a partition, and only they are sorted (stably, in column order), where exactly
    ``kb`` values lie at or below the row's ``kb``-th smallest; a row with a tie there (or NaN) is sorted whole.
    A batch's fold ranks 32 items for the k=5 best per (head, statistic): sorting whole rows was ~0.4 ms of a
    worker's ~2.5 ms outside each batch's run; this ~0.3 ms (MiniLM, 720 rows)."""
    r, b = key.shape
    if kb >= b or kb < 1:
        return np.argsort(key, axis=-1, kind="stable")[:, :kb]
    key = np.ascontiguousarray(key)
    inside = key <= np.partition(key, kb - 1, axis=-1)[:, kb - 1 : kb]  # NaN is never inside
    clear = np.count_nonzero(inside, axis=-1) == kb
    every = bool(clear.all())
    flat = np.flatnonzero(inside if every else inside & clear[:, None])  # row by row, each in column order
    cols = (flat % b).reshape(-1, kb)
    best = np.take_along_axis(cols, np.argsort(key.ravel()[flat].reshape(-1, kb), axis=-1, kind="stable"), -1)
    if every:
        return best
    out = np.empty((r, kb), np.intp)
    out[clear] = best
    rest = ~clear
    out[rest] = np.argsort(key[rest], axis=-1, kind="stable")[:, :kb]
    return out
