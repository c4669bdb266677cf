"""onnxruntime's optimised graph of a model with subgraphs, made loadable again before it is kept (runtime/optcache.py).

onnxruntime 1.32's transpose optimiser names what it adds per graph (``Transpose_token_10_out0``,
``const_transpose_optimizer``): an ``If`` branch gets the same names as the graph around it, and the optimised graph
it writes then fails its own SSA check on load ("... has been used as output names multiple times").  The
statistics graph has such an ``If`` per site (runtime/statgraph.py), so every worker of every command missed its kept
session and made it again (~0.1 s CPU a worker).  Renaming what a subgraph makes where the name is taken already
(outside it, or in an earlier subgraph) gives the same computation under unique names.
"""

from __future__ import annotations

import os

import onnx

from attnviz.runtime.optcache import KEEP_MAX_BYTES

SUFFIX = "__attnviz_sub"  # a renamed value: its old name, this, a number (unique in the whole model)


def unique_subgraph_names(path: str) -> bool:
    """Rewrite the graph at ``path`` (its weights left where they are) so that no value made in a subgraph shares
    its name with any other in the model; True where anything was renamed (else the file is left untouched).
    ``path`` is the temporary file of ``session._kept``'s atomic write (core.writes.atomic_path), never a kept
    entry or a user's file: an interrupted rewrite leaves nothing behind.  A
    graph too large to keep (:data:`~attnviz.runtime.optcache.KEEP_MAX_BYTES`) is not read: it is dropped anyway."""
    if os.path.getsize(path) > KEEP_MAX_BYTES:
        return False
    m = onnx.load(path, load_external_data=False)
    if not any(a.type == onnx.AttributeProto.GRAPH or a.graphs for n in m.graph.node for a in n.attribute):
        return False
    taken = set(_made(m.graph))
    renamed = [0]
    for n in m.graph.node:
        for g in _bodies(n):
            _rename(g, {}, taken, renamed)
    if not renamed[0]:
        return False
    onnx.save(m, path)
    return True


def _made(g: onnx.GraphProto) -> list[str]:
    """The names ``g`` itself binds: its inputs, initializers and its nodes' outputs (not its subgraphs')."""
    return [
        *(i.name for i in g.input),
        *(t.name for t in g.initializer),
        *(t.values.name for t in g.sparse_initializer),
        *(o for n in g.node for o in n.output if o),
    ]


def _bodies(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    return [b for a in node.attribute for b in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs))]


def _rename(g: onnx.GraphProto, outer: dict[str, str], taken: set[str], renamed: list[int]) -> None:
    """Rename in ``g`` what it binds under a taken name, and every use of a renamed name (``outer``: the enclosing
    graphs' renames, which ``g`` may read); then its own subgraphs, the same way."""
    names = dict(outer)
    for name in _made(g):
        if name in taken:
            renamed[0] += 1
            new = f"{name}{SUFFIX}{renamed[0]}"
            while new in taken:
                renamed[0] += 1
                new = f"{name}{SUFFIX}{renamed[0]}"
            names[name] = new
        taken.add(names.get(name, name))
    for i in g.input:
        i.name = names.get(i.name, i.name)
    for t in g.initializer:
        t.name = names.get(t.name, t.name)
    for s in g.sparse_initializer:
        s.values.name = names.get(s.values.name, s.values.name)
    for n in g.node:
        n.input[:] = [names.get(x, x) if x else x for x in n.input]
        n.output[:] = [names.get(x, x) if x else x for x in n.output]
    for v in [*g.output, *g.value_info]:
        v.name = names.get(v.name, v.name)
    for n in g.node:
        for body in _bodies(n):
            _rename(body, names, taken, renamed)
