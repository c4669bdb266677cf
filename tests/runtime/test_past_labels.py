"""Labels when keys come from past_key_values inputs (optimum decoder_with_past_model.onnx layout): cross-attention
reads the encoder half of the cache, self-attention the decoder's own; layers numbered per kind (0,0,1,1)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from attnviz.runtime import open_model

B, TNEW, TPAST, TSRC, D, H, L, V = 2, 1, 3, 6, 8, 2, 2, 20
DH = D // H


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def decoder_with_past(path, seed=0):
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((V, D)).astype(np.float32)
    inits = [
        numpy_helper.from_array(emb, "emb"),
        numpy_helper.from_array(np.array([0, 0, H, DH], np.int64), "bthd"),
        numpy_helper.from_array(np.array([0, 0, D], np.int64), "btd"),
        numpy_helper.from_array(np.array(1 / np.sqrt(DH), np.float32), "scale"),
    ]
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["h0"])]
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "t"]),
        helper.make_tensor_value_info("encoder_attention_mask", TensorProto.INT64, ["b", "s"]),
    ]
    outputs = []
    W = {}
    x = "h0"

    def proj(name, src):
        W[name] = (rng.standard_normal((D, D)) * 0.6).astype(np.float32)
        inits.append(numpy_helper.from_array(W[name], name))
        nodes.extend(
            [
                helper.make_node("MatMul", [src, name], [name + "_l"]),
                helper.make_node("Reshape", [name + "_l", "bthd"], [name + "_r"]),
                helper.make_node("Transpose", [name + "_r"], [name + "_t"], perm=[0, 2, 1, 3]),
            ]
        )
        return name + "_t"

    def attend(p, q, k, v, x_in):
        nodes.extend(
            [
                helper.make_node("Transpose", [k], [p + "kT"], perm=[0, 1, 3, 2]),
                helper.make_node("MatMul", [q, p + "kT"], [p + "s"], name=p + "qk"),
                helper.make_node("Mul", [p + "s", "scale"], [p + "ss"]),
                helper.make_node("Softmax", [p + "ss"], [p + "p"], axis=-1, name=p + "Softmax"),
                helper.make_node("MatMul", [p + "p", v], [p + "o"]),
                helper.make_node("Transpose", [p + "o"], [p + "ot"], perm=[0, 2, 1, 3]),
                helper.make_node("Reshape", [p + "ot", "btd"], [p + "or"]),
                helper.make_node("Add", [x_in, p + "or"], [p + "x"]),
            ]
        )
        return p + "x"

    for l in range(L):
        for half in ("decoder", "encoder"):
            for kv in ("key", "value"):
                name = f"past_key_values.{l}.{half}.{kv}"
                inputs.append(
                    helper.make_tensor_value_info(
                        name, TensorProto.FLOAT, ["b", H, "past" if half == "decoder" else "s", DH]
                    )
                )
        p = f"/model/decoder/layers.{l}/self_attn/"
        q = proj(f"Wq{l}", x)
        kn, vn = proj(f"Wk{l}", x), proj(f"Wv{l}", x)
        nodes += [
            helper.make_node("Concat", [f"past_key_values.{l}.decoder.key", kn], [f"present.{l}.decoder.key"], axis=2),
            helper.make_node(
                "Concat", [f"past_key_values.{l}.decoder.value", vn], [f"present.{l}.decoder.value"], axis=2
            ),
        ]
        outputs += [
            helper.make_tensor_value_info(f"present.{l}.decoder.{kv}", TensorProto.FLOAT, None)
            for kv in ("key", "value")
        ]
        x = attend(p, q, f"present.{l}.decoder.key", f"present.{l}.decoder.value", x)
        p = f"/model/decoder/layers.{l}/encoder_attn/"
        qc = proj(f"Wc{l}", x)
        x = attend(p, qc, f"past_key_values.{l}.encoder.key", f"past_key_values.{l}.encoder.value", x)
    outputs.insert(0, helper.make_tensor_value_info(x, TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "decoder_with_past", inputs, outputs, initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))

    def reference(feeds):
        maps = []
        h = emb[feeds["input_ids"]]
        split = lambda a: a.reshape(B, -1, H, DH).transpose(0, 2, 1, 3)
        merge = lambda a: a.transpose(0, 2, 1, 3).reshape(B, -1, D)
        for l in range(L):
            k = np.concatenate([feeds[f"past_key_values.{l}.decoder.key"], split(h @ W[f"Wk{l}"])], 2)
            v = np.concatenate([feeds[f"past_key_values.{l}.decoder.value"], split(h @ W[f"Wv{l}"])], 2)
            p = _softmax(split(h @ W[f"Wq{l}"]) @ k.transpose(0, 1, 3, 2) / np.sqrt(DH))
            maps.append(p)
            h = h + merge(p @ v)
            ek, ev = feeds[f"past_key_values.{l}.encoder.key"], feeds[f"past_key_values.{l}.encoder.value"]
            p = _softmax(split(h @ W[f"Wc{l}"]) @ ek.transpose(0, 1, 3, 2) / np.sqrt(DH))
            maps.append(p)
            h = h + merge(p @ ev)
        return maps

    return path, reference


def test_cross_attention_from_the_encoder_cache_is_labelled_cross(tmp_path):
    path, reference = decoder_with_past(tmp_path / "decoder_with_past_model.onnx")
    m = open_model(path, provider="cpu")
    want = [("decoder", "self", 0), ("decoder", "cross", 0), ("decoder", "self", 1), ("decoder", "cross", 1)]
    assert [(s.stack, s.kind, s.layer) for s in m.sites] == want
    assert m.kind == "encoder-decoder"
    rng = np.random.default_rng(3)
    feeds = {"input_ids": rng.integers(0, V, (B, TNEW)), "encoder_attention_mask": np.ones((B, TSRC), np.int64)}
    for l in range(L):
        for kv in ("key", "value"):
            feeds[f"past_key_values.{l}.decoder.{kv}"] = rng.standard_normal((B, H, TPAST, DH)).astype(np.float32)
            feeds[f"past_key_values.{l}.encoder.{kv}"] = rng.standard_normal((B, H, TSRC, DH)).astype(np.float32)
    r = m.run(feeds)
    assert [(s.stack, s.kind, s.layer) for s in r.sites] == want
    for got, ref in zip(r.maps, reference(feeds)):
        np.testing.assert_allclose(got.array(), ref, atol=1e-5)
    # a step's query row against every key so far (self) / every source token (cross)
    assert [mp.shape[2:] for mp in r.maps] == [(TNEW, TPAST + TNEW), (TNEW, TSRC)] * L
