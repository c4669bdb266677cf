"""A corpus worker whose statistics graph an earlier command kept (runtime/statgraph_kept.py) builds none and gives
exactly the partials of a worker that built its own, and of one that keeps nothing."""

import numpy as np
from planted import corpus_lines, planted_model

from attnviz.corpus import graph_reduce
from attnviz.corpus import items as it
from attnviz.corpus.items import read_texts
from attnviz.corpus.plan import encode_items, plan_text
from attnviz.corpus.reduce import BatchReducer
from attnviz.runtime import statgraph as sg
from attnviz.runtime import statgraph_kept as sgk


def _no_build(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("built again")

    monkeypatch.setattr(sg, "stats_model", refuse)


def test_a_worker_from_a_kept_graph_gives_the_same_partials(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("ATTNVIZ_CACHE_DIR", str(cache))
    monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")  # sessions in this process, as in a corpus worker
    model = planted_model(tmp_path / "planted.onnx")
    it.sha256_model(model)
    texts = tmp_path / "c.txt"
    texts.write_text("\n".join(corpus_lines(40)) + "\n")
    first = BatchReducer(str(model), "cpu", None, 1, 3)
    items = read_texts(texts)
    specs = plan_text(items, encode_items(first.model, items), None, None, 8, equal_lengths=False)
    want = [first(s) for s in specs]  # its statistics graph built and kept
    assert len(list((cache / sgk.KIND).iterdir())) == 1

    real = sg.stats_model
    _no_build(monkeypatch)
    kept = BatchReducer(str(model), "cpu", None, 1, 3)
    got = [kept(s) for s in specs]
    assert isinstance(kept.in_graph, graph_reduce.InGraphReducer)  # (a refused build would fall back to maps)
    monkeypatch.setattr(sg, "stats_model", real)
    monkeypatch.setenv("ATTNVIZ_CACHE_DIR", "off")  # a worker that keeps nothing builds its own
    fresh = [BatchReducer(str(model), "cpu", None, 1, 3)(s) for s in specs]
    for a, b, c in zip(got, want, fresh):
        for f in ("sums", "counts", "top_value", "top_item", "top_row", "top_col"):
            assert np.array_equal(getattr(a, f), getattr(b, f)) and np.array_equal(getattr(a, f), getattr(c, f))
