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
MIN_OPSET = 11  # TopK with its tie rule (lower index first); older graphs keep the numpy path
EPS = 1e-30  # the same guard as core.stats.row_stats: 0·log(0 + eps) = 0 and log stays finite

# extra graph inputs, shared by every site (built per batch by :func:`stat_feeds`)
REAL = "attnviz_stat_real"  # [B, 1, 1, T] float32: 1 where the key is a real token
SEL = "attnviz_stat_sel"  # [B, 1, T, 1 + S] float32: the real-key mask as a column, then one column per special key
DIST = "attnviz_stat_dist"  # [T, T] float32: |i - j|
SP_W = "attnviz_stat_sp_w"  # [B, 1, S, 2] float32: which special columns are "special", "special after 0"
SP_OFF = "attnviz_stat_sp_off"  # [B, 1, 1, S] float32: 0 for a real special key, -2 for padding (argmax)
SP_OFF_OTHER = "attnviz_stat_sp_off_other"  # the same for real special keys after position 0
COLUMNS = 1  # SEL's columns before the special keys


@dataclass(frozen=True)
class StatOutputs:
    """Names of one site's outputs: float32 ``[B, H, T, len(SUMMED)]``, float32 ``[B, H, 4T - 2]`` (the weights
    of the keys i, i-1, i+1 and 0 of each row i, see :data:`FIXED`) and int64 ``[B, H, T, len(ARGMAX)]``."""

    sums: str
    fixed: str
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
    """Appends nodes with fresh names to a graph (only ops whose signature is the same from opset 11 on)."""

    def __init__(self, graph: onnx.GraphProto, prefix: str):
        self.graph, self.prefix, self.n = graph, prefix, 0

    def __call__(self, op: str, inputs: list[str], **attrs) -> str:
        self.n += 1
        out = f"{self.prefix}{op.lower()}_{self.n}"
        self.graph.node.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def const(self, value, dtype=np.int64) -> str:
        return self("Constant", [], value=numpy_helper.from_array(np.asarray(value, dtype)))

    def multi(self, op: str, inputs: list[str], n: int, **attrs) -> list[str]:
        self.n += 1
        outs = [f"{self.prefix}{op.lower()}_{self.n}_{i}" for i in range(n)]
        self.graph.node.append(helper.make_node(op, inputs, outs, name=outs[0], **attrs))
        return outs


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


def _site_nodes(nd: _Nodes, probs: str, batch: str) -> tuple[str, str, str]:
    """Eight passes over the map (one Mul for the masked map, TopK, three for p·log p, one for p·|i-j|, three
    GEMMs); padded keys are dropped by the GEMMs' weights (SEL's real column), so only TopK needs the masked map."""
    p = _as_bhtt(nd, probs, batch)
    T1 = nd("Slice", [nd("Shape", [p]), nd.const([-1]), nd.const([np.iinfo(np.int64).max])])  # [T]
    pm = nd("Mul", [p, REAL])  # [B, H, T, T]; rows are renormalised in numpy by the row sum
    mx, am = nd.multi("TopK", [pm, nd.const([1])], 2, axis=-1)  # max and its key (the first of equal ones)
    # diag, prev, next, first: strided slices of the flat map (a Gather of the same T·4 weights took 6x longer)
    flat = nd("Reshape", [pm, nd.const([0, 0, -1])])  # [B, H, T·T]
    end, step = nd.const([np.iinfo(np.int64).max]), nd("Add", [T1, nd.const([1])])
    cut = [
        nd("Slice", [flat, nd.const([0]), end, nd.const([-1]), step]),  # (i, i): T
        nd("Slice", [flat, T1, end, nd.const([-1]), step]),  # (i, i-1) from i = 1: T-1
        nd("Slice", [flat, nd.const([1]), end, nd.const([-1]), step]),  # (i, i+1) up to i = T-2: T-1
        nd("Slice", [flat, nd.const([0]), end, nd.const([-1]), T1]),  # (i, 0): T
    ]
    fixed = nd("Concat", cut, axis=-1)  # [B, H, 4T - 2]
    real = nd("Slice", [SEL, nd.const([0]), nd.const([COLUMNS]), nd.const([-1])])  # [B, 1, T, 1]
    plogp = nd("MatMul", [nd("Mul", [p, nd("Log", [nd("Add", [p, nd.const(EPS, np.float32)])])]), real])  # ln
    dist = nd("MatMul", [nd("Mul", [p, DIST]), real])
    # the row sum and the weights on each special key in one GEMM (special keys are few: [B, H, T, 1 + S])
    sw = nd("MatMul", [p, SEL])
    s = nd("Slice", [sw, nd.const([0]), nd.const([COLUMNS]), nd.const([-1])])
    spv = nd("Slice", [sw, nd.const([COLUMNS]), nd.const([np.iinfo(np.int64).max]), nd.const([-1])])
    spm = nd("MatMul", [spv, SP_W])  # [B, H, T, 2]: special, special after 0
    a_sp = nd("ArgMax", [nd("Add", [spv, SP_OFF])], axis=-1, keepdims=1)
    a_ot = nd("ArgMax", [nd("Add", [spv, SP_OFF_OTHER])], axis=-1, keepdims=1)
    sums = nd("Concat", [s, plogp, dist, mx, spm], axis=-1)
    arg = nd("Concat", [am, a_sp, a_ot], axis=-1)
    return sums, fixed, arg


def stats_model(
    g: gr.Graph, sites: list[gr.Site], groups_sites: set[int]
) -> tuple[onnx.ModelProto, gr.Exposed, dict[int, StatOutputs]]:
    """A copy of the model whose outputs are: per supported site in ``groups_sites`` its two statistic tensors,
    and for every other site what the dense instrumented model exposes.  The model's own outputs are dropped,
    so onnxruntime prunes whatever follows the last attention map the corpus needs."""
    m, exposed = gr.instrument(g, sites, "dense")
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
            helper.make_tensor_value_info(SEL, TensorProto.FLOAT, ["B", 1, "T", "C"]),
            helper.make_tensor_value_info(DIST, TensorProto.FLOAT, ["T", "T"]),
            helper.make_tensor_value_info(SP_W, TensorProto.FLOAT, ["B", 1, "S", 2]),
            helper.make_tensor_value_info(SP_OFF, TensorProto.FLOAT, ["B", 1, 1, "S"]),
            helper.make_tensor_value_info(SP_OFF_OTHER, TensorProto.FLOAT, ["B", 1, 1, "S"]),
        ]
    )
    shared = _Nodes(m.graph, "attnviz_stat_")
    batch = shared("Slice", [shared("Shape", [REAL]), shared.const([0]), shared.const([1])])
    names: dict[int, StatOutputs] = {}
    for i in sorted(on):
        sums, fixed, arg = _site_nodes(_Nodes(m.graph, f"attnviz_stat{i}_"), exposed.outputs[i], batch)
        m.graph.output.extend(
            [
                helper.make_tensor_value_info(sums, TensorProto.FLOAT, None),
                helper.make_tensor_value_info(fixed, TensorProto.FLOAT, None),
                helper.make_tensor_value_info(arg, TensorProto.INT64, None),
            ]
        )
        names[i] = StatOutputs(sums, fixed, arg)
    _prune(m.graph)
    return m, exposed, names


def _prune(graph: onnx.GraphProto) -> None:
    """Drop the nodes no output needs (onnxruntime runs every node of a graph, measured: none was pruned), e.g.
    the layers after MiniLM's last attention map.  ONNX nodes are in topological order: one backward sweep."""
    known = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    for n in graph.node:
        if any(t not in known for t in gr._reads(n)):
            return  # not in topological order (onnxruntime sorts such graphs itself): left whole
        known.update(n.output)
    need = {o.name for o in graph.output}
    keep = []
    for n in reversed(graph.node):
        if any(o in need for o in n.output if o):
            keep.append(n)
            need.update(gr._reads(n))
    if len(keep) < len(graph.node):
        del graph.node[:]
        graph.node.extend(reversed(keep))


def stat_feeds(lengths: np.ndarray, special: np.ndarray | None, t: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The extra inputs for one right-padded batch (``lengths [B]`` real tokens, ``special [B, T]`` special
    keys), and the key position of each special column ``[B, S]``."""
    lengths = np.asarray(lengths, np.int64)
    b = len(lengths)
    ar = np.arange(t)
    real = ar[None, :] < lengths[:, None]
    sp = np.zeros((b, t), bool) if special is None else np.asarray(special, bool)[:, :t]
    sp = sp & real
    n = max(1, int(sp.sum(1).max(initial=0)))  # one padding column at least: ArgMax needs a non-empty axis
    idx = np.zeros((b, n), np.int64)
    keep = np.zeros((b, n), bool)
    sel = np.zeros((b, t, COLUMNS + n), np.float32)
    sel[:, :, 0] = real
    for r in range(b):
        cols = np.flatnonzero(sp[r])
        idx[r, : len(cols)] = cols
        keep[r, : len(cols)] = True
        sel[r, cols, COLUMNS + np.arange(len(cols))] = 1.0
    other = keep & (idx > 0)
    # kept columns hold weights in [0, 1], the others weight - 2 < 0: ArgMax never picks one while any is kept
    feeds = {
        REAL: real.astype(np.float32)[:, None, None, :],
        SEL: sel[:, None],
        DIST: np.abs(ar[:, None] - ar[None, :]).astype(np.float32),
        SP_W: np.stack([keep, other], -1).astype(np.float32)[:, None],
        SP_OFF: np.where(keep, 0.0, -2.0).astype(np.float32)[:, None, None, :],
        SP_OFF_OTHER: np.where(other, 0.0, -2.0).astype(np.float32)[:, None, None, :],
    }
    return feeds, idx


SUMMED = ("s", "plogp", "distance", "max", "special", "special_other")  # the columns of StatOutputs.sums
FIXED = ("diag", "prev", "next", "first")  # the four runs of StatOutputs.fixed


def row_sums(
    sums: np.ndarray, fixed: np.ndarray, arg: np.ndarray, feeds: dict[str, np.ndarray], idx: np.ndarray
) -> RowSums:
    """One site's outputs as :class:`RowSums`, special argmax slots mapped back to key positions ``idx``."""
    t = sums.shape[2]
    zero = np.zeros((*fixed.shape[:2], 1), np.float32)
    runs = {
        "diag": fixed[..., :t],
        "prev": np.concatenate([zero, fixed[..., t : 2 * t - 1]], -1),  # row 0 has no previous key
        "next": np.concatenate([fixed[..., 2 * t - 1 : 3 * t - 2], zero], -1),  # the last row has no next key
        "first": fixed[..., 3 * t - 2 :],
    }
    b = np.arange(idx.shape[0])[:, None, None]
    cols = {"real": arg[..., 0]}
    for j, (name, off) in enumerate([("special", SP_OFF), ("special_other", SP_OFF_OTHER)], start=1):
        any_key = (feeds[off][:, 0, 0, :] == 0).any(-1)[:, None, None]
        cols[name] = np.where(any_key, idx[b, arg[..., j]], 0)  # none kept: numpy's argmax of all -1 is 0
    linear = {k: sums[..., i] for i, k in enumerate(SUMMED)} | runs
    return RowSums({k: linear[k] for k in LINEAR}, {k: cols[k] for k in ARGMAX}, log_base=np.e)
