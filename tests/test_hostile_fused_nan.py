"""A NaN attention scale on a com.microsoft ``MultiHeadAttention`` (maps read as ``mha-qk``: scaled QKᵀ from the
graph, softmax in numpy) is refused like any NaN attention; it used to come out as all-zero maps."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from attnviz import AttnvizError
from attnviz.runtime import open_model
from attnviz.runtime.analyze import analyze_call


def mha_model(path, scale: float, seq: int = 4, d: int = 8, heads: int = 2):
    rng = np.random.default_rng(0)
    w = {f"W{n}": rng.standard_normal((d, d)).astype(np.float32) for n in "qkvo"}
    nodes = [helper.make_node("MatMul", ["x", f"W{n}"], [n]) for n in "qkv"]
    nodes.append(
        helper.make_node(
            "MultiHeadAttention", ["q", "k", "v"], ["y"], domain="com.microsoft", num_heads=heads, scale=scale
        )
    )
    nodes.append(helper.make_node("MatMul", ["y", "Wo"], ["out"]))
    g = helper.make_graph(
        nodes,
        "mha",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, d])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, seq, d])],
        initializer=[numpy_helper.from_array(a, n) for n, a in w.items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    path.write_bytes(m.SerializeToString())
    return path


def test_a_nan_scale_on_multi_head_attention_is_refused(tmp_path):
    x = np.random.default_rng(1).standard_normal((1, 4, 8)).astype(np.float32)
    good = open_model(mha_model(tmp_path / "good.onnx", 0.5), provider="cpu")
    assert good.sites[0].method == "mha-qk"
    r = analyze_call(good, feeds={"x": x})
    np.testing.assert_allclose(r.maps[0].array().sum(-1), 1.0, rtol=1e-5)  # the reference: rows sum to 1
    bad = open_model(mha_model(tmp_path / "nan.onnx", float("nan")), provider="cpu")
    with pytest.raises(AttnvizError, match="NaN/Inf attention"):
        analyze_call(bad, feeds={"x": x})
