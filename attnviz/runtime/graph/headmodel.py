"""A site's head model: one head's attention rows from the site's whole Q and Kᵀ, for on-demand maps whose Q and Kᵀ
stay where onnxruntime wrote them (:mod:`attnviz.runtime.kept`).  The numpy recompute's steps
(:class:`attnviz.runtime.sitemaps.RecomputeMap`) as graph nodes: the head picked, its rows picked, Q·Kᵀ, the
QK node's ``alpha``, then the graph's own epilogue (:func:`~attnviz.runtime.graph.instrument.epilogue_model`), so
that they run on the device that holds Q and Kᵀ and only the rows asked for come back.

Only ops every opset since 5 has in one form (Reshape, Gather, Transpose, MatMul, Mul): the model's own opset
applies, as its epilogue nodes need it."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from attnviz.runtime.graph.base import Site
from attnviz.runtime.graph.index import Graph
from attnviz.runtime.graph.instrument import epilogue_model
from attnviz.runtime.kept import K_INDEX, K_SHAPE, Q_INDEX, Q_SHAPE, ROWS, SCORES_SHAPE, K, Q


def head_model(
    g: Graph, s: Site, opset_imports, dtypes: dict[str, tuple], attrs: dict, ranks: tuple[int, int]
) -> onnx.ModelProto | None:
    """Site ``s``'s head model (None where its epilogue cannot be rebuilt).  ``dtypes``: as for
    :func:`epilogue_model` (the scores' and the side inputs' (dtype, rank)); ``attrs``: the QK node's attributes
    (``transA``, ``transB``, ``alpha`` of a FusedMatMul); ``ranks``: the kept Q's and Kᵀ's ranks."""
    epi = epilogue_model(g, s, opset_imports, dtypes)
    if epi is None:
        return None
    qdt = np.dtype(dtypes[s.qk][0])
    q_type = helper.np_dtype_to_tensor_dtype(qdt)
    nodes = [
        helper.make_node("Reshape", [Q, Q_SHAPE], ["attnviz_head_q3"]),
        helper.make_node("Gather", ["attnviz_head_q3", Q_INDEX], ["attnviz_head_q2"], axis=0),
        helper.make_node("Reshape", [K, K_SHAPE], ["attnviz_head_k3"]),
        helper.make_node("Gather", ["attnviz_head_k3", K_INDEX], ["attnviz_head_k2"], axis=0),
    ]
    q2, k2 = "attnviz_head_q2", "attnviz_head_k2"
    if attrs.get("transA"):
        nodes.append(helper.make_node("Transpose", [q2], ["attnviz_head_qt"], perm=[1, 0]))
        q2 = "attnviz_head_qt"
    if attrs.get("transB"):
        nodes.append(helper.make_node("Transpose", [k2], ["attnviz_head_kt"], perm=[1, 0]))
        k2 = "attnviz_head_kt"
    nodes += [
        helper.make_node("Gather", [q2, ROWS], ["attnviz_head_qrows"], axis=0),
        helper.make_node("MatMul", ["attnviz_head_qrows", k2], ["attnviz_head_s"]),
    ]
    scores, inits = "attnviz_head_s", []
    alpha = float(attrs.get("alpha", 1.0))
    if alpha != 1.0:  # as the numpy recompute scales: after the product, in Q's dtype
        inits.append(numpy_helper.from_array(np.array(alpha, qdt), "attnviz_head_alpha"))
        nodes.append(helper.make_node("Mul", [scores, "attnviz_head_alpha"], ["attnviz_head_scaled"]))
        scores = "attnviz_head_scaled"
    nodes.append(helper.make_node("Reshape", [scores, SCORES_SHAPE], [s.qk]))
    ints = [
        helper.make_tensor_value_info(n, TensorProto.INT64, shape)
        for n, shape in (
            (Q_SHAPE, [3]),
            (K_SHAPE, [3]),
            (Q_INDEX, []),
            (K_INDEX, []),
            (ROWS, [None]),
            (SCORES_SHAPE, [4]),
        )
    ]
    eg = epi.graph
    side = [i for i in eg.input if i.name != s.qk]
    graph = helper.make_graph(
        [*nodes, *eg.node],
        "attnviz_head",
        [
            helper.make_tensor_value_info(Q, q_type, [None] * ranks[0]),
            helper.make_tensor_value_info(K, q_type, [None] * ranks[1]),
            *ints,
            *side,
        ],
        list(eg.output),
        initializer=[*inits, *eg.initializer],
    )
    return helper.make_model(graph, opset_imports=list(epi.opset_import), ir_version=epi.ir_version)
