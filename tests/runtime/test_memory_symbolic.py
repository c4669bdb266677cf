"""The memory check's symbolic pass (runtime/memory.py) is not tried on a graph it cannot size: onnxruntime's
symbolic shape inference ignores GatherND's ``batch_dims``, and the corpus statistics graph (runtime/statgraph.py)
gathers each statistic's best rows that way.  There the pass failed after ~0.9 s CPU (sympy imported), once per
corpus worker, on the run's longest batch (bench/RESULTS.md, corpusloop12)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper
from onnx_builders import tiny_text_model

from attnviz.corpus.fold import layout
from attnviz.runtime import memory, open_model
from attnviz.runtime import statgraph as sg


def _batched_gathernd() -> onnx.ModelProto:
    """y = GatherND(x [B, H, T, T], rows [B, H, K, 1], batch_dims=2): [B, H, K, T], whole rows of each (b, h)."""
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    g = helper.make_graph(
        [helper.make_node("GatherND", ["x", "rows"], ["y"], batch_dims=2)],
        "g",
        [
            helper.make_tensor_value_info("x", f32, ["B", "H", "T", "T"]),
            helper.make_tensor_value_info("rows", i64, ["B", "H", "K", 1]),
        ],
        [helper.make_tensor_value_info("y", f32, None)],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_onnxruntimes_symbolic_inference_misreads_a_batched_gathernd():
    """The premise, against onnxruntime's own run: the symbolic pass's shape for a batched GatherND is not the
    tensor's (should a later onnxruntime size it right, this fails: then the guard can go)."""
    m = _batched_gathernd()
    x = np.arange(2 * 3 * 5 * 5, dtype=np.float32).reshape(2, 3, 5, 5)
    rows = np.zeros((2, 3, 4, 1), np.int64)
    (y,) = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x, "rows": rows}
    )
    assert y.shape == (2, 3, 4, 5) and np.array_equal(y, x[:, :, :1].repeat(4, 2))
    fixed = onnx.ModelProto()
    fixed.CopyFrom(m)
    for v, shape in zip(fixed.graph.input, (x.shape, rows.shape)):
        for d, n in zip(v.type.tensor_type.shape.dim, shape):
            d.dim_value = n
    inferred = memory._ssi().SymbolicShapeInference.infer_shapes(fixed, auto_merge=True)
    out = next(v for v in [*inferred.graph.output, *inferred.graph.value_info] if v.name == "y")
    sized = tuple(d.dim_value for d in out.type.tensor_type.shape.dim)
    assert sized != y.shape, "onnxruntime's symbolic inference sizes a batched GatherND now: drop the guard"
    assert not memory._followable(m.graph)


def _stats_plan(tmp_path) -> tuple[memory.MemoryPlan, dict, list[str]]:
    model = open_model(tiny_text_model(tmp_path / "t.onnx"), provider="cpu")
    model.probe()
    groups = layout(model.sites)
    m, _, on = sg.stats_model(model.graph, model.graph_sites, {g.site for g in groups})
    assert on, "the tiny model's sites are read in the graph"
    t, b = memory.LONG_AXIS, 2  # a long input: the pass would be worth trying (MemoryPlan._worth_symbolic)
    lengths = np.array([t, t // 2])
    extra, _ = sg.stat_feeds(lengths, np.zeros((b, t), bool), t)
    feeds = {"input_ids": np.ones((b, t), np.int64), **extra}
    return memory.MemoryPlan(m), feeds, [sg.SUMS, sg.PICKS]


def test_the_statistics_graph_is_estimated_without_the_symbolic_pass(tmp_path, monkeypatch):
    """The corpus statistics graph of a long batch: ONNX's inference only (the pass is never loaded), and the
    estimate still counts the site's maps; without the guard the same estimate would try the pass."""
    calls = []
    real = memory._ssi
    monkeypatch.setattr(memory, "_ssi", lambda: calls.append(1) or real())
    plan, feeds, fetch = _stats_plan(tmp_path)
    assert not memory._followable(plan.proto.graph)
    shapes = {k: (v.shape, int(helper.np_dtype_to_tensor_dtype(v.dtype))) for k, v in feeds.items() if k in plan.fed}
    est = plan.estimate(shapes, fetch)
    assert calls == [] and plan._symbolic is None
    t = memory.LONG_AXIS
    assert est.bytes >= 2 * 2 * t * t * 4  # at least one [B, H, T, T] float32 map (2 items, 2 heads) alive
    memory.check_run(plan, feeds, fetch, "t.onnx")  # within the cap: not refused

    monkeypatch.setattr(memory, "_followable", lambda g: True)
    again = memory.MemoryPlan(plan.proto)
    again.estimate(shapes, fetch)
    assert calls == [1], "without the guard this estimate loads the symbolic pass"
