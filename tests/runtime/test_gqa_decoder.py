"""Issue 22 item 3, GroupQueryAttention: the attention of onnxruntime-genai style decoders (and the Hub's files made
by its builder) is one com.microsoft GroupQueryAttention node a layer, with grouped KV heads, a past/present cache,
seqlens_k / total_sequence_length and rotary inside the op.  Built here by hand (two layers, projections as
MatMuls), run for the prompt and then for a cached step fed the prompt's present; every map equals numpy's
softmax(QKᵀ/√d + causal mask) over the grouped heads, with rotary applied to Q and K the way the op documents it
(and with its softcap and sliding window)."""

from __future__ import annotations

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
    nodes, inputs, outputs = [], [helper.make_tensor_value_info("x", et, [B, "s", HIDDEN])], []
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
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kv}", et, [B, HKV, "past", D]))
            outputs.append(helper.make_tensor_value_info(f"present.{i}.{kv}", et, [B, HKV, "total", D]))
    inputs += [
        helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, [B]),
        helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, []),
    ]
    outputs.insert(0, helper.make_tensor_value_info(x, et, [B, "s", HIDDEN]))
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


def reference(w, xs: np.ndarray, rotary: bool, softcap: float = 0.0, local_window_size: int = -1) -> list[np.ndarray]:
    """numpy: every layer's probabilities over the whole sequence [B, H, T, T] (grouped KV heads, causal; scores
    soft-capped as c·tanh(s/c), keys further back than the window masked, as the op documents)."""
    T = xs.shape[1]
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
    return maps


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
    want = reference({k: v.astype(dtype) for k, v in w.items()}, xs, rotary, **attrs)  # the weights the graph holds
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
