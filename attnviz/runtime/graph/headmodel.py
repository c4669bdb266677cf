"""A site's head model: some heads' attention rows from the site's whole Q and Kᵀ, for on-demand maps whose Q and Kᵀ
stay where onnxruntime wrote them (:mod:`attnviz.runtime.kept`).  The numpy recompute's steps
(:class:`attnviz.runtime.sitemaps.RecomputeMap`) as graph nodes: the heads picked (one, or every head of a batch
row: one request a site), their rows picked, Q·Kᵀ, the QK node's ``alpha``, then the graph's own epilogue
(:func:`~attnviz.runtime.graph.instrument.epilogue_model`), so that they run on the device that holds Q and Kᵀ and
only the rows asked for come back.  Its pooling twin (``pool=True``) then max-pools those heads as the overview does
(:func:`attnviz.core.view.downsample`) and returns only the thumbnails.

The head model uses only ops every opset since 5 has in one form (Reshape, Gather, Transpose, MatMul, Mul): the
model's own opset applies, as its epilogue nodes need it.  The pooling adds Slice and Pad (pads as an input: opset
11 on) and ReduceMax (axes an attribute to opset 17, an input from 18), so it is made for opset 13 on
(:data:`POOL_OPSET`; below, the overview pools the heads on the host, as before)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from attnviz.runtime.graph.base import Site
from attnviz.runtime.graph.index import Graph
from attnviz.runtime.graph.instrument import epilogue_model
from attnviz.runtime.kept import (
    K_INDEX,
    K_SHAPE,
    POOL_COLS,
    POOL_ENDS,
    POOL_PADS,
    POOL_ROWS,
    Q_INDEX,
    Q_SHAPE,
    ROWS,
    SCORES_SHAPE,
    THUMBS,
    K,
    Q,
    side_input,
)

POOL_OPSET = 13  # the pooling's ops in the forms it writes (ReduceMax's axes switch form at 18: both written)


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def head_model(
    g: Graph,
    s: Site,
    opset_imports,
    dtypes: dict[str, tuple],
    attrs: Mapping,
    ranks: tuple[int, int],
    pool: bool = False,
    kept_side: dict[str, int] | None = None,
) -> onnx.ModelProto | None:
    """Site ``s``'s head model (None where its epilogue cannot be rebuilt, or, with ``pool``, where the model's
    opset is below :data:`POOL_OPSET`).  ``dtypes``: as for :func:`epilogue_model` (the scores' and the side
    inputs' (dtype, rank)); ``attrs``: the QK node's attributes (``transA``, ``transB``, ``alpha`` of a
    FusedMatMul); ``ranks``: the kept Q's and Kᵀ's ranks; ``pool``: the pooling twin, whose one output is
    :data:`~attnviz.runtime.kept.THUMBS`; ``kept_side``: the side inputs kept beside Q and Kᵀ (name -> the kept
    value's rank), fed whole and sliced here (:func:`_side_slices`); the others are fed sliced, as before."""
    epi = epilogue_model(g, s, opset_imports, dtypes)
    if epi is None or (pool and _opset(epi) < POOL_OPSET):
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
    # the heads' indices are a vector (one head: a vector of one), so each picked Q is [n, Tq, d] and each Kᵀ [n, d, Tk]
    if attrs.get("transA"):
        nodes.append(helper.make_node("Transpose", [q2], ["attnviz_head_qt"], perm=[0, 2, 1]))
        q2 = "attnviz_head_qt"
    if attrs.get("transB"):
        nodes.append(helper.make_node("Transpose", [k2], ["attnviz_head_kt"], perm=[0, 2, 1]))
        k2 = "attnviz_head_kt"
    nodes += [
        helper.make_node("Gather", [q2, ROWS], ["attnviz_head_qrows"], axis=1),
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
            (Q_INDEX, [None]),
            (K_INDEX, [None]),
            (ROWS, [None]),
            (SCORES_SHAPE, [4]),
        )
    ]
    eg = epi.graph
    kept_side = kept_side or {}
    side_nodes, side_inputs = _side_slices(kept_side, {n: np.dtype(dtypes[n][0]) for n in kept_side})
    nodes = side_nodes + nodes
    side = [i for i in eg.input if i.name != s.qk and i.name not in kept_side] + side_inputs
    outputs = list(eg.output)
    tail: list[onnx.NodeProto] = []
    if pool:
        tail, ints2 = _pooling(s.probs, _opset(epi))
        ints += ints2
        outputs = [helper.make_empty_tensor_value_info(THUMBS)]  # the probabilities' type, as the epilogue's
    graph = helper.make_graph(
        [*nodes, *eg.node, *tail],
        "attnviz_head_pool" if pool else "attnviz_head",
        [
            helper.make_tensor_value_info(Q, q_type, [None] * ranks[0]),
            helper.make_tensor_value_info(K, q_type, [None] * ranks[1]),
            *ints,
            *side,
        ],
        outputs,
        initializer=[*inits, *eg.initializer],
    )
    return helper.make_model(graph, opset_imports=list(epi.opset_import), ir_version=epi.ir_version)


def _side_slices(
    kept_side: dict[str, int], dtypes: dict[str, np.dtype]
) -> tuple[list[onnx.NodeProto], list[onnx.ValueInfoProto]]:
    """For each kept side input: its whole value made 4-D (a fed shape: Reshape, every opset) and its batch row,
    heads and query rows gathered (fed index vectors: the rank stays 4), under the name the epilogue reads."""
    nodes: list[onnx.NodeProto] = []
    inputs: list[onnx.ValueInfoProto] = []
    for n, rank in kept_side.items():
        inputs.append(
            helper.make_tensor_value_info(
                side_input(n, "value"), helper.np_dtype_to_tensor_dtype(dtypes[n]), [None] * rank
            )
        )
        inputs.append(helper.make_tensor_value_info(side_input(n, "shape"), TensorProto.INT64, [4]))
        src = side_input(n, "value")
        steps = [
            ("shape", "Reshape", None),
            ("rows_of_batch", "Gather", 0),
            ("heads", "Gather", 1),
            ("rows", "Gather", 2),
        ]
        for i, (tag, op, axis) in enumerate(steps):
            out = n if i == len(steps) - 1 else f"{side_input(n, tag)}/out"
            if axis is None:
                nodes.append(helper.make_node(op, [src, side_input(n, tag)], [out]))
            else:
                nodes.append(helper.make_node(op, [src, side_input(n, tag)], [out], axis=axis))
            if axis is not None:
                inputs.append(helper.make_tensor_value_info(side_input(n, tag), TensorProto.INT64, [None]))
            src = out
    return nodes, inputs


def _pooling(probs: str, opset: int) -> tuple[list[onnx.NodeProto], list[onnx.ValueInfoProto]]:
    """Nodes max-pooling the heads' probabilities ``[1, n, r, Tk]`` to ``[n, R, C]`` as
    :func:`attnviz.core.view.downsample` pools each head: the first ``n_k`` keys kept (a step's, sliced before
    pooling as the overview slices), the rows and keys padded with zeros to whole runs of ``fq`` and ``fk`` (the
    host counts a short last run's 0 too), then the rows' runs' maxima and the keys'.  Every length is fed
    (:func:`~attnviz.runtime.kept.pool_feeds`), so the graph holds no size.  The maxima are of the very numbers
    the head model returns, so the thumbnails are its heads' pooled on the host, exactly."""

    def const(
        name: str, value: int
    ) -> onnx.NodeProto:  # a Constant node (every opset): the pooling adds no initializer
        return helper.make_node(
            "Constant", [], [name], value=numpy_helper.from_array(np.array([value], np.int64), name)
        )

    def reduce_max(src: str, axis: int, out: str) -> list[onnx.NodeProto]:
        if opset >= 18:  # the axes an input from opset 18, an attribute before
            axes = f"attnviz_pool_axis{axis}"
            return [const(axes, axis), helper.make_node("ReduceMax", [src, axes], [out], keepdims=0)]
        return [helper.make_node("ReduceMax", [src], [out], axes=[axis], keepdims=0)]

    nodes = [
        const("attnviz_pool_zero", 0),
        const("attnviz_pool_three", 3),
        helper.make_node("Slice", [probs, "attnviz_pool_zero", POOL_ENDS, "attnviz_pool_three"], ["attnviz_pool_k"]),
        helper.make_node("Pad", ["attnviz_pool_k", POOL_PADS], ["attnviz_pool_padded"], mode="constant"),
        helper.make_node("Reshape", ["attnviz_pool_padded", POOL_ROWS], ["attnviz_pool_r4"]),  # [n, R, fq, C·fk]
        *reduce_max("attnviz_pool_r4", 2, "attnviz_pool_rows"),
        helper.make_node("Reshape", ["attnviz_pool_rows", POOL_COLS], ["attnviz_pool_c4"]),  # [n, R, C, fk]
        *reduce_max("attnviz_pool_c4", 3, THUMBS),
    ]
    ints = [
        helper.make_tensor_value_info(n, TensorProto.INT64, [k])
        for n, k in ((POOL_ENDS, 1), (POOL_PADS, 8), (POOL_ROWS, 4), (POOL_COLS, 4))
    ]
    return nodes, ints
