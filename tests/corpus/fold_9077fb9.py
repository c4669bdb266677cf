"""The corpus worker's host code after each run as it was at commit 9077fb9 (corpus/fold.py fold_items,
runtime/statfeeds.py stat_feeds and item_stats), unchanged but for its names: the reference that
tests/corpus/test_fold_host.py holds the code that replaced it to (session 23, fold23), and the "before" loop of
bench/gpu/corpus_gil.py."""

from __future__ import annotations

import numpy as np

from attnviz import AttnvizError
from attnviz.core.row_sums import ItemStats, valid_rows
from attnviz.core.stats import ROW_STATS
from attnviz.corpus.fold import HeadGroup, Partial, S, _head_signs
from attnviz.runtime.statfeeds import (
    BHTT,
    DIST,
    DIVISOR,
    KEY_COLUMNS,
    KEYW,
    NEAR,
    OFF,
    REAL,
    SIGN,
    SP_OFF,
    _per_length,
)


def reference_fold(
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
    order = by_id[_ref_smallest(key, kb).T.reshape(kb, *per_item.shape[1:])]

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


def _ref_smallest(key: np.ndarray, kb: int) -> np.ndarray:
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


def reference_stat_feeds(
    lengths: np.ndarray, special: np.ndarray | None, t: int, causal: bool = False
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The extra inputs for one right-padded batch (``lengths [B]`` real tokens, ``special [B, T]`` special
    keys), and the key position of each special slot ``[B, n]``."""
    lengths = np.asarray(lengths, np.int64)
    b = len(lengths)
    ar = np.arange(t)
    real = ar[None, :] < lengths[:, None]
    sp = np.zeros((b, t), bool) if special is None else np.asarray(special, bool)[:, :t]
    sp = sp & real
    n = max(1, int(sp.sum(1).max(initial=0)))  # one padding slot at least: ArgMax needs a non-empty axis
    idx = np.zeros((b, n), np.int64)
    keep = np.zeros((b, n), bool)
    k = len(KEY_COLUMNS)
    keyw = np.zeros((b, t, k + n), np.float32)
    keyw[:, :, 0] = real
    keyw[:, 0, 1] = real[:, 0]
    keyw[:, :, 2] = sp
    keyw[:, 1:, 3] = sp[:, 1:]
    keyw[:, :, 4] = ~real
    r, c = np.nonzero(sp)  # item r's special keys c, in key order: slots 0, 1, ... of that item
    slot = (np.cumsum(sp, 1) - 1)[r, c]
    idx[r, slot] = c
    keep[r, slot] = True
    keyw[r, c, k + slot] = 1.0
    # kept slots hold weights in [0, 1], the others weight - 2 < 0: ArgMax never picks one while any is kept
    sp_off = np.full((b, 2, k + n), -np.inf, np.float32)  # [B, 2, K]
    sp_off[:, 0, k:] = np.where(keep, 0.0, -2.0)
    sp_off[:, 1, k:] = np.where(keep & (idx > 0), 0.0, -2.0)
    valid, seen = valid_rows(lengths, t, causal)
    ok = np.stack([valid[name] for name in ROW_STATS], 1)[:, None]  # [B, 1, S, T]
    divisor = np.ones(ok.shape, np.float32)
    divisor[:, 0, ROW_STATS.index("broad")] = np.log2(np.maximum(seen, 2))
    # finite / inf = 0: rows that do not count add nothing.  [B, 1, T, S]: the values are divided rows first
    divisor = np.where(ok, divisor, np.float32(np.inf)).transpose(0, 1, 3, 2).copy()
    dist, near = _per_length(t)
    feeds = {
        REAL: np.broadcast_to(real.astype(np.float32)[:, None, None, :], (b, 1, t, t)).copy(),
        KEYW: keyw[:, None],
        DIST: dist,
        SP_OFF: sp_off[:, None],
        OFF: np.where(ok, 0.0, -np.inf).astype(np.float32),
        DIVISOR: divisor,
        NEAR: near,
        BHTT: np.array([b, -1, t, t], np.int64),
    }
    return feeds, idx


def reference_item_stats(
    sums: np.ndarray, picks: np.ndarray, feeds: dict[str, np.ndarray], idx: np.ndarray
) -> ItemStats:
    """One site's outputs as :class:`ItemStats`: key slots of the special statistics mapped back to key
    positions ``idx``, keys of the fixed statistics (diag, prev, next, first) taken from their rows.
    ``sums`` are of the signed values (:data:`SIGN`): times SIGN again they are the values' sums."""
    s = len(ROW_STATS)
    picks = picks.reshape(*picks.shape[:2], 2 * s)
    rows, keys = picks[..., :s], picks[..., s:].copy()
    b = np.arange(idx.shape[0])[:, None]
    off = feeds[SP_OFF][:, 0, :, len(KEY_COLUMNS) :]  # [B, 2, n]
    for j, name in enumerate(("special", "special_other")):
        c = ROW_STATS.index(name)
        any_key = (off[:, j] == 0).any(-1)[:, None]
        # none kept: numpy's argmax of all -1 is 0
        keys[..., c] = np.where(any_key, idx[b, keys[..., c] - len(KEY_COLUMNS)], 0)
    counts = (feeds[OFF][:, 0] == 0).sum(-1).astype(np.int64)  # [B, S]
    return ItemStats.with_fixed_keys(sums * SIGN.astype(np.float64), counts, rows, keys)


def reference_finish(groups: list[HeadGroup], ran: tuple) -> list[tuple[HeadGroup, ItemStats]]:
    """InGraphReducer.finish at 9077fb9 for a session that reduces every group (its sites in offset order)."""
    got, extra, positions, _ = ran
    st = reference_item_stats(got["attnviz_stat_sums"], got["attnviz_stat_picks"], extra, positions)
    out = []
    for g in groups:
        h = slice(g.offset, g.offset + g.heads)
        out.append((g, ItemStats(st.sums[:, h], st.counts, st.rows[:, h], st.keys[:, h])))
    return out
