"""Small ONNX models built with onnx.helper alone (no torch): fast fixtures for engine, GUI and figure tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

VOCAB = ["[PAD]", "[CLS]", "[SEP]", "the", "cat", "sat", "on", "mat", "a", "dog", "ran", "home"]


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name=name)


def tiny_text_model(
    path: Path,
    layers: int = 2,
    heads: int = 2,
    d: int = 8,
    vocab=VOCAB,
    metadata: bool = True,
    classifier: bool = True,
    seed: int = 0,
    causal: bool = False,
    sinks: np.ndarray | None = None,
) -> Path:
    """input_ids [B,T] -> embeddings -> `layers` self-attention layers -> logits [B, n_labels].

    ``sinks`` [heads]: attention sinks as optimum exports GPT-OSS (:func:`sink_model`): each head's logit joins
    every row of scores, the Softmax runs over T+1 columns and the sink's column is sliced off before P·V."""
    rng = np.random.default_rng(seed)
    D, H, dh = d, heads, d // heads
    nodes, inits = [], []
    inits.append(_init("emb", rng.standard_normal((len(vocab), D)).astype(np.float32)))
    inits.append(_init("scale", np.array(1.0 / np.sqrt(dh), np.float32)))
    inits.append(_init("shape_bthd", np.array([0, 0, H, dh], np.int64)))
    inits.append(_init("shape_btd", np.array([0, 0, D], np.int64)))
    nodes.append(helper.make_node("Gather", ["emb", "input_ids"], ["x0"], name="embed"))
    x = "x0"
    if causal:
        # mask[i, j] = -1e4 where j > i, built from the sequence length
        inits += [
            _init("one", np.array(1, np.int64)),
            _init("zero", np.array(0, np.int64)),
            _init("neg", np.array(-1e4, np.float32)),
            _init("fzero", np.array(0.0, np.float32)),
            _init("idx1", np.array([1], np.int64)),
        ]
        nodes += [
            helper.make_node("Shape", ["input_ids"], ["ids_shape"]),
            helper.make_node("Gather", ["ids_shape", "one"], ["T"], axis=0),
            helper.make_node("Range", ["zero", "T", "one"], ["ar"]),
            helper.make_node("Unsqueeze", ["ar", "idx1"], ["ar_col"]),
            helper.make_node("Greater", ["ar", "ar_col"], ["upper"]),
            helper.make_node("Where", ["upper", "neg", "fzero"], ["causal_mask"]),
        ]
    for l in range(layers):
        p = f"/{'decoder' if causal else 'encoder'}/layers.{l}/attn/"
        for w in "qkv":
            inits.append(_init(f"W{w}{l}", (rng.standard_normal((D, D)) * 0.7).astype(np.float32)))
            nodes.append(helper.make_node("MatMul", [x, f"W{w}{l}"], [f"{w}{l}_lin"], name=p + f"{w}_proj"))
            nodes.append(
                helper.make_node("Reshape", [f"{w}{l}_lin", "shape_bthd"], [f"{w}{l}_r"], name=p + f"{w}_reshape")
            )
            perm = [0, 2, 3, 1] if w == "k" else [0, 2, 1, 3]
            nodes.append(
                helper.make_node("Transpose", [f"{w}{l}_r"], [f"{w}{l}_t"], perm=perm, name=p + f"{w}_transpose")
            )
        nodes.append(helper.make_node("MatMul", [f"q{l}_t", f"k{l}_t"], [f"s{l}"], name=p + "MatMul"))
        nodes.append(helper.make_node("Mul", [f"s{l}", "scale"], [f"ss{l}"], name=p + "Mul"))
        pre = f"ss{l}"
        if causal:
            nodes.append(helper.make_node("Add", [pre, "causal_mask"], [f"sm{l}"], name=p + "Add"))
            pre = f"sm{l}"
        if sinks is not None:
            if l == 0:
                inits += [
                    _init("sink_logits", np.asarray(sinks, np.float32).reshape(1, H, 1, 1)),
                    _init("sk_0", np.array([0], np.int64)),
                    _init("sk_3", np.array([3], np.int64)),
                    _init("sk_4", np.array([4], np.int64)),
                    _init("sk_1", np.array([1], np.int64)),
                    _init("sk_last", np.array([-1], np.int64)),
                ]
            nodes += [
                helper.make_node("Shape", [pre], [f"sk_shape{l}"], name=p + "sink_shape"),
                helper.make_node("Slice", [f"sk_shape{l}", "sk_0", "sk_3"], [f"sk_bht{l}"], name=p + "sink_bht"),
                helper.make_node("Slice", [f"sk_shape{l}", "sk_3", "sk_4"], [f"sk_t{l}"], name=p + "sink_t"),
                helper.make_node("Concat", [f"sk_bht{l}", "sk_1"], [f"sk_col{l}"], axis=0, name=p + "sink_colshape"),
                helper.make_node("Expand", ["sink_logits", f"sk_col{l}"], [f"sk_x{l}"], name=p + "sink_expand"),
                helper.make_node("Concat", [pre, f"sk_x{l}"], [f"sk_s{l}"], axis=-1, name=p + "sink_concat"),
                helper.make_node("Softmax", [f"sk_s{l}"], [f"sk_p{l}"], axis=-1, name=p + "Softmax"),
                helper.make_node(
                    "Slice", [f"sk_p{l}", "sk_0", f"sk_t{l}", "sk_last"], [f"p{l}"], name=p + "sink_slice"
                ),
            ]
        else:
            nodes.append(helper.make_node("Softmax", [pre], [f"p{l}"], axis=-1, name=p + "Softmax"))
        nodes.append(helper.make_node("MatMul", [f"p{l}", f"v{l}_t"], [f"o{l}"], name=p + "MatMul_1"))
        nodes.append(helper.make_node("Transpose", [f"o{l}"], [f"o{l}_t"], perm=[0, 2, 1, 3], name=p + "out_transpose"))
        nodes.append(helper.make_node("Reshape", [f"o{l}_t", "shape_btd"], [f"o{l}_r"], name=p + "out_reshape"))
        nodes.append(helper.make_node("Add", [x, f"o{l}_r"], [f"x{l + 1}"], name=p + "residual"))
        x = f"x{l + 1}"
    outputs = []
    if classifier:
        inits.append(_init("Wc", rng.standard_normal((D, 2)).astype(np.float32)))
        inits.append(_init("axes1", np.array([1], np.int64)))
        nodes.append(helper.make_node("ReduceMean", [x, "axes1"], ["pooled"], keepdims=0, name="pool"))
        nodes.append(helper.make_node("MatMul", ["pooled", "Wc"], ["logits"], name="classifier"))
        nodes.append(helper.make_node("Softmax", ["logits"], ["probs"], axis=-1, name="classifier_softmax"))
        outputs = [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 2]),
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 2]),
        ]
    else:
        inits.append(_init("Wlm", rng.standard_normal((D, len(vocab))).astype(np.float32)))
        nodes.append(helper.make_node("MatMul", [x, "Wlm"], ["logits"], name="lm_head"))
        outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", len(vocab)])]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        outputs,
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="attnviz-tests")
    model.ir_version = 8
    if metadata:
        meta = {
            "attnviz.task": "sequence-classification" if classifier else "lm",
            "attnviz.vocab": json.dumps(list(vocab)),
            "attnviz.special": json.dumps(
                {"pad": 0, "cls": 1, "sep": 2} if not causal else {"pad": 0, "bos": 1, "eos": 2}
            ),
            "attnviz.labels": json.dumps(["A", "B"]),
        }
        for k, v in meta.items():
            model.metadata_props.add(key=k, value=v)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return Path(path)


def no_attention_model(path: Path) -> Path:
    """A linear classifier with a Softmax head: a Softmax that is not attention."""
    w = _init("W", np.ones((4, 3), np.float32))
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["b", 3])],
        initializer=[w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return Path(path)


def gqa_model(path: Path, seq: int = 5, heads: int = 4, kv_heads: int = 2, d: int = 8, seed: int = 0):
    """One com.microsoft GroupQueryAttention node (what onnxruntime's LLM exports use) and its numpy reference.

    Returns (path, feeds, reference probabilities [1, heads, seq, seq]).
    """
    B, S, H, Hkv = 1, seq, heads, kv_heads

    def vi(n, t, s):
        return helper.make_tensor_value_info(n, t, s)

    node = helper.make_node(
        "GroupQueryAttention",
        ["q", "k", "v", "pk", "pv", "seqlens_k", "total_len"],
        ["out", "present_k", "present_v"],
        domain="com.microsoft",
        num_heads=H,
        kv_num_heads=Hkv,
        name="gqa0",
    )
    proj = helper.make_node("MatMul", ["out", "W"], ["y"])
    g = helper.make_graph(
        [node, proj],
        "gqa",
        [
            vi("q", TensorProto.FLOAT, [B, "s", H * d]),
            vi("k", TensorProto.FLOAT, [B, "s", Hkv * d]),
            vi("v", TensorProto.FLOAT, [B, "s", Hkv * d]),
            vi("pk", TensorProto.FLOAT, [B, Hkv, "p", d]),
            vi("pv", TensorProto.FLOAT, [B, Hkv, "p", d]),
            vi("seqlens_k", TensorProto.INT32, [B]),
            vi("total_len", TensorProto.INT32, []),
        ],
        [vi("y", TensorProto.FLOAT, [B, "s", H * d])],
        initializer=[_init("W", np.eye(H * d, dtype=np.float32))],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    onnx.save(m, str(path))
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, S, H * d)).astype(np.float32)
    k = rng.standard_normal((B, S, Hkv * d)).astype(np.float32)
    v = rng.standard_normal((B, S, Hkv * d)).astype(np.float32)
    feeds = dict(
        q=q,
        k=k,
        v=v,
        pk=np.zeros((B, Hkv, 0, d), np.float32),
        pv=np.zeros((B, Hkv, 0, d), np.float32),
        seqlens_k=np.array([S - 1], np.int32),
        total_len=np.array(S, np.int32),
    )
    qh = q.reshape(B, S, H, d).transpose(0, 2, 1, 3)
    kh = np.repeat(k.reshape(B, S, Hkv, d).transpose(0, 2, 1, 3), H // Hkv, axis=1)
    s = qh @ kh.transpose(0, 1, 3, 2) / np.sqrt(d) + np.triu(np.full((S, S), -np.inf), 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    return Path(path), feeds, (p / p.sum(-1, keepdims=True)).astype(np.float32)


# the encoder's output inside the demo translation model (models/translation.onnx): where split_export cuts it
TRANSLATION_ENCODER_OUT = "/model/encoder/norm/LayerNormalization_output_0"


def split_export(src: Path, folder: Path, encoder_out: str = TRANSLATION_ENCODER_OUT) -> Path:
    """An optimum-style export folder (``encoder_model.onnx`` + ``decoder_model.onnx``) cut out of one
    encoder-decoder file with onnx.utils.extract_model, with optimum's input names: the encoder takes
    input_ids / attention_mask and gives last_hidden_state; the decoder takes input_ids, encoder_hidden_states and
    encoder_attention_mask.  No optimum, no torch: a folder model for fast tests."""
    import onnx.utils

    folder.mkdir(parents=True, exist_ok=True)
    cuts = {
        "encoder_model.onnx": (["input_ids", "attention_mask"], [encoder_out], {encoder_out: "last_hidden_state"}),
        "decoder_model.onnx": (
            ["decoder_input_ids", encoder_out, "attention_mask"],
            ["logits"],
            {
                encoder_out: "encoder_hidden_states",
                "decoder_input_ids": "input_ids",
                "attention_mask": "encoder_attention_mask",
            },
        ),
    }
    for name, (inputs, outputs, names) in cuts.items():
        tmp = folder / f"cut-{name}"
        onnx.utils.extract_model(str(src), str(tmp), inputs, outputs)
        m = onnx.load(str(tmp))
        tmp.unlink()
        for n in m.graph.node:
            n.input[:] = [names.get(x, x) for x in n.input]
            n.output[:] = [names.get(x, x) for x in n.output]
        for v in [*m.graph.input, *m.graph.output]:
            v.name = names.get(v.name, v.name)
        del m.metadata_props[:]  # a folder's files carry no attnviz metadata (optimum writes none)
        onnx.save(m, str(folder / name))
    return folder


def block_local_model(path: Path, block: int = 2, heads: int = 2, d: int = 8, seed: int = 0) -> Path:
    """A text encoder whose one attention layer is local in blocks, as LongT5's local encoder is: the sequence
    (its length a multiple of ``block``) cut into blocks of ``block`` queries, each attending to its own block's
    keys and its two neighbours' (zero keys past either end), so the Softmax sees ``[B, blocks, H, block,
    3*block]``: no one [query, key] map over the tokens.  input_ids [B, T] -> logits [B, T, vocab]."""
    rng = np.random.default_rng(seed)
    D, H, dh, L = d, heads, d // heads, block
    inits = [
        _init("emb", rng.standard_normal((len(VOCAB), D)).astype(np.float32)),
        _init("scale", np.array(1.0 / np.sqrt(dh), np.float32)),
        _init("to_blocks", np.array([0, -1, L, H, dh], np.int64)),  # [B, blocks, L, H, dh]
        _init("to_btd", np.array([0, -1, D], np.int64)),
        _init("pads", np.array([1, 1], np.int64)),
        _init("pad_axes", np.array([1], np.int64)),
        _init("axis1", np.array([1], np.int64)),
        _init("Wlm", rng.standard_normal((D, len(VOCAB))).astype(np.float32)),
    ]
    for i, (lo, hi) in enumerate(((0, -2), (1, -1), (2, 2**62))):  # previous, own and next block
        inits += [_init(f"lo{i}", np.array([lo], np.int64)), _init(f"hi{i}", np.array([hi], np.int64))]
    p = "/encoder/block.0/layer.0/LocalSelfAttention/"
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["x"], name="embed")]
    for w in "qkv":
        inits.append(_init(f"W{w}", (rng.standard_normal((D, D)) * 0.7).astype(np.float32)))
        nodes += [
            helper.make_node("MatMul", ["x", f"W{w}"], [f"{w}_lin"], name=p + f"{w}/MatMul"),
            helper.make_node("Reshape", [f"{w}_lin", "to_blocks"], [f"{w}_r"], name=p + f"{w}/Reshape"),
            helper.make_node("Transpose", [f"{w}_r"], [f"{w}_b"], perm=[0, 1, 3, 2, 4], name=p + f"{w}/Transpose"),
        ]
        if w == "q":
            continue
        nodes.append(helper.make_node("Pad", [f"{w}_b", "pads", "", "pad_axes"], [f"{w}_pad"], name=p + f"{w}/Pad"))
        for i in range(3):
            nodes.append(
                helper.make_node(
                    "Slice", [f"{w}_pad", f"lo{i}", f"hi{i}", "axis1"], [f"{w}_s{i}"], name=p + f"{w}/Slice_{i}"
                )
            )
        nodes.append(
            helper.make_node("Concat", [f"{w}_s{i}" for i in range(3)], [f"{w}3"], axis=3, name=p + f"{w}/Concat")
        )
    nodes += [
        helper.make_node("Transpose", ["k3"], ["k3_t"], perm=[0, 1, 2, 4, 3], name=p + "k/Transpose_1"),
        helper.make_node("MatMul", ["q_b", "k3_t"], ["scores"], name=p + "MatMul"),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"], name=p + "Mul"),
        helper.make_node("Softmax", ["scaled"], ["probs"], axis=-1, name=p + "Softmax"),
        helper.make_node("MatMul", ["probs", "v3"], ["ctx"], name=p + "MatMul_1"),
        helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 1, 3, 2, 4], name=p + "out/Transpose"),
        helper.make_node("Reshape", ["ctx_t", "to_btd"], ["ctx_r"], name=p + "out/Reshape"),
        helper.make_node("Add", ["x", "ctx_r"], ["y"], name=p + "residual"),
        helper.make_node("MatMul", ["y", "Wlm"], ["logits"], name="lm_head"),
    ]
    graph = helper.make_graph(
        nodes,
        "block_local",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", len(VOCAB)])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="attnviz-tests")
    model.ir_version = 8
    for k, v in {
        "attnviz.task": "lm",
        "attnviz.vocab": json.dumps(VOCAB),
        "attnviz.special": json.dumps({"pad": 0, "cls": 1, "sep": 2}),
    }.items():
        model.metadata_props.add(key=k, value=v)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return Path(path)


def sink_model(path: Path, seq: int = 5, heads: int = 2, d: int = 4, seed: int = 0):
    """Attention with sinks as optimum exports GPT-OSS: one learned logit per head concatenated to every row of
    Q·Kᵀ scores, the max subtracted, Softmax over T+1 columns, the sink column sliced off before P·V.

    Returns (path, feeds, reference probabilities [1, heads, seq, seq]: rows summing to less than 1)."""
    rng = np.random.default_rng(seed)
    H, T = heads, seq
    sinks = rng.standard_normal(H).astype(np.float32) * 2

    def vi(n):
        return helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, H, T, d])

    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2], name="/attn/Transpose"),
        helper.make_node("MatMul", ["q", "kt"], ["qk"], name="/attn/MatMul"),
        helper.make_node("Mul", ["qk", "scale"], ["scores"], name="/attn/Mul"),
        helper.make_node("Concat", ["scores", "sinks"], ["with_sink"], axis=-1, name="/attn/Concat"),
        helper.make_node("ReduceMax", ["with_sink", "last"], ["row_max"], keepdims=1, name="/attn/ReduceMax"),
        helper.make_node("Sub", ["with_sink", "row_max"], ["shifted"], name="/attn/Sub"),
        helper.make_node("Softmax", ["shifted"], ["probs"], axis=-1, name="/attn/Softmax"),
        helper.make_node("Slice", ["probs", "zero", "t", "last"], ["kept"], name="/attn/Slice"),
        helper.make_node("MatMul", ["kept", "v"], ["y"], name="/attn/MatMul_1"),
    ]
    inits = [
        _init("scale", np.array(1 / np.sqrt(d), np.float32)),
        _init("sinks", np.broadcast_to(sinks[None, :, None, None], (1, H, T, 1)).astype(np.float32)),
        _init("last", np.array([-1], np.int64)),
        _init("zero", np.array([0], np.int64)),
        _init("t", np.array([T], np.int64)),
    ]
    g = helper.make_graph(nodes, "sinks", [vi("q"), vi("k"), vi("v")], [vi("y")], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], producer_name="attnviz-tests")
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    feeds = {n: rng.standard_normal((1, H, T, d)).astype(np.float32) for n in "qkv"}
    s = feeds["q"] @ feeds["k"].transpose(0, 1, 3, 2) / np.sqrt(d)
    s = np.concatenate([s, np.broadcast_to(sinks[None, :, None, None], (1, H, T, 1))], -1)
    p = np.exp(s - s.max(-1, keepdims=True))
    return Path(path), feeds, (p / p.sum(-1, keepdims=True))[..., :T].astype(np.float32)
