"""A corpus worker's statistics graph (:func:`attnviz.runtime.statgraph.stats_model`) kept between commands.

Each worker of every command built the same edited graph of the same model (~0.02 s CPU of MiniLM's start-up)
before onnxruntime read it.  What it builds depends on the model file, on attnviz's code (finding the sites,
instrumenting them, the statistics' nodes), on onnx and numpy (the helpers that make the nodes and constants), on the
sites as the probe labelled them and on the arguments, so the key names all of them: the file's sha256 where every
weight lies in it (:meth:`AttentionModel.file_key`) and its name (which the graph's weights refer to), a digest of attnviz's source
(:func:`attnviz.runtime.optcache.code_digest`), the versions, every site as found and probed (its record, node and
tensors), and ``wanted`` / ``rows`` / ``join``.  The entry is the graph's serialised bytes, which the session's own
keys (the optimised graph, the memory estimates) hash: a kept graph finds the same kept session.  An entry that does
not read back whole (its own digest, a parseable graph, what it exposes for every site) is not believed: the graph
is built, and kept again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from attnviz.runtime import optcache
from attnviz.runtime import statgraph as sg
from attnviz.runtime.graph import Exposed

if TYPE_CHECKING:
    from attnviz.runtime.model import AttentionModel

FORMAT = 1  # the entry's layout: a new layout is a new key, never a misread entry
KIND = "statgraph"


def stats_model(
    model: AttentionModel, wanted: set[int], rows: bool = False, join: bool = False
) -> tuple[onnx.ModelProto, Exposed, list[int]]:
    """:func:`attnviz.runtime.statgraph.stats_model` of ``model``'s graph and sites: read from the cache where an
    earlier command built it for the same key, else built (and kept)."""
    key = graph_key(model, wanted, rows, join)
    found = _parsed(optcache.kept_bytes(KIND, key), len(model.graph_sites)) if key is not None else None
    if found is not None:
        return found
    m, exposed, on = sg.stats_model(model.graph, model.graph_sites, wanted, rows, join)
    if key is not None:
        optcache.keep_bytes(KIND, key, _entry(m, exposed, on))
    return m, exposed, on


def graph_key(model: AttentionModel, wanted: set[int], rows: bool, join: bool) -> optcache.GraphKey | None:
    """What names the statistics graph of ``model`` in the cache; None where nothing is kept (caching off, the
    file's hash not known yet, a weight outside the file, no attnviz sources to name the code by)."""
    import numpy

    if any(s.method != "softmax" or s.g.path for s in model.graph_sites):
        return None  # instrumenting these sets their Site's tensor names (graph.instrument): they are built each time

    def described(code: str) -> list:
        return [
            FORMAT,
            code,
            # the graph's weights name the file they lie in (runtime/wire.py): the same bytes under another name are
            # another graph
            Path(model.path).resolve().name,
            onnx.__version__,
            numpy.__version__,
            sorted(wanted),
            rows,
            join,
            [s.to_dict() for s in model.sites],
            [repr(s) for s in model.graph_sites],  # the sites as found and probed: node, tensors, method, heads, extra
        ]

    return optcache.code_key(model.file_key(KIND.encode()), described)


def _entry(m: onnx.ModelProto, exposed: Exposed, on: list[int]) -> bytes:
    graph = m.SerializeToString()
    head = {
        "format": FORMAT,
        "sha256": hashlib.sha256(graph).hexdigest(),
        "outputs": exposed.outputs,
        "site_extra": exposed.site_extra,
        "on": on,
    }
    return json.dumps(head).encode() + b"\n" + graph


def _parsed(entry: bytes | None, sites: int) -> tuple[onnx.ModelProto, Exposed, list[int]] | None:
    """The kept graph, or None where ``entry`` is not a whole one for ``sites`` sites."""
    from attnviz import AttnvizError
    from attnviz.core.untrusted import parse_json

    if not entry or b"\n" not in entry:
        return None
    text, graph = entry.split(b"\n", 1)
    try:
        head = parse_json(text, "a kept statistics graph")
    except AttnvizError:
        return None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        return None
    outputs, extra, on = head.get("outputs"), head.get("site_extra"), head.get("on")
    if head.get("sha256") != hashlib.sha256(graph).hexdigest():
        return None  # damaged: not the bytes that were kept
    if not (isinstance(outputs, list) and len(outputs) == sites and all(isinstance(o, str) for o in outputs)):
        return None
    if not (isinstance(extra, list) and len(extra) == sites and all(_names(e) for e in extra)):
        return None
    if not (isinstance(on, list) and all(type(i) is int and 0 <= i < sites for i in on) and on == sorted(set(on))):
        return None
    try:
        m = onnx.load_model_from_string(graph)
    except Exception:
        return None
    made = {o for n in m.graph.node for o in n.output} | {i.name for i in [*m.graph.input, *m.graph.initializer]}
    fetched = {o.name for o in m.graph.output}
    if not fetched <= made or (on and not {sg.SUMS, sg.PICKS} <= fetched):
        return None  # an output nothing makes, or no statistics: not the graph that was kept
    return m, Exposed(outputs, extra), on


def _names(extra: object) -> bool:
    return isinstance(extra, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in extra.items())
