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
