"""Which Softmax nodes are attention: consumers other than a P·V MatMul, the key axis, and safe analysis of
hostile graphs (cycles, variadic chains) — each checked against numpy or a clear one-line error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from attnviz import AttnvizError
from attnviz.runtime import open_model

ROOT = Path(__file__).resolve().parents[2]
B, T, D, H = 2, 5, 8, 2
DH = D // H


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


class Builder:
    """x [B,T,D] -> per layer: Q, Kᵀ projections -> scores -> Softmax(axis) -> a consumer; numpy twin alongside."""

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.outputs, self.ref = [], [], [], []
        self.inits += [
            numpy_helper.from_array(np.array([0, 0, H, DH], np.int64), "bthd"),
            numpy_helper.from_array(np.array([0, 0, D], np.int64), "btd"),
            numpy_helper.from_array(np.array(1 / np.sqrt(DH), np.float32), "scale"),
        ]
        self.x = "x"

    def w(self, name):
        a = (self.rng.standard_normal((D, D)) * 0.6).astype(np.float32)
        self.inits.append(numpy_helper.from_array(a, name))
        return a

    def layer(self, l, consumer="pv", axis=-1):
        W = {}
        for w in "qkv":
            W[w] = self.w(f"W{w}{l}")
            perm = [0, 2, 3, 1] if w == "k" else [0, 2, 1, 3]
            self.nodes += [
                helper.make_node("MatMul", [self.x, f"W{w}{l}"], [f"{w}{l}_l"]),
                helper.make_node("Reshape", [f"{w}{l}_l", "bthd"], [f"{w}{l}_r"]),
                helper.make_node("Transpose", [f"{w}{l}_r"], [f"{w}{l}_t"], perm=perm),
            ]
        self.nodes += [
            helper.make_node("MatMul", [f"q{l}_t", f"k{l}_t"], [f"s{l}"]),
            helper.make_node("Mul", [f"s{l}", "scale"], [f"ss{l}"]),
            helper.make_node("Softmax", [f"ss{l}"], [f"p{l}"], axis=axis, name=f"layers.{l}/Softmax"),
        ]
        self.w_np = W
        return W

    def finish(self, path, value_info=False):
        graph = helper.make_graph(
            self.nodes,
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None, D])],
            self.outputs,
            initializer=self.inits,
        )
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        m.ir_version = 8
        if value_info:
            m = onnx.shape_inference.infer_shapes(m)
        onnx.save(m, str(path))  # outputs carry no shapes, which only the checker (not onnxruntime) wants
        return path


def numpy_layer(x, W, axis=-1):
    q, k, v = ((x @ W[w]).reshape(B, T, H, DH).transpose(0, 2, 1, 3) for w in "qkv")
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(DH)
    return _softmax(s, axis), v


X = np.random.default_rng(7).standard_normal((B, T, D)).astype(np.float32)


def pv_layer(b: Builder, l, axis=-1):
    """A standard layer: P·V, merge heads, residual."""
    W = b.layer(l, axis=axis)
    b.nodes += [
        helper.make_node("MatMul", [f"p{l}", f"v{l}_t"], [f"o{l}"]),
        helper.make_node("Transpose", [f"o{l}"], [f"o{l}_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", [f"o{l}_t", "btd"], [f"o{l}_r"]),
        helper.make_node("Add", [b.x, f"o{l}_r"], [f"x{l + 1}"]),
    ]
    b.x = f"x{l + 1}"
    return W


@pytest.mark.parametrize("reduce", ["ReduceMean", "ReduceSum"])
def test_reduce_consumed_attention_is_found(tmp_path, reduce):
    """Layer 0 is ordinary; layer 1's probabilities only go (over heads) to a model output."""
    b = Builder()
    W0 = pv_layer(b, 0)
    W1 = b.layer(1)
    b.inits.append(numpy_helper.from_array(np.array([1], np.int64), "ax1"))
    b.nodes.append(helper.make_node(reduce, ["p1", "ax1"], ["attn_mean"], keepdims=0))
    b.outputs = [
        helper.make_tensor_value_info("x1", TensorProto.FLOAT, None),
        helper.make_tensor_value_info("attn_mean", TensorProto.FLOAT, None),
    ]
    m = open_model(b.finish(tmp_path / "reduce.onnx"), provider="cpu")
    assert [s.method for s in m.sites] == ["softmax", "softmax-reduce"]
    r = m.run({"x": X})
    p0, v0 = numpy_layer(X, W0)
    x1 = X + (p0 @ v0).transpose(0, 2, 1, 3).reshape(B, T, D)
    p1, _ = numpy_layer(x1, W1)
    np.testing.assert_allclose(r.maps[0].array(), p0, atol=1e-5)
    np.testing.assert_allclose(r.maps[1].array(), p1, atol=1e-5)
    np.testing.assert_allclose(r.outputs["attn_mean"], p1.mean(1) if reduce == "ReduceMean" else p1.sum(1), atol=1e-5)
    assert [(s.layer, s.heads) for s in r.sites] == [(0, H), (1, H)]


def test_additive_context_mul_reduce_sum_is_found(tmp_path):
    """Context = ReduceSum(Unsqueeze(P) * V) over the key axis instead of a MatMul."""
    b = Builder()
    W = b.layer(0)
    b.inits += [
        numpy_helper.from_array(np.array([-1], np.int64), "last"),
        numpy_helper.from_array(np.array([2], np.int64), "ax2"),
        numpy_helper.from_array(np.array([-2], np.int64), "keyax"),
    ]
    b.nodes += [
        helper.make_node("Unsqueeze", ["p0", "last"], ["p0_u"]),  # [B,H,Tq,Tk,1]
        helper.make_node("Unsqueeze", ["v0_t", "ax2"], ["v0_u"]),  # [B,H,1,Tk,dh]
        helper.make_node("Mul", ["p0_u", "v0_u"], ["pv0"]),
        helper.make_node("ReduceSum", ["pv0", "keyax"], ["ctx"], keepdims=0),
    ]
    b.outputs = [helper.make_tensor_value_info("ctx", TensorProto.FLOAT, None)]
    m = open_model(b.finish(tmp_path / "context.onnx"), provider="cpu")
    assert [s.method for s in m.sites] == ["softmax-context"]
    r = m.run({"x": X})
    p, v = numpy_layer(X, W)
    np.testing.assert_allclose(r.maps[0].array(), p, atol=1e-5)
    np.testing.assert_allclose(r.outputs["ctx"], p @ v, atol=1e-5)


@pytest.mark.parametrize("declared", [True, False], ids=["shapes-declared", "shapes-unknown"])
def test_softmax_over_a_non_key_axis_is_not_attention(tmp_path, declared):
    """Layer 1 normalises over the query axis (rows would sum to T-ish numbers): refused, never exported."""
    b = Builder()
    W0 = pv_layer(b, 0)
    pv_layer(b, 1, axis=2)
    b.outputs = [helper.make_tensor_value_info(b.x, TensorProto.FLOAT, None)]
    m = open_model(b.finish(tmp_path / "axis.onnx", value_info=declared), provider="cpu")
    r = m.run({"x": X})
    assert len(r.maps) == 1 and r.sites[0].node == "layers.0/Softmax"
    np.testing.assert_allclose(r.maps[0].array(), numpy_layer(X, W0)[0], atol=1e-5)
    for mp in r.maps:
        np.testing.assert_allclose(mp.array().sum(-1), 1.0, atol=1e-5)
    if not declared:  # found statically only when the rank is known; otherwise refused on the run, with a note
        assert any("not the key axis" in n for n in r.info["notes"])


def test_only_wrong_axis_softmax_gives_a_clear_error(tmp_path):
    b = Builder()
    pv_layer(b, 0, axis=1)  # over heads
    b.outputs = [helper.make_tensor_value_info(b.x, TensorProto.FLOAT, None)]
    path = b.finish(tmp_path / "heads.onnx", value_info=True)
    m = open_model(path, provider="cpu")
    assert m.sites == [] and "not the key axis" in m.no_attention_reason
    b2 = Builder()  # the rank-unknown twin is refused on the run, with the same reason
    pv_layer(b2, 0, axis=1)
    b2.outputs = [helper.make_tensor_value_info(b2.x, TensorProto.FLOAT, None)]
    m2 = open_model(b2.finish(tmp_path / "heads2.onnx"), provider="cpu")
    with pytest.raises(AttnvizError, match="not the key axis"):
        m2.run({"x": X})


def _cli(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "attnviz", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_cycle_beside_the_softmax_is_an_invalid_graph(tmp_path):
    b = Builder()
    b.layer(0)
    # ss0 feeds the Softmax; make it also depend on its own later result: Add(s0, loop) -> loop' ... a cycle
    b.nodes = [n for n in b.nodes if not (n.op_type == "Mul" and n.output[0] == "ss0")]
    b.nodes += [
        helper.make_node("Add", ["s0", "back"], ["ss0"], name="cyc_add"),
        helper.make_node("Mul", ["ss0", "scale"], ["back"], name="cyc_mul"),
        helper.make_node("MatMul", ["p0", "v0_t"], ["o0"]),
    ]
    b.outputs = [helper.make_tensor_value_info("o0", TensorProto.FLOAT, None)]
    graph = helper.make_graph(
        b.nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None, D])],
        b.outputs,
        initializer=b.inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "cycle.onnx"
    onnx.save(m, str(path))  # not checked: the checker rejects it too
    with pytest.raises(AttnvizError, match="cycle"):
        open_model(path, provider="cpu")
    p = _cli("inspect", str(path))  # the timeout is only a guard against the old infinite loop
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnviz: error:") and "cycle" in lines[0], p.stderr


def test_deep_variadic_max_chain_is_walked_once(tmp_path):
    """Each Max reads the previous ten results: walking paths would be exponential; visited sets make it linear."""
    b = Builder()
    W = b.layer(0)
    b.nodes = [n for n in b.nodes if n.op_type != "Softmax"]
    chain = ["ss0"]
    for i in range(60):
        out = f"mx{i}"
        b.nodes.append(helper.make_node("Max", chain[-10:][::-1], [out], name=f"max{i}"))
        chain.append(out)
    b.nodes += [
        helper.make_node("Softmax", [chain[-1]], ["p0"], axis=-1, name="layers.0/Softmax"),
        helper.make_node("MatMul", ["p0", "v0_t"], ["o0"]),
    ]
    b.outputs = [helper.make_tensor_value_info("o0", TensorProto.FLOAT, None)]
    path = b.finish(tmp_path / "maxchain.onnx")
    p = _cli("inspect", str(path), "--no-probe")
    assert p.returncode == 0, p.stderr
    m = open_model(path, provider="cpu")
    assert len(m.sites) == 1
    r = m.run({"x": X})
    np.testing.assert_allclose(r.maps[0].array(), numpy_layer(X, W)[0], atol=1e-5)  # Max of copies = the scores


def test_instrumented_model_does_not_carry_the_weights(tmp_path):
    """A single-file model: the instrumented bytes hold the graph only (weights are read from the file in place)."""
    import onnxruntime as ort
    from onnx_builders import tiny_text_model

    from attnviz.runtime import graph as gr

    path = tiny_text_model(tmp_path / "wide.onnx", layers=2, heads=4, d=64)
    before = path.read_bytes()
    m = open_model(path, provider="cpu")
    data, _ = gr.instrumented_bytes(m.graph, m._sites)
    assert len(data) < len(before) / 4
    ids = np.array([[1, 3, 4, 5, 2]], np.int64)
    r = m.run({"input_ids": ids})
    # the same probabilities as a session built the old way, from a fully loaded and re-serialised copy
    full = onnx.load(str(path))
    full.graph.output.extend(helper.make_empty_tensor_value_info(f"p{i}") for i in range(2))
    sess = ort.InferenceSession(full.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run([f"p{i}" for i in range(2)], {"input_ids": ids})
    for got, w in zip(r.maps, want):
        np.testing.assert_array_equal(got.array(), w)
    assert path.read_bytes() == before


def test_no_probe_for_raw_feeds_or_huge_declared_inputs(tmp_path, capsys):
    """issue 9: a tiny file declaring a huge input made inspect run it at that size; raw feeds need no probe either."""
    import json

    from attnviz.cli import main

    b = Builder()
    pv_layer(b, 0)
    b.outputs = [helper.make_tensor_value_info(b.x, TensorProto.FLOAT, None)]
    path = b.finish(tmp_path / "big.onnx")
    m = onnx.load(str(path))
    dims = m.graph.input[0].type.tensor_type.shape.dim
    dims[0].dim_value, dims[1].dim_value = 64, 4096  # 64 x 4096 x 8 floats: 2 M elements, maps 64x2x4096² floats
    onnx.save(m, str(path))
    assert main(["inspect", str(path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["probed"] is False and len(d["sites"]) == 1
    small = Builder()
    pv_layer(small, 0)
    small.outputs = [helper.make_tensor_value_info(small.x, TensorProto.FLOAT, None)]
    am = open_model(small.finish(tmp_path / "small.onnx"), provider="cpu")
    r = am.analyze(feeds={"x": X})
    assert am._probed is False and len(r.maps) == 1
