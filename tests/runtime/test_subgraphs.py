"""Attention inside If / Loop / Scan bodies: found, labelled once, and its maps equal the unwrapped graph's."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import tiny_text_model

from attnviz.runtime import open_model


def _rename(graph: onnx.GraphProto, prefix: str, keep: set[str]) -> onnx.GraphProto:
    """A copy of ``graph``'s nodes as a body: every tensor it makes gets ``prefix``; outer names stay."""
    g = onnx.GraphProto()
    g.CopyFrom(graph)
    made = {o for n in g.node for o in n.output if o}

    def r(t):
        return prefix + t if t in made and t not in keep else t

    for n in g.node:
        n.name = prefix + n.name if n.name else n.name
        n.input[:] = [r(t) for t in n.input]
        n.output[:] = [r(t) for t in n.output]
    return g


def if_wrapped(src, dst, prefixes=("then/", "else/"), drop_else_layer=False):
    """The whole decoder as both branches of an If on a bool input (as in optimum's decoder_model_merged)."""
    m = onnx.load(str(src))
    g = m.graph
    branches = []
    for bi, p in enumerate(prefixes):
        body = _rename(g, p, keep=set())
        nodes = list(body.node)
        if drop_else_layer and p == prefixes[1]:
            # the else branch skips layer 1's attention: x2 = x1
            first = next(i for i, n in enumerate(nodes) if "layers.1" in n.name)
            rest = [n for n in nodes[first:] if "layers.1" not in n.name]
            nodes = nodes[:first] + [helper.make_node("Identity", [p + "x1"], [p + "x2"])] + rest
        out_name = p + "logits"
        bg = helper.make_graph(
            nodes, f"branch{bi}", [], [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, None)]
        )
        branches.append(bg)
    node = helper.make_node(
        "If", ["use_cache_branch"], ["logits"], then_branch=branches[0], else_branch=branches[1], name="merged_if"
    )
    inputs = list(g.input) + [helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [])]
    graph = helper.make_graph([node], "merged", inputs, list(g.output), initializer=list(g.initializer))
    out = helper.make_model(graph, opset_imports=m.opset_import, producer_name="attnviz-tests")
    out.ir_version = m.ir_version
    out.metadata_props.extend(m.metadata_props)
    onnx.checker.check_model(out)
    onnx.save(out, str(dst))
    return dst


@pytest.fixture
def decoder(tmp_path):
    return tiny_text_model(tmp_path / "dec.onnx", layers=2, heads=2, causal=True, classifier=False)


IDS = np.array([[3, 4, 5, 6, 7], [8, 9, 10, 11, 3]], np.int64)


@pytest.mark.parametrize("branch", [True, False])
@pytest.mark.parametrize("prefixes", [("then/", "else/"), ("", "")], ids=["renamed", "same-names"])
def test_if_wrapped_decoder_equals_unwrapped(decoder, tmp_path, branch, prefixes):
    ref = open_model(decoder, provider="cpu").run({"input_ids": IDS})
    wrapped = if_wrapped(decoder, tmp_path / "merged.onnx", prefixes)
    m = open_model(wrapped, provider="cpu")
    # both branches hold layers 0 and 1: two sites, not four
    assert [(s.stack, s.kind, s.layer) for s in m.sites] == [("decoder", "self", 0), ("decoder", "self", 1)]
    r = m.run({"input_ids": IDS, "use_cache_branch": np.array(branch)})
    assert [(s.stack, s.kind, s.layer) for s in r.sites] == [(s.stack, s.kind, s.layer) for s in ref.sites]
    assert len(r.maps) == 2
    for got, want in zip(r.maps, ref.maps):
        np.testing.assert_allclose(got.array(), want.array(), atol=1e-6)
    np.testing.assert_allclose(r.outputs["logits"], ref.outputs["logits"], atol=1e-5)


def test_if_branch_sites_that_differ_report_the_branch_that_ran(decoder, tmp_path):
    ref = open_model(decoder, provider="cpu").run({"input_ids": IDS})
    wrapped = if_wrapped(decoder, tmp_path / "merged.onnx", drop_else_layer=True)
    m = open_model(wrapped, provider="cpu")
    full = m.run({"input_ids": IDS, "use_cache_branch": np.array(True)})
    assert len(full.maps) == 2
    for got, want in zip(full.maps, ref.maps):
        np.testing.assert_allclose(got.array(), want.array(), atol=1e-6)
    short = m.run({"input_ids": IDS, "use_cache_branch": np.array(False)})  # the else branch has layer 0 only
    assert [(s.stack, s.kind, s.layer) for s in short.sites] == [("decoder", "self", 0)]
    np.testing.assert_allclose(short.maps[0].array(), ref.maps[0].array(), atol=1e-6)


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def loop_model(path, iters=3, heads=2, d=8, seed=0):
    """One shared attention layer applied ``iters`` times by a Loop (x carried); attention in the body."""
    rng = np.random.default_rng(seed)
    dh = d // heads
    W = {w: (rng.standard_normal((d, d)) * 0.5).astype(np.float32) for w in "qkv"}
    inits = [numpy_helper.from_array(a, f"W{w}") for w, a in W.items()]
    inits += [
        numpy_helper.from_array(np.array([0, 0, heads, dh], np.int64), "bthd"),
        numpy_helper.from_array(np.array([0, 0, d], np.int64), "btd"),
        numpy_helper.from_array(np.array(1 / np.sqrt(dh), np.float32), "scale"),
        numpy_helper.from_array(np.array(iters, np.int64), "n_iter"),
        numpy_helper.from_array(np.array(True), "true"),
    ]
    body_nodes = [helper.make_node("Identity", ["cond_in"], ["cond_out"])]
    for w in "qkv":
        perm = [0, 2, 3, 1] if w == "k" else [0, 2, 1, 3]
        body_nodes += [
            helper.make_node("MatMul", ["x_in", f"W{w}"], [f"{w}_l"]),
            helper.make_node("Reshape", [f"{w}_l", "bthd"], [f"{w}_r"]),
            helper.make_node("Transpose", [f"{w}_r"], [f"{w}_t"], perm=perm),
        ]
    body_nodes += [
        helper.make_node("MatMul", ["q_t", "k_t"], ["s"], name="body/qk"),
        helper.make_node("Mul", ["s", "scale"], ["ss"]),
        helper.make_node("Softmax", ["ss"], ["p"], axis=-1, name="body/Softmax"),
        helper.make_node("MatMul", ["p", "v_t"], ["o"]),
        helper.make_node("Transpose", ["o"], ["o_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["o_t", "btd"], ["o_r"]),
        helper.make_node("Add", ["x_in", "o_r"], ["x_out"]),
    ]
    body = helper.make_graph(
        body_nodes,
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x_in", TensorProto.FLOAT, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x_out", TensorProto.FLOAT, None),
        ],
    )
    nodes = [helper.make_node("Loop", ["n_iter", "true", "x"], ["y"], body=body, name="layers")]
    graph = helper.make_graph(
        nodes,
        "looped",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "t", d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "t", d])],
        initializer=inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))

    def reference(x):
        maps = []
        for _ in range(iters):
            b, t, _ = x.shape
            q, k, v = ((x @ W[w]).reshape(b, t, heads, dh).transpose(0, 2, 1, 3) for w in "qkv")
            p = _softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh))
            maps.append(p)
            x = x + (p @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
        return maps

    return path, reference


def test_loop_body_attention_gives_one_map_per_iteration(tmp_path):
    path, reference = loop_model(tmp_path / "loop.onnx", iters=3)
    x = np.random.default_rng(1).standard_normal((2, 5, 8)).astype(np.float32)
    m = open_model(path, provider="cpu")
    assert len(m.sites) == 1  # one site in the graph ...
    r = m.run({"x": x})
    want = reference(x)
    assert len(r.maps) == 3  # ... three layers at run time
    assert [s.layer for s in r.sites] == [0, 1, 2]
    for got, ref in zip(r.maps, want):
        np.testing.assert_allclose(got.array(), ref, atol=1e-5)


def scan_over_layers(path, layers=3, heads=2, d=8, seed=0):
    """JAX-style: stacked per-layer weights [L, D, D] are scanned, the hidden state is carried; attention in the body."""
    rng = np.random.default_rng(seed)
    dh = d // heads
    W = {w: (rng.standard_normal((layers, d, d)) * 0.5).astype(np.float32) for w in "qkv"}
    inits = [numpy_helper.from_array(a, f"W{w}_all") for w, a in W.items()]
    inits += [
        numpy_helper.from_array(np.array([0, 0, heads, dh], np.int64), "bthd"),
        numpy_helper.from_array(np.array([0, 0, d], np.int64), "btd"),
        numpy_helper.from_array(np.array(1 / np.sqrt(dh), np.float32), "scale"),
    ]
    body_nodes = []
    for w in "qkv":
        perm = [0, 2, 3, 1] if w == "k" else [0, 2, 1, 3]
        body_nodes += [
            helper.make_node("MatMul", ["x_in", f"W{w}"], [f"{w}_l"]),
            helper.make_node("Reshape", [f"{w}_l", "bthd"], [f"{w}_r"]),
            helper.make_node("Transpose", [f"{w}_r"], [f"{w}_t"], perm=perm),
        ]
    body_nodes += [
        helper.make_node("MatMul", ["q_t", "k_t"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["ss"]),
        helper.make_node("Softmax", ["ss"], ["p"], axis=-1, name="scan/Softmax"),
        helper.make_node("MatMul", ["p", "v_t"], ["o"]),
        helper.make_node("Transpose", ["o"], ["o_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["o_t", "btd"], ["o_r"]),
        helper.make_node("Add", ["x_in", "o_r"], ["x_out"]),
    ]
    body = helper.make_graph(
        body_nodes,
        "layer",
        [helper.make_tensor_value_info("x_in", TensorProto.FLOAT, None)]
        + [helper.make_tensor_value_info(f"W{w}", TensorProto.FLOAT, [d, d]) for w in "qkv"],
        [helper.make_tensor_value_info("x_out", TensorProto.FLOAT, None)],
    )
    node = helper.make_node(
        "Scan", ["x", "Wq_all", "Wk_all", "Wv_all"], ["y"], body=body, num_scan_inputs=3, name="layers"
    )
    graph = helper.make_graph(
        [node],
        "scanned",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "t", d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "t", d])],
        initializer=inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))

    def reference(x):
        maps = []
        b, t, _ = x.shape
        for layer in range(layers):
            q, k, v = ((x @ W[w][layer]).reshape(b, t, heads, dh).transpose(0, 2, 1, 3) for w in "qkv")
            p = _softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh))
            maps.append(p)
            x = x + (p @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
        return maps

    return path, reference


def test_scan_over_stacked_layer_weights(tmp_path):
    path, reference = scan_over_layers(tmp_path / "scan.onnx", layers=3)
    x = np.random.default_rng(2).standard_normal((2, 4, 8)).astype(np.float32)
    r = open_model(path, provider="cpu").run({"x": x})
    assert [(s.stack, s.kind, s.layer) for s in r.sites] == [("encoder", "self", i) for i in range(3)]
    for got, want in zip(r.maps, reference(x)):
        np.testing.assert_allclose(got.array(), want, atol=1e-5)
