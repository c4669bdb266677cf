"""onnxruntime contrib attention ops built by hand (no torch): GroupQueryAttention and unsupported fused ops."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx_builders import gqa_model

from attnviz import AttnvizError
from attnviz.runtime import open_model


def test_group_query_attention_probabilities(tmp_path):
    path, feeds, ref = gqa_model(tmp_path / "gqa.onnx")
    m = open_model(path, provider="cpu")
    assert [(s.stack, s.kind, s.layer, s.method) for s in m.sites] == [("decoder", "self", 0, "gqa-qk")]
    r = m.run(feeds)
    assert r.maps[0].shape == (1, 4, 5, 5) and r.sites[0].heads == 4
    np.testing.assert_allclose(r.maps[0].array(), ref, atol=1e-5)


def test_packed_attention_op_is_reported_not_guessed(tmp_path):
    node = helper.make_node(
        "PackedAttention", ["x", "w", "b", "token_offset", "cu_seqlens"], ["y"], domain="com.microsoft", num_heads=2
    )
    g = helper.make_graph(
        [node],
        "p",
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
            for n in ("x", "w", "b", "token_offset", "cu_seqlens")
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    onnx.save(model, str(tmp_path / "packed.onnx"))
    m = open_model(tmp_path / "packed.onnx", provider="cpu")
    assert m.sites == []
    assert "PackedAttention" in m.no_attention_reason and "re-export" in m.no_attention_reason
    with pytest.raises(AttnvizError, match="PackedAttention"):
        m.run({})


def test_packed_attention_with_a_computed_bias_is_refused_not_crashed(tmp_path):
    """com.microsoft Attention is recomputed from its constant weights and bias; a bias the graph computes (here a
    graph input) cannot be read before the run, so the site is refused with the reason instead of an internal
    error at run time (found by mypy: const_value may return None)."""
    node = helper.make_node("Attention", ["x", "w", "b"], ["y"], domain="com.microsoft", num_heads=2)
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 24], np.random.default_rng(0).normal(size=192).tolist())
    g = helper.make_graph(
        [node],
        "a",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [24]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[w],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    onnx.save(model, str(tmp_path / "att.onnx"))
    m = open_model(tmp_path / "att.onnx", provider="cpu")
    assert m.sites == []
    assert "non-constant" in m.no_attention_reason
    feeds = {"x": np.ones((1, 4, 8), np.float32), "b": np.zeros(24, np.float32)}
    with pytest.raises(AttnvizError, match="non-constant"):
        m.run(feeds)
