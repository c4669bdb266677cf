"""Per-item attention statistics computed inside onnxruntime, so that neither maps nor rows leave the session.

A corpus worker needs, per item of a batch and per head, only each statistic's sum over the item's counted query
rows, and for the top examples each item's best row and the key it looked at.  Copying every map out of the
session (off the GPU) and reducing it with numpy on one core cost most of the corpus overhead; so did, after
that, finishing ``[B, H, T]`` row sums in numpy.  :func:`stats_model` appends nodes after each site's probability
tensor that compute the row statistics of :func:`attnviz.core.stats.row_stats` (float32, the same arithmetic)
and reduce them per item; only ``[B, H, S]`` arrays come back (a few kB a site).

Sites whose probabilities are not a tensor of the top-level graph (a Loop/If body, scores that numpy
normalises, packed attention recomputed from weights, an explicit softmax axis) stay on the numpy path: their
maps are exposed as before and the caller reduces them itself.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from attnviz.core.row_sums import ROW_TIE, ItemStats, key_table, valid_rows
from attnviz.core.score_direction import direction
from attnviz.core.stats import ROW_STATS
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
VALID = "attnviz_stat_valid"  # [B, 1, T, len(ROW_STATS)] float64: 1 where the row counts for the statistic
OFF = "attnviz_stat_off"  # [B, 1, T, len(ROW_STATS)] float32: 0 where it counts, -inf where not
LOG_SEEN = "attnviz_stat_log_seen"  # [B, 1, T, 1] float32: log2 of the keys the row may see (at least 2)
COLUMNS = 1  # SEL's columns before the special keys
# the outputs: every in-graph site's per-item statistics side by side along the head axis (sites in index order),
# so that a batch hands back two small arrays in all (each output is a copy off the device and a sync)
SUMS = "attnviz_stat_sums"  # float64 [B, heads of all in-graph sites, S]
PICKS = "attnviz_stat_picks"  # int64 [B, heads of all in-graph sites, 2S]
VALUES = "attnviz_stat_values"  # with rows=True (tests): float32 [B, heads, T, S], each row's statistics
KEYS = "attnviz_stat_keys"  # with rows=True: int64 [B, heads, T, S], each row's key (slots for special statistics)
ARGMAX = ("real", "special", "special_other")  # the key columns the graph finds per row, in this order
KEY_TABLE = [ARGMAX.index(key_table(n)) for n in ROW_STATS]  # which of them each statistic's key comes from


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


def _site_nodes(nd: _Nodes, p: str) -> tuple[str, str]:
    """Each row's statistics ``[B, H, T, len(ROW_STATS)]`` (float32, in ROW_STATS order, as ``row_stats``) and
    the key column of each row's largest weight in the table its statistic takes keys from (int64, same shape).

    Eight passes over the map (one Mul for the masked map, TopK, three for p·log p, one for p·|i-j|, three
    GEMMs); padded keys are dropped by the GEMMs' weights (SEL's real column), so only TopK needs the masked map.
    Everything after them works on ``[B, H, T, k]``.  ``p``: float32 ``[B or 1, H, T, T]`` (:func:`_as_bhtt`)."""
    T1 = nd("Slice", [nd("Shape", [p]), nd.const([-1]), nd.const([np.iinfo(np.int64).max])])  # [T]
    pm = nd("Mul", [p, REAL])  # [B, H, T, T]; rows are renormalised below by the row sum
    mx, am = nd.multi("TopK", [pm, nd.const([1])], 2, axis=-1)  # max and its key (the first of equal ones)
    # diag, prev, next, first: strided slices of the flat map (a Gather of the same T·4 weights took 6x longer)
    flat = nd("Reshape", [pm, nd.const([0, 0, -1])])  # [B, H, T·T]
    end, step = nd.const([np.iinfo(np.int64).max]), nd("Add", [T1, nd.const([1])])
    col = nd.const([0, 0, -1, 1])  # [B, H, n] -> [B, H, n, 1]

    def run(start, stride, pad=None):
        r = nd("Slice", [flat, start, end, nd.const([-1]), stride])
        if pad is not None:  # row 0 has no previous key, the last row no next one (row_stats pads with 0)
            r = nd("Pad", [r, nd.const(pad)], mode="constant")
        return nd("Reshape", [r, col])

    diag = run(nd.const([0]), step)  # (i, i): T
    prev = run(T1, step, [0, 0, 1, 0, 0, 0])  # (i, i-1) from i = 1
    nxt = run(nd.const([1]), step, [0, 0, 0, 0, 0, 1])  # (i, i+1) up to i = T-2
    first = run(nd.const([0]), T1)  # (i, 0)
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
    # row_stats' finishing arithmetic (float32): one reciprocal of the row sum per row, not one division per weight
    ms = nd("Max", [s, nd.const(EPS, np.float32)])
    inv = nd("Reciprocal", [ms])
    lin = nd("Mul", [nd("Concat", [dist, prev, nxt, diag, first, spm, mx], axis=-1), inv])  # ROW_STATS[2:]
    ln2 = np.float32(np.log(2.0))
    ent = nd("Div", [nd("Sub", [nd("Log", [ms]), nd("Mul", [plogp, inv])]), nd.const(ln2, np.float32)])  # bits
    broad = nd("Div", [ent, LOG_SEEN])
    values = nd("Concat", [ent, broad, lin], axis=-1)  # [B, H, T, len(ROW_STATS)]
    keys = nd("Gather", [nd("Concat", [am, a_sp, a_ot], axis=-1), nd.const(KEY_TABLE)], axis=-1)
    return values, keys


def _item_nodes(nd: _Nodes, values: str, keys: str, batch: str, opset: int) -> tuple[str, str]:
    """Per item: the sum of each statistic over its counted rows (float64 ``[B, H, S]``: the sum numpy took of
    the float32 row values) and, per statistic, the first row within ``ROW_TIE`` of the item's best one (at
    the statistic's interesting end: the lowest entropy, the highest of the others) and the
    key that row looked at (int64 ``[B, H, 2S]``: rows, then keys; key slots of special statistics)."""
    vd = nd("Mul", [nd("Cast", [values], to=TensorProto.DOUBLE), VALID])
    # the best row is at each statistic's interesting end (self-attention: low entropy, high everything else)
    sign = np.array([direction(n, "self").sign for n in ROW_STATS], np.float32)
    masked = nd("Add", [nd("Mul", [values, nd.const(sign, np.float32)]) if (sign < 0).any() else values, OFF])
    if opset >= 13:
        sums = nd("ReduceSum", [vd, nd.const([2])], keepdims=0)
    else:
        sums = nd("ReduceSum", [vd], axes=[2], keepdims=0)
    if opset >= 18:
        best = nd("ReduceMax", [masked, nd.const([2])], keepdims=1)
    else:
        best = nd("ReduceMax", [masked], axes=[2], keepdims=1)
    # no row counted: best = -inf, the threshold -inf, every row "near" and row 0 taken (as numpy's argmax)
    slack = nd("Mul", [nd("Max", [nd("Abs", [best]), nd.const(1.0, np.float32)]), nd.const(ROW_TIE, np.float32)])
    near = nd("Not", [nd("Less", [masked, nd("Sub", [best, slack])])])
    rows = nd("ArgMax", [nd("Cast", [near], to=TensorProto.FLOAT)], axis=2, keepdims=1)  # the first near row
    # a site read as [1, H, T, T] (one map for the batch) has keys for one item: GatherElements needs all B
    keys = nd("Expand", [keys, nd("Concat", [batch, nd.const([1, 1, 1])], axis=0)])
    picked = nd("GatherElements", [keys, rows], axis=2)
    picks = nd("Reshape", [nd("Concat", [rows, picked], axis=-1), nd.const([0, 0, -1])])
    return sums, picks


def stats_model(
    g: gr.Graph, sites: list[gr.Site], groups_sites: set[int], rows: bool = False, join: bool = False
) -> tuple[onnx.ModelProto, gr.Exposed, list[int]]:
    """A copy of the model whose outputs are: the per-item statistics (:data:`SUMS`, :data:`PICKS`; with
    ``rows`` also :data:`VALUES`, :data:`KEYS`) of the supported sites in ``groups_sites`` (returned, in index
    order), and for every other site what the dense instrumented model exposes.  The model's own outputs are
    dropped, so onnxruntime prunes whatever follows the last map needed.

    ``join``: the sites' probabilities are concatenated along the head axis and ONE set of statistic nodes reads
    them all.  On a GPU every node is a kernel launch (~70 a set): per-site sets made the statistics cost more
    than the model (H100, bench/RESULTS.md).  On a CPU the launches are free and the copy is not, so sites keep
    their own sets there.  Joined sites are read as ``[B, heads, T, T]`` with one shared shape (a rank-2 map,
    or a rank-3 ``[H, T, T]`` one for a batch of B items, makes the run fail: the caller then reduces that
    model from maps)."""
    m, exposed = gr.instrument(g, sites, "dense")
    on = sorted(i for i, s in enumerate(sites) if i in groups_sites and supported(g, s))
    keep = [exposed.outputs[i] for i in range(len(sites)) if i not in on]
    for ex in (exposed.site_extra[i] for i in range(len(sites)) if i not in on):
        keep += [ex["mask_index"]] if "mask_index" in ex else []
    outputs = [o for o in m.graph.output if o.name in keep]
    del m.graph.output[:]
    m.graph.output.extend(outputs)
    if not on:
        return m, exposed, []
    f32, f64, i64 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64
    m.graph.input.extend(
        [
            helper.make_tensor_value_info(REAL, f32, ["B", 1, 1, "T"]),
            helper.make_tensor_value_info(SEL, f32, ["B", 1, "T", "C"]),
            helper.make_tensor_value_info(DIST, f32, ["T", "T"]),
            helper.make_tensor_value_info(SP_W, f32, ["B", 1, "S", 2]),
            helper.make_tensor_value_info(SP_OFF, f32, ["B", 1, 1, "S"]),
            helper.make_tensor_value_info(SP_OFF_OTHER, f32, ["B", 1, 1, "S"]),
            helper.make_tensor_value_info(VALID, f64, ["B", 1, "T", len(ROW_STATS)]),
            helper.make_tensor_value_info(OFF, f32, ["B", 1, "T", len(ROW_STATS)]),
            helper.make_tensor_value_info(LOG_SEEN, f32, ["B", 1, "T", 1]),
        ]
    )
    shared = _Nodes(m.graph, "attnviz_stat_")
    batch = shared("Slice", [shared("Shape", [REAL]), shared.const([0]), shared.const([1])])
    opset = gr._opset(g.model)
    parts: dict[str, list[str]] = {SUMS: [], PICKS: [], VALUES: [], KEYS: []}
    if join:  # [B, heads, T, T] for every rank but 2 (and [H, T, T] for B items): those fail, see above
        t = shared("Slice", [shared("Shape", [REAL]), shared.const([-1]), shared.const([np.iinfo(np.int64).max])])
        bhtt = shared("Concat", [batch, shared.const([-1]), t, t], axis=0)
    for members in [on] if join else [[i] for i in on]:
        nd = _Nodes(m.graph, f"attnviz_stat{members[0]}_")
        if join:
            ps = [nd("Reshape", [nd("Cast", [exposed.outputs[i]], to=f32), bhtt]) for i in members]
            p = ps[0] if len(ps) == 1 else nd("Concat", ps, axis=1)
        else:
            p = _as_bhtt(nd, exposed.outputs[members[0]], batch)
        values, keys = _site_nodes(nd, p)
        sums, picks = _item_nodes(nd, values, keys, batch, opset)
        for name, t in ((SUMS, sums), (PICKS, picks), (VALUES, values), (KEYS, keys)):
            parts[name].append(t)
    types = {SUMS: f64, PICKS: i64, VALUES: f32, KEYS: i64}
    for name in (SUMS, PICKS, VALUES, KEYS) if rows else (SUMS, PICKS):
        m.graph.node.append(helper.make_node("Concat", parts[name], [name], name=name, axis=1))
        m.graph.output.append(helper.make_tensor_value_info(name, types[name], None))
    _prune(m.graph)
    return m, exposed, on


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


def stat_feeds(
    lengths: np.ndarray, special: np.ndarray | None, t: int, causal: bool = False
) -> tuple[dict[str, np.ndarray], np.ndarray]:
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
    r, c = np.nonzero(sp)  # item r's special keys c, in key order: slots 0, 1, ... of that item
    slot = (np.cumsum(sp, 1) - 1)[r, c]
    idx[r, slot] = c
    keep[r, slot] = True
    sel[r, c, COLUMNS + slot] = 1.0
    other = keep & (idx > 0)
    valid, seen = valid_rows(lengths, t, causal)
    ok = np.stack([valid[k] for k in ROW_STATS], -1)[:, None]  # [B, 1, T, S]
    # kept columns hold weights in [0, 1], the others weight - 2 < 0: ArgMax never picks one while any is kept
    feeds = {
        REAL: real.astype(np.float32)[:, None, None, :],
        SEL: sel[:, None],
        DIST: np.abs(ar[:, None] - ar[None, :]).astype(np.float32),
        SP_W: np.stack([keep, other], -1).astype(np.float32)[:, None],
        SP_OFF: np.where(keep, 0.0, -2.0).astype(np.float32)[:, None, None, :],
        SP_OFF_OTHER: np.where(other, 0.0, -2.0).astype(np.float32)[:, None, None, :],
        VALID: ok.astype(np.float64),
        OFF: np.where(ok, 0.0, -np.inf).astype(np.float32),
        LOG_SEEN: np.log2(np.maximum(seen, 2)).astype(np.float32)[:, None, :, None],
    }
    return feeds, idx


def item_stats(sums: np.ndarray, picks: np.ndarray, feeds: dict[str, np.ndarray], idx: np.ndarray) -> ItemStats:
    """One site's outputs as :class:`ItemStats`: key slots of the special statistics mapped back to key
    positions ``idx``, keys of the fixed statistics (diag, prev, next, first) taken from their rows."""
    s = len(ROW_STATS)
    rows, keys = picks[..., :s], picks[..., s:].copy()
    b = np.arange(idx.shape[0])[:, None]
    for name, off in (("special", SP_OFF), ("special_other", SP_OFF_OTHER)):
        c = ROW_STATS.index(name)
        any_key = (feeds[off][:, 0, 0, :] == 0).any(-1)[:, None]
        keys[..., c] = np.where(any_key, idx[b, keys[..., c]], 0)  # none kept: numpy's argmax of all -1 is 0
    counts = feeds[VALID][:, 0].sum(1).astype(np.int64)  # [B, S]
    return ItemStats.with_fixed_keys(sums, counts, rows, keys)
