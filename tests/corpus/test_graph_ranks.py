"""The statistics session ranks each (head, statistic) row's items for the fold (runtime/statgraph.py _rank_nodes,
statfeeds.RANKS; session 25: the fold's sort was the largest host part a batch held the GIL for).  onnxruntime's
TopK breaks ties and places NaN its own way, so the host takes a row's ranks only where the session marked it
settled (its k + 1 smallest keys strictly increasing, no NaN in the row) and ranks the others itself.  Checked
against the fold of 9077fb9 (tests/corpus/fold_9077fb9.py, the reference of test_fold_host.py) on batches full of
ties, -0.0 against 0.0, NaN, items with no counted row and distinct values, through onnxruntime at the opsets whose
reduce ops differ; and against numpy's lexsort of the host's own key for every row's settled lead."""

import numpy as np
import onnxruntime as ort
import pytest
from fold_9077fb9 import reference_finish, reference_fold
from onnx import TensorProto, helper
from onnx_builders import tiny_text_model
from test_fold_host import S, _session_outputs, assert_same

from attnviz.corpus.fold import HeadGroup
from attnviz.corpus.graph_reduce import InGraphReducer
from attnviz.runtime import statfeeds as sf
from attnviz.runtime import statgraph as sg


def _rank_session(opset: int) -> ort.InferenceSession:
    """A graph of the ranking nodes alone: SUMS and OFF in, RANKS out."""
    graph = helper.make_graph(
        [],
        "ranks",
        [
            helper.make_tensor_value_info(sf.SUMS, TensorProto.DOUBLE, ["B", "H", S]),
            helper.make_tensor_value_info(sf.OFF, TensorProto.FLOAT, ["B", 1, S, "T"]),
        ],
        [],
    )
    sg._rank_nodes(sg._Nodes(graph, "t_"), graph, opset)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])


def _reducer(heads: list[int]) -> tuple[InGraphReducer, list[HeadGroup]]:
    groups, off = [], 0
    for i, h in enumerate(heads):
        groups.append(HeadGroup(i, "encoder", "self", i, h, off))
        off += h
    red = InGraphReducer.__new__(InGraphReducer)
    red.model, red.exposed, red.outputs, red.groups = None, None, list(range(len(heads))), groups
    return red, groups


def _host_key(sums: np.ndarray, off: np.ndarray) -> np.ndarray:
    """fold_stats' ranking key of the session's signed sums, [heads · S, B] (every flip -1)."""
    n = (off[:, 0] == 0).sum(-1)[:, None]  # [B, 1, S]
    with np.errstate(invalid="ignore", divide="ignore"):
        key = sums.transpose(1, 2, 0) / (-1.0 * np.maximum(n, 1).transpose(1, 2, 0))
    return np.where(n.transpose(1, 2, 0) <= 0, np.inf, key).reshape(-1, sums.shape[0])


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_session_ranks_give_the_fold_it_replaced(opset):
    sess = _rank_session(opset)
    settled = unsettled = 0
    for seed in range(24):
        rng = np.random.default_rng(700 + seed)
        heads = [int(h) for h in rng.integers(1, 5, int(rng.integers(1, 4)))]
        red, groups = _reducer(heads)
        b, t = int(rng.integers(1, 24)), int(rng.integers(2, 12))
        causal = bool(seed % 2)
        lengths, special, ran = _session_outputs(rng, b, t, sum(heads), causal)
        sums = ran[0][sf.SUMS]
        if seed % 3:  # mostly distinct values (a trained model's): rows the session settles
            sums += rng.standard_normal(sums.shape)
        if seed % 4 == 1:
            sums[rng.random(sums.shape) < 0.03] = np.nan
        if seed % 5 == 2:
            sums[rng.random(sums.shape) < 0.05] = rng.choice([-0.0, 0.0])
        items = [int(x) for x in rng.permutation(500)[:b]]  # not in id order: TopK's index is not the id
        tokens = int(lengths.sum())
        off = ran[1][sf.OFF]
        key = _host_key(sums, off)
        got = sess.run([sf.RANKS], {sf.SUMS: sums, sf.OFF: off})[0]
        kk = min(sf.RANK_K, b)
        assert got.shape == (sum(heads) * S, kk + 1) and got.dtype == np.int64
        lead = got[:, -1]
        assert ((lead >= 0) & (lead <= kk)).all() and not lead[np.isnan(key).any(1)].any()
        want_cols = np.lexsort((np.broadcast_to(items, key.shape), key), axis=-1)
        for r in range(len(key)):  # a row's settled lead but its last place (tied with the next) is the fold's
            d = kk if lead[r] == kk == b else max(int(lead[r]) - 1, 0)
            assert np.array_equal(got[r, :d], want_cols[r, :d]), (seed, r, lead[r])
        for k in (1, 3, 5, 6, b + 2):
            if k < b:
                settled += int((lead > k).sum()) if k < sf.RANK_K else 0
                unsettled += int((lead <= k).sum()) if k < sf.RANK_K else 0
            want = reference_fold(reference_finish(groups, ran), items, k, 3, tokens)
            with_ranks = ({**ran[0], sf.RANKS: got}, *ran[1:])
            assert_same(red.partial(with_ranks, lengths, special, causal, items, k, 3), want, f"seed {seed} k {k}")
    assert settled > 1000 and unsettled > 500  # (both ways a row goes were taken)


def test_a_settled_row_is_taken_as_the_session_ranked_it():
    """The host trusts a settled row (no sort of its own there): the same ranks with one settled row's first two
    columns swapped give that row's examples in the swapped order; marked unsettled, the host ranks it again."""
    rng = np.random.default_rng(5)
    red, groups = _reducer([2, 3])
    lengths, special, ran = _session_outputs(rng, 16, 8, 5, False)
    ran[0][sf.SUMS] += rng.standard_normal(ran[0][sf.SUMS].shape)
    items = list(range(100, 116))
    got = _rank_session(17).run([sf.RANKS], {sf.SUMS: ran[0][sf.SUMS], sf.OFF: ran[1][sf.OFF]})[0]
    row = int(np.flatnonzero(got[:, -1] == sf.RANK_K)[0])
    want = reference_fold(reference_finish(groups, ran), items, 5, 0, int(lengths.sum()))
    swapped = got.copy()
    swapped[row, [0, 1]] = swapped[row, [1, 0]]
    part = red.partial(({**ran[0], sf.RANKS: swapped}, *ran[1:]), lengths, special, False, items, 5, 0)
    h, s = divmod(row, S)
    assert np.array_equal(part.top_item[s, h, :2], want.top_item[s, h, 1::-1])
    swapped[row, -1] = 5  # (settled for the first 4 only: not enough for k = 5)
    part = red.partial(({**ran[0], sf.RANKS: swapped}, *ran[1:]), lengths, special, False, items, 5, 0)
    assert_same(part, want)


def test_a_models_session_ranks_its_batches(tmp_path):
    """A random-weight encoder's statistics session hands out RANKS: most rows settled, and each batch's partial
    is the reference fold of the session's own item statistics for k below, at and above what the session ranks."""
    from attnviz.corpus.reduce import layout
    from attnviz.runtime import open_model

    m = open_model(tiny_text_model(tmp_path / "enc.onnx", layers=2, heads=2, classifier=False), provider="cpu")
    m.probe()
    red = InGraphReducer.build(m, layout(m.sites))
    assert red is not None and sf.RANKS in red.fetch
    rng = np.random.default_rng(3)
    settled = 0
    for k in (2, 5, 7):
        for b, t in ((12, 10), (7, 5), (3, 6)):
            lengths = rng.integers(2, t + 1, b)
            lengths[0] = t
            special = np.zeros((b, t), bool)
            special[:, 0] = True
            special[np.arange(b), lengths - 1] = True
            ids = rng.integers(3, 8, (b, t))
            ran = red.run({m.inputs[0].name: ids}, lengths, special, False)
            ranks = ran[0][sf.RANKS]
            assert ranks.shape == (4 * S, min(b, sf.RANK_K) + 1)
            settled += int((ranks[:, -1] > k).sum()) if k < b else 0
            items = [int(x) for x in rng.permutation(90)[:b]]
            want = reference_fold(reference_finish(red.groups, ran), items, k, 1, int(lengths.sum()))
            assert_same(red.partial(ran, lengths, special, False, items, k, 1), want, f"k {k} b {b}")
    assert settled > 60
