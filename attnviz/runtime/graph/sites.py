"""Find the attention sites of a graph: every registered pattern finder over every node, then ``If`` pairing.

The finders come from one module per pattern family (:mod:`.softmax`, :mod:`.fused`), keyed by (domain, op);
a new family adds its module's ``FINDERS`` here.
"""

from __future__ import annotations

import time

from attnviz import AttnvizError
from attnviz.runtime.graph import fused, softmax
from attnviz.runtime.graph.base import Finder, Scan, Site, _loop_kind
from attnviz.runtime.graph.index import Graph

REEXPORT_HINT = (
    "re-export the model without onnxruntime's transformer optimizer (plain torch.onnx.export), "
    "or optimize with use_multi_head_attention=True"
)
ANALYSIS_SECONDS = 20.0  # walks are linear; this only bounds pathological files (a clear error, never a hang)

# (domain, op) -> the finder for that node ("ai.onnx" is looked up as "")
FINDERS: dict[tuple[str, str], Finder] = {**softmax.FINDERS, **fused.FINDERS}
# method -> how its maps are obtained (inspect's legend)
METHOD_NOTES: dict[str, str] = {**softmax.METHOD_NOTES, **fused.METHOD_NOTES}


class _Clock:
    def __init__(self, seconds: float = ANALYSIS_SECONDS):
        self.deadline = time.perf_counter() + seconds

    def check(self) -> None:
        if time.perf_counter() > self.deadline:
            raise AttnvizError(
                f"graph analysis took over {ANALYSIS_SECONDS:.0f} s (a pathological graph); "
                "the file is probably not a normal exported model — re-export it"
            )


def find_sites(g: Graph) -> tuple[list[Site], str | None]:
    """Return the attention sites (unordered, unlabelled) of the graph and every body in it and, when there
    are none, why.  Sites in the two branches of one ``If`` are paired (see :func:`_pair_branches`)."""
    scan = Scan()
    clock = _Clock()
    for sg in g.walk():
        loop = _loop_kind(sg)
        for k, i in enumerate(sg.order):
            if k % 512 == 0:
                clock.check()
            n = sg.nodes[i]
            finder = FINDERS.get(("" if n.domain == "ai.onnx" else n.domain, n.op_type))
            if finder is not None:
                finder(sg, i, n.name or f"{n.op_type}_{i}", loop, scan)
    sites = _pair_branches(scan.sites)
    if sites:
        return sites, None
    if scan.problems:
        return [], f"attention is fused into ops that hide the probabilities: {scan.problems[0]}; {REEXPORT_HINT}"
    if scan.wrong_axis:
        return [], (
            f"no attention found: {scan.wrong_axis} Softmax node(s) over Q·Kᵀ scores normalise an axis that is "
            "not the key axis, so their values are not attention weights; check the export"
        )
    if scan.softmax:
        return [], (
            f"no attention found: the graph has {scan.softmax} Softmax node(s) but none feeds a P·V MatMul "
            "from a Q·Kᵀ MatMul (e.g. only a classifier head); this model may not be a transformer"
        )
    return (
        [],
        "no attention found: the graph has no Softmax, ONNX Attention or onnxruntime attention op; this model may not be a transformer",
    )


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
