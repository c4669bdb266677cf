"""Find the attention in an ONNX graph, label it, order it, and expose it as graph outputs.

Three families of sites (see shared/reference/onnx-attention-findings.md):

* decomposed: a ``Softmax`` whose output (through NaN guards, casts, dropout) is input A of the
  P·V ``MatMul`` and whose input (through scale / mask / bias ops) comes from a Q·Kᵀ ``MatMul``;
* the standard ONNX ``Attention`` op (opset 23+): switched to ``qk_matmul_output_mode=3``;
* onnxruntime ``com.microsoft`` fused ops: ``MultiHeadAttention`` / ``GroupQueryAttention`` expose
  their optional QK output, packed ``Attention`` is recomputed from its input and weights.

Everything here works on an in-memory copy; the user's file is never written.
"""

from __future__ import annotations

import copy
import re
import time
from collections import ChainMap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from attnviz import AttnvizError
from attnviz.core import metadata as md
from attnviz.core.attention import SiteInfo
from attnviz.runtime.wire import weights_by_reference, weights_by_reference_in  # noqa: F401 (re-exported)

# ops a probability tensor may pass through between Softmax and the P·V MatMul
DOWN_PASS = {"Where", "Cast", "Dropout", "Identity", "Reshape"}
# ops between the Q·Kᵀ MatMul and the Softmax (scale, mask, bias, softcap)
UP_PASS = {"Add", "Mul", "Div", "Sub", "Where", "Cast", "Reshape", "Tanh", "Identity", "Max", "Min", "Clip"}
MATMULS = {"MatMul", "Einsum", "FusedMatMul"}
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
UNSUPPORTED_FUSED = {
    "PackedAttention": "packed (padding-free) attention",
    "PackedMultiHeadAttention": "packed multi-head attention",
    "SparseAttention": "sparse attention",
    "PagedAttention": "paged attention",
    "DecoderMaskedSelfAttention": "decoder-masked self-attention",
    "LongformerAttention": "Longformer attention",
    "QAttention": "quantized attention",
}
REEXPORT_HINT = (
    "re-export the model without onnxruntime's transformer optimizer (plain torch.onnx.export), "
    "or optimize with use_multi_head_attention=True"
)
MS = "com.microsoft"
# com.microsoft fused ops that can hand out their QK scores or probabilities (see FUSED_OUTPUT): op -> method
MS_QK_METHODS = {"MultiHeadAttention": "mha-qk", "GroupQueryAttention": "gqa-qk"}


@dataclass
class Site:
    """One attention site found in the graph (internal; SiteInfo is what leaves the runtime)."""

    node_index: int
    node_name: str
    method: str  # softmax | onnx-attention | mha-qk | gqa-qk | recompute-packed
    probs: str = ""  # tensor to expose (probabilities, or pre-softmax scores for *-qk)
    q: str = ""  # operand A of the QK MatMul (for stack/kind and on-demand recompute)
    k: str = ""  # operand B of the QK MatMul
    qk: str = ""  # output of the QK MatMul (start of the epilogue)
    epilogue: list[int] = field(default_factory=list)  # node indices from QK output to probs
    extra: dict = field(default_factory=dict)  # method-specific facts
    heads: int = 0
    stack: str = "encoder"
    kind: str = "self"
    layer: int = 0
    depth: int = 0
    scope: str = ""
    g: Graph = field(kw_only=True, repr=False)  # the graph (or If/Loop/Scan body) holding the node
    twin: Site | None = field(default=None, repr=False)  # the same layer in the other branch of an If
    loop: str = ""  # "Loop" / "Scan": the body runs per iteration, its tensor comes out stacked on axis 0
    body_probs: str = ""  # for a site inside a body: the tensor there (``probs`` is its top-level output)

    def info(self, heads: int | None = None) -> SiteInfo:
        return SiteInfo(self.stack, self.kind, self.layer, int(heads or self.heads), self.node_name, self.method)


class Graph:
    """Index of one GraphProto (the model's, or an ``If``/``Loop``/``Scan`` body): producers, consumers, constants.

    A body may read tensors of the graphs around it (outer scope); lookups fall back to ``parent``.
    ``path`` locates a body: ``((node index, attribute name), ...)`` from the top-level graph down.
    Construction rejects cycles (an invalid graph that would make every walk loop) and orders the nodes.
    """

    def __init__(
        self,
        model: onnx.ModelProto,
        external_dir: str | None = None,
        graph: onnx.GraphProto | None = None,
        parent: Graph | None = None,
        path: tuple = (),
    ):
        self.model = model
        self.proto = graph if graph is not None else model.graph
        self.parent = parent
        self.path = path
        g = self.proto
        self.nodes = list(g.node)
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[tuple[int, int]]] = {}
        for i, n in enumerate(self.nodes):
            for o in n.output:
                if o:
                    self.producer[o] = i
            for j, t in enumerate(n.input):
                if t:
                    self.consumers.setdefault(t, []).append((i, j))
        self.initializers = {t.name: t for t in g.initializer}
        self.external_dir: str | None = external_dir if parent is None else parent.external_dir
        self.inputs = [i for i in g.input if i.name not in self.initializers]
        self.input_names = [i.name for i in self.inputs]
        self.order = _topological_order(self)
        self._site_depths: dict[int, int] | None = None  # filled by local_depths on first use
        self.bodies: list[Graph] = []  # direct subgraphs, in node order
        for i, n in enumerate(self.nodes):
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    self.bodies.append(Graph(model, graph=a.g, parent=self, path=path + ((i, a.name),)))

    def walk(self):
        """This graph and every nested body, outer first."""
        yield self
        for b in self.bodies:
            yield from b.walk()

    def is_const(self, name: str) -> bool:
        """An initializer here or in an enclosing scope (not shadowed by a local node output)."""
        if name in self.initializers:
            return True
        if name in self.producer:
            return False
        return self.parent is not None and self.parent.is_const(name)

    def const_value(self, name: str) -> np.ndarray | None:
        if name in self.initializers:
            # weights in external data files stay on disk until needed (base_dir is set by load_model)
            return numpy_helper.to_array(self.initializers[name], base_dir=self.external_dir or "")
        i = self.producer.get(name)
        if i is not None:
            if self.nodes[i].op_type == "Constant":
                for a in self.nodes[i].attribute:
                    if a.name == "value":
                        return numpy_helper.to_array(a.t)
            return None
        return self.parent.const_value(name) if self.parent is not None else None


def _topological_order(g: Graph) -> list[int]:
    """Node indices in dependency order (Kahn's algorithm, linear); a cycle is an invalid graph: one clear error."""
    local_deps: list[set[int]] = []
    for n in g.nodes:
        deps = {g.producer[t] for t in _reads(n) if t in g.producer}
        local_deps.append(deps)
    users: dict[int, list[int]] = {}
    missing = [len(d) for d in local_deps]
    for i, deps in enumerate(local_deps):
        for d in deps:
            users.setdefault(d, []).append(i)
    ready = [i for i, m in enumerate(missing) if m == 0]
    ready.reverse()
    order: list[int] = []
    while ready:
        i = ready.pop()
        order.append(i)
        for u in users.get(i, ()):
            missing[u] -= 1
            if missing[u] == 0:
                ready.append(u)
    if len(order) != len(g.nodes):
        stuck = next(i for i, m in enumerate(missing) if m > 0)
        n = g.nodes[stuck]
        raise AttnvizError(
            f"invalid ONNX graph: node {(n.name or n.op_type)!r} is part of a cycle (a tensor depends on "
            "itself); re-export the model"
        )
    order.sort()  # files are usually already sorted: keep file order where it is valid
    if any(d > i for i, deps in enumerate(local_deps) for d in deps):
        order = _kahn_stable(local_deps, users)
    return order


def _kahn_stable(local_deps, users) -> list[int]:
    """Dependency order that keeps file order among independent nodes (for files stored out of order)."""
    import heapq

    missing = [len(d) for d in local_deps]
    heap = [i for i, m in enumerate(missing) if m == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        i = heapq.heappop(heap)
        order.append(i)
        for u in users.get(i, ()):
            missing[u] -= 1
            if missing[u] == 0:
                heapq.heappush(heap, u)
    return order


def _reads(n) -> list[str]:
    """Tensors a node reads, including outer-scope names its bodies use (they are inputs too)."""
    out = [t for t in n.input if t]
    for a in n.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out += _outer_reads(a.g)
    return out


def _outer_reads(body: onnx.GraphProto) -> list[str]:
    defined = {i.name for i in body.input} | {t.name for t in body.initializer}
    for n in body.node:
        defined.update(o for o in n.output if o)
    out = []
    for n in body.node:
        out += [t for t in _reads(n) if t not in defined]
    return out


# --------------------------------------------------------------------------- loading
def load_model(path: str | Path) -> tuple[onnx.ModelProto, str | None]:
    """Parse an ONNX file safely: clear one-line errors, external data confined to the model's folder.

    Returns the model and, when it has external data, the folder that data is relative to.  The weights
    are left on disk: onnxruntime reads them itself and the graph we instrument stays small (which is
    also how models over protobuf's 2 GB limit work).
    """
    # moved to runtime/loading.py (the checks for untrusted files live there); kept here for callers
    from attnviz.runtime.loading import load_model as load

    return load(path)


# --------------------------------------------------------------------------- finding
ANALYSIS_SECONDS = 20.0  # walks are linear; this only bounds pathological files (a clear error, never a hang)
# consumers that make a Softmax over Q·Kᵀ scores attention even without a P·V MatMul, and the method they give
REDUCE_CONSUMERS = {"ReduceSum": "softmax-reduce", "ReduceMean": "softmax-reduce"}


class _Clock:
    def __init__(self, seconds: float = ANALYSIS_SECONDS):
        self.deadline = time.perf_counter() + seconds

    def check(self) -> None:
        if time.perf_counter() > self.deadline:
            raise AttnvizError(
                f"graph analysis took over {ANALYSIS_SECONDS:.0f} s (a pathological graph); "
                "the file is probably not a normal exported model — re-export it"
            )


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


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)


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


def find_sites(g: Graph) -> tuple[list[Site], str | None]:
    """Return the attention sites (unordered, unlabelled) of the graph and every body in it and, when there
    are none, why.  Sites in the two branches of one ``If`` are paired (see :func:`_pair_branches`)."""
    sites: list[Site] = []
    problems: list[str] = []
    counts = {"softmax": 0, "wrong_axis": 0}
    clock = _Clock()
    for sg in g.walk():
        for k, i in enumerate(sg.order):
            if k % 512 == 0:
                clock.check()
            _site_at(sg, i, sites, problems, counts)
    sites = _pair_branches(sites)
    if sites:
        return sites, None
    if problems:
        return [], f"attention is fused into ops that hide the probabilities: {problems[0]}; {REEXPORT_HINT}"
    if counts["wrong_axis"]:
        return [], (
            f"no attention found: {counts['wrong_axis']} Softmax node(s) over Q·Kᵀ scores normalise an axis that is "
            "not the key axis, so their values are not attention weights; check the export"
        )
    if counts["softmax"]:
        return [], (
            f"no attention found: the graph has {counts['softmax']} Softmax node(s) but none feeds a P·V MatMul "
            "from a Q·Kᵀ MatMul (e.g. only a classifier head); this model may not be a transformer"
        )
    return (
        [],
        "no attention found: the graph has no Softmax, ONNX Attention or onnxruntime attention op; this model may not be a transformer",
    )


def _site_at(g: Graph, i: int, sites: list[Site], problems: list[str], counts: dict) -> None:
    n = g.nodes[i]
    op, dom = n.op_type, n.domain
    name = n.name or f"{op}_{i}"
    loop = _loop_kind(g)
    if op == "Softmax" and dom in ("", "ai.onnx"):
        counts["softmax"] += 1
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
            counts["wrong_axis"] += 1  # normalised over queries / heads / a flattened block: not attention
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
        sites.append(site)
    elif op == "Attention" and dom in ("", "ai.onnx"):
        sites.append(
            Site(
                i,
                name,
                "onnx-attention",
                q=n.input[0],
                k=n.input[1],
                heads=int(_attr(n, "q_num_heads", 0) or 0),
                g=g,
                loop=loop,
            )
        )
    elif dom == MS and op in MS_QK_METHODS:
        k = n.input[1] if len(n.input) > 1 and n.input[1] else n.input[0]  # packed QKV: one input
        method = MS_QK_METHODS[op]
        sites.append(Site(i, name, method, q=n.input[0], k=k, heads=int(_attr(n, "num_heads", 0)), g=g, loop=loop))
    elif dom == MS and op == "Attention":
        # its maps are recomputed from the input, weights and bias: the weights and any bias must be constants
        w = g.const_value(n.input[1]) if len(n.input) > 1 else None
        bias_given = len(n.input) > 2 and bool(n.input[2])
        if w is None or (bias_given and g.const_value(n.input[2]) is None) or g.parent is not None:
            problems.append(
                f"com.microsoft Attention node {name!r} has non-constant weights or bias, or sits in a subgraph"
            )
            return
        sites.append(
            Site(
                i,
                name,
                "recompute-packed",
                q=n.input[0],
                k=n.input[0],
                heads=int(_attr(n, "num_heads", 0)),
                g=g,
                extra={
                    "unidirectional": int(_attr(n, "unidirectional", 0) or 0),
                    "mask_filter_value": float(_attr(n, "mask_filter_value", -10000.0) or -10000.0),
                    "scale": float(_attr(n, "scale", 0.0) or 0.0),
                    "qkv_hidden_sizes": list(_attr(n, "qkv_hidden_sizes", []) or []),
                },
            )
        )
    elif dom == MS and op in UNSUPPORTED_FUSED:
        problems.append(f"{op} ({UNSUPPORTED_FUSED[op]}) node {name!r} does not expose its probabilities")


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


def _loop_kind(g: Graph) -> str:
    """'Loop' / 'Scan' when the body runs once per iteration (its tensors come out stacked), else ''."""
    scope: Graph | None = g
    while scope is not None and scope.parent is not None:
        node = scope.parent.nodes[scope.path[-1][0]]
        if node.op_type in ("Loop", "Scan"):
            return node.op_type
        scope = scope.parent
    return ""


def _pair_branches(sites: list[Site]) -> list[Site]:
    """Sites of the two branches of one ``If`` are the same layers (a merged decoder runs one branch).

    When both branches hold the same number of sites they are paired in data-path order: one site, two
    tensors (the branch that runs supplies the map).  Otherwise each keeps its own site and the branch that
    does not run returns an empty placeholder, which the runtime drops.
    """
    by_if: dict[tuple, dict[str, list[Site]]] = {}
    for s in sites:
        for depth in range(len(s.g.path)):
            pnode, attr = s.g.path[depth]
            if attr in ("then_branch", "else_branch"):
                key = s.g.path[:depth] + ((pnode, ""),)
                by_if.setdefault(key, {}).setdefault(attr, []).append(s)
                break
    dropped: set[int] = set()
    for branches in by_if.values():
        a, b = branches.get("then_branch", []), branches.get("else_branch", [])
        if not a or not b or len(a) != len(b):
            continue
        ka = sorted(a, key=lambda s: (_site_depth(s), s.g.path, s.node_index))
        kb = sorted(b, key=lambda s: (_site_depth(s), s.g.path, s.node_index))
        if [s.method for s in ka] != [s.method for s in kb]:
            continue
        for x, y in zip(ka, kb):
            x.twin = y
            dropped.add(id(y))
    return [s for s in sites if id(s) not in dropped]


def _site_depth(s: Site) -> int:
    return local_depths(s.g).get(s.node_index, 0)


def local_depths(g: Graph) -> dict[int, int]:
    """Attention-site depth of each node inside one graph (longest data path counting sites), cached."""
    if g._site_depths is not None:
        return g._site_depths
    depth: dict[str, int] = {}
    out: dict[int, int] = {}
    for i in g.order:
        n = g.nodes[i]
        d = max((depth.get(t, 0) for t in n.input if t), default=0)
        out[i] = d
        if _is_site_op(n):
            d += 1
        for o in n.output:
            depth[o] = d
    g._site_depths = out
    return out


def _is_site_op(n) -> bool:
    return n.op_type in ("Softmax", "Attention", "MultiHeadAttention", "GroupQueryAttention")


# --------------------------------------------------------------------------- labelling
_LAYER_RE = re.compile(r"(?:layers?|blocks?|block|h|layer)[._/](\d+)")
DECODER_INPUT_RE = re.compile(r"^decoder_|^labels$", re.I)
PAST_RE = re.compile(r"past|cache|present", re.I)


def node_scope(g: Graph, n) -> str:
    """The module path of a node: dynamo's name_scopes metadata, else the (legacy) node name."""
    for p in n.metadata_props:
        if p.key == "pkg.torch.onnx.name_scopes":
            return p.value
    return n.name or ""


ENCODER_PAST_RE = re.compile(r"encoder|cross", re.I)


def _flow(g: Graph, bits: dict[str, int], sites: list[Site]) -> dict[int, ChainMap]:
    """One pass over the graph and every body: for each tensor, the input bits it depends on; for each site,
    its depth (attention sites on the longest data path).  Returns the ancestry map of each scope (by id)."""
    site_at = {(id(s.g), s.node_index): s for s in sites}
    scopes: dict[int, ChainMap] = {}

    def run(sg: Graph, anc: ChainMap, dep: ChainMap) -> None:
        scopes[id(sg)] = anc
        bodies: dict[int, list[Graph]] = {b.path[-1][0]: [] for b in sg.bodies}
        for b in sg.bodies:
            bodies[b.path[-1][0]].append(b)
        for i in sg.order:
            n = sg.nodes[i]
            m = 0
            for t in n.input:
                m |= anc.get(t, 0)
            d = max((dep.get(t, 0) for t in n.input if t), default=0)
            if n.op_type in ("Shape", "Size"):
                m = 0  # shapes carry no content; a mask built from another input's shape is not data flow
            d_out = d
            for body in bodies.get(i, ()):
                banc, bdep = anc.new_child(), dep.new_child()
                for v in body.proto.input:  # iteration counters, loop-carried values, scanned slices
                    banc[v.name], bdep[v.name] = m, d
                run(body, banc, bdep)
                for v in body.proto.output:
                    m |= banc.get(v.name, 0)
                    d_out = max(d_out, bdep.get(v.name, d))
            s = site_at.get((id(sg), i))
            if s is not None:
                s.depth = d
                d_out = max(d_out, d + 1)
            for o in n.output:
                anc[o], dep[o] = m, d_out

    run(g, ChainMap(dict(bits)), ChainMap({}))
    return scopes


def label_sites(g: Graph, sites: list[Site], meta: dict | None = None) -> list[Site]:
    """Assign stack / kind / layer and return the sites in canonical order.

    kind: a site is cross-attention when its keys come from the encoder side (encoder inputs or states, or
    the encoder half of a KV cache: ``past_key_values.N.encoder.*``) and not from the decoder's own tokens or
    cache, while its queries do.  Layers are numbered per stack and kind (self L0, cross L0, self L1, ...).
    """
    meta = meta or {}
    roles = md.section(meta, "inputs")
    names = g.input_names
    bit = {name: 1 << i for i, name in enumerate(names)}
    enc_past = {n for n in names if PAST_RE.search(n) and ENCODER_PAST_RE.search(n)}
    dec_past = {n for n in names if PAST_RE.search(n) and n not in enc_past}
    # a decoder graph fed with precomputed encoder states or an encoder cache (optimum decoder files)
    decoder_graph = bool(enc_past) or any("encoder_hidden_states" in n or "encoder_output" in n for n in names)
    dec_bits = 0
    enc_bits = 0
    image_input = None
    for inp in g.inputs:
        name = inp.name
        if name in dec_past:
            if decoder_graph:
                dec_bits |= bit[name]
            continue
        if name in enc_past or "encoder_hidden_states" in name or "encoder_output" in name:
            enc_bits |= bit[name]
            continue
        role = roles.get(name, "")
        if (
            role in ("decoder_tokens", "decoder_mask")
            or DECODER_INPUT_RE.search(name)
            or (decoder_graph and "encoder" not in name)
        ):
            dec_bits |= bit[name]
        else:
            enc_bits |= bit[name]
        t = inp.type.tensor_type
        if role == "image" or (t.elem_type in (TensorProto.FLOAT, TensorProto.FLOAT16) and len(t.shape.dim) == 4):
            image_input = name
    # an image encoder + text decoder in one graph: token inputs are the decoder's
    if image_input is not None and not dec_bits:
        img_bit = bit[image_input]
        others = enc_bits & ~img_bit
        if others:
            dec_bits, enc_bits = others, img_bit

    scopes = _flow(g, bit, sites)

    for s in sites:
        node = s.g.nodes[s.node_index]
        s.scope = node_scope(s.g, node)
        anc = scopes[id(s.g)]
        aq, ak = anc.get(s.q, 0), anc.get(s.k, 0)
        s.kind = "cross" if (aq != ak and ak and not (ak & dec_bits) and (aq & dec_bits or aq & ~ak)) else "self"
        sc = s.scope.lower()
        if dec_bits and enc_bits:
            s.stack = "decoder" if (aq & dec_bits) else "encoder"
        elif "decoder" in sc:
            s.stack = "decoder"
        elif "encoder" in sc:
            s.stack = "encoder"
        elif s.kind == "cross":
            s.stack = "decoder"
        else:
            s.stack = ""  # decided below for single-stack graphs
    if any(s.stack == "" for s in sites):
        guess = "decoder" if _looks_causal(g, sites, meta) else "encoder"
        for s in sites:
            if s.stack == "":
                s.stack = guess
    # a cross site's stack is always the decoder, whatever the names said
    for s in sites:
        if s.kind == "cross":
            s.stack = "decoder"

    kind_order = {"self": 0, "cross": 1}
    stack_order = {"encoder": 0, "decoder": 1}
    out: list[Site] = []
    for stack in ("encoder", "decoder"):
        group = [s for s in sites if s.stack == stack]
        for kind in ("self", "cross"):
            ks = sorted((s for s in group if s.kind == kind), key=lambda s: (s.depth, s.g.path, s.node_index))
            for li, s in enumerate(ks):
                s.layer = li
        out += sorted(group, key=lambda s: (s.layer, kind_order[s.kind], s.node_index))
    out.sort(key=lambda s: (stack_order[s.stack], s.layer, kind_order[s.kind]))
    _cross_check_layers(out)
    return out


def _cross_check_layers(sites: list[Site]) -> None:
    """Names are only a hint: record where a parsed layer number disagrees with the data-path order."""
    for s in sites:
        m = _LAYER_RE.findall(s.scope)
        if m and int(m[-1]) != s.layer:
            s.extra["name_layer"] = int(m[-1])


def _looks_causal(g: Graph, sites: list[Site], meta: dict) -> bool:
    """Static guess whether a single-stack graph is a (causal) decoder; the runtime confirms on the maps."""
    arch = md.section(md.section(meta, "config"), "model").get("arch")
    if arch == "decoder":  # attnviz's own exports say what they are
        return True
    if any(PAST_RE.search(n) for n in g.input_names):
        return True
    # a causal mask compares two position ranges (j > i): Greater/Less on Range-derived tensors
    from_range: set[str] = set()
    for n in (n for sg in g.walk() for n in sg.nodes):
        if n.op_type == "Range" or (
            n.op_type in ("Unsqueeze", "Reshape", "Cast", "Expand", "Add", "Sub")
            and n.input
            and n.input[0] in from_range
        ):
            from_range.update(o for o in n.output if o)
        if (
            n.op_type in ("Greater", "Less", "GreaterOrEqual", "LessOrEqual")
            and len(n.input) == 2
            and n.input[0] in from_range
            and n.input[1] in from_range
        ):
            return True
    for n in (n for sg in g.walk() for n in sg.nodes):
        if n.op_type == "Trilu":
            return True
        if n.op_type == "Attention" and _attr(n, "is_causal", 0):
            return True
        if n.domain == MS and n.op_type in ("GroupQueryAttention",):
            return True
        if n.domain == MS and n.op_type == "Attention" and _attr(n, "unidirectional", 0):
            return True
    return False


# --------------------------------------------------------------------------- exposing
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
                _add_output(m, s.probs, seen, _float_type(g0.model, n) if new else None)
        for name in [ex["mask_index"]] if "mask_index" in ex else []:
            if name not in existing and g0.producer.get(name) is not None:
                _add_output(m, name, seen)
        outs.append(s.probs)
        extras.append(ex)
    for name in threader.top:
        _add_output(m, name, seen)
    return m, Exposed(outs, extras)


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
    """Element type of a site's tensor (value_info when declared; float32 otherwise)."""
    scope: Graph | None = s.g
    while scope is not None:
        for v in list(scope.proto.value_info) + list(scope.proto.output):
            if v.name == (s.body_probs or s.probs) and v.type.tensor_type.elem_type:
                return v.type.tensor_type.elem_type
        scope = scope.parent
    return _float_type(s.g.model, node) if s.method in FUSED_OUTPUT else TensorProto.FLOAT


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


def _float_type(model: onnx.ModelProto, node) -> int:
    """The element type of a fused node's first input when declared (fp16 models), else float32."""
    for v in list(model.graph.value_info) + list(model.graph.input):
        if v.name == node.input[0] and v.type.tensor_type.elem_type:
            return v.type.tensor_type.elem_type
    return TensorProto.FLOAT


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


def static_heads(g: Graph, s: Site) -> int:
    """Heads from the graph when cheaply known (attributes / value_info); 0 if unknown."""
    if s.heads:
        return s.heads
    vi = {v.name: v for v in list(g.model.graph.value_info) + list(g.model.graph.output)}
    v = vi.get(s.probs) or vi.get(s.qk)
    if v is not None:
        dims = v.type.tensor_type.shape.dim
        if len(dims) == 4 and dims[1].HasField("dim_value"):
            return int(dims[1].dim_value)
    return 0


# --------------------------------------------------------------------------- token grids
@dataclass
class TokenGrid:
    """How an image encoder's tokens lie on the image, read from the graph: ``lead`` tokens before the patches
    (concatenated learned tokens: CLS, registers), then ``rows x cols`` patches in row-major order."""

    rows: int
    cols: int
    lead: int = 0


SPATIAL_OPS = {"Conv", "MaxPool", "AveragePool"}


def token_grid(g: Graph, image_input: str, hw: tuple[int, int], n_keys: int) -> TokenGrid | None:
    """The patch grid of the image input at size ``hw``: the spatial map [B, C, h, w] that a Reshape/Flatten
    turns into tokens after a Conv (patch embedding / CNN backbone), and the Concat that may add learned
    tokens in front.  None when the graph does not show it (nothing is guessed)."""
    shapes = _concrete_shapes(g, image_input, hw)
    if shapes is None:
        return None
    seen, frontier = {image_input}, [(image_input, False)]
    flat = None
    for _ in range(200):  # bounded breadth-first walk down from the image
        nxt = []
        for t, after_conv in frontier:
            for ci, _ in g.consumers.get(t, []):
                n = g.nodes[ci]
                conv = after_conv or n.op_type in SPATIAL_OPS
                if conv and n.op_type in ("Reshape", "Flatten") and len(shapes.get(n.input[0], ())) == 4:
                    flat = flat or (n, shapes[n.input[0]])
                for o in n.output:
                    if o and o not in seen:
                        seen.add(o)
                        nxt.append((o, conv))
        if flat or not nxt:
            break
        frontier = nxt
    if flat is None:
        return None
    node, (_, _, h, w) = flat
    if not isinstance(h, int) or not isinstance(w, int):
        return None
    lead = _lead_tokens(g, node.output[0], shapes)
    # tokens are the h x w cells, or the columns (a text-line strip: the Reshape folds the height into channels),
    # or the rows; learned tokens come first.  Anything else does not fit: no grid rather than a guessed one.
    for rows, cols in ((h, w), (1, w), (h, 1)):
        if lead is None and 0 < n_keys - rows * cols <= 16:
            return TokenGrid(rows, cols, n_keys - rows * cols)  # a Concat in front whose sizes are computed at run time
        if lead is not None and rows * cols + lead == n_keys:
            return TokenGrid(rows, cols, lead)
    return None


def _concrete_shapes(g: Graph, image_input: str, hw: tuple[int, int]) -> dict[str, tuple[int | None, ...]] | None:
    """Shape inference on a weight-free copy with the image input fixed to [1, C, H, W]; dims as ints or None."""
    m = onnx.ModelProto()
    m.CopyFrom(g.model)
    for v in m.graph.input:
        if v.name == image_input:
            dims = v.type.tensor_type.shape.dim
            if len(dims) != 4:
                return None
            c = dims[1].dim_value if dims[1].HasField("dim_value") else 3
            v.type.tensor_type.shape.CopyFrom(
                onnx.TensorShapeProto(dim=[onnx.TensorShapeProto.Dimension(dim_value=d) for d in (1, c, hw[0], hw[1])])
            )
    try:
        inferred = onnx.shape_inference.infer_shapes(m, data_prop=True)
    except Exception:
        return None
    out: dict[str, tuple[int | None, ...]] = {t.name: tuple(int(d) for d in t.dims) for t in inferred.graph.initializer}
    for v in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        t = v.type.tensor_type
        if t.HasField("shape"):
            out[v.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
    return out


def _concat_after(g: Graph, t: str, limit: int = 6):
    """The first Concat downstream of the flattened patches (through layout ops), and the operand it reads."""
    frontier, seen = [t], {t}
    for _ in range(limit):
        nxt = []
        for cur in frontier:
            for ci, j in g.consumers.get(cur, []):
                n = g.nodes[ci]
                if n.op_type == "Concat":
                    return n, j
                if (
                    n.op_type
                    in (
                        "Transpose",
                        "Reshape",
                        "Flatten",
                        "Squeeze",
                        "Unsqueeze",
                        "Identity",
                        "Cast",
                        "Add",
                        "MatMul",
                        "LayerNormalization",
                    )
                    and n.output[0] not in seen
                ):
                    seen.add(n.output[0])
                    nxt.append(n.output[0])
        frontier = nxt
    return None


def _lead_tokens(g: Graph, t: str, shapes: dict) -> int | None:
    """Tokens a Concat puts before the patches along the token axis: 0 when there is no such Concat (or the
    patches come first), None when something is put in front but its size is only known at run time."""
    found = _concat_after(g, t)
    if found is None:
        return 0
    node, j = found
    axis = int(_attr(node, "axis", 1))
    lead = 0
    for inp in node.input[:j]:
        shp = shapes.get(inp)
        if not shp or len(shp) <= axis or not isinstance(shp[axis], int):
            return None
        lead += shp[axis]
    return lead
