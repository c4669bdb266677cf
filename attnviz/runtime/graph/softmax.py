"""Decomposed attention: a ``Softmax`` over Q·Kᵀ scores whose probabilities reach the P·V ``MatMul``.

The probabilities may pass through NaN guards, casts and dropout on the way down, and the scores through scale,
mask, bias and softcap ops on the way up (see shared/reference/onnx-attention-findings.md).
"""

from __future__ import annotations

import onnx

from attnviz.runtime.graph.base import Finder, Scan, Site
from attnviz.runtime.graph.index import Graph, _attr, _opset

# ops a probability tensor may pass through between Softmax and the P·V MatMul (Slice: attention sinks, below)
DOWN_PASS = {"Where", "Cast", "Dropout", "Identity", "Reshape", "Slice"}
# ops between the Q·Kᵀ MatMul and the Softmax (scale, mask, bias, softcap; Concat: attention sinks).  GPT-OSS
# concatenates one learned logit per head to every row of scores, normalises, and slices that column off before
# P·V: the map is the sliced probabilities (rows summing to less than 1), as transformers' output_attentions
UP_PASS = {"Add", "Mul", "Div", "Sub", "Where", "Cast", "Reshape", "Tanh", "Identity", "Max", "Min", "Clip", "Concat"}
MATMULS = {"MatMul", "Einsum", "FusedMatMul"}
# consumers that make a Softmax over Q·Kᵀ scores attention even without a P·V MatMul, and the method they give
REDUCE_CONSUMERS = {"ReduceSum": "softmax-reduce", "ReduceMean": "softmax-reduce"}


def _down_step(g: Graph, cur: str):
    """Tensors one pass-through op further down from ``cur`` (Softmax side), skipping Where conditions."""
    for ci, j in g.consumers.get(cur, []):
        c = g.nodes[ci]
        if c.op_type in DOWN_PASS and c.output and c.output[0] and not (c.op_type == "Where" and j == 0):
            yield ci, c.output[0]


def _walk_down(g: Graph, t: str, limit: int = 6) -> tuple[str, str] | None:
    """From a Softmax output: (tensor consumed as probabilities, method), or None.

    The consumer is the P·V MatMul (input A), else a reduction over the probabilities (a head mean / sum
    to an output) or an elementwise product summed afterwards (an additive-attention context).
    Breadth-first with a visited set: linear in the graph size.
    """
    seen = {t}
    frontier = [t]
    other: tuple[str, str] | None = None
    for _ in range(limit):
        nxt = []
        for cur in frontier:
            for ci, j in g.consumers.get(cur, []):
                c = g.nodes[ci]
                if (c.op_type in MATMULS and j == 0) or (c.op_type == "Einsum" and j in (0, 1)):
                    return cur, "softmax"
                if other is None and c.op_type in REDUCE_CONSUMERS:
                    other = (cur, REDUCE_CONSUMERS[c.op_type])
                if other is None and _feeds_weighted_sum(g, c):
                    other = (cur, "softmax-context")
            for _, o in _down_step(g, cur):
                if o not in seen:
                    seen.add(o)
                    nxt.append(o)
        if not nxt:
            break
        frontier = nxt
    return other


def _feeds_weighted_sum(g: Graph, c) -> bool:
    """``c`` (possibly through an Unsqueeze that adds the value axis) is a Mul whose product is ReduceSum'd."""
    muls = [c] if c.op_type == "Mul" else []
    if c.op_type == "Unsqueeze":
        muls = [g.nodes[k] for k, _ in g.consumers.get(c.output[0], []) if g.nodes[k].op_type == "Mul"]
    return any(g.nodes[k].op_type == "ReduceSum" for m in muls for k, _ in g.consumers.get(m.output[0], []))


def _walk_up(g: Graph, t: str, limit: int = 8) -> tuple[int, list[int]] | None:
    """From a Softmax input, the Q·Kᵀ MatMul producing it and the epilogue nodes in between.

    Breadth-first over tensors with a visited set (a chain of variadic ops is walked once, never per path);
    returns the nearest Q·Kᵀ MatMul and the nodes on the route to it.
    """
    came_from: dict[str, tuple[str, int] | None] = {t: None}
    frontier = [t]
    for _ in range(limit + 1):
        nxt = []
        for cur in frontier:
            pi = g.producer.get(cur)
            if pi is None:
                continue
            p = g.nodes[pi]
            if p.op_type in MATMULS:
                # Q·Kᵀ has two activations (not a weight); a projection has an initializer operand
                if len(p.input) >= 2 and not g.is_const(p.input[0]) and not g.is_const(p.input[1]):
                    path, step = [], came_from[cur]
                    while step is not None:
                        path.append(step[1])
                        step = came_from[step[0]]
                    return pi, path
                continue
            if p.op_type not in UP_PASS:
                continue
            for inp in p.input:
                if inp and inp not in came_from and not g.is_const(inp) and g.const_value(inp) is None:
                    came_from[inp] = (cur, pi)
                    nxt.append(inp)
        if not nxt:
            return None
        frontier = nxt
    return None


def softmax_axis(model: onnx.ModelProto, node) -> int:
    """The Softmax axis as written (opset < 13 defaults to 1 with 2-D coercion, 13+ to -1)."""
    return int(_attr(node, "axis", -1 if _opset(model) >= 13 else 1))


def _declared_rank(g: Graph, name: str) -> int | None:
    scope: Graph | None = g
    while scope is not None:
        for v in list(scope.proto.value_info) + list(scope.proto.input) + list(scope.proto.output):
            if v.name == name and v.type.tensor_type.HasField("shape"):
                return len(v.type.tensor_type.shape.dim)
        scope = scope.parent
    return None


def find_softmax(g: Graph, i: int, name: str, loop: str, scan: Scan) -> None:
    n = g.nodes[i]
    scan.softmax += 1
    down = _walk_down(g, n.output[0])
    if down is None:
        return  # classifier head or other non-attention softmax
    probs, method = down
    up = _walk_up(g, n.input[0])
    if up is None:
        return
    axis = softmax_axis(g.model, n)
    rank = _declared_rank(g, n.input[0])
    if axis != -1 and rank is not None and axis % max(rank, 1) != rank - 1:
        scan.wrong_axis += 1  # normalised over queries / heads / a flattened block: not attention
        return
    mi, path = up
    mm = g.nodes[mi]
    epi = sorted(path) + [i]
    epi += _guard_nodes(g, n.output[0], probs)
    site = Site(
        i,
        name,
        method,
        probs=probs,
        q=mm.input[0],
        k=mm.input[1],
        qk=mm.output[0],
        epilogue=sorted(set(epi)),
        g=g,
        loop=loop,
    )
    if axis != -1:
        site.extra["softmax_axis"] = axis  # rank unknown here: checked on the tensor the run returns
    scan.sites.append(site)


def _guard_nodes(g: Graph, start: str, probs: str) -> list[int]:
    """Nodes between the Softmax and the exposed tensor (NaN guard: Where, and the IsNaN feeding it)."""
    out: list[int] = []
    cur, seen = start, {start}
    while cur != probs:
        nxt = next(iter(_down_step(g, cur)), None)
        if nxt is None or nxt[1] in seen:
            break
        ci, cur = nxt
        seen.add(cur)
        out.append(ci)
        for inp in g.nodes[ci].input:
            pi = g.producer.get(inp)
            if pi is not None and g.nodes[pi].op_type == "IsNaN" and pi not in out:
                out.append(pi)
    return out


# how each method gets its maps, for ``inspect``'s legend
METHOD_NOTES = {
    "softmax": "the graph's Softmax output, as the P·V MatMul reads it",
    "softmax-reduce": "the graph's Softmax output, before the reduction that reads it",
    "softmax-context": "the graph's Softmax output, before the weighted sum that reads it",
}

FINDERS: dict[tuple[str, str], Finder] = {("", "Softmax"): find_softmax}
