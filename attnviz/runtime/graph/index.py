"""The graph index: producers, consumers, constants and a dependency order of one ONNX graph and its bodies.

Everything the site finders, the labelling, the instrumenting and the token grids read goes through
:class:`Graph`; nothing here knows about attention (onnxruntime keeps ``onnx_model.py`` apart from its pattern
passes the same way).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from attnviz import AttnvizError

MS = "com.microsoft"


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
        self._attributes: dict[int, Mapping[str, Any]] = {}  # filled by attributes() on first use per node
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

    def attributes(self, i: int) -> Mapping[str, Any]:
        """Node ``i``'s attributes by name, as values (``onnx.helper.get_attribute_value``), read-only: parsed on the
        first request, then kept, as the graph never changes (an instrumented session edits a deep copy).  Every
        on-demand run reads its QK nodes' (``transA``, ``alpha``...): ~7 us a site a run where parsed each time,
        most of it protobuf access that the run's onnxruntime work has evicted from the caches (measured)."""
        got = self._attributes.get(i)
        if got is None:
            got = MappingProxyType({a.name: helper.get_attribute_value(a) for a in self.nodes[i].attribute})
            self._attributes[i] = got
        return got

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


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
