"""A worker's batches with the next run overlapping this fold (BatchReducer.many, the GPU engine's tasks of
several batches) give exactly the partials of one batch at a time."""

import numpy as np
import pytest
from planted import corpus_lines, planted_model

from attnviz.corpus import graph_reduce
from attnviz.corpus.engines import GPU_CHUNK, WorkerSetup, local_engine
from attnviz.corpus.items import read_texts
from attnviz.corpus.plan import encode_items, plan_text
from attnviz.corpus.reduce import Accumulator, BatchReducer, layout

FIELDS = ("sums", "counts", "top_value", "top_item", "top_row", "top_col")


def _folded(parts, k=3):
    """What the driver makes of ``parts``: its accumulator folded in order."""
    acc = Accumulator(parts[0].sums.shape[0], k)
    for p in parts:
        acc.fold(p)
    return acc


def _same_folded(a, b):
    """Two engines' partials (per batch, or tasks of batches combined in the worker) fold to the same bytes."""
    x, y = _folded(a), _folded(b)
    assert (x.next_batch, x.items, x.tokens) == (y.next_batch, y.items, y.tokens)
    for f in FIELDS:
        assert getattr(x, f).tobytes() == getattr(y, f).tobytes(), f


def _same(a, b):
    assert [p.batch_id for p in a] == [p.batch_id for p in b]
    for x, y in zip(a, b):
        assert (x.items, x.tokens) == (y.items, y.tokens)
        for f in FIELDS:
            assert np.array_equal(getattr(x, f), getattr(y, f)), (x.batch_id, f)


@pytest.fixture
def batches(tmp_path):
    model = planted_model(tmp_path / "planted.onnx")
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(corpus_lines(50)) + "\n")
    red = BatchReducer(str(model), "cpu", None, 1, 3)
    items = read_texts(texts)
    specs = plan_text(items, encode_items(red.model, items), None, None, 8, equal_lengths=False)
    assert len(specs) > 3
    return model, specs


@pytest.mark.parametrize("depth", [1, 3])
def test_many_equals_one_at_a_time(batches, depth):
    """``depth`` 3: three runs in flight at once on the one session (the shared layout's worker)."""
    model, specs = batches
    one = BatchReducer(str(model), "cpu", None, 1, 3)
    want = [one(s) for s in specs]
    many = BatchReducer(str(model), "cpu", None, 1, 3)
    _same(many.many(specs, depth), want)
    assert isinstance(many.in_graph, graph_reduce.InGraphReducer)


def test_runs_in_flight_overlap_on_one_session(batches):
    """With depth 3 the session really runs batches side by side (the point of the shared layout): the first two
    runs wait for each other, which only returns if both are in flight at once (else the barrier breaks)."""
    import threading

    model, specs = batches
    want = [BatchReducer(str(model), "cpu", None, 1, 3)(s) for s in specs]
    red = BatchReducer(str(model), "cpu", None, 1, 3)
    red.prepare()
    barrier = threading.Barrier(2, timeout=60)
    first_two = iter(range(2))
    inner = red.in_graph.run

    def meet(*a):
        if next(first_two, None) is not None:
            barrier.wait()
        return inner(*a)

    red.in_graph.run = meet
    _same(red.many(specs, 3), want)
    assert not barrier.broken


@pytest.mark.parametrize("depth", [1, 3])
def test_many_falls_back_to_maps_mid_way(batches, monkeypatch, depth):
    """A batch the statistics session cannot run (here: the third) sends it and the rest down the maps path
    (``depth`` 3: the later runs already started are dropped and reduced from maps too)."""
    model, specs = batches
    maps = BatchReducer(str(model), "cpu", None, 1, 3, in_graph=False)
    graph = BatchReducer(str(model), "cpu", None, 1, 3)
    want = [graph(s) for s in specs[:2]] + [maps(s) for s in specs[2:]]
    real = graph_reduce.InGraphReducer.run
    third = graph.feeds(specs[2])[0]["input_ids"]  # runs in flight start in any order: the batch is told by its ids
    calls = []

    def run(self, feeds, *a):
        calls.append(1)
        if np.array_equal(feeds["input_ids"], third):
            raise graph_reduce.NotInGraph("planted failure")
        return real(self, feeds, *a)

    monkeypatch.setattr(graph_reduce.InGraphReducer, "run", run)
    red = BatchReducer(str(model), "cpu", None, 1, 3)
    _same(red.many(specs, depth), want)
    assert red.in_graph is False and 3 <= len(calls) <= 2 + depth  # (runs not yet started are cancelled)


def test_gpu_engine_tasks_of_several_batches(batches):
    """The local engine as it runs on a GPU (tasks of GPU_CHUNK batches) and as on a CPU: the same partials."""
    model, specs = batches
    red = BatchReducer(str(model), "cpu", None, 1, 3)
    groups = tuple(layout(red.model.sites))
    runs = {}
    for gpu in (False, True):
        setup = WorkerSetup(str(model), "cpu", None, 1, 3, groups, 1, gpu=gpu)
        runs[gpu] = list(local_engine(setup, specs))
    _same_folded(runs[True], runs[False])
    # one partial a batch on a CPU, one a task of GPU_CHUNK batches on a GPU (reduce.combine)
    assert len(runs[False]) == len(specs)
    assert [p.batches for p in runs[True]] == [len(specs[i : i + GPU_CHUNK]) for i in range(0, len(specs), GPU_CHUNK)]


def test_the_shared_layout_gives_the_process_layouts_partials(batches, monkeypatch):
    """One process with three batches in flight on its session, in tasks of two batches (so that tasks follow
    one another), against three processes of one batch a task: the same partials in the same order."""
    import dataclasses

    from attnviz.corpus import engines

    model, specs = batches
    red = BatchReducer(str(model), "cpu", None, 1, 3)
    groups = tuple(layout(red.model.sites))
    shared = dataclasses.replace(engines.LAYOUTS["threads"], chunk_cpu=2)
    monkeypatch.setitem(engines.LAYOUTS, "threads", shared)
    runs = {}
    for name in ("processes", "threads"):
        setup = WorkerSetup(str(model), "cpu", None, 1, 3, groups, 3, layout=name)
        runs[name] = list(local_engine(setup, specs))
    _same_folded(runs["threads"], runs["processes"])
    assert len(specs) > 2 * shared.chunk_cpu and len(runs["processes"]) == len(specs)
    assert [p.batches for p in runs["threads"]] == [len(specs[i : i + 2]) for i in range(0, len(specs), 2)]


@pytest.mark.parametrize("sessions", [1, 2])
def test_runs_in_flight_on_sessions_of_their_own_give_the_same_partials(batches, monkeypatch, sessions):
    """ATTNVIZ_CORPUS_SESSIONS=2 (a bench's knob for a GPU, where each session has a CUDA stream of its own): the
    batches in flight are dealt to two sessions of the same graph, and the partials are one at a time's."""
    model, specs = batches
    want = [BatchReducer(str(model), "cpu", None, 1, 3)(s) for s in specs]
    monkeypatch.setenv("ATTNVIZ_CORPUS_SESSIONS", str(sessions))
    used = []
    real = graph_reduce.InGraphReducer.run

    def run(self, feeds, lengths, special, causal, sess=None):
        used.append(id(sess or self.sess))
        return real(self, feeds, lengths, special, causal, sess)

    monkeypatch.setattr(graph_reduce.InGraphReducer, "run", run)
    red = BatchReducer(str(model), "cpu", None, 1, 3)
    _same(red.many(specs, 3), want)
    assert len(set(used)) == sessions and len(used) == len(specs)
