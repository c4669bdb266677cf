"""A hand-built 2-layer causal decoder with a planted induction circuit (onnx.helper alone).

x = [one-hot position | one-hot token | "previous token" slot].  Layer 0 head 0 attends to the previous position
and copies that token's one-hot into the previous-token slot; layer 0 head 1 sinks on position 0 and writes
nothing.  Layer 1 head 0 (the induction head) queries with its own token and keys on the previous-token slot, so
it attends to the position right after an earlier occurrence of the current token; layer 1 head 1 is uniform.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

VOCAB = ["[PAD]", "[BOS]", *[f"w{i}" for i in range(120)]]
MAX_T = 40
C = 30.0
ROLES = {(0, 0): "positional", (0, 1): "sink", (1, 0): "induction", (1, 1): "broad"}


def planted_induction_model(path: Path) -> Path:
    v, t = len(VOCAB), MAX_T
    d, heads = t + 2 * v, 2
    tok, prev = slice(t, t + v), slice(t + v, t + 2 * v)  # blocks of x
    eye_v = np.eye(v, dtype=np.float32)

    def zeros():
        return np.zeros((d, d), np.float32)

    # layer 0: head 0 previous position (and copies the token there into the previous-token slot), head 1 sink
    q00, k00, v00 = zeros(), zeros(), zeros()
    for p in range(1, t):
        q00[p, p - 1] = C
    k00[:t, :t] = np.eye(t)
    v00[tok, prev] = eye_v
    q01, k01 = zeros(), zeros()
    q01[:t, 0] = C
    k01[:t, :t] = np.eye(t)
    # layer 1: head 0 induction (own token against the previous-token slot), head 1 uniform
    q10, k10 = zeros(), zeros()
    q10[tok, prev] = eye_v
    q10 *= C
    k10[prev, prev] = eye_v
    weights = {
        0: ([q00, q01], [k00, k01], [v00, zeros()]),
        1: ([q10, zeros()], [k10, zeros()], [zeros(), zeros()]),
    }
    init = lambda n, a: numpy_helper.from_array(np.asarray(a), name=n)
    emb = np.zeros((v, d), np.float32)
    emb[:, tok] = eye_v
    inits = [
        init("pos_table", np.eye(t, d, dtype=np.float32)),
        init("tok_table", emb),
        init("zero", np.array(0, np.int64)),
        init("one", np.array(1, np.int64)),
        init("idx1", np.array([1], np.int64)),
        init("neg", np.array(-1e4, np.float32)),
        init("fzero", np.array(0.0, np.float32)),
        init("scale", np.array(1.0, np.float32)),
        init("shape_bthd", np.array([0, 0, heads, d], np.int64)),
        init("shape_btd", np.array([0, 0, heads * d], np.int64)),
        init("Wo", np.tile(np.eye(d, dtype=np.float32), (heads, 1))),  # heads' outputs summed back to d
    ]
    nodes = [
        helper.make_node("Shape", ["input_ids"], ["ids_shape"]),
        helper.make_node("Gather", ["ids_shape", "one"], ["T"], axis=0),
        helper.make_node("Range", ["zero", "T", "one"], ["positions"]),
        helper.make_node("Gather", ["pos_table", "positions"], ["pos"], name="pos_embed"),
        helper.make_node("Gather", ["tok_table", "input_ids"], ["tokx"], name="tok_embed"),
        helper.make_node("Add", ["tokx", "pos"], ["x0"], name="embed"),
        helper.make_node("Unsqueeze", ["positions", "idx1"], ["pos_col"]),
        helper.make_node("Greater", ["positions", "pos_col"], ["upper"]),
        helper.make_node("Where", ["upper", "neg", "fzero"], ["causal_mask"]),
    ]
    x = "x0"
    for l, (qs, ks, vs) in weights.items():
        p = f"/decoder/layers.{l}/attn/"
        for w, mats in (("q", qs), ("k", ks), ("v", vs)):
            inits.append(init(f"W{w}{l}", np.concatenate(mats, 1)))
            nodes.append(helper.make_node("MatMul", [x, f"W{w}{l}"], [f"{w}{l}"], name=p + f"{w}_proj"))
            nodes.append(helper.make_node("Reshape", [f"{w}{l}", "shape_bthd"], [f"{w}{l}r"], name=p + f"{w}_reshape"))
            perm = [0, 2, 3, 1] if w == "k" else [0, 2, 1, 3]
            nodes.append(
                helper.make_node("Transpose", [f"{w}{l}r"], [f"{w}{l}t"], perm=perm, name=p + f"{w}_transpose")
            )
        nodes += [
            helper.make_node("MatMul", [f"q{l}t", f"k{l}t"], [f"s{l}"], name=p + "MatMul"),
            helper.make_node("Mul", [f"s{l}", "scale"], [f"ss{l}"], name=p + "Mul"),
            helper.make_node("Add", [f"ss{l}", "causal_mask"], [f"sm{l}"], name=p + "Add"),
            helper.make_node("Softmax", [f"sm{l}"], [f"p{l}"], axis=-1, name=p + "Softmax"),
            helper.make_node("MatMul", [f"p{l}", f"v{l}t"], [f"o{l}"], name=p + "MatMul_1"),
            helper.make_node("Transpose", [f"o{l}"], [f"o{l}t"], perm=[0, 2, 1, 3], name=p + "out_transpose"),
            helper.make_node("Reshape", [f"o{l}t", "shape_btd"], [f"o{l}r"], name=p + "out_reshape"),
            helper.make_node("MatMul", [f"o{l}r", "Wo"], [f"o{l}d"], name=p + "out_proj"),
            helper.make_node("Add", [x, f"o{l}d"], [f"x{l + 1}"], name=p + "residual"),
        ]
        x = f"x{l + 1}"
    graph = helper.make_graph(
        nodes,
        "planted_induction",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", "seq", d])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="attnviz-tests")
    model.ir_version = 8
    model.metadata_props.add(key="attnviz.vocab", value=json.dumps(VOCAB))
    model.metadata_props.add(key="attnviz.special", value=json.dumps({"pad": 0, "bos": 1}))
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return Path(path)


def lines(n: int, seed: int = 0) -> list[str]:
    """n texts of 2..20 random words, each a random word sequence repeated once (so the induction head fires)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        half = rng.choice(VOCAB[2:], size=int(rng.integers(1, 11)), replace=False)
        out.append(" ".join([*half, *half]))
    return out
