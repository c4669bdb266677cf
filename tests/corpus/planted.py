"""A hand-built encoder whose heads do one known thing each (planted roles), built with onnx.helper alone.

x = [one-hot position | one-hot token]; with keys k_j = x_j and a query weight per head, head scores are
C·[j = i-1] (previous token), C·[j = 0] (first token), 0 (uniform) and C·[token_j = [SEP]] (special).
Padded keys get -1e4 from attention_mask, as BERT exports do.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

VOCAB = ["[PAD]", "[CLS]", "[SEP]", "the", "cat", "sat", "on", "mat", "a", "dog", "ran", "home"]
SEP = 2
MAX_T = 24
C = 30.0
ROLES = ("positional", "sink", "broad", "special")  # the heads' planted roles, in head order (layer 1 reversed)


def _q_weights(d: int) -> list[np.ndarray]:
    prev = np.zeros((d, d), np.float32)
    for p in range(1, MAX_T):
        prev[p, p - 1] = C  # query at position p looks for key position p-1
    first = np.zeros((d, d), np.float32)
    first[:MAX_T, 0] = C
    uniform = np.zeros((d, d), np.float32)
    sep = np.zeros((d, d), np.float32)
    sep[:MAX_T, MAX_T + SEP] = C
    return [prev, first, uniform, sep]


def planted_model(path: Path, layers: int = 2) -> Path:
    d = MAX_T + len(VOCAB)
    heads = 4
    init = lambda n, a: numpy_helper.from_array(np.asarray(a), name=n)
    inits = [
        init("pos_table", np.eye(MAX_T, d, dtype=np.float32)),
        init("tok_table", np.eye(len(VOCAB), d, k=MAX_T, dtype=np.float32)),
        init("zero", np.array(0, np.int64)),
        init("one", np.array(1, np.int64)),
        init("shape_bthd", np.array([0, 0, heads, d], np.int64)),
        init("shape_btd", np.array([0, 0, heads * d], np.int64)),
        init("scale", np.array(1.0, np.float32)),
        init("neg", np.array(-1e4, np.float32)),
        init("fone", np.array(1.0, np.float32)),
        init("axes12", np.array([1, 2], np.int64)),
        init("axes1", np.array([1], np.int64)),
        init("Wk", np.tile(np.eye(d, dtype=np.float32), (1, heads))),
    ]
    nodes = [
        helper.make_node("Shape", ["input_ids"], ["ids_shape"]),
        helper.make_node("Gather", ["ids_shape", "one"], ["T"], axis=0),
        helper.make_node("Range", ["zero", "T", "one"], ["positions"]),
        helper.make_node("Gather", ["pos_table", "positions"], ["pos"], name="pos_embed"),
        helper.make_node("Gather", ["tok_table", "input_ids"], ["tok"], name="tok_embed"),
        helper.make_node("Add", ["tok", "pos"], ["x"], name="embed"),
        helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["fone", "maskf"], ["inv"]),
        helper.make_node("Mul", ["inv", "neg"], ["bias2"]),
        helper.make_node("Unsqueeze", ["bias2", "axes12"], ["bias"]),
    ]
    qw = _q_weights(d)
    outs = []
    for l in range(layers):
        order = qw if l % 2 == 0 else qw[::-1]
        inits.append(init(f"Wq{l}", np.concatenate(order, 1)))
        p = f"/encoder/layer.{l}/attention/"
        for w, wn in (("q", f"Wq{l}"), ("k", "Wk"), ("v", "Wk")):
            nodes.append(helper.make_node("MatMul", ["x", wn], [f"{w}{l}"], name=p + f"{w}_proj"))
            nodes.append(helper.make_node("Reshape", [f"{w}{l}", "shape_bthd"], [f"{w}{l}r"], name=p + f"{w}_reshape"))
            perm = [0, 2, 3, 1] if w == "k" else [0, 2, 1, 3]
            nodes.append(
                helper.make_node("Transpose", [f"{w}{l}r"], [f"{w}{l}t"], perm=perm, name=p + f"{w}_transpose")
            )
        nodes += [
            helper.make_node("MatMul", [f"q{l}t", f"k{l}t"], [f"s{l}"], name=p + "MatMul"),
            helper.make_node("Mul", [f"s{l}", "scale"], [f"ss{l}"], name=p + "Mul"),
            helper.make_node("Add", [f"ss{l}", "bias"], [f"sm{l}"], name=p + "Add"),
            helper.make_node("Softmax", [f"sm{l}"], [f"p{l}"], axis=-1, name=p + "Softmax"),
            helper.make_node("MatMul", [f"p{l}", f"v{l}t"], [f"o{l}"], name=p + "MatMul_1"),
            helper.make_node("Transpose", [f"o{l}"], [f"o{l}t"], perm=[0, 2, 1, 3], name=p + "out_transpose"),
            helper.make_node("Reshape", [f"o{l}t", "shape_btd"], [f"o{l}r"], name=p + "out_reshape"),
            helper.make_node("ReduceMean", [f"o{l}r", "axes1"], [f"pooled{l}"], keepdims=0, name=p + "pool"),
        ]
        outs.append(f"pooled{l}")
    nodes.append(helper.make_node("Concat", outs, ["pooled"], axis=-1, name="concat"))
    graph = helper.make_graph(
        nodes,
        "planted",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", layers * heads * d])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="attnviz-tests")
    model.ir_version = 8
    for k, v in {
        "attnviz.vocab": json.dumps(VOCAB),
        "attnviz.special": json.dumps({"pad": 0, "cls": 1, "sep": 2}),
    }.items():
        model.metadata_props.add(key=k, value=v)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return Path(path)


def corpus_lines(n: int, seed: int = 0) -> list[str]:
    """n sentences of 1..MAX_T-3 known words (lengths vary, so batches are padded)."""
    rng = np.random.default_rng(seed)
    words = VOCAB[3:]
    return [" ".join(rng.choice(words, size=rng.integers(1, MAX_T - 3))) for _ in range(n)]
