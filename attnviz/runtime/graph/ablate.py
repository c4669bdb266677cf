"""Head ablation: a copy of the graph with a per-head gate on chosen attention sites (the user's file is never
written).

Each gated site gets a new graph input ``attnviz_head_gate_<site>``: a float ``[H]`` mask fed at run time (1 keeps
a head, 0 ablates it), so one session serves every choice of heads (``attnviz ablate --all-heads`` runs one forward
per head through one session).  Where the gate goes:

* decomposed Softmax sites (method ``softmax``): on the probability tensor the P·V ``MatMul`` reads, viewed as
  ``[-1, H, Q, K]`` (a ``[B·H, Q, K]`` layout is viewed the same way, heads inner to the batch); method
  ``"probabilities"``;
* fused ops whose probabilities are internal (ONNX ``Attention``, com.microsoft ``MultiHeadAttention`` /
  ``GroupQueryAttention`` / ``Attention``): on the op's output, each head's slice before the output projection
  (``[B, S, H·dv]`` viewed as ``[B, S, H, dv]``; ONNX ``Attention`` with 4-D inputs gives ``[B, H, S, dv]``);
  method ``"output"``.  Since the output is P·V per head, zeroing a head's slice equals zeroing its probabilities,
  and the mean of its rows equals the output of its mean probability row (P·V is linear in P).

Modes: ``zero`` multiplies by the mask; ``mean`` replaces an ablated head's rows by their mean over the query rows
of the input being run (``m·X + (1 − m)·mean_q X``: on the probabilities, the head's average attention row; on a
fused op's output, the same through linearity).  In a causal decoder that mean row puts weight on keys after a
query (the mean over all rows sees the whole sequence); ``zero`` has no such effect.  ``fed`` (the corpus form's
``--mode mean``) replaces an ablated head's rows by a tensor fed at run time, ``m·X + (1 − m)·F``, through a second
input ``attnviz_head_mean_<site>`` ([B, H, Q, K], or any shape that broadcasts to the probabilities' view, e.g.
``[1, 1, 1, 1]`` zeros for a site whose heads all stay on): the caller computes the corpus mean; probability gates
only (a fused op's probabilities are internal, so there is nothing to feed them into).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from attnviz.runtime.graph.base import Site
from attnviz.runtime.graph.index import Graph, _opset

MODES = ("zero", "mean", "fed")
GATE_INPUT = "attnviz_head_gate_{}"
MEAN_INPUT = "attnviz_head_mean_{}"  # mode "fed": the rows an ablated head's rows become
# fused methods gated on their output: the output's layout ("bsd": [B, S, H·dv], "rank": decided by Q's rank)
FUSED_LAYOUT = {"onnx-attention": "rank", "mha-qk": "bsd", "gqa-qk": "bsd", "recompute-packed": "bsd"}


class GateRefused(ValueError):
    """A site that can be gated neither on its probabilities nor on its output (the message names it)."""


@dataclass(frozen=True)
class Gate:
    """One gated site: the graph input its ``[heads]`` mask is fed to, and where the gate sits."""

    site: int
    input: str
    heads: int
    method: str  # "probabilities" | "output"
    fed: str | None = None  # mode "fed": the graph input of the rows that replace an ablated head's


def gate_method(g: Graph, s: Site, ranks: Ranks | None = None) -> str:
    """Where site ``s`` can be gated ("probabilities" | "output"); raises :class:`GateRefused` naming the site."""
    ranks = ranks or Ranks(g)
    where = f"{s.stack} {s.kind} L{s.layer} ({s.node_name!r}, {s.method})"
    if s.g.path or s.loop:
        raise GateRefused(f"cannot ablate {where}: it sits inside an If / Loop / Scan body")
    if not s.heads:
        raise GateRefused(f"cannot ablate {where}: its head count is unknown (the graph does not say and no run told)")
    if s.method == "softmax":
        if s.probs not in g.producer:
            raise GateRefused(f"cannot ablate {where}: its probabilities are not computed in this graph")
        return "probabilities"
    if s.method in FUSED_LAYOUT:
        if FUSED_LAYOUT[s.method] == "rank" and ranks(g.nodes[s.node_index].input[0]) not in (3, 4):
            raise GateRefused(f"cannot ablate {where}: the rank of its query input (3-D or 4-D) is not declared")
        return "output"
    raise GateRefused(f"cannot ablate {where}: it has no per-head P·V product to gate")


def gate_heads(g0: Graph, sites: list[Site], chosen: list[int], mode: str) -> tuple[onnx.ModelProto, list[Gate]]:
    """A copy of ``g0.model`` with a gate on each site in ``chosen`` (indices into ``sites``), and the gates."""
    if mode not in MODES:
        raise ValueError(f"unknown ablation mode {mode!r}; use {' or '.join(MODES)}")
    ranks = Ranks(g0)
    methods = {i: gate_method(g0, sites[i], ranks) for i in chosen}
    for i in chosen:
        if mode == "fed" and methods[i] != "probabilities":
            s = sites[i]
            raise GateRefused(
                f"cannot replace the probabilities of {s.stack} {s.kind} L{s.layer} ({s.node_name!r}, {s.method}) by "
                "their corpus mean: they are internal to the fused op; use --mode zero"
            )
    m = copy.deepcopy(g0.model)
    graph = m.graph
    after: dict[int, list] = {}  # producer node index -> the gate's nodes, inserted right after it
    gates = []
    opset = _opset(m)
    for i in sorted(chosen):
        s = sites[i]
        node = g0.nodes[s.node_index]
        if methods[i] == "probabilities":
            # a [B, H, Q, K] tensor is gated as it is; another rank (or an unknown one) through the [-1, H, Q, K] view
            tensor, layout = s.probs, "bhsd" if ranks(s.probs) == 4 else "probs"
        else:
            tensor = node.output[0]
            layout = FUSED_LAYOUT[s.method]
            if layout == "rank":
                layout = "bhsd" if ranks(node.input[0]) == 4 else "bsd"
        pi = g0.producer[tensor]
        ungated = f"{tensor}__attnviz_ungated"
        prod = graph.node[pi]
        prod.output[:] = [ungated if o == tensor else o for o in prod.output]
        name = GATE_INPUT.format(i)
        graph.input.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [s.heads]))
        fed = None
        if mode == "fed":
            fed = MEAN_INPUT.format(i)
            dims = [f"attnviz_{a}{i}" for a in "bhqk"]  # symbolic: a [1, 1, 1, 1] zero stands for no head off
            graph.input.append(helper.make_tensor_value_info(fed, TensorProto.FLOAT, dims))
        after.setdefault(pi, []).extend(
            _gate_nodes(f"attnviz_gate{i}_", ungated, tensor, name, s.heads, layout, mode, opset, fed)
        )
        gates.append(Gate(i, name, s.heads, methods[i], fed))
    nodes = []
    for k, n in enumerate(graph.node):
        nodes.append(n)
        nodes.extend(after.get(k, []))
    del graph.node[:]
    graph.node.extend(nodes)
    return m, gates


def _gate_nodes(
    p: str, x: str, out: str, mask: str, heads: int, layout: str, mode: str, opset: int, fed: str | None = None
) -> list:
    """Nodes computing ``out`` = ``x`` with each head scaled by ``mask`` (zero), moved toward its mean row (mean) or
    toward the rows fed as ``fed`` (fed)."""
    nodes = []

    def const(name: str, value) -> str:
        nodes.append(helper.make_node("Constant", [], [p + name], value=numpy_helper.from_array(np.asarray(value))))
        return p + name

    # the view: heads on their own axis, query rows on another
    if layout == "probs":  # [.., Q, K] with heads just before Q (or folded into the batch): [-1, H, Q, K]
        nodes.append(helper.make_node("Shape", [x], [p + "shape"]))
        big = np.iinfo(np.int64).max
        qk = [p + "shape", const("s0", np.array([-2], np.int64)), const("s1", np.array([big], np.int64))]
        nodes.append(helper.make_node("Slice", qk, [p + "qk"]))
        lead = const("lead", np.array([-1, heads], np.int64))
        nodes.append(helper.make_node("Concat", [lead, p + "qk"], [p + "view_shape"], axis=0))
        nodes.append(helper.make_node("Reshape", [x, p + "view_shape"], [p + "view"]))
        view, head_axis, row_axis = p + "view", 1, 2
    elif layout == "bsd":  # [B, S, H·dv] -> [B, S, H, dv]
        nodes.append(helper.make_node("Shape", [x], [p + "shape"]))
        split = const("split", np.array([0, 0, heads, -1], np.int64))
        nodes.append(helper.make_node("Reshape", [x, split], [p + "view"]))
        view, head_axis, row_axis = p + "view", 2, 1
    else:  # "bhsd": [B, H, S, dv] (or probabilities [B, H, Q, K]) as it is
        view, head_axis, row_axis = x, 1, 2
    reshaped = view != x
    gated = p + "gated" if reshaped else out

    shape4 = [1, 1, 1, 1]
    shape4[head_axis] = heads
    nodes.append(helper.make_node("Reshape", [mask, const("mshape", np.array(shape4, np.int64))], [p + "m"]))
    nodes.append(_cast_like(p + "m", view, p + "mc", opset))
    if mode == "zero":
        nodes.append(helper.make_node("Mul", [view, p + "mc"], [gated]))
    elif mode == "fed":  # m·X + (1 − m)·F: an ablated head's rows become the fed ones, a kept head's stay
        assert fed is not None
        nodes.append(_cast_like(fed, view, p + "fedc", opset))
        nodes.append(_cast_like(const("one", np.array(1.0, np.float32)), view, p + "onec", opset))
        nodes.append(helper.make_node("Sub", [p + "onec", p + "mc"], [p + "off"]))
        nodes.append(helper.make_node("Mul", [view, p + "mc"], [p + "kept"]))
        nodes.append(helper.make_node("Mul", [p + "fedc", p + "off"], [p + "moved"]))
        nodes.append(helper.make_node("Add", [p + "kept", p + "moved"], [gated]))
    else:
        if opset >= 18:
            axes = const("axes", np.array([row_axis], np.int64))
            nodes.append(helper.make_node("ReduceMean", [view, axes], [p + "mean"], keepdims=1))
        else:
            nodes.append(helper.make_node("ReduceMean", [view], [p + "mean"], axes=[row_axis], keepdims=1))
        nodes.append(_cast_like(const("one", np.array(1.0, np.float32)), view, p + "onec", opset))
        nodes.append(helper.make_node("Sub", [p + "onec", p + "mc"], [p + "off"]))
        nodes.append(helper.make_node("Mul", [view, p + "mc"], [p + "kept"]))
        nodes.append(helper.make_node("Mul", [p + "mean", p + "off"], [p + "moved"]))
        nodes.append(helper.make_node("Add", [p + "kept", p + "moved"], [gated]))
    if reshaped:
        nodes.append(helper.make_node("Reshape", [gated, p + "shape"], [out]))
    return nodes


def _cast_like(x: str, like: str, out: str, opset: int):
    """``x`` in ``like``'s element type (an fp16 graph's tensors stay fp16)."""
    if opset >= 15:
        return helper.make_node("CastLike", [x, like], [out])
    return helper.make_node("Identity", [x], [out])  # before CastLike: float32 graphs only (fp16 exports are newer)


class Ranks:
    """Tensors' ranks: declared (graph inputs, value_info), else from onnx shape inference, run once on first need."""

    def __init__(self, g: Graph):
        self.g = g
        self.known = {
            v.name: len(v.type.tensor_type.shape.dim)
            for v in [*g.proto.input, *g.proto.value_info, *g.proto.output]
            if v.type.tensor_type.HasField("shape")
        }
        self.inferred: dict[str, int] | None = None

    def __call__(self, name: str) -> int | None:
        if name in self.known:
            return self.known[name]
        if self.inferred is None:
            self.inferred = {}
            try:
                m = onnx.shape_inference.infer_shapes(self.g.model, strict_mode=False)
            except Exception:  # inference is a best effort: an unknown rank is decided without it
                return None
            self.inferred = {
                v.name: len(v.type.tensor_type.shape.dim)
                for v in m.graph.value_info
                if v.type.tensor_type.HasField("shape")
            }
        return self.inferred.get(name)
