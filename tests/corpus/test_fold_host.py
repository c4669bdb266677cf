"""The corpus worker's host work after each run, cut for a GPU loop that was capped by it (issue 26, session 23:
corpus/fold.py fold_items and fold_stats, graph_reduce.InGraphReducer.partial, runtime/statfeeds.py stat_feeds)
gives the partials and the statistics inputs of the code it replaced, bit for bit.  That code (commit 9077fb9) is
kept below, unchanged but for its names, as the reference: random per-item statistics with ties (equal means,
within the k and at the k-th), items with no counted row (padding, -inf), NaN sums, -0.0 against 0.0, k larger
than the batch, groups of both kinds (cross attention's signs), shared and per-head counts; the statistics
session's outputs over random right-padded batches with special keys, causal (decoder) rows or not; and real
batches of the planted encoder and a causal decoder through the session (BatchReducer.many)."""

import numpy as np
import pytest
from onnx_builders import tiny_text_model
from planted import corpus_lines, planted_model

from attnviz import AttnvizError
from attnviz.core.row_sums import ItemStats, valid_rows
from attnviz.core.stats import ROW_STATS
from attnviz.corpus.fold import HeadGroup, Partial, _head_signs, fold_items
from attnviz.corpus.graph_reduce import InGraphReducer
from attnviz.runtime import statfeeds as sf
from attnviz.runtime.statfeeds import BHTT, DIST, DIVISOR, KEY_COLUMNS, KEYW, NEAR, OFF, REAL, SIGN, SP_OFF, _per_length

S = len(ROW_STATS)
FIELDS = ("batch_id", "items", "tokens", "sums", "counts", "top_value", "top_item", "top_row", "top_col")


# ---- the reference: corpus/fold.py and runtime/statfeeds.py at 9077fb9 ----------------------------------------


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


# ---- the checks --------------------------------------------------------------------------------------------------


def assert_same(got: Partial, want: Partial, what: str = "") -> None:
    """Every field of the two partials: the same dtype, shape and bytes (NaN's bits included)."""
    for f in FIELDS:
        a, b = getattr(got, f), getattr(want, f)
        if isinstance(b, np.ndarray):
            assert a.dtype == b.dtype and a.shape == b.shape, (what, f, a.dtype, b.dtype, a.shape, b.shape)
            assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes(), (what, f)
        else:
            assert a == b, (what, f)


def _random_parts(rng, b: int, shared: bool):
    """Head groups (self and cross, one head or several) with per-item statistics full of ties."""
    kinds = [("self", 3), ("cross", 2), ("self", 1), ("cross", 4)][: int(rng.integers(1, 5))]
    groups, off = [], 0
    for i, (kind, h) in enumerate(kinds):
        groups.append(HeadGroup(i, "decoder" if kind == "cross" else "encoder", kind, i, h, off))
        off += h
    counts = rng.integers(0, 4, (b, S))  # 0: an item with no counted row for that statistic (padding)
    parts = []
    for g in groups:
        # few distinct values: equal per-item means, between items and within the k
        sums = rng.integers(-3, 4, (b, g.heads, S)).astype(np.float64) / 2
        sums[rng.random(sums.shape) < 0.05] = -0.0
        sums[rng.random(sums.shape) < 0.02] = np.nan
        sums[rng.random(sums.shape) < 0.3] += rng.standard_normal() * 1e-3  # and some that differ
        c = counts if shared else rng.integers(0, 4, (b, S))
        rows = rng.integers(0, 9, (b, g.heads, S))
        keys = rng.integers(0, 9, (b, g.heads, S))
        parts.append((g, ItemStats(sums, c, rows, keys)))
    rng.shuffle(parts)  # fold_items takes the groups in any order
    return parts


@pytest.mark.parametrize("seed", range(40))
def test_fold_items_is_the_fold_it_replaced(seed):
    rng = np.random.default_rng(seed)
    b = int(rng.integers(1, 40))
    parts = _random_parts(rng, b, shared=bool(seed % 2))
    items = [int(x) for x in rng.permutation(1000)[:b]]  # a length-sorted plan: items not in id order
    for k in (1, 5, b, b + 3):  # k larger than the batch too
        want = reference_fold(parts, items, k, seed, 77)
        assert_same(fold_items(parts, items, k, seed, 77), want, f"seed {seed} k {k}")


def test_fold_items_refuses_groups_that_do_not_tile_the_heads():
    rng = np.random.default_rng(0)
    (g, st), *_ = _random_parts(rng, 4, True)
    with pytest.raises(AttnvizError, match="do not tile"):
        fold_items([(HeadGroup(g.site, g.stack, g.kind, g.layer, g.heads, 1), st)], [0, 1, 2, 3], 2, 0, 1)


def _session_outputs(rng, b: int, t: int, nh: int, causal: bool):
    """A right-padded batch (specials where a tokenizer puts them and elsewhere) and what a statistics session
    could hand back for it: per-item signed sums, best rows, keys (a special statistic's a slot + its columns)."""
    lengths = rng.integers(1, t + 1, b)
    lengths[0] = t
    special = rng.random((b, t)) < 0.2
    special[np.arange(b), 0] = True
    special[np.arange(b), lengths - 1] = True
    feeds, positions = sf.stat_feeds(lengths, special, t, causal)
    sums = rng.integers(-4, 5, (b, nh, S)).astype(np.float64) / 4
    sums[rng.random(sums.shape) < 0.05] = -0.0
    picks = rng.integers(0, t, (b, nh, 2, S))
    n = positions.shape[1]
    for name in ("special", "special_other"):
        picks[:, :, 1, ROW_STATS.index(name)] = len(KEY_COLUMNS) + rng.integers(0, n, (b, nh))
    return lengths, special, ({sf.SUMS: sums, sf.PICKS: picks}, feeds, positions, t)


@pytest.mark.parametrize("seed", range(30))
def test_partial_is_the_fold_of_item_stats(seed):
    """The session's batch folded on its outputs as they come (keys completed at the chosen entries only) is
    the old item_stats then fold_items."""
    rng = np.random.default_rng(100 + seed)
    heads = [int(h) for h in rng.integers(1, 5, int(rng.integers(1, 4)))]
    groups, off = [], 0
    for i, h in enumerate(heads):
        groups.append(HeadGroup(i, "encoder", "self", i, h, off))
        off += h
    red = InGraphReducer.__new__(InGraphReducer)
    red.model, red.exposed, red.outputs = None, None, list(range(len(heads)))
    red.groups = list(reversed(groups))  # (as many as any order)
    b, t = int(rng.integers(1, 20)), int(rng.integers(2, 12))
    causal = bool(seed % 2)
    lengths, special, ran = _session_outputs(rng, b, t, off, causal)
    items = [int(x) for x in rng.permutation(500)[:b]]
    got_, extra, positions, _ = ran
    st = reference_item_stats(got_[sf.SUMS], got_[sf.PICKS], extra, positions)
    for k in (1, 3, b + 2):
        want = reference_fold(
            [
                (
                    g,
                    ItemStats(
                        st.sums[:, g.offset : g.offset + g.heads],
                        st.counts,
                        st.rows[:, g.offset : g.offset + g.heads],
                        st.keys[:, g.offset : g.offset + g.heads],
                    ),
                )
                for g in groups
            ],
            items,
            k,
            3,
            int(lengths.sum()),
        )
        assert_same(red.partial(ran, lengths, special, causal, items, k, 3), want, f"seed {seed} k {k}")
        assert_same(fold_items(red.finish(ran, lengths, special, causal), items, k, 3, int(lengths.sum())), want)


@pytest.mark.parametrize("causal", [False, True])
def test_stat_feeds_are_the_feeds_they_replaced(causal):
    """Every statistics input, its dtype, shape and bytes, for batches with empty items, specials past the
    tokens, no specials at all, one token."""
    rng = np.random.default_rng(3)
    for i in range(150):
        b, t = int(rng.integers(1, 9)), int(rng.integers(1, 20))
        lengths = rng.integers(0, t + 1, b)
        special = None if i % 5 == 0 else rng.random((b, t + int(rng.integers(0, 3)))) < rng.choice([0.0, 0.2, 0.6])
        got, idx = sf.stat_feeds(lengths, special, t, causal)
        want, want_idx = reference_stat_feeds(lengths, special, t, causal)
        assert np.array_equal(idx, want_idx) and idx.dtype == want_idx.dtype
        assert got.keys() == want.keys()
        for name, w in want.items():
            a = got[name]
            assert (a.dtype, a.shape) == (w.dtype, w.shape), name
            assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(w).tobytes(), (i, name)


def test_real_batches_through_the_session(tmp_path):
    """The planted encoder's length-sorted batches and a causal decoder's, through the statistics session with
    runs in flight (BatchReducer.many): each partial is the reference fold of the session's own item_stats."""
    from attnviz.corpus.items import read_texts
    from attnviz.corpus.plan import encode_items, plan_text
    from attnviz.corpus.reduce import BatchReducer
    from attnviz.runtime import open_model

    planted = planted_model(tmp_path / "planted.onnx")
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(corpus_lines(60)) + "\n")
    br = BatchReducer(str(planted), "cpu", None, 1, 5)
    items = read_texts(texts)
    specs = plan_text(items, encode_items(br.model, items), None, None, 8, equal_lengths=False)
    got = br.many(specs, 3)
    red = br.in_graph
    assert isinstance(red, InGraphReducer) and len(got) == len(specs) > 3
    for spec, part in zip(specs, got):
        feeds, lengths, special = br.feeds(spec)
        lengths = np.asarray(lengths, np.int64)
        ran = red.run(feeds, lengths, special, False)
        st = reference_item_stats(ran[0][sf.SUMS], ran[0][sf.PICKS], ran[1], ran[2])
        parts = [
            (
                g,
                ItemStats(
                    st.sums[:, g.offset : g.offset + g.heads],
                    st.counts,
                    st.rows[:, g.offset : g.offset + g.heads],
                    st.keys[:, g.offset : g.offset + g.heads],
                ),
            )
            for g in red.groups
        ]
        assert_same(part, reference_fold(parts, spec.items, 5, spec.batch_id, int(lengths.sum())), str(spec.batch_id))
    dec = open_model(
        tiny_text_model(tmp_path / "dec.onnx", layers=2, heads=2, causal=True, classifier=False), provider="cpu"
    )
    dec.probe()
    from attnviz.corpus.reduce import layout

    rd = InGraphReducer.build(dec, layout(dec.sites))
    assert rd is not None
    rng = np.random.default_rng(1)
    lengths = np.array([9, 4, 6, 4, 1])
    special = np.zeros((5, 9), bool)
    special[:, 0] = True
    ran = rd.run({dec.inputs[0].name: rng.integers(3, 8, (5, 9))}, lengths, special, True)
    st = reference_item_stats(ran[0][sf.SUMS], ran[0][sf.PICKS], ran[1], ran[2])
    parts = [
        (
            g,
            ItemStats(
                st.sums[:, g.offset : g.offset + g.heads],
                st.counts,
                st.rows[:, g.offset : g.offset + g.heads],
                st.keys[:, g.offset : g.offset + g.heads],
            ),
        )
        for g in rd.groups
    ]
    for k in (2, 5, 8):
        assert_same(
            rd.partial(ran, lengths, special, True, [4, 3, 9, 0, 2], k, 0),
            reference_fold(parts, [4, 3, 9, 0, 2], k, 0, 24),
        )


@pytest.mark.parametrize("at", [0, 1, 3])
def test_ranked_ties_inside_the_k_where_every_row_is_clear(at):
    """Rows of distinct values but one, whose kb smallest hold two equal values (at places ``at`` and ``at``+1 of
    its order): that row is ordered by id there, as a stable sort by id orders it, not left with a gap."""
    from attnviz.corpus.fold import ranked

    rng = np.random.default_rng(at)
    key = rng.standard_normal((50, 16))
    row = np.sort(key[7])
    key[7, np.argsort(key[7])[at + 1]] = row[at]  # the (at+1)-th smallest now equals the at-th
    ids = rng.permutation(np.arange(40, 56))
    by_id = np.argsort(ids, kind="stable")
    want = by_id[np.argsort(key[:, by_id], axis=-1, kind="stable")[:, :5]]
    assert np.array_equal(ranked(key, ids, 5), want)
