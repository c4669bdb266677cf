"""Per-row attention statistics computed inside onnxruntime, so that maps never leave the session.

A corpus worker needs, per query row of each self-attention map ``P [B, H, T, T]``, only a few row sums
(:data:`LINEAR`) and three argmax columns (:data:`ARGMAX`).  Copying every map out of the session (off the GPU)
and reducing it with numpy on one core cost most of the corpus overhead.  :func:`stats_model` appends nodes after
each site's probability tensor that compute exactly those ``[B, H, T, k]`` arrays; only they come back.  Division
by the row sum, entropy, validity masks and top-k stay in numpy (:mod:`attnviz.core.row_sums`).

Sites whose probabilities are not a tensor of the top-level graph (a Loop/If body, scores that numpy
normalises, packed attention recomputed from weights, an explicit softmax axis) stay on the numpy path: their
maps are exposed as before and the caller reduces them itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from attnviz.core.row_sums import ARGMAX, LINEAR, RowSums
from attnviz.runtime import graph as gr

# methods whose exposed tensor is the post-softmax probabilities (mha-qk gives scores; packed is recomputed)
IN_GRAPH_METHODS = {"softmax", "softmax-reduce", "onnx-attention", "gqa-qk"}
MIN_OPSET = 11  # GatherElements; older graphs keep the numpy path
EPS = 1e-30  # the same guard as core.stats.row_stats: 0·log(0 + eps) = 0 and log stays finite

# extra graph inputs, shared by every site (built per batch by :func:`stat_feeds`)
REAL = "attnviz_stat_real"  # [B, 1, 1, T] float32: 1 where the key is a real token
DIST = "attnviz_stat_dist"  # [T, T] float32: |i - j|
FLAT = "attnviz_stat_flat"  # [T, 4] int64: flat index in a row-major T×T map of (i,i), (i,i-1), (i,i+1), (i,0)
SP_IDX = "attnviz_stat_sp_idx"  # [B, 1, 1, S] int64: key positions of the special real keys (padded with 0)
SP_W = "attnviz_stat_sp_w"  # [B, 1, S, 2] float32: columns "special", "special after position 0"
SP_KEEP = "attnviz_stat_sp_keep"  # [B, 1, 1, S] bool: a real special key (not padding)
SP_OTHER = "attnviz_stat_sp_other"  # [B, 1, 1, S] bool: ... after position 0


@dataclass(frozen=True)
class StatOutputs:
    """Names of one site's two outputs: float32 ``[B, H, T, len(LINEAR)]`` and int64 ``[B, H, T, len(ARGMAX)]``."""

    sums: str
    argmax: str


def supported(g: gr.Graph, s: gr.Site) -> bool:
    """A site whose probabilities the appended nodes can read (else it stays on the numpy path)."""
    return (
        s.kind == "self"
        and s.method in IN_GRAPH_METHODS
        and not s.g.path
        and not s.loop
        and s.g is g
        and "softmax_axis" not in s.extra
        and gr._opset(g.model) >= MIN_OPSET
    )


class _Nodes:
    """Appends nodes with fresh names to a graph; ``opset`` picks the ReduceSum form (axes input from 13)."""

    def __init__(self, graph: onnx.GraphProto, opset: int, prefix: str):
        self.graph, self.opset, self.prefix, self.n = graph, opset, prefix, 0

    def __call__(self, op: str, inputs: list[str], **attrs) -> str:
        self.n += 1
        out = f"{self.prefix}{op.lower()}_{self.n}"
        self.graph.node.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def const(self, value, dtype=np.int64) -> str:
        return self("Constant", [], value=numpy_helper.from_array(np.asarray(value, dtype)))

    def row_sum(self, x: str) -> str:
        """Sum over the key axis, kept as a trailing axis of size 1."""
        if self.opset >= 13:
            return self("ReduceSum", [x, self.const([-1])], keepdims=1)
        return self("ReduceSum", [x], axes=[-1], keepdims=1)


def _as_bhtt(nd: _Nodes, probs: str, batch: str) -> str:
    """The site's tensor as float32 ``[B or 1, H, Tq, Tk]``, reshaped exactly as ``model.to_bhqk`` does:
    rank 4 as is, rank 3 ``[B·H, T, T]`` (or ``[H, T, T]`` when B does not divide it), rank 2 one head,
    rank 5 grouped heads ``[B, Hkv, G, T, T]``.  A leading 1 broadcasts against the batch's masks."""
    p = nd("Cast", [probs], to=TensorProto.FLOAT)  # onnxruntime drops it when the tensor is float32 already
    shape = nd("Shape", [p])
    rank = nd("Size", [shape])
    d0 = nd("Slice", [shape, nd.const([0]), nd.const([1])])
    tail = nd("Slice", [shape, nd.const([-2]), nd.const([np.iinfo(np.int64).max])])
    one = nd.const([1])
    divides = nd("Equal", [nd("Mod", [d0, batch]), nd.const([0])])
    lead = nd(
        "Where",
        [
            nd("Equal", [rank, nd.const(3)]),
            nd("Where", [divides, batch, one]),
            nd("Where", [nd("Equal", [rank, nd.const(2)]), one, d0]),
        ],
    )
    return nd("Reshape", [p, nd("Concat", [lead, nd.const([-1]), tail], axis=0)])


def _site_nodes(nd: _Nodes, probs: str, batch: str) -> tuple[str, str]:
    p = _as_bhtt(nd, probs, batch)
    pm = nd("Mul", [p, REAL])  # padded keys dropped; rows are renormalised in numpy by the row sum
    s = nd.row_sum(pm)
    plogp = nd.row_sum(nd("Mul", [pm, nd("Log", [nd("Add", [pm, nd.const(EPS, np.float32)])])]))  # natural log
    dist = nd.row_sum(nd("Mul", [pm, DIST]))
    am = nd("ArgMax", [pm], axis=-1, keepdims=1)  # first of equal maxima, as numpy; padded keys are 0 here
    mx = nd("GatherElements", [pm, am], axis=-1)
    flat = nd("Reshape", [pm, nd.const([0, 0, -1])])  # [B, H, T·T]
    fixed = nd("Gather", [flat, FLAT], axis=2)  # [B, H, T, 4]: diag, prev, next, first
    # special keys are few: gather their columns and work on [B, H, T, S] instead of the whole map
    lead3 = nd("Slice", [nd("Shape", [pm]), nd.const([0]), nd.const([3])])
    want = nd("Concat", [lead3, nd("Slice", [nd("Shape", [SP_IDX]), nd.const([3]), nd.const([4])])], axis=0)
    spv = nd("GatherElements", [pm, nd("Expand", [SP_IDX, want])], axis=-1)
    spm = nd("MatMul", [spv, SP_W])  # [B, H, T, 2]: special, special after 0
    minus = nd.const(-1.0, np.float32)
    a_sp = nd("ArgMax", [nd("Where", [SP_KEEP, spv, minus])], axis=-1, keepdims=1)
    a_ot = nd("ArgMax", [nd("Where", [SP_OTHER, spv, minus])], axis=-1, keepdims=1)
    sums = nd("Concat", [s, plogp, dist, mx, fixed, spm], axis=-1)
    arg = nd("Concat", [am, a_sp, a_ot], axis=-1)
    return sums, arg


def stats_model(
    g: gr.Graph, sites: list[gr.Site], groups_sites: set[int]
) -> tuple[onnx.ModelProto, gr.Exposed, dict[int, StatOutputs]]:
    """A copy of the model whose outputs are: per supported site in ``groups_sites`` its two statistic tensors,
    and for every other site what the dense instrumented model exposes.  The model's own outputs are dropped,
    so onnxruntime prunes whatever follows the last attention map the corpus needs."""
    m, exposed = gr.instrument(g, sites, "dense")
    opset = gr._opset(m)
    on = {i for i, s in enumerate(sites) if i in groups_sites and supported(g, s)}
    keep = [exposed.outputs[i] for i in range(len(sites)) if i not in on]
    for ex in (exposed.site_extra[i] for i in range(len(sites)) if i not in on):
        keep += [ex["mask_index"]] if "mask_index" in ex else []
    outputs = [o for o in m.graph.output if o.name in keep]
    del m.graph.output[:]
    m.graph.output.extend(outputs)
    if not on:
        return m, exposed, {}
    m.graph.input.extend(
        [
            helper.make_tensor_value_info(REAL, TensorProto.FLOAT, ["B", 1, 1, "T"]),
            helper.make_tensor_value_info(DIST, TensorProto.FLOAT, ["T", "T"]),
            helper.make_tensor_value_info(FLAT, TensorProto.INT64, ["T", 4]),
            helper.make_tensor_value_info(SP_IDX, TensorProto.INT64, ["B", 1, 1, "S"]),
            helper.make_tensor_value_info(SP_W, TensorProto.FLOAT, ["B", 1, "S", 2]),
            helper.make_tensor_value_info(SP_KEEP, TensorProto.BOOL, ["B", 1, 1, "S"]),
            helper.make_tensor_value_info(SP_OTHER, TensorProto.BOOL, ["B", 1, 1, "S"]),
        ]
    )
    shared = _Nodes(m.graph, opset, "attnviz_stat_")
    batch = shared("Slice", [shared("Shape", [REAL]), shared.const([0]), shared.const([1])])
    names: dict[int, StatOutputs] = {}
    for i in sorted(on):
        sums, arg = _site_nodes(_Nodes(m.graph, opset, f"attnviz_stat{i}_"), exposed.outputs[i], batch)
        m.graph.output.extend(
            [
                helper.make_tensor_value_info(sums, TensorProto.FLOAT, None),
                helper.make_tensor_value_info(arg, TensorProto.INT64, None),
            ]
        )
        names[i] = StatOutputs(sums, arg)
    return m, exposed, names


def stat_feeds(lengths: np.ndarray, special: np.ndarray | None, t: int) -> dict[str, np.ndarray]:
    """The extra inputs for one right-padded batch: ``lengths [B]`` real tokens, ``special [B, T]`` special keys."""
    lengths = np.asarray(lengths, np.int64)
    b = len(lengths)
    ar = np.arange(t)
    real = ar[None, :] < lengths[:, None]
    sp = np.zeros((b, t), bool) if special is None else np.asarray(special, bool)[:, :t]
    sp = sp & real
    n = max(1, int(sp.sum(1).max(initial=0)))
    idx = np.zeros((b, n), np.int64)
    keep = np.zeros((b, n), bool)
    for r in range(b):
        cols = np.flatnonzero(sp[r])
        idx[r, : len(cols)] = cols
        keep[r, : len(cols)] = True
    other = keep & (idx > 0)
    flat = np.stack([ar * t + ar, ar * t + np.maximum(ar - 1, 0), ar * t + np.minimum(ar + 1, t - 1), ar * t], -1)
    return {
        REAL: real.astype(np.float32)[:, None, None, :],
        DIST: np.abs(ar[:, None] - ar[None, :]).astype(np.float32),
        FLAT: flat.astype(np.int64),
        SP_IDX: idx[:, None, None, :],
        SP_W: np.stack([keep, other], -1).astype(np.float32)[:, None],
        SP_KEEP: keep[:, None, None, :],
        SP_OTHER: other[:, None, None, :],
    }


def row_sums(sums: np.ndarray, arg: np.ndarray, feeds: dict[str, np.ndarray]) -> RowSums:
    """One site's outputs as :class:`RowSums`, special argmax slots mapped back to key positions."""
    idx = feeds[SP_IDX][:, 0, 0, :]  # [B, S]
    b = np.arange(idx.shape[0])[:, None, None]
    cols = {"real": arg[..., 0]}
    for j, (name, keep) in enumerate([("special", SP_KEEP), ("special_other", SP_OTHER)], start=1):
        any_key = feeds[keep][:, 0, 0, :].any(-1)[:, None, None]
        cols[name] = np.where(any_key, idx[b, arg[..., j]], 0)  # none kept: numpy's argmax of all -1 is 0
    return RowSums({k: sums[..., i] for i, k in enumerate(LINEAR)}, {k: cols[k] for k in ARGMAX}, log_base=np.e)
