"""A worker's task of batches combined into one partial (reduce.combine) folds in the driver to exactly what the
batches folded one by one give: the same sums (float64, added batch by batch), counts and top lists (ties to the
lower item id, empty slots, NaN), for any grouping of the batches into tasks."""

import numpy as np
import pytest

from attnviz.corpus.fold import Partial, S
from attnviz.corpus.reduce import Accumulator, combine

NH, K = 7, 5
FIELDS = ("sums", "counts", "top_value", "top_item", "top_row", "top_col")


def _batch(rng, batch_id: int, first_item: int, b: int) -> Partial:
    kb = min(K, b)
    # few distinct values: many ties between items, which the merge breaks by item id
    v = rng.integers(0, 4, (S, NH, kb)).astype(np.float64) / 4
    v[rng.random(v.shape) < 0.05] = -np.inf  # items with no counted row
    v[rng.random(v.shape) < 0.02] = np.nan
    items = first_item + np.stack([rng.permutation(b)[:kb] for _ in range(S * NH)]).reshape(S, NH, kb)
    order = np.lexsort((items, -v), axis=-1)  # a batch's own list is sorted as fold_items sorts it
    v, items = np.take_along_axis(v, order, -1), np.take_along_axis(items, order, -1)
    return Partial(
        batch_id,
        b,
        int(rng.integers(b, 40 * b)),
        rng.standard_normal((NH, S)) * 10.0 ** rng.integers(-3, 4, (NH, S)),  # magnitudes whose sums round
        rng.integers(0, 500, (NH, S)),
        v,
        items.astype(np.int64),
        rng.integers(0, 40, (S, NH, kb)),
        rng.integers(0, 40, (S, NH, kb)),
    )


def _fold(parts) -> Accumulator:
    acc = Accumulator(NH, K)
    for p in parts:
        acc.fold(p)
    return acc


@pytest.mark.parametrize("task", [2, 3, 8, 32])
def test_combined_tasks_fold_to_the_same_bytes(task):
    rng = np.random.default_rng(task)
    sizes = [int(x) for x in rng.integers(1, 9, 40)]  # batches smaller than k too: lists with empty slots
    starts = np.cumsum([0, *sizes[:-1]])
    batches = [_batch(rng, i, int(s), b) for i, (s, b) in enumerate(zip(starts, sizes))]
    one = _fold(batches)
    tasks = [p for i in range(0, len(batches), task) for p in combine(batches[i : i + task], K)]
    assert [p.batches for p in tasks] == [len(batches[i : i + task]) for i in range(0, len(batches), task)]
    many = _fold(tasks)
    assert (
        (many.next_batch, many.items, many.tokens)
        == (one.next_batch, one.items, one.tokens)
        == (40, sum(sizes), one.tokens)
    )
    for f in FIELDS:
        assert getattr(many, f).tobytes() == getattr(one, f).tobytes(), f
    # the grouping matters to float64 sums: added as one pre-summed array the bytes would differ somewhere
    presummed = one.sums - one.sums
    for p in tasks:
        presummed = presummed + p.sums
    assert not np.array_equal(presummed, one.sums)


def test_partials_that_carry_more_than_statistics_are_left_as_they_are():
    rng = np.random.default_rng(0)
    a, b = _batch(rng, 0, 0, 6), _batch(rng, 1, 6, 6)
    b.generated = {7: ["the", "</s>"]}
    assert combine([a, b], K) == [a, b]
    assert combine([a], K) == [a]


@pytest.mark.parametrize("seed", range(6))
def test_a_task_ranked_at_once_is_the_folds_one_by_one(seed):
    """combine ranks a task's candidates once (reduce._fold_at_once): the partial it makes has the bytes and dtypes
    of the Accumulator's folds of the batches one by one (the merge it replaced), on top lists of distinct values
    (the integer sort's rows), near ties a few ulps apart, -0.0 beside 0.0, values equal across batches (ties to
    the lower item id), rows of NaN (empty slots kept before NaN), -inf, and batches smaller than k; and values
    the same in every batch (ties in most rows), which it leaves to the folds."""
    from attnviz.corpus.reduce import _fold_at_once

    rng = np.random.default_rng(100 + seed)
    sizes = [int(x) for x in rng.integers(1 if seed % 2 else K, 12, int(rng.integers(2, 40)))]
    starts = np.cumsum([0, *sizes[:-1]])
    batches = []
    renamed = rng.permutation(sum(sizes))  # a later batch's items may have lower ids (a length-sorted plan)
    for i, (s, b) in enumerate(zip(starts, sizes)):
        p = _batch(rng, i, int(s), b)
        p.top_item = renamed[p.top_item]
        v = rng.standard_normal(p.top_value.shape)
        v[rng.random(v.shape) < 0.1] = 0.25
        v[rng.random(v.shape) < 0.05] = np.nextafter(0.25, 1)
        v[rng.random(v.shape) < 0.05] = rng.choice([-0.0, 0.0, -np.inf])
        # one (statistic, head) row of NaN (empty slots kept before them; a row with a NaN is lexsorted, a task with
        # many such rows left to the folds: test_combined_tasks_fold_to_the_same_bytes), one of items with no counted row (before
        # the empty slots), one of a value every batch repeats at the top (ties to the lower item id): rows the
        # integer sort leaves to the lexsort, fewer than an eighth of them
        v[seed, 0], v[seed + 1, 0], v[seed + 2, 0, :2] = np.nan, -np.inf, 5.0
        order = np.lexsort((p.top_item, -v), axis=-1)
        p.top_value, p.top_item = np.take_along_axis(v, order, -1), np.take_along_axis(p.top_item, order, -1)
        batches.append(p)
    (got,) = combine(batches, K)
    one = _fold(batches)
    for f in ("sums", "counts", "top_value", "top_item", "top_row", "top_col"):
        a, b = getattr(got, f), getattr(one, f)
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), f
    assert (got.items, got.tokens, got.batches) == (one.items, one.tokens, len(batches))
    # (the new path made it, not the folds; a batch of fewer items than k is left to them)
    assert _fold_at_once(Accumulator(NH, K), batches) == (min(sizes) >= K)
    same = [_batch(rng, i, 0, K) for i in range(3)]  # (the same values a batch: ties in every row)
    for p in same[1:]:
        p.top_value = same[0].top_value
    assert not _fold_at_once(Accumulator(NH, K), same)  # left to the folds: a lexsort of most rows costs more
    (tied,) = combine(same, K)
    assert tied.top_item.tobytes() == _fold(same).top_item.tobytes()
    late = Accumulator(NH, K)
    late.next_batch = 1
    assert not _fold_at_once(late, batches)  # batch ids that do not follow: left to the folds' own check
