"""A head switch on Token links with the maps kept per head (``open --memory ondemand``): the switch computes the
head it shows and no other (at 4,096 tokens each head is a Q·Kᵀ of 16 M scores and the graph's epilogue through
the isolation child), and the map drawn, and its links, are the map the graph's own Softmax gives for that head
(the same input run keeping every map: the probabilities as the graph wrote them, no recompute)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_builders import VOCAB, tiny_text_model

pytest.importorskip("onnxruntime")

import attnviz.runtime.model as rm
from attnviz.core.view import strongest_links

T = 300  # past the 16 x 12 keys where links.py narrows each row by block maxima


def test_a_head_switch_computes_that_head_alone_and_draws_the_graphs_map(qtbot, window, tmp_path, monkeypatch):
    model = rm.open_model(tiny_text_model(tmp_path / "enc.onnx", heads=4, d=16, classifier=False), provider="cpu")
    ids = np.random.default_rng(28).integers(3, len(VOCAB), (1, T))
    ids[0, 0], ids[0, -1] = 1, 2
    feeds = {"input_ids": ids}
    kept = model.run(feeds, mode="dense")
    od = model.run(feeds, mode="ondemand")
    assert all(isinstance(m, rm.RecomputeMap) for m in od.maps)
    w = window
    w._show_result(od)
    w.select_view("links")
    w.session.select(mode="head", layer=1, head=0)
    asked = []
    real = rm.RecomputeMap.head
    monkeypatch.setattr(
        rm.RecomputeMap, "head", lambda self, b, h: asked.append((od.maps.index(self), b, h)) or real(self, b, h)
    )
    for layer, head in [(1, 1), (1, 3), (0, 2), (0, 0)]:
        asked.clear()
        w.session.select(layer=layer, head=head)  # the shown view draws on the selection, before this returns
        assert asked == [(layer, 0, head)]  # that head of that layer, once
        (_, _, shown), *more = w.links.lv.items
        want = np.asarray(kept.maps[layer].array())[0, head]
        assert not more and shown.shape == (T, T)
        np.testing.assert_allclose(shown, want, rtol=0, atol=2e-6)
        np.testing.assert_allclose(shown.sum(1), 1.0, atol=1e-5)  # (a softmax's rows)
        got, want_links = w.links.lv.links, strongest_links([want])[0]
        assert [lk[:3] for lk in got] == [lk[:3] for lk in want_links]
