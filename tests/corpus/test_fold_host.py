"""The corpus worker's host work after each run, cut for a GPU loop that was capped by it (issue 26, session 23:
corpus/fold.py fold_items, fold_stats and ranked, graph_reduce.InGraphReducer.partial, runtime/statfeeds.py
stat_feeds) gives the partials and the statistics inputs of the code it replaced, bit for bit.  That code (commit
9077fb9) is kept in tests/corpus/fold_9077fb9.py, unchanged but for its names, as the reference: random per-item
statistics with ties (equal means, within the k and at the k-th), items with no counted row (padding, -inf), NaN
sums, -0.0 against 0.0, k larger than the batch, groups of both kinds (cross attention's signs), shared and per-head
counts; the statistics session's outputs over random right-padded batches with special keys, causal (decoder) rows
or not; and real batches of the planted encoder and a causal decoder through the session (BatchReducer.many)."""

import numpy as np
import pytest
from fold_9077fb9 import reference_finish, reference_fold, reference_stat_feeds
from onnx_builders import tiny_text_model
from planted import corpus_lines, planted_model
from ranked_93201d0 import reference_ranked

from attnviz import AttnvizError
from attnviz.core.row_sums import ItemStats
from attnviz.core.stats import ROW_STATS
from attnviz.corpus.fold import HeadGroup, Partial, fold_items
from attnviz.corpus.graph_reduce import InGraphReducer
from attnviz.runtime import statfeeds as sf
from attnviz.runtime.statfeeds import KEY_COLUMNS

S = len(ROW_STATS)
FIELDS = ("batch_id", "items", "tokens", "sums", "counts", "top_value", "top_item", "top_row", "top_col")


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
    red.groups = list(reversed(groups))  # (in any order)
    b, t = int(rng.integers(1, 20)), int(rng.integers(2, 12))
    causal = bool(seed % 2)
    lengths, special, ran = _session_outputs(rng, b, t, off, causal)
    items = [int(x) for x in rng.permutation(500)[:b]]
    tokens = int(lengths.sum())
    for k in (1, 3, b + 2):
        want = reference_fold(reference_finish(groups, ran), items, k, 3, tokens)
        assert_same(red.partial(ran, lengths, special, causal, items, k, 3), want, f"seed {seed} k {k}")
        assert_same(fold_items(red.finish(ran, lengths, special, causal), items, k, 3, tokens), want)


@pytest.mark.parametrize("causal", [False, True])
def test_stat_feeds_are_the_feeds_they_replaced(causal):
    """Every statistics input, its dtype, shape and bytes, for batches with empty items, specials past the
    tokens, no specials at all, one token."""
    rng = np.random.default_rng(3)
    for i in range(150):
        b, t = int(rng.integers(1, 9)), int(rng.integers(1, 20))
        lengths = rng.integers(0, t + 1, b)
        special = None if i % 5 == 0 else rng.random((b, t + int(rng.integers(0, 3)))) < rng.choice([0.0, 0.2, 0.6])
        want, want_idx = reference_stat_feeds(lengths, special, t, causal)
        for _ in range(2):  # made, then the same batch again (sf._MEMO's)
            _assert_feeds(sf.stat_feeds(lengths, special, t, causal), want, want_idx, i)


def _assert_feeds(got_idx, want: dict, want_idx: np.ndarray, what: object = "") -> None:
    got, idx = got_idx
    assert np.array_equal(idx, want_idx) and idx.dtype == want_idx.dtype
    assert got.keys() == want.keys()
    for name, w in want.items():
        a = got[name]
        if name == sf.REAL:  # fed [B, 1, 1, T] now: the graph expands it to the [B, 1, T, T] it was fed
            assert a.shape == (*w.shape[:2], 1, w.shape[3]), a.shape
            a = np.broadcast_to(a, w.shape)
        assert (a.dtype, a.shape) == (w.dtype, w.shape), name
        assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(w).tobytes(), (what, name)


def test_stat_feeds_of_a_batch_like_a_recent_one_are_its_own():
    """The last batches' feeds are kept (a length-sorted corpus repeats them): a batch that differs from a kept one
    in one thing only (a length, a special key, a special key past T, T itself, causal rows, one item less, special
    keys given or not) gets its own feeds, equal to 9077fb9's; the same batch again gets the same read-only
    C-ordered arrays; the caller's arrays changed in place after a call change nothing kept."""
    rng = np.random.default_rng(7)
    b, t = 6, 10
    lengths = np.full(b, t)
    lengths[-1] = 7
    special = np.zeros((b, t + 2), bool)
    special[:, 0] = special[np.arange(b), lengths - 1] = True
    more = special.copy()
    more[2, 4] = True
    past = special.copy()
    past[1, t] = True  # beyond T: cut off, the same batch
    shorter = lengths.copy()
    shorter[-1] = 6
    cases = [
        (lengths, special, t, False),
        (lengths, more, t, False),
        (shorter, special, t, False),
        (lengths, special, t, True),
        (lengths, None, t, False),
        (lengths[:-1], special[:-1], t, False),
        (np.minimum(lengths, t - 1), special, t - 1, False),
        (np.minimum(lengths, t - 1), None, t - 1, False),
        (np.minimum(lengths, t - 1), None, t, False),
        (lengths, past, t, False),
    ]
    for _ in range(3):
        for j in rng.permutation(len(cases)):
            ln, sp, tt, causal = cases[j]
            want, want_idx = reference_stat_feeds(ln, sp, tt, causal)
            _assert_feeds(sf.stat_feeds(ln, sp, tt, causal), want, want_idx, j)
    first = sf.stat_feeds(lengths, special, t)
    again = sf.stat_feeds(lengths.copy(), special.copy(), t)
    assert all(again[0][n] is a for n, a in first[0].items()) and again[1] is first[1]
    assert not any(a.flags.writeable for a in (*first[0].values(), first[1]))
    assert all(a.flags.c_contiguous for a in first[0].values())  # (fed as they are: no binding copies one a run)
    ln, sp = lengths.copy(), special.copy()
    sf.stat_feeds(ln, sp, t)
    ln[0], sp[0, 3] = 4, True  # (the caller's arrays, reused for the next batch)
    want, want_idx = reference_stat_feeds(ln, sp, t, False)
    _assert_feeds(sf.stat_feeds(ln, sp, t), want, want_idx)
    want, want_idx = reference_stat_feeds(lengths, special, t, False)
    _assert_feeds(sf.stat_feeds(lengths, special, t), want, want_idx)


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
        parts = reference_finish(red.groups, ran)
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
    parts = reference_finish(rd.groups, ran)
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


@pytest.mark.parametrize("b", [6, 32, 33, 100])
def test_ranked_packed_sort_edges(b):
    """The integer sort's edges against numpy's lexsort of whole rows: near ties (values a few ulps apart, below
    the bits that hold the column's place), -0.0 and 0.0 alone or together at and around the k-th place, NaN of
    either sign (a negative NaN's bits sort first as integers), ±inf, one value per row, batches that are no power
    of two (the place's bits), and items in no id order with repeated ids."""
    from attnviz.corpus.fold import ranked

    rng = np.random.default_rng(b)
    key = rng.standard_normal((600, b))
    near = np.nextafter(key[::6, :1], np.inf)
    key[::6, 1:4] = near  # 1 ulp from column 0: one place apart as integers, the same above the place's bits
    key[1::6, :3] = np.array([1.5, np.nextafter(1.5, 2), np.nextafter(np.nextafter(1.5, 2), 2)])
    key[2::6, rng.integers(0, b, 2)] = [-0.0, 0.0]
    key[3::12, rng.integers(0, b)] = -0.0  # a single zero (the fast path's)
    key[9::12, rng.integers(0, b)] = 0.0
    neg_nan = -np.abs(np.full(1, np.nan))
    assert np.signbit(neg_nan[0])
    key[4::6, rng.integers(0, b, 3)] = neg_nan[0]
    key[5::12, rng.integers(0, b, 2)] = [np.inf, -np.inf]
    key[11::12] = -2.0
    key[13, 4], key[19, 4] = neg_nan[0], np.nan  # one NaN of each sign in a row of distinct values
    # the -0.0 at the k-th place and a 0.0 of a lower id further on; and below -0.0 only a few values
    key[7, :] = 3.0
    key[7, :5], key[7, 5] = [-4.0, -3.0, -2.0, -1.0, -0.0], 0.0
    for ids in (rng.permutation(np.arange(1000, 1000 + b)), rng.integers(0, 5, b), np.arange(b)[::-1]):
        if b > 5:
            ids = ids.copy()
            ids[5] = ids.min() - 1  # the 0.0 of row 7 has the lowest id
        for kb in {1, 2, 5, b - 1}:
            want = np.lexsort((np.broadcast_to(ids, key.shape), key), axis=-1)[:, :kb]
            got = ranked(key, ids, kb)
            assert got.dtype == want.dtype and np.array_equal(got, want), (b, kb)
            assert np.array_equal(reference_ranked(key, ids, kb), want)  # (the code it replaced: the same)
