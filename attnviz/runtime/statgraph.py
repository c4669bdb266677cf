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

from attnviz.core.row_sums import ROW_TIE
from attnviz.core.stats import ROW_STATS
from attnviz.runtime import graph as gr
from attnviz.runtime.graph.dtypes import elem_type

# the graph's extra inputs and outputs and its per-batch half (feeds, outputs read back) live in runtime/statfeeds.py
# (onnx-free, for a worker that only runs the graph); their names stay importable from here, their first home
from attnviz.runtime.statfeeds import (  # noqa: F401
    _KEY_FROM,
    _SP,
    ARGMAX,
    BATCH_1111,
    BHTT,
    DIST,
    DIVISOR,
    KEY_COLUMNS,
    KEY_TABLE,
    KEYS,
    KEYW,
    MIXED,
    NEAR,
    OFF,
    PICKS,
    RANK_K,
    RANKS,
    REAL,
    REAL_KEYED,
    SIGN,
    SP_OFF,
    SUMS,
    VALUES,
    item_stats,
    stat_feeds,
)

# methods whose exposed tensor is the post-softmax probabilities (mha-qk gives scores; packed is recomputed)
IN_GRAPH_METHODS = {"softmax", "softmax-reduce", "onnx-attention", "gqa-qk"}
MIN_OPSET = 11  # Clip, Pad and Slice with their bounds as inputs; older graphs keep the numpy path
EPS = 1e-30  # the same guard as core.stats.row_stats: 0·log(0 + eps) = 0 and log stays finite
LOWEST = float(np.finfo(np.float32).min)  # a -inf score clipped to it: 0·LOWEST = 0 where 0·-inf is NaN


# each row's statistics are one small MatMul of [ln s, then (plogp, dist, prev, next, diag, max, MIXED) / s, then
# key 0's weight as it is] against MIX: entropy in bits = (ln s - plogp / s) / ln 2, the rest copied into ROW_STATS
# order, all signed (the column of a one in MIX is an exact copy: x·1 + 0·y); "sink_share" is the one not divided
# by the row sum (core/stats.py SINK_SHARE_HELP)
_PARTS = ("log_sum", "plogp", "distance", "prev", "next", "diag", "max", *MIXED, "sink_share")


def _mix() -> np.ndarray:
    m = np.zeros((len(_PARTS), len(ROW_STATS)), np.float32)
    bits = np.float32(1 / np.log(2.0))
    for name in ("entropy", "broad"):
        c = ROW_STATS.index(name)
        m[_PARTS.index("log_sum"), c] = SIGN[c] * bits
        m[_PARTS.index("plogp"), c] = -SIGN[c] * bits
    for c, name in enumerate(ROW_STATS):
        if name in _PARTS:
            m[_PARTS.index(name), c] = SIGN[c]
    return m


MIX = _mix()


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

    def __init__(self, graph: onnx.GraphProto, prefix: str, made: dict[str, str] | None = None):
        """``made``: tensors made once for every set in ``graph`` (shared by the sets' own ``_Nodes``)."""
        self.graph, self.prefix, self.n = graph, prefix, 0
        self.made = {} if made is None else made

    def __call__(self, op: str, inputs: list[str], **attrs) -> str:
        self.n += 1
        out = f"{self.prefix}{op.lower()}_{self.n}"
        self.graph.node.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def const(self, value, dtype=np.int64) -> str:
        return self("Constant", [], value=numpy_helper.from_array(np.asarray(value, dtype)))

    def real(self) -> str:
        """REAL (fed ``[B, 1, 1, T]``) expanded to ``[B, 1, T, T]``, once in this graph, where a set first reads it:
        the host neither builds nor sends B·T² floats (on a GPU a copy to the device each batch), and the Mul reads
        a mask as wide as the map, which onnxruntime's CPU kernel multiplies a quarter faster than a broadcast row.
        Made in the graph of the set that reads it: a trusting set's exact branch (an If body) expands it only
        when it runs."""
        if "real" not in self.made:
            t = self("Slice", [self("Shape", [REAL]), self.const([-1]), self.const([np.iinfo(np.int64).max])])
            to = self("Concat", [self.const([1, 1]), t, self.const([1])], axis=0)
            self.made["real"] = self("Expand", [REAL, to])
        return self.made["real"]

    def multi(self, op: str, inputs: list[str], n: int, **attrs) -> list[str]:
        self.n += 1
        outs = [f"{self.prefix}{op.lower()}_{self.n}_{i}" for i in range(n)]
        self.graph.node.append(helper.make_node(op, inputs, outs, name=outs[0], **attrs))
        return outs


def _as_bhtt(nd: _Nodes, probs: str, batch: str, *more: str) -> list[str]:
    """The site's tensor as float32 ``[B or 1, H, Tq, Tk]``, reshaped exactly as ``model.to_bhqk`` does:
    rank 4 as is, rank 3 ``[B·H, T, T]`` (or ``[H, T, T]`` when B does not divide it), rank 2 one head,
    rank 5 grouped heads ``[B, Hkv, G, T, T]``.  A leading 1 broadcasts against the batch's masks.  ``more``:
    float32 tensors of the same shape (the softmax's input), reshaped alike."""
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
    to = nd("Concat", [lead, nd.const([-1]), tail], axis=0)
    return [nd("Reshape", [t, to]) for t in (p, *more)]


def _reduce(nd: _Nodes, op: str, x: str, axis: int, keepdims: int, opset: int) -> str:
    """``op`` (ReduceSum / ReduceMax / ReduceMin) over one axis: the axes are an input from opset 13 (ReduceMax,
    ReduceMin: 18) on."""
    if opset >= (13 if op == "ReduceSum" else 18):
        return nd(op, [x, nd.const([axis])], keepdims=keepdims)
    return nd(op, [x], axes=[axis], keepdims=keepdims)


def _near_diagonal(nd: _Nodes, pm: str, p: str, gather: bool) -> list[str]:
    """Each row's weights on keys i-1, i+1 and i (``[B, H, T, 3]`` or three ``[B, H, T, 1]`` columns).  Rows 0
    (prev) and T-1 (next) never count; their value is whatever the read gives there (0 for the slices).

    ``gather``: one Gather of the flat map at NEAR (one kernel on a GPU); else strided slices of it, which
    onnxruntime's CPU kernels read 3x faster than that Gather (T = 112: 0.37 against 1.0 ms a site)."""
    if gather:
        return [nd("Gather", [nd("Reshape", [pm, nd.const([0, 0, -1])]), NEAR], axis=2)]
    col = nd("Reshape", [pm, nd.const([0, 0, -1, 1])])  # [B, H, T·T, 1]: a strided slice is a column already
    t = nd("Slice", [nd("Shape", [p]), nd.const([-1]), nd.const([np.iinfo(np.int64).max])])  # [T]
    end, axis, step = nd.const([np.iinfo(np.int64).max]), nd.const([2]), nd("Add", [t, nd.const([1])])

    def run(start, pad=None):
        r = nd("Slice", [col, start, end, axis, step])
        return r if pad is None else nd("Pad", [r, nd.const(pad)], mode="constant")

    # (i, i-1) from i = 1, (i, i+1) up to i = T-2 (row_stats pads both with 0), (i, i)
    return [run(t, [0, 0, 1, 0, 0, 0, 0, 0]), run(nd.const([1]), [0, 0, 0, 0, 0, 0, 1, 0]), run(nd.const([0]))]


def _site_nodes(
    nd: _Nodes, p: str, opset: int, gather: bool, x: str | None = None, kw: str = "", exact: bool = True
) -> tuple[str, str, str]:
    """Each row's statistics ``[B, H, T, S]`` (S = len(ROW_STATS)) times :data:`SIGN` (float32, ROW_STATS
    order, the arithmetic of ``row_stats``), the masked map ``pm`` and the key-weight table ``kw``
    (both ``[B, H, T, .]``: :func:`_keys_at` reads each statistic's key at its best row from them).  ``p``: float32
    ``[B or 1, H, T, T]``; ``x``: the softmax's input (the scores, shaped as ``p``) where ``p`` is a float32
    Softmax's own output, else None; ``kw``: the key-weight table if made already.  ``exact=False`` (with ``x``)
    trusts the batch to give padded keys no weight and to have no score of -inf: no mask Mul (``pm`` is ``p``) and
    no Clip, two passes less; :func:`_trusting_site` checks both and recomputes the exact way where they fail.

    The nodes that read the whole map (nine; eight with ``exact=False``): the masked map (Mul) and its largest weight (ReduceMax: its key is found
    only at the rows that need one, :func:`_keys_at`); p·ln p (Add, Log, Mul and its row sum; given ``x``, the
    scores' ReduceMax, Sub, Clip, Mul and its row sum, :func:`_plogp_from_scores`: no Log over the map, and with
    ``exact=False`` no mask Mul, no Clip and one ReduceMax of the map for both); p·|i - j| (Mul
    and its row sum: the weight depends on the row, so no key-weight table holds it); and ONE MatMul against the
    key-weight table KEYW for every statistic that weights the keys of every row alike (the real keys' sum, key
    0, the special keys, each special key alone).  Diagonal, previous and next are read at 3T points a map; the
    rest works on ``[B, H, k, T]``: one reciprocal of the row sum per row (row_stats' arithmetic), then one MatMul
    against MIX puts entropy (bits) and the normalised masses into ROW_STATS order, signed."""
    pm = nd("Mul", [p, nd.real()]) if exact or x is None else p  # padded keys dropped; rows renormalised by the row sum
    row = nd.const([0, 0, 1, -1])  # a [B, H, T] (or [B, H, T, 1]) column as one [B, H, 1, T] row of the tail

    def across(x: str) -> str:
        return nd("Reshape", [x, row])

    if x is None or exact:
        mx = across(_reduce(nd, "ReduceMax", pm, -1, 0, opset))
    if x is None:
        plogp = _reduce(
            nd, "ReduceSum", nd("Mul", [pm, nd("Log", [nd("Add", [pm, nd.const(EPS, np.float32)])])]), -1, 0, opset
        )
        log_top = None
    else:
        plogp, p_top, log_top = _plogp_from_scores(nd, pm, x, p, opset, exact)
        if not exact:  # pm is p: its largest weight is the one ln p is shifted by (one ReduceMax, not two)
            mx = across(p_top)
    dist = _reduce(nd, "ReduceSum", nd("Mul", [pm, DIST]), -1, 0, opset)
    kw = kw or nd("MatMul", [p, KEYW])  # [B, H, T, K]: KEYW drops padded keys itself
    if gather:  # one [B, H, T, 3] Gather: prev, next, diag as rows
        near = [nd("Transpose", [_near_diagonal(nd, pm, p, True)[0]], perm=[0, 1, 3, 2])]
    else:
        near = [across(c) for c in _near_diagonal(nd, pm, p, False)]
    kwt = nd("Transpose", [kw], perm=[0, 1, 3, 2])  # [B, H, K, T]: small (K columns a row)
    fixed = nd("Slice", [kwt, nd.const([0]), nd.const([len(MIXED)]), nd.const([2])])
    # row_stats' finishing arithmetic (float32): one reciprocal of the row sum per row, not one division per weight
    # (Clip, not Max: the same maximum, and onnxruntime's Max broadcasts a scalar ~30x slower)
    total = nd("Slice", [kwt, nd.const([0]), nd.const([1]), nd.const([2])])  # [B, H, 1, T]: each row's real mass
    ms = nd("Clip", [total, nd.const(EPS, np.float32)])
    plogp = across(plogp)
    if log_top is not None:  # sum pm·ln p = sum pm·(x - x_top) + s·ln p_top (a row without real mass: 0, as the Log)
        plogp = nd("Add", [plogp, nd("Mul", [total, across(log_top)])])
    parts = [plogp, across(dist), *near, mx, fixed]
    if not exact and x is not None:  # read off p itself, whose leading axis may be 1 (a map the batch shares)
        parts[1:-1] = [nd("Expand", [nd("Concat", parts[1:-1], axis=2), BATCH_1111])]
    lin = nd("Mul", [nd("Concat", parts, axis=2), nd("Reciprocal", [ms])])
    log_sum = nd("Log", [ms])
    raw_first = nd("Slice", [kwt, nd.const([1]), nd.const([2]), nd.const([2])])  # [B, H, 1, T]: key 0, not rescaled
    # back to rows before statistics for the MatMul against MIX and the division (a small transpose): each
    # value then comes out of the same arithmetic, and _item_nodes adds rows in the same order, as before the
    # tail put rows last (the float64 sums run.json's means and examples.parquet carry stay bit for bit)
    x = nd("Transpose", [nd("Concat", [log_sum, lin, raw_first], axis=2)], perm=[0, 1, 3, 2])  # [B, H, T, 12]
    mixed = nd("MatMul", [x, nd.const(MIX, np.float32)])
    values = nd("Div", [mixed, DIVISOR])  # "broad": entropy / log2(keys seen); the others / 1; rows not counted 0
    return values, pm, kw


def _plogp_from_scores(nd: _Nodes, pm: str, x: str, p: str, opset: int, exact: bool) -> tuple[str, str, str]:
    """Each row's sum of pm·(x - max x) ``[B, H, T]``, max p and ln max p (``[B, H, T, 1]`` each): a softmax row has
    ln p = (x - max x) + ln max p for every key (the largest score's key has the largest weight), so
    sum pm·ln p = that sum + s·ln max p without a Log over the map.  Both terms are <= 0, so nothing cancels: the
    error stays relative to the entropy, unlike sum pm·x - s·(max x - ln max p).  Scores of -inf (masked keys,
    whose pm is 0; a row of them) are clipped to the lowest float: 0·-inf would be NaN (``exact=False``: not
    clipped, the NaN tells :func:`_trusting_site` to recompute)."""
    x_top = nd("Clip", [_reduce(nd, "ReduceMax", x, -1, 1, opset), nd.const(LOWEST, np.float32)])
    shifted = nd("Sub", [x, x_top])
    if exact:
        shifted = nd("Clip", [shifted, nd.const(LOWEST, np.float32)])
    plogp = _reduce(nd, "ReduceSum", nd("Mul", [pm, shifted]), -1, 0, opset)
    p_top = _reduce(nd, "ReduceMax", p, -1, 1, opset)
    return plogp, p_top, nd("Log", [nd("Clip", [p_top, nd.const(EPS, np.float32)])])


def _row_keys(nd: _Nodes, pm: str, kw: str) -> str:
    """Every row's key per statistic ``[B, H, T, S]`` (int64; special: slot + len(KEY_COLUMNS)), the way
    :func:`_keys_at` finds them at the best rows: only the tests ask for every row's (``rows=True``)."""
    am = nd("ArgMax", [pm], axis=-1, keepdims=1)  # the first of equal weights, as numpy's argmax
    sp = nd("Reshape", [SP_OFF, nd.const([0, 1, 1, 2, -1])])
    a_sp = nd("ArgMax", [nd("Add", [nd("Reshape", [kw, nd.const([0, 0, 0, 1, -1])]), sp])], axis=-1, keepdims=0)
    return nd("Concat", [am] * _SP + [a_sp] + [am] * (len(ROW_STATS) - _SP - 2), axis=-1)


def _keys_at(nd: _Nodes, pm: str, kw: str, rows: str, opset: int) -> str:
    """Each statistic's key at its best row ``rows [B, H, S]`` (int64 ``[B, H, S]``): the real key with the largest
    weight (the first of equal ones) for :data:`REAL_KEYED`, the special key with the largest weight for "special"
    and "special_other" (slot + len(KEY_COLUMNS)), the row itself for the fixed ones.  Reads S rows of the map a
    head, not T: the argmax of every row was a full pass over the maps."""

    def at_rows(x: str, cols: list[int]) -> str:  # [B, H, len(cols), x's last axis]: x's rows picked by those stats
        r = nd("Reshape", [nd("Gather", [rows, nd.const(cols)], axis=-1), nd.const([0, 0, -1, 1])])
        if opset >= 12:  # GatherND with batch axes: whole rows at once (3x faster than GatherElements here)
            return nd("GatherND", [x, r], batch_dims=2)
        width = nd("Slice", [nd("Shape", [x]), nd.const([-1]), nd.const([np.iinfo(np.int64).max])])
        idx = nd("Expand", [r, nd("Concat", [nd.const([1, 1, 1]), width], axis=0)])  # each row index repeated
        return nd("GatherElements", [x, idx], axis=2)

    k_real = nd("ArgMax", [at_rows(pm, REAL_KEYED)], axis=-1, keepdims=0)
    k_sp = nd("ArgMax", [nd("Add", [at_rows(kw, [_SP, _SP + 1]), SP_OFF])], axis=-1, keepdims=0)
    every = nd("Concat", [k_real, k_sp, rows], axis=-1)
    return nd("Gather", [every, nd.const(_KEY_FROM)], axis=-1)


def _item_nodes(nd: _Nodes, values: str, opset: int) -> tuple[str, str]:
    """Per item: the sum of each statistic over its counted rows (float64 ``[B, H, S]``: the sum numpy took of
    the float32 row values; ``values [B, H, T, S]`` are 0 on the rows that do not count, so every row is summed)
    and, per statistic, the first row within ``ROW_TIE`` of the item's best one (at the statistic's interesting
    end: ``values`` are signed; int64 ``[B, H, S]``), found with rows last (``OFF`` is ``[B, 1, S, T]``)."""
    # 0 where not counted
    sums = _reduce(nd, "ReduceSum", nd("Cast", [values], to=TensorProto.DOUBLE), 2, 0, opset)
    masked = nd("Add", [nd("Transpose", [values], perm=[0, 1, 3, 2]), OFF])  # [B, H, S, T]: rows last
    best = _reduce(nd, "ReduceMax", masked, -1, 1, opset)
    # best - max(|best|, 1)·ROW_TIE: value·SIGN is the statistic itself, >= 0 but for float noise, so |best| is
    # best·SIGN there (and a noise-negative one is below 1 anyway).
    # No row counted: best = -inf, the threshold -inf, every row "near" and row 0 taken (as numpy's argmax)
    tie = nd.const((SIGN * np.float32(ROW_TIE))[:, None], np.float32)
    slack = nd("Clip", [nd("Mul", [best, tie]), nd.const(ROW_TIE, np.float32)])
    threshold = nd("Sub", [best, slack])
    # the first row at or above the threshold: min(row, threshold) is largest (= threshold) exactly there
    rows = nd("ArgMax", [nd("Min", [masked, threshold])], axis=-1, keepdims=0)
    return sums, rows


def stats_model(
    g: gr.Graph, sites: list[gr.Site], groups_sites: set[int], rows: bool = False, join: bool = False
) -> tuple[onnx.ModelProto, gr.Exposed, list[int]]:
    """A copy of the model whose outputs are: the per-item statistics (:data:`SUMS`, :data:`PICKS`; with
    ``rows`` also :data:`VALUES`, :data:`KEYS`) of the supported sites in ``groups_sites`` (returned, in index
    order), and for every other site what the dense instrumented model exposes.  The model's own outputs are
    dropped, so onnxruntime prunes whatever follows the last map needed.

    ``join``: the sites' probabilities are concatenated along the head axis and ONE set of statistic nodes reads
    them all.  On a GPU every node is a kernel launch (dozens a set, plus a Reshape and a Cast onnxruntime drops per
    site): per-site sets made the statistics cost more than the model (H100, bench/RESULTS.md).  On a CPU the
    launches are free and the copy is not, so sites keep their own sets there.  Joined sites are read as
    ``[B, heads, T, T]`` (:data:`BHTT`; a rank-2 map, or a rank-3 ``[H, T, T]`` one for a batch of B items, makes
    the run fail: the caller then reduces that model from maps); they read the near-diagonal weights with one
    Gather, the per-site sets with strided slices (faster on a CPU).  Per-site sets run right after their map is made
    (:func:`_run_in_turn`), so that a batch holds one map at a time, not every site's."""
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
    s = len(ROW_STATS)
    m.graph.input.extend(
        [
            helper.make_tensor_value_info(REAL, f32, ["B", 1, 1, "T"]),
            helper.make_tensor_value_info(KEYW, f32, ["B", 1, "T", "K"]),
            helper.make_tensor_value_info(DIST, f32, ["T", "T"]),
            helper.make_tensor_value_info(SP_OFF, f32, ["B", 1, 2, "K"]),
            helper.make_tensor_value_info(OFF, f32, ["B", 1, s, "T"]),
            helper.make_tensor_value_info(DIVISOR, f32, ["B", 1, "T", s]),
            helper.make_tensor_value_info(NEAR, i64, ["T", 3]),
            helper.make_tensor_value_info(BHTT, i64, [4]),
        ]
    )
    opset = gr._opset(g.model)
    parts: dict[str, list[str]] = {SUMS: [], PICKS: [], VALUES: [], KEYS: []}
    ends: dict[int, list[str]] = {}
    batch = None
    # per-site sets read ln p off the scores where the map is a Softmax's own float32 output (no Log over the map)
    scores = {} if join else _softmax_inputs(m, g, [exposed.outputs[i] for i in on])
    made: dict[str, str] = {}  # (the expanded REAL, made once for every set of the graph: _Nodes.real)
    if not join:  # (the statistics' nodes read the masked map, which has B whatever the site's leading axis)
        shared = _Nodes(m.graph, "attnviz_stat_", made)
        batch = shared("Slice", [shared("Shape", [REAL]), shared.const([0]), shared.const([1])])
        shared.graph.node.append(
            helper.make_node("Concat", [batch, shared.const([1, 1, 1])], [BATCH_1111], name=BATCH_1111, axis=0)
        )
    for members in [on] if join else [[i] for i in on]:
        nd = _Nodes(m.graph, f"attnviz_stat{members[0]}_", made)
        x = None
        if join:  # [B, heads, T, T] for every rank but 2 (and [H, T, T] for B items): those fail, see above
            ps = [nd("Reshape", [nd("Cast", [exposed.outputs[i]], to=f32), BHTT]) for i in members]
            p = ps[0] if len(ps) == 1 else nd("Concat", ps, axis=1)
        else:
            assert batch is not None
            x = scores.get(exposed.outputs[members[0]])
            p, *xs = _as_bhtt(nd, exposed.outputs[members[0]], batch, *([x] if x else []))
            x = xs[0] if xs else None
        if x is None:
            sums, picks, values, keys = (*_finish(nd, *_site_nodes(nd, p, opset, gather=join), opset, rows), "", "")[:4]
        else:
            assert batch is not None
            sums, picks, values, keys = (*_trusting_site(nd, p, x, batch, opset, rows), "", "")[:4]
        for name, t in ((SUMS, sums), (PICKS, picks), (VALUES, values), (KEYS, keys)):
            parts[name].append(t)
        ends[members[0]] = [sums, picks]
    types = {SUMS: f64, PICKS: i64, VALUES: f32, KEYS: i64}
    for name in (SUMS, PICKS, VALUES, KEYS) if rows else (SUMS, PICKS):
        if len(parts[name]) == 1 and name in (SUMS, PICKS):  # one set: its node writes the output (no copy)
            node = next(n for n in m.graph.node if parts[name][0] in n.output)
            node.output[list(node.output).index(parts[name][0])] = name
            ends = {i: [name if t == parts[name][0] else t for t in e] for i, e in ends.items()}  # renamed
        else:
            m.graph.node.append(helper.make_node("Concat", parts[name], [name], name=name, axis=1))
        m.graph.output.append(helper.make_tensor_value_info(name, types[name], None))
    _rank_nodes(_Nodes(m.graph, "attnviz_stat_rank_"), m.graph, opset)
    _prune(m.graph)
    if not join:
        _run_in_turn(m.graph, [exposed.outputs[i] for i in on], [ends[i] for i in on])
    return m, exposed, on


def _rank_nodes(nd: _Nodes, graph: onnx.GraphProto, opset: int) -> None:
    """:data:`RANKS` from :data:`SUMS` and :data:`OFF`: the fold's ranking (corpus/fold.py fold_stats) of each
    (head, statistic) row's items, done where the session runs so that the host does not sort them under the GIL.

    The key is the fold's, bit for bit: ``SUMS`` (signed sums, float64) over ``-max(n, 1)`` with ``n`` each item's
    counted rows (the host's ``statfeeds.counted``, an exact float64 count), +inf where ``n`` is 0 (the fold's
    ``flip`` is -1 for every self-attention head, ``-sign · SIGN``; the host uses these ranks only where it is).  An
    IEEE division and a negation give the same bits on any device.  TopK's order among equal values or NaN is not
    the fold's (ties to the lower item id, NaN last), so each row carries how far it is settled: the count of its
    leading values that increase strictly (0 where the row holds a NaN).  Where that is at least k + 1, its first k
    are the fold's choice and order whatever the tie rule."""
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    counted = nd("Cast", [nd("Equal", [OFF, nd.const(0.0, np.float32)])], to=TensorProto.DOUBLE)  # [B, 1, S, T]
    n = nd("Transpose", [_reduce(nd, "ReduceSum", counted, 3, 0, opset)], perm=[1, 2, 0])  # [1, S, B]
    div = nd("Neg", [nd("Max", [n, nd.const(1.0, np.float64)])])
    key = nd("Div", [nd("Transpose", [SUMS], perm=[1, 2, 0]), div])  # [NH, S, B]
    key = nd("Where", [nd("Equal", [n, nd.const(0.0, np.float64)]), nd.const(np.inf, np.float64), key])
    flat = nd("Flatten", [key], axis=2)  # [NH · S, B]
    b = nd("Slice", [nd("Shape", [SUMS]), nd.const([0]), nd.const([1])])
    k = _reduce(nd, "ReduceMin", nd("Concat", [b, nd.const([RANK_K])], axis=0), 0, 1, opset)  # (Min of int64: 12)
    vals, idx = nd.multi("TopK", [flat, k], 2, axis=-1, largest=0, sorted=1)
    later = nd("Slice", [vals, nd.const([1]), nd.const([np.iinfo(np.int64).max]), nd.const([1])])
    earlier = nd("Slice", [vals, nd.const([0]), nd.const([-1]), nd.const([1])])
    # pairs not increasing so far, pair by pair: 0 over the settled lead (CumSum: ONNX has no CumProd)
    so_far = nd("CumSum", [nd("Cast", [nd("Not", [nd("Greater", [later, earlier])])], to=f32), nd.const(1)])
    lead = _reduce(nd, "ReduceSum", nd("Cast", [nd("Equal", [so_far, nd.const(0.0, np.float32)])], to=f32), 1, 1, opset)
    nan = _reduce(nd, "ReduceMax", nd("Cast", [nd("IsNaN", [flat])], to=f32), 1, 1, opset)
    one = nd.const(1.0, np.float32)
    settled = nd(
        "Where", [nd("Greater", [nan, nd.const(0.0, np.float32)]), nd.const(0.0, np.float32), nd("Add", [lead, one])]
    )
    graph.node.append(helper.make_node("Concat", [idx, nd("Cast", [settled], to=i64)], [RANKS], name=RANKS, axis=1))
    graph.output.append(helper.make_tensor_value_info(RANKS, i64, None))


def _finish(nd: _Nodes, values: str, pm: str, kw: str, opset: int, rows: bool) -> list[str]:
    """A set's outputs from its row values: per-item sums and picks (``[B, H, S]``, ``[B, H, 2, S]``: best rows,
    then their keys), with ``rows`` also every row's unsigned values and keys (tests)."""
    sums, best = _item_nodes(nd, values, opset)
    at = (best, _keys_at(nd, pm, kw, best, opset))  # [B, H, S] each: rows, then their keys
    out = [sums, nd("Concat", [nd("Reshape", [r, nd.const([0, 0, 1, -1])]) for r in at], axis=2)]
    if rows:
        out += [nd("Mul", [values, nd.const(SIGN, np.float32)]), _row_keys(nd, pm, kw)]  # unsigned, as row_stats
    return out


def _trusting_site(nd: _Nodes, p: str, x: str, batch: str, opset: int, rows: bool) -> list[str]:
    """A per-site set that reads ln p off the scores ``x`` (outputs as :func:`_finish`'s), made without the mask
    Mul and the Clip (``exact=False``) and checked: where the batch gives a padded key any weight (KEYW's "padded"
    column: a sum of weights >= 0 is 0 only if each is), a value came out NaN (a score of -inf: 0·-inf) or the
    map's leading axis is not the batch's (a map the items share: its rows are read per item from the masked map),
    an If finishes the set the exact way.  Where none happens, the mask multiplies every weight by 1 or an exact 0
    by 0 and the Clip changes no finite score: the same bits either way."""
    kw = nd("MatMul", [p, KEYW])
    fast = _site_nodes(nd, p, opset, False, x, kw, exact=False)[0]
    padded = nd("Slice", [kw, nd.const([KEY_COLUMNS.index("padded")]), nd.const([len(KEY_COLUMNS)]), nd.const([3])])
    leaks = nd("Greater", [nd("ReduceMax", [padded], keepdims=0), nd.const(0.0, np.float32)])
    shared = nd("Not", [nd("Equal", [nd("Slice", [nd("Shape", [p]), nd.const([0]), nd.const([1])]), batch])])
    nan = nd("IsNaN", [nd("ReduceSum", [fast], keepdims=0)])
    unsure = nd("Or", [nd("Or", [leaks, nan]), nd("Squeeze", [shared])])
    branches = []
    for label, exact in (("exact", True), ("trusted", False)):
        body = helper.make_graph([], f"{nd.prefix}{label}", [], [])
        bn = _Nodes(body, f"{nd.prefix}{label}_")
        if exact:
            values, pm, _ = _site_nodes(bn, p, opset, False, x, kw, exact=True)
            outs = _finish(bn, values, pm, kw, opset, rows)
        else:
            outs = _finish(bn, fast, p, kw, opset, rows)
        types = [TensorProto.DOUBLE, TensorProto.INT64, TensorProto.FLOAT, TensorProto.INT64]
        body.output.extend(helper.make_tensor_value_info(o, t, None) for o, t in zip(outs, types))
        branches.append(body)
    return nd.multi("If", [unsure], 4 if rows else 2, then_branch=branches[0], else_branch=branches[1])


def _softmax_inputs(m: onnx.ModelProto, g: gr.Graph, probs: list[str]) -> dict[str, str]:
    """For each of ``probs`` that is a float32 Softmax's own output over the last axis in the edited model ``m``:
    the Softmax's input (:func:`_plogp_from_scores` reads ln p off it).  A map that passes a NaN guard, a Cast or a
    Reshape after its Softmax, or comes out of a fused op, is left out: its entropy keeps the Log path."""
    want = set(probs)
    out = {}
    for n in m.graph.node:
        name = n.output[0] if n.output else ""
        if name in want and n.op_type == "Softmax" and n.domain in ("", "ai.onnx") and n.input and n.input[0]:
            axis = next((a.i for a in n.attribute if a.name == "axis"), -1 if gr._opset(m) >= 13 else 1)
            float32 = all(elem_type(g, t, TensorProto.UNDEFINED) == TensorProto.FLOAT for t in (n.input[0], name))
            if axis == -1 and float32:
                out[name] = n.input[0]
    return out


def _run_in_turn(graph: onnx.GraphProto, maps: list[str], ends: list[list[str]]) -> None:
    """Make each site's statistics run right after its map is made, before the model reads the map on.

    onnxruntime orders nodes by a depth-first walk back from the outputs: appended statistics ran after the whole
    model, every map stayed alive until then and each pass over it read memory.  The model's own readers of the map
    (the P·V MatMul) now read it through a Reshape to its own shape whose shape waits for the site's outputs (their
    shapes' first entry times 0, added to the map's shape): a view (onnxruntime's Reshape aliases its input), so no
    value changes; the statistics read the map itself, so no cycle.  ``ends``: each site's output tensors."""
    own = [n for n in graph.node if not n.name.startswith("attnviz_stat")]
    readers: dict[str, list] = {name: [] for name in maps}  # one pass over the graph, not one a site
    for n in own:
        for t in dict.fromkeys(n.input):
            if t in readers:
                readers[t].append(n)
    for k, (name, outs) in enumerate(zip(maps, ends)):
        if not readers[name]:
            continue  # (the last site: the pruned graph reads its map no further)
        nd = _Nodes(graph, f"attnviz_stat_turn{k}_")
        first = [nd("Slice", [nd("Shape", [e]), nd.const([0]), nd.const([1])]) for e in outs]
        shape = nd("Add", [nd("Shape", [name]), nd("Mul", [nd("Add", first), nd.const([0])])])
        view = nd("Reshape", [name, shape])
        for n in readers[name]:
            for j, t in enumerate(n.input):
                if t == name:
                    n.input[j] = view
    # the new nodes must come before the readers: ONNX graphs are in topological order (stable: one pass a site;
    # each node's reads listed once, ~0.01 s of a worker's start-up where every pass listed them again)
    done = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    order, pending = [], [(n, gr._reads(n)) for n in graph.node]
    while pending:
        left = []
        for n, reads in pending:
            if all(t in done for t in reads):
                order.append(n)
                done.update(n.output)
            else:
                left.append((n, reads))
        if len(left) == len(pending):
            return  # not sortable here (a name read from an outer scope): onnxruntime sorts it itself
        pending = left
    del graph.node[:]
    graph.node.extend(order)


def _prune(graph: onnx.GraphProto) -> None:
    """Drop the nodes no output needs (onnxruntime runs every node of a graph, measured: none was pruned), e.g.
    the layers after MiniLM's last attention map.  ONNX nodes are in topological order: one backward sweep."""
    known = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    reads = [gr._reads(n) for n in graph.node]
    for n, r in zip(graph.node, reads):
        if any(t not in known for t in r):
            return  # not in topological order (onnxruntime sorts such graphs itself): left whole
        known.update(n.output)
    need = {o.name for o in graph.output}
    keep = []
    for n, r in zip(reversed(graph.node), reversed(reads)):
        if any(o in need for o in n.output if o):
            keep.append(n)
            need.update(r)
    if len(keep) < len(graph.node):
        del graph.node[:]
        graph.node.extend(reversed(keep))
