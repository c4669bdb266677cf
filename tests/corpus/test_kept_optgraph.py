"""runtime/optgraph.py: an optimised graph whose If branch binds names the graph around it binds too (what
onnxruntime 1.32's transpose optimiser writes for the statistics graph) is renamed so that onnxruntime loads it, with
the outputs numpy computes; and the statistics session's optimised graph, kept by one command, is read back by the
next (not made and written again)."""

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from attnviz.corpus import graph_reduce
from attnviz.corpus import items as it
from attnviz.corpus.fold import layout
from attnviz.runtime import open_model, optcache
from attnviz.runtime.optgraph import unique_subgraph_names


def _clashing(path):
    """z = If(c, 2|x|, x) + (-x), the then-branch binding "t" (as the graph does) and reading the graph's "n"."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [3])
    then = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["t"]), helper.make_node("Add", ["t", "t"], ["u"])],
        "then",
        [],
        [helper.make_tensor_value_info("u", TensorProto.FLOAT, [3])],
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["t2"])],
        "else",
        [],
        [helper.make_tensor_value_info("t2", TensorProto.FLOAT, [3])],
    )
    nodes = [
        helper.make_node("Neg", ["x"], ["t"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
        helper.make_node("Add", ["y", "t"], ["z"]),
    ]
    m = helper.make_model(helper.make_graph(nodes, "g", [x, c], [z]), opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, str(path))
    return path


def _session(path):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def test_a_branch_binding_a_taken_name_is_renamed_and_computes_the_same(tmp_path):
    path = _clashing(tmp_path / "g.onnx")
    with pytest.raises(Exception, match="multiple times"):
        _session(path)
    assert unique_subgraph_names(str(path))
    x = np.array([-1.5, 0.0, 2.0], np.float32)
    sess = _session(path)
    for c, want in ((True, 2 * np.abs(x) - x), (False, x - x)):
        (z,) = sess.run(["z"], {"x": x, "c": np.array(c)})
        assert np.array_equal(z, want)
    assert not unique_subgraph_names(str(path))  # nothing left to rename: the file is not written again


def _items(path, feeds, lengths, special):
    """A fresh command's worker: the model opened, its statistics session made, one padded batch's statistics."""
    m = open_model(path, provider="cpu", threads=1)
    m.probe()  # each site's heads (a corpus worker adopts its driver's)
    m.probe()  # the heads
    red = graph_reduce.InGraphReducer(m, layout(m.sites))
    return [(g.site, s) for g, s in red.items(feeds, lengths, special, False)]


def test_the_statistics_session_is_read_back_by_the_next_command(hf_export, tmp_path, monkeypatch):
    """MiniLM's statistics graph has an If per site (statgraph._trusting_site), which onnxruntime's optimised graph
    of it named as the graph around it: each command made the session again.  Now the next one reads it back."""
    monkeypatch.setenv("ATTNVIZ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")  # sessions in this process, as in a corpus worker
    path, _, _, _ = hf_export("minilm", "legacy", "eager", 17)
    it.sha256_model(path)  # the driver's hash: the optimised graph is kept under it
    rng = np.random.default_rng(0)
    lengths = np.array([11, 7, 4])
    mask = (np.arange(11)[None, :] < lengths[:, None]).astype(np.int64)
    feeds = {
        "input_ids": rng.integers(5, 90, (3, 11)),
        "attention_mask": mask,
        "token_type_ids": np.zeros((3, 11), np.int64),
    }
    special = np.zeros((3, 11), bool)
    special[:, 0] = special[np.arange(3), lengths - 1] = True
    want = _items(path, feeds, lengths, special)
    (entry,) = (tmp_path / "cache" / "optimized").glob("*.onnx")
    assert any(n.op_type == "If" for n in onnx.load(str(entry), load_external_data=False).graph.node)
    made = os.stat(entry).st_mtime_ns

    read: list[str] = []
    real = optcache.used
    monkeypatch.setattr(optcache, "used", lambda e: (read.append(e), real(e)))
    got = _items(path, feeds, lengths, special)  # the next command's worker
    assert read == [str(entry)] and os.stat(entry).st_mtime_ns == made  # read back, not made and written again
    for (site_a, a), (site_b, b) in zip(got, want):
        assert site_a == site_b
        for f in ("sums", "counts", "rows", "keys"):
            assert np.array_equal(getattr(a, f), getattr(b, f))
