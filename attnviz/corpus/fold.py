"""What every reduction path ends in: a batch's per-head statistics become a :class:`Partial`.

Both paths, maps reduced in numpy (:func:`attnviz.corpus.reduce.reduce_maps`) and statistics reduced inside
onnxruntime (:mod:`attnviz.corpus.graph_reduce`), build per-item :class:`~attnviz.core.row_sums.ItemStats` and
hand them to :func:`fold_items`, so a partial does not depend on which path made it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
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
    groups = [g for g, _ in parts]
    heads_of(groups)
    isum = np.concatenate([st.sums for _, st in parts], 1)  # [B, NH, S]
    shared = parts[0][1].counts if parts else None
    if shared is not None and all(st.counts is shared for _, st in parts):
        # the statistics session's groups share one [B, S] (each site's rows count alike): the per-item means
        # divide by it broadcast over the heads instead of by a [B, NH, S] copy (the same float64 divisions)
        n = shared[:, None]
    else:
        n = np.concatenate([np.broadcast_to(st.counts[:, None], st.sums.shape) for _, st in parts], 1)
    rows = np.concatenate([st.rows for _, st in parts], 1)  # [B, NH, S], C-ordered: the chosen by flat index
    keys = np.concatenate([st.keys for _, st in parts], 1)
    return fold_stats(groups, isum, n, items, k, batch_id, tokens, lambda at: (rows.take(at[3]), keys.take(at[3])))


def heads_of(groups: list[HeadGroup]) -> int:
    """The heads of ``groups`` (in offset order), refused where they do not tile the head index."""
    nh = 0
    for g in groups:
        if g.offset != nh:
            raise AttnvizError("internal: head groups do not tile the head index")
        nh += g.heads
    return nh


# where the chosen (item, head, statistic) entries lie, each [S, NH, kb]: the batch position, the head, the
# statistic, and the flat index of the three in a C-ordered [B, NH, S] array
Chosen = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def fold_stats(
    groups: list[HeadGroup],
    base: np.ndarray,
    n: np.ndarray,
    items: list[int],
    k: int,
    batch_id: int,
    tokens: int,
    picked: Callable[[Chosen], tuple[np.ndarray, np.ndarray]],
    mult: np.ndarray | None = None,
    ranks: np.ndarray | None = None,
) -> Partial:
    """:func:`fold_items` on the groups' statistics side by side (``groups`` in offset order, tiling the heads):
    per-item sums ``isum [B, NH, S]`` = ``base`` times ``mult`` (``[S]``, ±1 per statistic: the
    statistics session's sums are of signed values; None: ``base`` itself), ``n`` their counted rows (``[B, 1, S]``
    shared by every head, or ``[B, NH, S]``), ``picked(chosen)`` the best rows and their keys ``[S, NH, kb]`` at
    the chosen (item, head, statistic) entries only (the session's keys are completed there alone).

    The partial of the fold before it (commit 9077fb9), bit for bit (tests/corpus/test_fold_host.py holds it to
    that code, kept in tests/corpus/fold_9077fb9.py); with the statistics session's finish, ~0.55 of the host CPU
    of the two (bench/RESULTS.md, session 23 fold23): the ranking key ``-per-item mean`` is made in one pass,
    straight into its [NH·S, B] layout, ranked in batch order (:func:`ranked`: no copy of the batch in item-id
    order), and the means, rows and keys are computed at the k chosen of each row only, not for every item.

    ``ranks``: the statistics session's ranking of the same key (runtime/statfeeds.py ``RANKS``, ``[NH·S, K + 1]``:
    K columns, then how many lead each row settled); a row settled for kb + 1 gives its first kb columns as they
    come, the others are ranked here (used only where its key is this one's: every flip -1, kb < K <= B)."""
    b, nh, s = base.shape
    kb = min(k, b)
    base = np.ascontiguousarray(base)
    n = np.ascontiguousarray(n)
    lay = _layout(tuple((g.kind, g.heads) for g in groups), None if mult is None else tuple(mult.tolist()), kb)
    item_ids = np.asarray(items, np.int64)
    nmax = np.maximum(n, 1)
    # the key -(sign · isum / n) as isum / (-sign · n), ±1 products being exact: the same values (a NaN's sign
    # aside, which no comparison sees); where every head has the same signs, the divisor is [S, B]
    if ranks is not None and kb < b and ranks.shape[0] == nh * s and ranks.shape[1] >= kb + 2 and lay.minus:
        best = _settled(ranks, base, nmax, n, item_ids, kb)  # [NH·S, kb] batch positions
    else:
        div = lay.flip[..., None] * nmax.transpose(1, 2, 0)  # [1 or NH, S, B]
        with np.errstate(invalid="ignore", divide="ignore"):
            key = np.divide(base.transpose(1, 2, 0), div, order="C")
        empty = n <= 0  # an item with no counted row ranks last (its mean -inf)
        if empty.any():
            np.copyto(key, np.inf, where=empty.transpose(1, 2, 0))
        best = ranked(key.reshape(nh * s, b), item_ids, kb)  # [NH·S, kb] batch positions
    pos = best.reshape(nh, s, kb).transpose(1, 0, 2)  # [S, NH, kb]
    flat = pos * (nh * s) + lay.at_hs
    # each chosen mean by the float64 operations the fold made over every item: isum, times the sign, / n
    isum = base.take(flat)
    if lay.mult_at is not None:
        isum *= lay.mult_at
    n_at = n.take(flat if n.shape[1] > 1 else pos * s + lay.at_s)
    with np.errstate(invalid="ignore", divide="ignore"):
        top_value = lay.sign_at * isum
        if n_at.all():  # (max(n, 1) is n; no -inf)
            top_value /= n_at
        else:
            top_value = np.where(n_at > 0, top_value / np.maximum(n_at, 1), -np.inf)
    top_row, top_col = picked((pos, lay.at_h, lay.at_s, flat))
    return Partial(
        batch_id,
        b,
        tokens,
        _summed(base, mult),
        np.broadcast_to(n.sum(0), (nh, s)).copy(),
        top_value,
        item_ids.take(pos),
        top_row,
        top_col,
    )


def _settled(
    ranks: np.ndarray, base: np.ndarray, nmax: np.ndarray, n: np.ndarray, ids: np.ndarray, kb: int
) -> np.ndarray:
    """:func:`ranked` of fold_stats' key (every flip -1) from the session's ``ranks``: the first ``kb`` columns of
    a row whose first ``kb + 1`` are settled, as they come; any other row's key made here (the same float64
    operations, for those rows alone) and lexsorted whole, as :func:`ranked` does with the rows its integer sort
    does not settle."""
    best = ranks[:, :kb]
    bad = np.flatnonzero(ranks[:, -1] <= kb)
    if not len(bad):
        return best
    best = best.copy()
    h, st = np.divmod(bad, base.shape[2])
    at = h if n.shape[1] > 1 else np.zeros_like(h)
    div = np.float64(-1.0) * nmax[:, at, st].T  # [U, B]: fold_stats' flip · max(n, 1), the same float64 product
    with np.errstate(invalid="ignore", divide="ignore"):
        key = base[:, h, st].T / div
    np.copyto(key, np.inf, where=n[:, at, st].T <= 0)
    best[bad] = _lexsorted(key, np.broadcast_to(ids, key.shape), kb)
    return best


def _summed(base: np.ndarray, mult: np.ndarray | None) -> np.ndarray:
    """``(base * mult).sum(0)`` (float64, items added in batch order) as ``base.sum(0) * mult`` where that is the
    same bits: a sum of ±x is ± the sum of x, step by step, unless a step's sign of zero differs (+0 + -0 is +0
    either way round) or a NaN's sign bit, which a final sum that is finite and not zero rules out."""
    total = base.sum(0)
    if mult is None:
        return total
    if np.isfinite(total).all() and total.all():
        return total * mult
    return (base * mult).sum(0)


def ranked(key: np.ndarray, ids: np.ndarray, kb: int) -> np.ndarray:
    """Per row of ``key [R, B]`` the columns of its ``kb`` smallest, smallest first, ties to the lower id (then
    the earlier column), NaN last: ``np.lexsort((ids, key), axis=-1)[:, :kb]``, without a lexsort of whole rows.
    ``ids``: each column's ``[B]`` (a batch's items, in batch order), or anything that broadcasts to ``key``.

    Each float64 key becomes an int64 of the same order (:func:`_packed`) whose lowest bits are replaced by its
    column, and the rows are sorted as integers (numpy's vectorised sort: one call, no partition, no placing).
    Where the first ``kb + 1`` of a row differ above those bits, hold no NaN and at most one zero (-0.0 and 0.0
    are equal to lexsort, not to the integers; nothing lies between them), they are its ``kb`` smallest, in
    order, with no tie for an id to break: each column is read back from its low bits.  Any other row (a tie or
    a near tie, a NaN, two zeros) is lexsorted whole, as above.  A batch's fold ranks 32 items for the k=5 best
    of 792 rows (MiniLM): ~330 -> ~170 µs a batch (bench/RESULTS.md, session 24, fold24); a task's ``combine``
    ranks every batch's candidates at once."""
    key = np.ascontiguousarray(key)
    r, b = key.shape
    if kb < 1:
        return np.empty((r, 0), np.intp)
    if kb >= b or key.dtype != np.float64:
        return _lexsorted(key, np.broadcast_to(ids, key.shape), kb)
    cols, ok = ranked_fast(key, kb)
    if not ok.all():
        rest = ~ok
        cols[rest] = _lexsorted(key[rest], np.broadcast_to(ids, key.shape)[rest], kb)
    return cols


def ranked_fast(key: np.ndarray, kb: int, out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`ranked`'s integer sort alone (``key`` C-ordered float64 ``[R, B]``, 0 < ``kb`` < B): per row the
    columns of its ``kb`` smallest, and whether that row is settled by them (False: a tie or near tie, a NaN or
    two zeros among its first ``kb + 1``, which the caller ranks whole by id).  Long rows (a task's candidates
    side by side) are partitioned at ``kb`` and only their first ``kb + 1`` sorted.  ``out``: an int64 array of
    ``key``'s shape to make the integers in (overwritten)."""
    r, b = key.shape
    bits = (b - 1).bit_length() or 1
    packed = _packed(key, bits, out)
    packed |= np.arange(b)
    if b > 64:
        packed.partition(kb, axis=-1)  # (every value differs in its low bits: the kb + 1 smallest, unordered)
        top = np.sort(packed[:, : kb + 1], axis=-1)
    else:
        packed.sort(axis=-1)
        top = packed[:, : kb + 1]
    cols = (top & np.int64((1 << bits) - 1)).astype(np.intp, copy=False)  # [R, kb + 1]
    high = top >> bits
    vals = key.ravel().take(cols + np.arange(0, r * b, b)[:, None])
    ok = (high[:, 1:] > high[:, :-1]).all(1)
    ok &= ~np.isnan(vals[:, :kb]).any(1)
    ok &= (vals == 0).sum(1) < 2
    return cols[:, :kb], ok


_MAGNITUDE = np.int64(0x7FFF_FFFF_FFFF_FFFF)


def _packed(key: np.ndarray, bits: int, out: np.ndarray | None = None) -> np.ndarray:
    """``key``'s float64 bits as int64 integers of the same order (a negative float's magnitude bits flipped: -0.0
    just below 0.0, NaN beyond ±inf by its sign), the lowest ``bits`` cleared.  Four passes, made in place (in
    ``out`` where given)."""
    v = key.view(np.int64)
    out = np.right_shift(v, 63, out=out)  # -1 where negative
    out &= _MAGNITUDE
    out ^= v
    out &= ~np.int64((1 << bits) - 1)
    return out


def _lexsorted(key: np.ndarray, ids: np.ndarray, kb: int) -> np.ndarray:
    """``np.lexsort((ids, key), axis=-1)[:, :kb]`` (rows of ``key`` with ``ids`` of the same shape)."""
    return np.lexsort((ids, key), axis=-1)[:, :kb]


@dataclass(frozen=True)
class _Layout:
    """What a fold of these groups (and ``mult``) with ``kb`` places needs that no batch changes, made once
    (read-only arrays: every batch shares them).  The chosen entries' arrays are [S, NH, kb]."""

    flip: np.ndarray  # -sign · mult, [NH, S]; [1, S] where every head's are the same
    at_h: np.ndarray  # each place's head
    at_s: np.ndarray  # its statistic
    at_hs: np.ndarray  # head · S + statistic
    sign_at: np.ndarray  # float64 _head_signs there (the same ±1 the int64 ones were cast to in the product)
    mult_at: np.ndarray | None  # mult there
    minus: bool  # every flip is -1 (self-attention heads): the statistics session's ranking key is this fold's


@functools.lru_cache(maxsize=16)
def _layout(groups: tuple[tuple[str, int], ...], mult: tuple[float, ...] | None, kb: int) -> _Layout:
    sign = _head_signs(groups).astype(np.float64)  # [NH, S]
    nh, s = sign.shape
    flip = -sign if mult is None else -(sign * np.array(mult))
    if (flip == flip[:1]).all():
        flip = flip[:1]
    at_s, at_h = np.meshgrid(np.arange(s), np.arange(nh), indexing="ij")
    at_h, at_s, at_hs = (
        np.ascontiguousarray(np.broadcast_to(a[..., None], (s, nh, kb))) for a in (at_h, at_s, at_h * s + at_s)
    )
    mult_at = None if mult is None else np.array(mult).take(at_s)
    out = _Layout(flip, at_h, at_s, at_hs, sign.take(at_hs), mult_at, bool((flip == -1).all()))
    for a in out.__dict__.values():
        if isinstance(a, np.ndarray):
            a.flags.writeable = False
    return out
