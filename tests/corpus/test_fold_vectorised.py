"""The single fold (corpus/reduce.py:fold_items, on per-item statistics [B, H, S], used by the maps path and the
statistics session alike) gives the partials of the per-group, per-statistic loop it replaced, kept here as the
reference: top values, items, rows and keys bit for bit, per-head sums to float64 rounding (they are now added
item by item instead of row by row).

Random inputs are built to hit the ties the loop resolves in a fixed way (equal rows inside an item, equal
per-item means, items with no counted row, -inf values), one-head groups (numpy sums a ``[B, 1, T]`` block in
another order), groups of another T, masks that differ between groups and keys from both kinds of ``key_of``.
Real batches come from the planted encoder and a causal decoder through the statistics session.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))

from onnx_builders import tiny_text_model
from planted import corpus_lines, planted_model

from attnviz.core.row_sums import ItemStats
from attnviz.core.row_sums import first_top_row as _first_top_row
from attnviz.core.stats import ROW_STATS, row_stats
from attnviz.corpus.graph_reduce import InGraphReducer
from attnviz.corpus.reduce import HeadGroup, Partial, _cols, fold_items, layout, signs
from attnviz.runtime import open_model
from attnviz.runtime import statgraph as sg

FIELDS = ("sums", "counts", "top_value", "top_item", "top_row", "top_col")


def reference_fold(per_group, items, k, batch_id, tokens) -> Partial:
    """graph_reduce.fold_rows as it was before vectorising (commit a465422), unchanged."""
    S = len(ROW_STATS)
    nh = sum(g.heads for g, *_ in per_group)
    b = len(items)
    kb = min(k, b)
    sums = np.zeros((nh, S))
    counts = np.zeros((nh, S), np.int64)
    tv = np.zeros((S, nh, kb))
    ti = np.zeros((S, nh, kb), np.int64)
    tr = np.zeros((S, nh, kb), np.int64)
    tc = np.zeros((S, nh, kb), np.int64)
    item_ids = np.asarray(items, np.int64)
    for g, values, valid, key_of in per_group:
        hs = slice(g.offset, g.offset + g.heads)
        for s, name in enumerate(ROW_STATS):
            v, ok = values[name], valid[name]
            n = ok.sum(1)  # [B]
            vm = np.where(ok[:, None, :], v, 0.0)
            sums[hs, s] = vm.sum((0, 2))
            counts[hs, s] = int(n.sum())
            with np.errstate(invalid="ignore", divide="ignore"):
                per_item = np.where(n[:, None] > 0, vm.sum(2) / np.maximum(n, 1)[:, None], -np.inf)  # [B, H]
            rows = _first_top_row(np.where(ok[:, None, :], v, -np.inf))  # [B, H]
            cols = key_of(name, rows)
            order = np.lexsort((np.broadcast_to(item_ids[:, None], per_item.shape), -per_item), axis=0)[:kb]
            hh = np.arange(g.heads)[None, :]
            tv[s, hs] = per_item[order, hh].T
            ti[s, hs] = item_ids[order].T
            tr[s, hs] = rows[order, hh].T
            tc[s, hs] = cols[order, hh].T
    return Partial(batch_id, b, tokens, sums, counts, tv, ti, tr, tc)


def fold_rows(per_group, items, k, batch_id, tokens) -> Partial:
    """The new fold on the same per-row input as the loop: per-item statistics first (the loop's tie rule)."""
    parts = [
        (g, ItemStats.from_rows(values, valid, key_of, tie=True, signs=signs(g.kind)))
        for g, values, valid, key_of in per_group
    ]
    return fold_items(parts, items, k, batch_id, tokens)


def directed(per_group):
    """The loop's input with each statistic's values times its direction's sign (core/score_direction.py): the
    loop, which ranks the highest, then ranks each score's interesting end, as the new fold does.  Negating is
    exact, so its partial is the new fold's bit for bit but for the per-head sums, which it also negates."""
    return [
        (g, {n: sg_ * values[n] for n, sg_ in zip(ROW_STATS, signs(g.kind))}, valid, key_of)
        for g, values, valid, key_of in per_group
    ]


def unsign_sums(p: Partial, per_group) -> Partial:
    sign = np.concatenate([np.broadcast_to(signs(g.kind), (g.heads, len(ROW_STATS))) for g, *_ in per_group])
    p.sums = p.sums * sign
    return p


def assert_identical(a: Partial, b: Partial, what="") -> None:
    for f in FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert x.shape == y.shape and x.dtype == y.dtype, (what, f, x.shape, y.shape)
        if f == "sums":  # per head: sum over items of sums over rows, against one sum over (items, rows)
            np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-300, err_msg=f"{what} {f}")
        else:
            assert np.array_equal(x, y), (what, f, np.argwhere(x != y)[:5])
    assert (a.batch_id, a.items, a.tokens) == (b.batch_id, b.items, b.tokens)


def _table_key_of(table):
    """key_of(stat, rows [B, H]) reading ``table[stat] [B, H, T]`` at the rows."""
    return lambda stat, rows: np.take_along_axis(table[stat], rows[..., None], -1)[..., 0]


def _values(rng, b, h, t, ties):
    """float64 [B, H, T] per statistic; with ties: few distinct values, copied rows and copied items."""
    out = {}
    for name in ROW_STATS:
        if ties:
            v = rng.integers(0, 3, (b, h, t)) / 3.0
            if t > 1:
                v[:, :, 1] = v[:, :, 0]  # the same row twice in an item
            if b > 1:
                v[1] = v[0]  # two items with equal means
        else:
            v = rng.standard_normal((b, h, t)) * 10.0 ** rng.integers(-3, 4)
        v[rng.random((b, h, t)) < 0.03] = -np.inf
        out[name] = v
    return out


def _valid(rng, lengths, t):
    real = np.arange(t)[None, :] < lengths[:, None]
    return {name: real & (rng.random(real.shape) < 0.9) for name in ROW_STATS}


def _key_of(rng, b, h, t, as_rowsums):
    if as_rowsums:
        cols = {k: rng.integers(0, t, (b, h, t)) for k in ("real", "special", "special_other")}
        ar = np.broadcast_to(np.arange(t), (b, h, t))
        fixed = {"prev": ar - 1, "next": ar + 1, "diag": ar, "first": np.zeros_like(ar)}
        return _table_key_of({n: fixed.get(n, cols[n if n.startswith("special") else "real"]) for n in ROW_STATS})
    table = rng.integers(-5, t + 5, (len(ROW_STATS), b, h, t))
    return lambda stat, rows: np.take_along_axis(table[ROW_STATS.index(stat)], rows[..., None], -1)[..., 0]


def random_case(rng):
    b = int(rng.choice([1, 2, 3, 7, 32]))
    t = int(rng.choice([1, 2, 5, 17, 130]))
    ties = bool(rng.random() < 0.5)
    lengths = rng.integers(0 if rng.random() < 0.3 else 1, t + 1, b)  # 0: an item with no counted row
    shared = _valid(rng, lengths, t)
    kinds = rng.random() < 0.5, rng.random() < 0.7  # every group's keys from RowSums / masks shared by all groups
    per_group, off = [], 0
    for site in range(int(rng.integers(1, 7))):
        h = int(rng.choice([1, 2, 3, 12]))
        tg = t if rng.random() < 0.8 else t + 3  # a group of another length (cross-attention queries)
        ok = shared if (kinds[1] and tg == t) else _valid(rng, np.minimum(lengths, tg), tg)
        key_of = _key_of(rng, b, h, tg, kinds[0] or rng.random() < 0.5)
        per_group.append((HeadGroup(site, "encoder", "self", site, h, off), _values(rng, b, h, tg, ties), ok, key_of))
        off += h
    items = sorted(rng.choice(10 * b + 5, b, replace=False).tolist())
    if rng.random() < 0.3:
        items = items[::-1]  # item ids not in batch order
    return per_group, items, int(rng.choice([1, 3, 5, 40])), int(lengths.sum())


def test_random_groups_fold_as_the_loop():
    rng = np.random.default_rng(13)
    for case in range(300):
        per_group, items, k, tokens = random_case(rng)
        want = unsign_sums(reference_fold(directed(per_group), items, k, case, tokens), per_group)
        assert_identical(fold_rows(per_group, items, k, case, tokens), want, f"case {case}")


def test_ties_go_to_the_first_row_and_the_earlier_item():
    """A hand-made tie: the loop (and so the fold) picks row 0 of two equal rows and item 3 before item 9.
    The items' means tie for entropy too, so item 3 still comes first there."""
    g = HeadGroup(0, "encoder", "self", 0, 2, 0)
    v = np.zeros((2, 2, 3))
    v[:, :, :2] = 0.5
    values = {n: v.copy() for n in ROW_STATS}
    valid = {n: np.ones((2, 3), bool) for n in ROW_STATS}
    key_of = _table_key_of(dict.fromkeys(ROW_STATS, np.broadcast_to(np.arange(3), (2, 2, 3))))
    got = fold_rows([(g, values, valid, key_of)], [9, 3], 2, 0, 6)
    groups = [(g, values, valid, key_of)]
    assert_identical(got, unsign_sums(reference_fold(directed(groups), [9, 3], 2, 0, 6), groups))
    e = ROW_STATS.index("entropy")  # its interesting end is the lowest: row 2 (0), not the tied 0.5s
    assert np.all(got.top_item == [3, 9]) and np.all(np.delete(got.top_row, e, 0) == 0) and np.all(got.top_row[e] == 2)
    assert np.allclose(np.abs(got.top_value), 1 / 3) and np.all(got.counts == 6)
    assert np.all(got.top_value[ROW_STATS.index("entropy")] < 0)  # entropy ranks its lowest: stored negated


def _real_reducers(tmp_path):
    planted = planted_model(tmp_path / "planted.onnx")
    dec = tiny_text_model(tmp_path / "dec.onnx", layers=2, heads=2, causal=True, classifier=False)
    return planted, dec


def _session_rows(r: InGraphReducer, feeds, lengths, special, causal):
    """Per group (group, values, valid, key_of) as the loop takes them: the session's own per-row values and
    keys for its sites (``rows=True``), row_stats of the maps for the sites left to numpy."""
    got, extra, positions, t = r.run(feeds, lengths, special, causal)
    maps = [m.array() for m in r.model.run(feeds, mode="dense").maps]
    real = np.arange(t)[None, :] < lengths[:, None]
    heads = np.cumsum([0] + [g.heads for g in r.groups if g.site in r.outputs])
    at = {i: slice(heads[j], heads[j + 1]) for j, i in enumerate(r.outputs)}
    out = []
    for g in r.groups:
        p = maps[g.site]
        want, valid = row_stats(p, lengths, special, causal)
        if g.site not in r.outputs:
            out.append((g, want, valid, lambda n, rows, p=p: _cols(n, p, rows, real, special)))
            continue
        vals = got[sg.VALUES][:, at[g.site]]
        values = {n: vals[..., s].astype(np.float64) for s, n in enumerate(ROW_STATS)}

        def key_of(name, rows, keys=got[sg.KEYS][:, at[g.site]]):
            s = ROW_STATS.index(name)
            at_rows = np.take_along_axis(keys, rows[:, :, None, None], 2)[:, :, 0]  # [B, H, S]
            picks = np.concatenate([np.repeat(rows[..., None], len(ROW_STATS), -1), at_rows], -1)
            return sg.item_stats(np.zeros(at_rows.shape), picks, extra, positions).keys[..., s]

        out.append((g, values, valid, key_of))
    return out


@pytest.mark.parametrize("left_to_numpy,join", [(False, False), (True, False), (False, True)])
def test_real_batches_through_the_statistics_session(tmp_path, monkeypatch, left_to_numpy, join):
    """The planted encoder's padded batches (and with layer 1 left to the maps path) and a causal decoder's:
    the reducer's partial (per-item statistics reduced inside the graph) equals the loop's on the session's own
    per-row values, to float64 rounding of the per-item sums."""
    from attnviz.corpus.items import read_texts
    from attnviz.corpus.plan import encode_items, plan_text
    from attnviz.corpus.reduce import BatchReducer

    if left_to_numpy:
        real = sg.supported
        monkeypatch.setattr(sg, "supported", lambda g, s: real(g, s) and s.layer == 0)
    planted, dec = _real_reducers(tmp_path)
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(corpus_lines(40)) + "\n")
    br = BatchReducer(str(planted), "cpu", None, 1, 5, in_graph=False)
    items = read_texts(texts)
    specs = plan_text(items, encode_items(br.model, items), None, None, 16, equal_lengths=False)
    red = InGraphReducer.build(br.model, layout(br.model.sites), rows=True, join=join)
    assert red is not None and sorted(red.outputs) == ([0] if left_to_numpy else [0, 1])
    cases = [(red, *br.feeds(s), False, s.items, s.batch_id) for s in specs]
    m = open_model(dec, provider="cpu")
    m.probe()
    rd = InGraphReducer.build(m, layout(m.sites), rows=True, join=join)
    assert rd is not None
    rng = np.random.default_rng(1)
    lengths = np.array([9, 4, 6, 4])
    special = np.zeros((4, 9), bool)
    special[:, 0] = True
    cases.append((rd, {m.inputs[0].name: rng.integers(3, 8, (4, 9))}, lengths, special, True, [5, 6, 7, 8], 0))
    for r, feeds, lengths, special, causal, ids, batch_id in cases:
        tokens = int(np.asarray(lengths).sum())
        for k in (1, 5):
            rows = _session_rows(r, feeds, lengths, special, causal)
            want = unsign_sums(reference_fold(directed(rows), ids, k, batch_id, tokens), rows)
            got = r(feeds, lengths, special, causal, ids, k, batch_id)
            what = f"batch {batch_id} k {k}"
            assert np.array_equal(got.counts, want.counts), what
            for f in ("sums", "top_value"):
                np.testing.assert_allclose(getattr(got, f), getattr(want, f), rtol=1e-12, atol=1e-14, err_msg=what)
            # the item order may differ only between items whose means are equal to float64 rounding
            same = got.top_item == want.top_item
            assert np.all(np.abs(got.top_value - want.top_value)[~same] < 1e-12), what
            for f in ("top_row", "top_col"):
                assert np.array_equal(getattr(got, f)[same], getattr(want, f)[same]), (what, f)


@pytest.mark.parametrize("kb", [1, 2, 5, 31, 32])
@pytest.mark.parametrize("order", ["in id order", "shuffled ids", "repeated ids"])
def test_ranked_is_a_stable_sort_by_id(kb, order):
    """fold_items' ranking takes each row's kb smallest by partition and places only those: the same columns, in
    the same order, as numpy's stable argsort of the whole row with the items taken in id order, with ties at the
    kb-th value (equal means of several items) and among the kb, NaN (sorted last), -inf, -0.0 against 0.0 and
    rows of one value; the items in batch order, not id order (a length-sorted plan's)."""
    from attnviz.corpus.fold import ranked

    rng = np.random.default_rng(7)
    key = rng.standard_normal((400, 32))
    key[::5, 3:9] = 0.25  # a tie straddling the kb-th smallest
    key[1::7] = rng.integers(0, 3, (len(key[1::7]), 32)) / 3.0  # few distinct values: ties everywhere
    key[2::11, ::3] = -np.inf
    key[3] = np.nan
    key[4, ::2] = np.nan
    key[6, :] = 1.0
    key[8, 1], key[8, 2], key[8, 3:] = -0.0, 0.0, 5.0
    key[9, :2] = -7.0  # a tie inside the kb smallest only
    ids = {
        "in id order": np.arange(32),
        "shuffled ids": rng.permutation(np.arange(100, 132)),
        "repeated ids": rng.integers(0, 6, 32),  # (then the earlier column first)
    }[order]
    by_id = np.argsort(ids, kind="stable")
    expected = by_id[np.argsort(key[:, by_id], axis=-1, kind="stable")[:, :kb]]
    assert np.array_equal(ranked(key, ids, kb), expected)
