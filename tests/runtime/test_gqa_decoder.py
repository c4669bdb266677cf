"""Issue 22 item 3, GroupQueryAttention: the attention of onnxruntime-genai style decoders (and the Hub's files made
by its builder) is one com.microsoft GroupQueryAttention node a layer, with grouped KV heads, a past/present cache,
seqlens_k / total_sequence_length and rotary inside the op.  Built here by hand (two layers, projections as
MatMuls), run for the prompt and then for a cached step fed the prompt's present; every map equals numpy's
softmax(QKᵀ/√d + causal mask) over the grouped heads, with rotary applied to Q and K the way the op documents it
(and with its softcap and sliding window).  As a whole genai-style model (input_ids and attention_mask in,
seqlens_k / total_sequence_length computed inside) it generates through its cache: numpy's greedy tokens, and
every step's rows are numpy's maps over the sequence."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from attnviz.cli import main
from attnviz.runtime import open_model

B, H, HKV, D, LAYERS, MAX_POS = 2, 4, 2, 16, 2, 32  # rotary inside the op wants D % 16 == 0
HIDDEN = H * D


def _weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = {}
    for i in range(LAYERS):
        w[f"wq{i}"] = rng.standard_normal((HIDDEN, H * D)) / np.sqrt(HIDDEN)
        w[f"wk{i}"] = rng.standard_normal((HIDDEN, HKV * D)) / np.sqrt(HIDDEN)
        w[f"wv{i}"] = rng.standard_normal((HIDDEN, HKV * D)) / np.sqrt(HIDDEN)
        w[f"wo{i}"] = rng.standard_normal((H * D, HIDDEN)) / np.sqrt(HIDDEN)
    return w


def _rotary_tables() -> tuple[np.ndarray, np.ndarray]:
    inv = 1.0 / (10000 ** (np.arange(0, D, 2) / D))
    angles = np.arange(MAX_POS)[:, None] * inv[None]
    return np.cos(angles), np.sin(angles)


def build(path, rotary: bool, dtype=np.float32, seed: int = 0, **attrs):
    """A two-layer decoder: x -> (q, k, v projections -> GroupQueryAttention -> output projection) x 2; ``attrs``
    go to the op (softcap, local_window_size)."""
    et = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    w = _weights(seed)
    inits = [numpy_helper.from_array(v.astype(dtype), k) for k, v in w.items()]
    if rotary:
        cos, sin = _rotary_tables()
        inits += [numpy_helper.from_array(cos.astype(dtype), "cos"), numpy_helper.from_array(sin.astype(dtype), "sin")]
    nodes, inputs, outputs = [], [helper.make_tensor_value_info("x", et, ["batch", "s", HIDDEN])], []
    x = "x"
    for i in range(LAYERS):
        for p in "qkv":
            nodes.append(helper.make_node("MatMul", [x, f"w{p}{i}"], [f"{p}{i}"], name=f"/layers.{i}/{p}_proj"))
        ins = [f"q{i}", f"k{i}", f"v{i}", f"past_key_values.{i}.key", f"past_key_values.{i}.value"]
        ins += ["seqlens_k", "total_sequence_length"] + (["cos", "sin"] if rotary else [])
        nodes.append(
            helper.make_node(
                "GroupQueryAttention",
                ins,
                [f"attn{i}", f"present.{i}.key", f"present.{i}.value"],
                domain="com.microsoft",
                name=f"/layers.{i}/attn/GroupQueryAttention",
                num_heads=H,
                kv_num_heads=HKV,
                do_rotary=int(rotary),
                **attrs,
            )
        )
        nodes.append(helper.make_node("MatMul", [f"attn{i}", f"wo{i}"], [f"h{i}"], name=f"/layers.{i}/o_proj"))
        x = f"h{i}"
        for kv in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kv}", et, ["batch", HKV, "past", D]))
            outputs.append(helper.make_tensor_value_info(f"present.{i}.{kv}", et, ["batch", HKV, "total", D]))
    inputs += [
        helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["batch"]),
        helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, []),
    ]
    outputs.insert(0, helper.make_tensor_value_info(x, et, ["batch", "s", HIDDEN]))
    g = helper.make_graph(nodes, "gqa_decoder", inputs, outputs, initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return w


def _rotate(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Non-interleaved rotary on [B, heads, S, D] at positions [S]: halves (x1, x2) -> (x1·cos − x2·sin, x2·cos + x1·sin)."""
    cos, sin = _rotary_tables()
    c, s = cos[pos][None, None], sin[pos][None, None]
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)


def reference(
    w, xs: np.ndarray, rotary: bool, softcap: float = 0.0, local_window_size: int = -1
) -> tuple[list[np.ndarray], np.ndarray]:
    """numpy: every layer's probabilities over the whole sequence [B, H, T, T] (grouped KV heads, causal; scores
    soft-capped as c·tanh(s/c), keys further back than the window masked, as the op documents), and the last
    layer's output."""
    B, T = xs.shape[:2]
    pos = np.arange(T)
    x = xs.astype(np.float64)
    maps = []
    for i in range(LAYERS):
        q = (x @ w[f"wq{i}"]).reshape(B, T, H, D).transpose(0, 2, 1, 3)
        k = (x @ w[f"wk{i}"]).reshape(B, T, HKV, D).transpose(0, 2, 1, 3)
        v = (x @ w[f"wv{i}"]).reshape(B, T, HKV, D).transpose(0, 2, 1, 3)
        if rotary:
            q, k = _rotate(q, pos), _rotate(k, pos)
        k, v = np.repeat(k, H // HKV, axis=1), np.repeat(v, H // HKV, axis=1)  # head h reads KV head h // (H/HKV)
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D)
        if softcap:
            s = softcap * np.tanh(s / softcap)
        hidden = pos[None, :] > pos[:, None]
        if local_window_size > 0:
            hidden |= pos[None, :] <= pos[:, None] - local_window_size
        s = np.where(hidden, -np.inf, s)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        maps.append(p)
        x = (p @ v).transpose(0, 2, 1, 3).reshape(B, T, H * D) @ w[f"wo{i}"]
    return maps, x


def _feeds(x, past: dict, dtype) -> dict:
    total = x.shape[1] + next(iter(past.values())).shape[2]
    return {
        "x": x.astype(dtype),
        **past,
        "seqlens_k": np.full(B, total - 1, np.int32),
        "total_sequence_length": np.array(total, np.int32),
    }


@pytest.mark.parametrize(
    ("rotary", "dtype", "tol", "attrs"),
    [
        (False, np.float32, 1e-5, {}),
        (True, np.float32, 1e-5, {}),
        (True, np.float16, 1e-3, {}),
        (True, np.float32, 1e-5, {"softcap": 2.0}),
        (False, np.float32, 1e-5, {"local_window_size": 3}),
    ],
    ids=["plain", "rotary", "rotary-fp16", "softcap", "sliding-window"],
)
def test_prompt_and_cached_step_maps_equal_numpy(tmp_path, rotary, dtype, tol, attrs):
    S, STEPS = 5, 2
    w = build(tmp_path / "gqa.onnx", rotary, dtype, **attrs)
    xs = np.random.default_rng(1).standard_normal((B, S + STEPS, HIDDEN)).astype(dtype)
    want, _ = reference({k: v.astype(dtype) for k, v in w.items()}, xs, rotary, **attrs)  # the graph's weights
    m = open_model(tmp_path / "gqa.onnx", provider="cpu")
    assert [(s.stack, s.kind, s.layer, s.method, s.heads) for s in m.sites] == [
        ("decoder", "self", i, "gqa-qk", H) for i in range(LAYERS)
    ]
    past = {
        f"past_key_values.{i}.{kv}": np.zeros((B, HKV, 0, D), dtype) for i in range(LAYERS) for kv in ("key", "value")
    }
    start = 0
    for n in (S, *([1] * STEPS)):  # the prompt, then one token a step through the cache
        r = m.run(_feeds(xs[:, start : start + n], past, dtype))
        for got, ref in zip(r.maps, want):
            a = got.array()
            assert a.dtype == np.float32 and a.shape == (B, H, n, start + n)
            assert np.abs(a - ref[:, :, start : start + n, : start + n]).max() < tol
        past = {k: r.outputs[k.replace("past_key_values", "present")] for k in past}
        start += n
    assert start == S + STEPS


def test_inspect_says_the_op_hands_out_its_probabilities(tmp_path, capsys):
    build(tmp_path / "gqa.onnx", rotary=True)
    assert main(["inspect", str(tmp_path / "gqa.onnx"), "--no-probe"]) == 0
    out = capsys.readouterr().out
    assert out.count(" gqa-qk ") == LAYERS
    assert "gqa-qk: GroupQueryAttention's own probabilities (its output_qk, qk_output=2)" in out


VOCAB = ["[PAD]", "[BOS]", "[EOS]", "the", "cat", "sat", "on", "mat", "a", "dog", "ran", "home"]


def build_lm(path, seed: int = 0):
    """The decoder as onnxruntime-genai writes a whole model: input_ids, attention_mask and the cache in, logits
    and present out; seqlens_k and total_sequence_length computed from the mask inside the graph."""
    rng = np.random.default_rng(seed + 7)
    emb = rng.standard_normal((len(VOCAB), HIDDEN))
    head = rng.standard_normal((HIDDEN, len(VOCAB)))
    tmp = path.with_suffix(".layers.onnx")
    w = build(tmp, rotary=True)
    layers = onnx.load(str(tmp))
    tmp.unlink()
    g = layers.graph
    ints = [
        numpy_helper.from_array(emb.astype(np.float32), "emb"),
        numpy_helper.from_array(head.astype(np.float32), "lm_head"),
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
    ]
    front = [
        helper.make_node("Gather", ["emb", "input_ids"], ["x"], name="embed"),
        helper.make_node("ReduceSum", ["attention_mask", "axis1"], ["mask_sum"], keepdims=0),
        helper.make_node("Sub", ["mask_sum", "one"], ["mask_last"]),
        helper.make_node("Cast", ["mask_last"], ["seqlens_k"], to=TensorProto.INT32),
        helper.make_node("Shape", ["attention_mask"], ["mask_shape"], start=1, end=2),
        helper.make_node("Squeeze", ["mask_shape"], ["mask_len"]),
        helper.make_node("Cast", ["mask_len"], ["total_sequence_length"], to=TensorProto.INT32),
    ]
    last = g.output[0].name
    nodes = front + list(g.node) + [helper.make_node("MatMul", [last, "lm_head"], ["logits"], name="lm_head")]
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"]),
        *[i for i in g.input if i.name.startswith("past_key_values")],
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", len(VOCAB)])]
    outputs += [o for o in g.output if o.name.startswith("present")]
    lm = helper.make_graph(nodes, "genai_lm", inputs, outputs, initializer=list(g.initializer) + ints)
    m = helper.make_model(lm, opset_imports=layers.opset_import, producer_name="onnxruntime-genai")
    m.ir_version = 8
    meta = {
        "attnviz.task": "lm",
        "attnviz.vocab": json.dumps(VOCAB),
        "attnviz.special": '{"pad": 0, "bos": 1, "eos": 2}',
    }
    for k, v in meta.items():
        m.metadata_props.add(key=k, value=v)
    onnx.save(m, str(path))
    return w, emb, head


def test_generation_through_the_cache_gives_numpy_maps_and_tokens(tmp_path):
    w, emb, head = build_lm(tmp_path / "model.onnx")
    m = open_model(tmp_path / "model.onnx", provider="cpu")
    r = m.analyze(text="the cat sat", generate=3, use_cache=True)
    assert r.info["generation"] == "kv-cache"
    ids = [VOCAB.index(t) for t in ("the", "cat", "sat")]
    for _ in range(3):  # numpy's greedy decoding of the same weights, the whole sequence each time
        maps, x = reference(w, emb[ids][None], rotary=True)
        ids.append(int(np.argmax(x[0, -1] @ head)))
    assert r.info["generated_ids"] == ids[3:]
    # the prompt's rows, then each cached step's row: the maps over the sequence fed (the last token never is)
    want, _ = reference(w, emb[ids[:-1]][None], rotary=True)
    assert [mp.shape for mp in r.maps] == [(1, H, 5, 5)] * LAYERS
    for got, ref in zip(r.maps, want):
        assert np.abs(got.array() - ref).max() < 1e-5
