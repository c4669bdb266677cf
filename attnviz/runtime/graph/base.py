"""What every attention-pattern finder shares: the :class:`Site` record it adds and the :class:`Scan` it adds to.

A finder (one per pattern family: :mod:`.softmax`, :mod:`.fused`) looks at one node; :mod:`.sites` runs the
registered finders over every node of the graph and its bodies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from attnviz.core.attention import SiteInfo
from attnviz.runtime.graph.index import Graph


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
    # the last info() made, with what it was made from: every run's result asks each site for its info, and a
    # SiteInfo (frozen) made anew each time was ~3 us a site a run (has_sink walks the epilogue's nodes; measured)
    _info: tuple[tuple, SiteInfo] | None = field(default=None, init=False, repr=False, compare=False)

    def info(self, heads: int | None = None) -> SiteInfo:
        tower = self.extra.get("tower")  # a dual encoder's (labels.py)
        window = self.extra.get("window")  # a windowed vision block's (a VLM family's, vlm.py)
        # every field the info reads that can change after the site is found (probe, relabelling, a copy's
        # numbering); has_sink reads method, epilogue and graph, which the finders set once
        key = (self.stack, self.kind, self.layer, int(heads or self.heads), self.node_name, self.method, tower, window)
        last = self._info
        if last is not None and last[0] == key:
            return last[1]
        made = SiteInfo(*key[:6], tower=tower, window=window, sink=self.has_sink)
        self._info = (key, made)
        return made

    @property
    def has_sink(self) -> bool:
        """A softmax over an attention sink: a Concat on the scores' way up (one learned logit per head joins every
        row) and a Slice on the probabilities' way down (its column cut off before P·V), as optimum exports
        GPT-OSS (graph/softmax.py walks through both)."""
        if self.method != "softmax":
            return False
        ops = {self.g.nodes[i].op_type for i in self.epilogue}
        return "Concat" in ops and "Slice" in ops


@dataclass
class Scan:
    """What one pass over the graph collects: the sites, why fused ops were refused, and the Softmax counts the
    "no attention found" message cites."""

    sites: list[Site] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    softmax: int = 0  # Softmax nodes seen
    wrong_axis: int = 0  # of those, over Q·Kᵀ scores but normalising another axis


# a finder: (graph, node index, node name, loop kind of the graph, scan) -> adds a Site or a problem, or nothing
Finder = Callable[[Graph, int, str, str, Scan], None]


def _loop_kind(g: Graph) -> str:
    """'Loop' / 'Scan' when the body runs once per iteration (its tensors come out stacked), else ''."""
    scope: Graph | None = g
    while scope is not None and scope.parent is not None:
        node = scope.parent.nodes[scope.path[-1][0]]
        if node.op_type in ("Loop", "Scan"):
            return node.op_type
        scope = scope.parent
    return ""
