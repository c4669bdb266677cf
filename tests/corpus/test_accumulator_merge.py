"""Accumulator.fold merges a batch's top-k candidates into the running lists by sorting only the rows a candidate
may enter (corpus/reduce.py ``_merged``).  Checked batch by batch against the merge of every row it replaced (kept
here as the reference), over values built to tie (a tie enters by its lower item id), -inf, NaN and empty slots."""

import numpy as np
import pytest

from attnviz.core.stats import ROW_STATS
from attnviz.corpus.reduce import Accumulator, Partial

S, NH = len(ROW_STATS), 4  # (the accumulator keeps every row statistic)


def reference_merge(acc: Accumulator, p: Partial):
    """The fold's merge before: every row of both lists sorted by value (highest first), then item id, -1 last."""
    v = np.concatenate([acc.top_value, p.top_value], -1)
    i = np.concatenate([acc.top_item, p.top_item], -1)
    order = np.lexsort((np.where(i < 0, np.iinfo(np.int64).max, i), -v), axis=-1)[..., : acc.k]

    def take(a, b):
        return np.take_along_axis(np.concatenate([a, b], -1), order, -1)

    return (
        take(acc.top_value, p.top_value),
        take(acc.top_item, p.top_item),
        take(acc.top_row, p.top_row),
        take(acc.top_col, p.top_col),
    )


def partial(rng: np.random.Generator, batch_id: int, kb: int, first_item: int) -> Partial:
    values = np.array([0.5, 0.25, 0.0, -1.0, -np.inf, np.nan])
    top_value = rng.choice(values, (S, NH, kb), p=[0.2, 0.2, 0.2, 0.2, 0.1, 0.1])
    top_item = first_item + rng.integers(0, 40, (S, NH, kb))
    empty = rng.random((S, NH, kb)) < 0.1
    top_value[empty], top_item[empty] = -np.inf, -1
    return Partial(
        batch_id,
        8,
        20,
        np.zeros((NH, S)),
        np.zeros((NH, S), np.int64),
        top_value,
        top_item,
        rng.integers(0, 9, (S, NH, kb)),
        rng.integers(0, 9, (S, NH, kb)),
    )


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("k", [1, 3, 5])
def test_the_fold_keeps_the_lists_the_merge_of_every_row_kept(seed, k):
    rng = np.random.default_rng(seed)
    acc = Accumulator(NH, k)
    for b in range(40):
        p = partial(rng, b, int(rng.integers(1, k + 1)), first_item=int(rng.integers(0, 30)))
        want = reference_merge(acc, p)
        acc.fold(p)
        for got, ref in zip((acc.top_value, acc.top_item, acc.top_row, acc.top_col), want):
            np.testing.assert_array_equal(got, ref)  # (NaN equal to NaN)
