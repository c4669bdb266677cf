"""Expose the sites as graph outputs of a copy of the model (dense maps, or Q/K and side inputs for on-demand
per-head recompute), threading tensors out of ``If`` / ``Loop`` / ``Scan`` bodies; the user's file is never
written."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from attnviz.runtime.graph import dtypes as tensor_types
from attnviz.runtime.graph.base import Site
from attnviz.runtime.graph.index import Graph

# elementwise ops an epilogue may contain for per-head recompute (shapes broadcast over heads)
ELEMENTWISE = {
    "Add",
    "Mul",
    "Div",
    "Sub",
    "Where",
    "Cast",
    "Tanh",
    "Identity",
    "Max",
    "Min",
    "Clip",
    "IsNaN",
    "Not",
    "Softmax",
    "Dropout",
}


@dataclass
class Exposed:
    """What the instrumented model returns beyond its own outputs."""

    outputs: list[str]  # per site: the tensor to fetch (dense mode) — probs, qk scores or packed X
    site_extra: list[dict]  # per site: extra fetched tensor names (mask_index for packed attention)


def _add_output(model: onnx.ModelProto, name: str, seen: set[str], elem_type: int | None = None) -> None:
    if name in seen:
        return
    seen.add(name)
    if elem_type:
        # outputs new to a node (ORT ops with several allowed types) need an explicit type; the rank is unknown
        vi = helper.make_tensor_value_info(name, elem_type, None)
    else:
        vi = helper.make_empty_tensor_value_info(name)  # existing tensors: onnxruntime infers the type
    model.graph.output.append(vi)


# fused ops whose 4th output carries the probabilities (or scores): attribute to set, output name prefix
FUSED_OUTPUT = {
    "onnx-attention": (("qk_matmul_output_mode", 3), "probs"),  # ONNX Attention: post-softmax probabilities
    "mha-qk": (None, "qk"),  # com.microsoft MultiHeadAttention: scaled QK + mask, softmax applied in numpy
    "gqa-qk": (("qk_output", 2), "qk"),  # com.microsoft GroupQueryAttention: 2 = after softmax
}


def instrumented_bytes(g: Graph, sites: list[Site], mode: str = "dense") -> tuple[bytes, Exposed]:
    """Serialise a copy of the model with the extra outputs.

    Large weights of a single-file model point at their bytes in the file (:func:`weights_by_reference`) and
    external data stays external, so the copy and its bytes hold the graph structure only.
    """
    m, exposed = instrument(g, sites, mode)
    return m.SerializeToString(), exposed  # the copy is dropped here: only its bytes run


def instrument(g0: Graph, sites: list[Site], mode: str = "dense") -> tuple[onnx.ModelProto, Exposed]:
    """Add graph outputs for every site, to a copy of ``g0.model``; returns the copy and what it exposes.

    dense: the probabilities (or what they are computed from for fused ops).
    ondemand: Q and K operands of the QK MatMul plus the epilogue's side inputs.
    Sites inside ``If``/``Loop``/``Scan`` bodies are threaded out as body and node outputs (:class:`_Threader`).
    """
    m = copy.deepcopy(g0.model)
    seen = {o.name for o in m.graph.output}
    existing = set(seen)
    threader = _Threader(m)
    outs: list[str] = []
    extras: list[dict] = []
    for s in sites:
        n = _graph_at(m, s.g.path).node[s.node_index]
        ex: dict = {}
        if s.method in FUSED_OUTPUT:
            _expose_fused(n, s)
            if s.twin is not None:
                _expose_fused(_graph_at(m, s.twin.g.path).node[s.twin.node_index], s.twin)
        elif s.method == "recompute-packed":
            s.probs = n.input[0]
            if len(n.input) > 3 and n.input[3]:
                ex["mask_index"] = n.input[3]
        if s.g.path:
            # a body tensor: its name outside is a new node output (one per If for a paired site); ``probs``
            # becomes that top-level name, ``body_probs`` keeps the tensor inside the body
            if s.method in FUSED_OUTPUT or not s.body_probs:
                s.body_probs = s.probs
            s.probs = threader.expose(s, _elem_type(s, n))
        elif mode == "ondemand" and can_recompute(g0, s):
            ex["q"], ex["k"] = s.q, s.k
            for name in epilogue_side_inputs(g0, s):
                ex.setdefault("side", []).append(name)
            for name in [ex["q"], ex["k"], *ex.get("side", [])]:
                if name not in existing and not g0.is_const(name):
                    _add_output(m, name, seen)
        else:
            if s.probs not in existing:
                new = s.method in FUSED_OUTPUT
                _add_output(m, s.probs, seen, _float_type(g0, n) if new else None)
        for name in [ex["mask_index"]] if "mask_index" in ex else []:
            if name not in existing and g0.producer.get(name) is not None:
                _add_output(m, name, seen)
        outs.append(s.probs)
        extras.append(ex)
    for name in threader.top:
        _add_output(m, name, seen)
    _fold_identity_casts(m, g0, [o for o, s in zip(outs, sites) if not s.g.path])
    return m, Exposed(outs, extras)


def _fold_identity_casts(m: onnx.ModelProto, g0: Graph, exposed: list[str]) -> None:
    """An exposed tensor made by a ``Cast`` to the type it already has (eager attention's
    ``softmax(..., dtype=float32).to(query.dtype)`` in a float32 export) becomes its producer's output instead.
    onnxruntime drops such a Cast from the plain graph, but cannot drop one whose output is a graph output: it
    copied every map once more each run (~0.6 ms of a 20 ms LLaVA decoder run, 3 MB of maps).  The same numbers
    under the same name: the exposed name stays, the Cast's input is renamed to it."""
    g = m.graph
    keep = {i.name for i in g.input} | {o.name for o in g.output if o.name not in exposed}
    keep |= {t.name for t in g.initializer} | _body_reads(g)
    by_output = {o: k for k, n in enumerate(g.node) for o in n.output if o}
    drop: list[int] = []
    blocked = keep | set(exposed)  # a name another site exposes stays too
    for name in dict.fromkeys(exposed):
        while True:  # a chain of them (Llama's eager attention casts twice): each folded in turn
            k = by_output.get(name)
            if k is None or k in drop:
                break
            src = _identity_cast_input(g.node[k], g0, blocked)
            if src is None:
                break
            for other in g.node:
                for field in (other.output, other.input):
                    if src in field:
                        field[:] = [name if t == src else t for t in field]
            kept_info = [v for v in g.value_info if v.name != src]
            del g.value_info[:]
            g.value_info.extend(kept_info)
            by_output[name] = by_output.pop(src)
            drop.append(k)
    for k in sorted(drop, reverse=True):
        del g.node[k]


def _identity_cast_input(n, g0: Graph, keep: set[str]) -> str | None:
    """The input of ``n`` when ``n`` is a Cast to the type its input already has for certain (and the input is
    no graph input, output or weight, nor read by a body or exposed itself); else None."""
    if n.op_type != "Cast" or len(n.input) != 1 or not n.input[0] or n.input[0] in keep:
        return None
    want = next((a.i for a in n.attribute if a.name == "to"), 0)
    have = tensor_types.elem_type(g0, n.input[0], TensorProto.UNDEFINED)
    return n.input[0] if want and have == want else None


def _body_reads(g: onnx.GraphProto) -> set[str]:
    """Every tensor name a node's body (``If`` / ``Loop`` / ``Scan``) reads: outer-scope names a rename would miss."""
    names: set[str] = set()
    for n in g.node:
        for a in n.attribute:
            for body in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                for bn in body.node:
                    names.update(bn.input)
                names |= _body_reads(body)
    return names


def _expose_fused(n, s: Site) -> None:
    attr, prefix = FUSED_OUTPUT[s.method]
    if attr:
        _set_attr(n, *attr)
    while len(n.output) < 4:
        n.output.append("")
    if not n.output[3]:
        n.output[3] = f"attnviz_{prefix}_{'_'.join(str(p) for p, _ in s.g.path)}_{s.node_index}"
    s.probs = n.output[3]


def _graph_at(m: onnx.ModelProto, path: tuple) -> onnx.GraphProto:
    g = m.graph
    for ni, attr in path:
        g = next(a.g for a in g.node[ni].attribute if a.name == attr)
    return g


def _elem_type(s: Site, node) -> int:
    """Element type of a site's tensor: declared, else followed up through its producers (an fp16 graph's
    probabilities are float16 under the same names); a fused op's extra output has its query's type."""
    if s.method in FUSED_OUTPUT:
        return tensor_types.elem_type(s.g, node.input[0])
    return tensor_types.elem_type(s.g, s.body_probs or s.probs)


class _Threader:
    """Bring tensors out of ``If`` / ``Loop`` / ``Scan`` bodies as outputs of the nodes that own the bodies.

    If: both branches must produce every output; the branch without the tensor returns an empty placeholder
    (a paired site gives each branch its own tensor instead).  Loop / Scan: the tensor becomes an extra scan
    output, stacked over iterations on axis 0.
    """

    def __init__(self, m: onnx.ModelProto):
        self.m = m
        self.top: list[str] = []
        self.count = 0

    def expose(self, s: Site, elem_type: int) -> str:
        path, name = s.g.path, s.body_probs
        if s.twin is not None:
            # both branches' tensors up to their If, then one output of that If
            tw = s.twin
            k = next(
                d
                for d, (p, a) in enumerate(path)
                if a in ("then_branch", "else_branch") and tw.g.path[d][0] == p and tw.g.path[:d] == path[:d]
            )
            mine = self._up(path, name, elem_type, stop=k + 1)
            theirs = self._up(tw.g.path, tw.probs, elem_type, stop=k + 1)
            branch = {path[k][1]: mine, tw.g.path[k][1]: theirs}
            name = self._if_output(path[:k], path[k][0], branch, elem_type)
            path = path[:k]
        top = self._up(path, name, elem_type, stop=0)
        self.top.append(top)
        return top

    def _fresh(self) -> str:
        self.count += 1
        return f"attnviz_site_out_{self.count}"

    def _up(self, path: tuple, name: str, elem_type: int, stop: int) -> str:
        """Thread ``name`` from the body at ``path`` up to the graph at ``path[:stop]``; return its name there."""
        while len(path) > stop:
            (ni, attr), parent = path[-1], path[:-1]
            node = _graph_at(self.m, parent).node[ni]
            if node.op_type == "If":
                name = self._if_output(parent, ni, {attr: name}, elem_type)
            else:  # Loop / Scan: a new scan output (body outputs and node outputs both end with scan outputs)
                body = next(a.g for a in node.attribute if a.name == attr)
                body.output.append(helper.make_tensor_value_info(name, elem_type, None))
                for key in ("scan_output_axes", "scan_output_directions"):
                    for a in node.attribute:
                        if a.name == key:
                            a.ints.append(0)
                name = self._fresh()
                node.output.append(name)
            path = parent
        return name

    def _if_output(self, parent: tuple, ni: int, branch: dict[str, str], elem_type: int) -> str:
        node = _graph_at(self.m, parent).node[ni]
        for a in node.attribute:
            if a.name not in ("then_branch", "else_branch"):
                continue
            t = branch.get(a.name)
            if t is None:  # this branch has no such site: an empty [0,0,0,0] tensor of the same type
                t = self._fresh()
                dtype = helper.tensor_dtype_to_np_dtype(elem_type)
                a.g.node.append(
                    helper.make_node("Constant", [], [t], value=numpy_helper.from_array(np.zeros((0, 0, 0, 0), dtype)))
                )
            a.g.output.append(helper.make_tensor_value_info(t, elem_type, None))
        out = self._fresh()
        node.output.append(out)
        return out


def _float_type(g: Graph, node) -> int:
    """The element type of a fused node's first input (float16 in fp16 models, else float32)."""
    return tensor_types.elem_type(g, node.input[0])


def _set_attr(node, name, value) -> None:
    for a in node.attribute:
        if a.name == name:
            node.attribute.remove(a)
            break
    node.attribute.append(helper.make_attribute(name, value))


def can_recompute(g: Graph, s: Site) -> bool:
    """Per-head recompute needs a plain Q·Kᵀ MatMul and an elementwise epilogue (no reshapes)."""
    if s.method != "softmax" or s.g is not g or not s.qk or s.qk not in g.producer or "softmax_axis" in s.extra:
        return False
    if g.nodes[g.producer[s.qk]].op_type not in ("MatMul", "FusedMatMul"):
        return False
    return all(g.nodes[i].op_type in ELEMENTWISE for i in s.epilogue)


def epilogue_side_inputs(g: Graph, s: Site) -> list[str]:
    """Tensors the epilogue reads that it does not compute itself and that are not constants."""
    produced = {s.qk}
    for i in s.epilogue:
        produced.update(o for o in g.nodes[i].output if o)
    side = []
    for i in s.epilogue:
        for t in g.nodes[i].input:
            if t and t not in produced and t not in g.initializers and g.const_value(t) is None and t not in side:
                side.append(t)
    return side


def epilogue_model(g: Graph, s: Site, opset_imports, dtypes: dict[str, tuple]) -> onnx.ModelProto | None:
    """A small model computing probabilities from the QK scores and side inputs, for per-head recompute.

    Returns None when the epilogue contains shape-changing ops (Reshape), which break per-head slicing.
    """
    if any(g.nodes[i].op_type not in ELEMENTWISE for i in s.epilogue):
        return None
    side = epilogue_side_inputs(g, s)
    nodes = []
    consts: dict[str, np.ndarray] = {}  # weights and Constant outputs the epilogue reads (side inputs are fed)
    for i in s.epilogue:
        nodes.append(copy.deepcopy(g.nodes[i]))
        for t in g.nodes[i].input:
            if not t or t in consts or (t in side and t not in g.initializers):
                continue
            arr = g.const_value(t)
            if arr is not None:
                consts[t] = arr
    inits = [numpy_helper.from_array(arr, name=t) for t, arr in consts.items()]

    # keep only the nodes on the path to probs (drop side branches that leave the epilogue)
    # dtypes: name -> (numpy dtype, rank) of the arrays that will be fed (side inputs are fed as rank 4)
    def vi(t):
        dt, rank = dtypes[t]
        return helper.make_tensor_value_info(t, helper.np_dtype_to_tensor_dtype(np.dtype(dt)), [None] * rank)

    inputs = [vi(s.qk)] + [vi(t) for t in side]
    graph = helper.make_graph(
        nodes, "attnviz_epilogue", inputs, [helper.make_empty_tensor_value_info(s.probs)], initializer=inits
    )
    return helper.make_model(graph, opset_imports=list(opset_imports), ir_version=g.model.ir_version)
