"""AttentionModel.extra_session: an edited copy of the graph runs beside the model with the model's own settings,
cached per key only while a caller holds it; close_session drops the model's own; dense_map reads the maps an
edited session fetched the way the model's own run reads them (issue 28: corpus uses only this public surface)."""

import gc
import weakref

import numpy as np
import pytest
from onnx import helper
from onnx_builders import tiny_text_model

from attnviz.runtime import graph as gr
from attnviz.runtime import open_model

# gc.collect() here frees what each test made; not a traversal of the whole suite's heap (conftest.py)
pytestmark = pytest.mark.usefixtures("young_gc")


def test_an_edited_graph_runs_beside_the_model(tmp_path):
    m = open_model(tiny_text_model(tmp_path / "m.onnx"), provider="cpu")
    assert m.open_provider is None  # asking opens nothing
    feeds = {"input_ids": np.array([[1, 2, 3, 4, 5], [5, 4, 3, 2, 1]], np.int64)}
    own = [x.array() for x in m.run(feeds, mode="dense").maps]
    assert m.open_provider == "CPUExecutionProvider"

    # the edit: a copy with every site's probabilities and its Q operand as extra outputs
    edited, exposed = gr.instrument(m.graph, m.graph_sites, "dense")
    q = m.graph_sites[0].q
    edited.graph.output.append(helper.make_empty_tensor_value_info(q))
    extra = m.extra_session(edited, "maps+q")
    assert m.extra_session(edited, "maps+q") is extra  # one session per key
    fetch = [*exposed.outputs, q]
    got = dict(zip(fetch, extra.run(fetch, feeds)))
    assert got[q].ndim == 4 and got[q].shape[0] == 2  # a tensor the model's own outputs do not have
    for i, want in enumerate(own):
        np.testing.assert_allclose(m.dense_map(i, got, 2, exposed.site_extra[i]), want, atol=1e-6)
        np.testing.assert_allclose(want.sum(-1), 1.0, atol=1e-5)

    # the model's own session can go (one copy of the weights); the extra one still says where it runs
    m.close_session("dense")
    assert m.open_provider == extra.provider == "CPUExecutionProvider"
    # the cache does not keep a dropped session alive
    gone = weakref.ref(extra)
    del extra
    gc.collect()
    assert gone() is None and m.open_provider is None
    # a later run opens the model's own session again, with the same maps
    again = [x.array() for x in m.run(feeds, mode="dense").maps]
    for a, b in zip(again, own):
        np.testing.assert_array_equal(a, b)
