"""A worker's batches with the next run overlapping this fold (BatchReducer.many, the GPU engine's tasks of
several batches) give exactly the partials of one batch at a time."""

import numpy as np
import pytest
from planted import corpus_lines, planted_model

from attnviz.corpus import graph_reduce
from attnviz.corpus.engines import WorkerSetup, local_engine
from attnviz.corpus.items import read_texts
from attnviz.corpus.plan import encode_items, plan_text
from attnviz.corpus.reduce import BatchReducer, layout

FIELDS = ("sums", "counts", "top_value", "top_item", "top_row", "top_col")


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


def test_many_equals_one_at_a_time(batches):
    model, specs = batches
    one = BatchReducer(str(model), "cpu", None, 1, 3)
    want = [one(s) for s in specs]
    many = BatchReducer(str(model), "cpu", None, 1, 3)
    _same(many.many(specs), want)
    assert isinstance(many.in_graph, graph_reduce.InGraphReducer)


def test_many_falls_back_to_maps_mid_way(batches, monkeypatch):
    """A batch the statistics session cannot run (here: the third) sends it and the rest down the maps path."""
    model, specs = batches
    maps = BatchReducer(str(model), "cpu", None, 1, 3, in_graph=False)
    graph = BatchReducer(str(model), "cpu", None, 1, 3)
    want = [graph(s) for s in specs[:2]] + [maps(s) for s in specs[2:]]
    real = graph_reduce.InGraphReducer.run
    calls = []

    def run(self, *a):
        calls.append(1)
        if len(calls) == 3:
            raise graph_reduce.NotInGraph("planted failure")
        return real(self, *a)

    monkeypatch.setattr(graph_reduce.InGraphReducer, "run", run)
    red = BatchReducer(str(model), "cpu", None, 1, 3)
    _same(red.many(specs), want)
    assert red.in_graph is False and len(calls) == 3


def test_gpu_engine_tasks_of_several_batches(batches):
    """The local engine as it runs on a GPU (tasks of GPU_CHUNK batches) and as on a CPU: the same partials."""
    model, specs = batches
    red = BatchReducer(str(model), "cpu", None, 1, 3)
    groups = tuple(layout(red.model.sites))
    runs = {}
    for gpu in (False, True):
        setup = WorkerSetup(str(model), "cpu", None, 1, 3, groups, 1, gpu=gpu)
        runs[gpu] = list(local_engine(setup, specs))
    _same(runs[True], runs[False])
    assert len(runs[True]) == len(specs)
