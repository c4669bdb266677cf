"""The onnx-free half of the corpus statistics graph (:mod:`attnviz.runtime.statgraph`): the names of its extra inputs
and outputs, each batch's extra inputs (:func:`stat_feeds`) and its outputs read back as :class:`ItemStats`
(:func:`item_stats`).

A corpus worker runs these for every batch; only building the graph needs onnx.  A second command's worker, whose
statistics session is read back whole from the cache (runtime/light_model.py), imports this module and not onnx
(~0.04 s CPU a worker).
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from attnviz.core.row_sums import FIXED_KEYS, ItemStats, key_table, valid_rows
from attnviz.core.score_direction import direction
from attnviz.core.stats import ROW_STATS

# extra graph inputs, shared by every site (built per batch by :func:`stat_feeds`)
# [B, 1, 1, T] float32: 1 where the key is a real token, the same for every row: the graph expands it to [B, 1, T, T]
# (statgraph._Nodes.real), where the host built and fed B·T² floats a batch (1 MB at T = 88, sent to the device)
REAL = "attnviz_stat_real"
# [B, 1, T, K] float32: the key-weight table one MatMul reads every row against: KEY_COLUMNS, then one column per
# special key (slots 0, 1, ... of each item, in key order)
KEYW = "attnviz_stat_keyw"
# real keys, key 0 if real, real special keys, those after 0, padded keys (only to check that the model gave them
# no weight: the statistics' masses are the first four, MIXED)
KEY_COLUMNS = ("sum", "first", "special", "special_other", "padded")
MIXED = KEY_COLUMNS[:4]
DIST = "attnviz_stat_dist"  # [T, T] float32: |i - j|
# [B, 1, 2, K] float32, added to a row's key weights before the argmax of its "special" / "special_other" key:
# 0 for a special key the statistic may take, -2 for a padding slot (or key 0 for "special_other"), -inf for the
# KEY_COLUMNS (so the argmax is a slot + len(KEY_COLUMNS))
SP_OFF = "attnviz_stat_sp_off"
# the per-row tail works on [B, H, k, T] (rows last) where it can: every broadcast there is one value a row of T,
# which onnxruntime's kernels vectorise (a [B, H, T, 1] one is ~10x slower a value), and the best rows are
# reductions over the last axis
OFF = "attnviz_stat_off"  # [B, 1, S, T] float32: 0 where it counts, -inf where not
# [B, 1, T, S] float32: where the row counts for the statistic 1, or in "broad"'s column log2 of the keys the row may
# see (>= 2); +inf where it does not count, so that the row's value there is 0 and a plain sum over rows is the sum
# over the counted ones
DIVISOR = "attnviz_stat_div"
NEAR = "attnviz_stat_near"  # [T, 3] int64: flat positions of (i, i-1), (i, i+1), (i, i) (the joined layout's Gather)
BATCH_1111 = "attnviz_stat_batch_1111"  # made in the graph: [B, 1, 1, 1], the shape Expand broadcasts a map's 1 to
BHTT = "attnviz_stat_bhtt"  # [4] int64: B, -1, T, T (the joined layout reads every site as [B, heads, T, T])
# the outputs: every in-graph site's per-item statistics side by side along the head axis (sites in index order),
# so that a batch hands back two small arrays in all (each output is a copy off the device and a sync)
SUMS = "attnviz_stat_sums"  # float64 [B, heads of all in-graph sites, S]
PICKS = "attnviz_stat_picks"  # int64 [B, heads of all in-graph sites, 2, S]: best rows, then their keys
# int64 [heads of all in-graph sites · S, K + 1] (K = min(B, RANK_K)): each (head, statistic) row's K items of
# lowest fold key (corpus/fold.py fold_stats: -(signed sum) / max(count, 1), +inf where none counted), lowest
# first, by onnxruntime's TopK (on the device where the session runs), then a last column: how many of them lead the
# row settled (its first values strictly increasing; 0 where the row holds a NaN).  A fold of k takes a row whose
# count is at least k + 1 as it comes and ranks the others itself.  The fold's sort was ~0.2 ms of a batch's
# ~0.75 ms of host work under the GIL (bench/RESULTS.md, session 25)
RANKS = "attnviz_stat_ranks"
RANK_K = 6  # the corpus's default top k (5) + 1: one more than the fold keeps, to see that the k-th is not tied
VALUES = "attnviz_stat_values"  # with rows=True (tests): float32 [B, heads, T, S], each row's statistics
KEYS = "attnviz_stat_keys"  # with rows=True: int64 [B, heads, T, S], each row's key (special: slot + len(KEY_COLUMNS))
ARGMAX = ("real", "special", "special_other")  # the key columns the graph finds per row, in this order
KEY_TABLE = [ARGMAX.index(key_table(n)) for n in ROW_STATS]  # which of them each statistic's key comes from
# the per-row argmax over special keys comes as one [.., 2] pair (special, special_other): ROW_STATS has them side
# by side, so each row's keys in ROW_STATS order are one Concat of the real-key argmax and that pair
_SP = ROW_STATS.index("special")
assert KEY_TABLE[_SP : _SP + 2] == [1, 2] and KEY_TABLE.count(0) == len(ROW_STATS) - 2
# a worker needs keys only at each statistic's best row: the real-key argmax for these statistics (the others'
# keys follow from the row, FIXED_KEYS, or are special ones), found after the rows are picked
REAL_KEYED = [s for s, n in enumerate(ROW_STATS) if KEY_TABLE[s] == 0 and n not in FIXED_KEYS]
# each statistic's key out of [real-key argmax at REAL_KEYED rows, the special pair, the rows themselves]: a fixed
# statistic's place holds its row (ItemStats.with_fixed_keys puts its key there)
_KEY_FROM = [
    REAL_KEYED.index(s) if s in REAL_KEYED else len(REAL_KEYED) + s - _SP if KEY_TABLE[s] else len(REAL_KEYED) + 2 + s
    for s in range(len(ROW_STATS))
]
# the graph works on each statistic times its sign (the interesting end highest): best rows are plain maxima
SIGN = np.array([direction(n, "self").sign for n in ROW_STATS], np.float32)
SIGN64 = SIGN.astype(np.float64)  # (what item_stats multiplies the sums by)
# the special statistics (in the order of SP_OFF's two rows), side by side in ROW_STATS (asserted above): a slice
_SPECIAL_KEYED = slice(_SP, _SP + 2)
assert ROW_STATS[_SPECIAL_KEYED] == ("special", "special_other")
# the statistics whose key follows from the row (FIXED_KEYS): key = row · mul + add, [len, 1, 1] against [S, ...]
_FIXED_STATS = slice(ROW_STATS.index("prev"), ROW_STATS.index("prev") + len(FIXED_KEYS))  # (side by side: asserted)
assert ROW_STATS[_FIXED_STATS] == tuple(FIXED_KEYS)
_FIXED_MUL = np.array([0 if off is None else 1 for off in FIXED_KEYS.values()], np.int64)[:, None, None]
_FIXED_ADD = np.array([off or 0 for off in FIXED_KEYS.values()], np.int64)[:, None, None]
_SPECIAL_SIDE = np.arange(2)[:, None, None]  # SP_OFF's row of each of _SPECIAL_KEYED
_BROAD = ROW_STATS.index("broad")
_ZERO, _ONE, _INF = np.float32(0.0), np.float32(1.0), np.float32(np.inf)


@functools.lru_cache(maxsize=64)
def _per_length(t: int) -> tuple[np.ndarray, np.ndarray]:
    """The inputs that depend on T alone (read-only: every batch of that length shares them): DIST and NEAR."""
    ar = np.arange(t)
    dist = np.abs(ar[:, None] - ar[None, :]).astype(np.float32)
    near = ar[:, None] * (t + 1) + np.array([-1, 1, 0])
    near[0, 0], near[-1, 1] = 0, t * t - 1  # (0, -1) and (T-1, T) do not exist: those rows never count
    for a in (dist, near):
        a.flags.writeable = False
    return dist, near


# the last batches' feeds (read-only): a length-sorted corpus cuts runs of batches of one length whose items all have
# the same special keys ([CLS] and [SEP] where a BERT tokenizer puts them): half the batches of a 10k-line corpus
# repeat the batch before them (bench/RESULTS.md, session 24), and each cost ~0.1-0.15 ms of host time under the GIL
_MEMO: OrderedDict[tuple, tuple[dict[str, np.ndarray], np.ndarray]] = OrderedDict()
_MEMO_SIZE = 4  # (a few MB at most: ~0.3 MB an entry at T = 88, B = 32; a repeat is the batch before, or just before)
_MEMO_LOCK = threading.Lock()  # (the runs in flight of BatchReducer.many call this from several threads)


def stat_feeds(
    lengths: np.ndarray, special: np.ndarray | None, t: int, causal: bool = False
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The extra inputs for one right-padded batch (``lengths [B]`` real tokens, ``special [B, T]`` special
    keys), and the key position of each special slot ``[B, n]``: read-only arrays, the same ones for a batch of
    the same lengths, special keys, T and ``causal`` as one of the last few (what they depend on, byte for byte)."""
    lengths = np.asarray(lengths, np.int64)
    sp = None if special is None else np.asarray(special, bool)[:, :t]
    key = (int(t), bool(causal), lengths.shape, lengths.tobytes(), None if sp is None else (sp.shape, sp.tobytes()))
    with _MEMO_LOCK:
        got = _MEMO.get(key)
        if got is not None:
            _MEMO.move_to_end(key)
    if got is None:
        got = _made(lengths, sp, int(t), bool(causal))
        with _MEMO_LOCK:
            _MEMO[key] = got
            while len(_MEMO) > _MEMO_SIZE:
                _MEMO.popitem(last=False)
    return dict(got[0]), got[1]


def _made(
    lengths: np.ndarray, special: np.ndarray | None, t: int, causal: bool
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """:func:`stat_feeds` computed (``special`` bool and cut to ``t`` already), its arrays made read-only."""
    b = len(lengths)
    ar = np.arange(t)
    real = ar[None, :] < lengths[:, None]
    sp = np.zeros((b, t), bool) if special is None else np.asarray(special, bool)[:, :t]
    sp = sp & real
    n = max(1, int(sp.sum(1).max(initial=0)))  # one padding slot at least: ArgMax needs a non-empty axis
    idx = np.zeros((b, n), np.int64)
    keep = np.zeros((b, n), bool)
    k = len(KEY_COLUMNS)
    keyw = np.zeros((b, t, k + n), np.float32)
    keyw[:, :, 0] = real
    keyw[:, 0, 1] = real[:, 0]
    keyw[:, :, 2] = sp
    keyw[:, 1:, 3] = sp[:, 1:]
    keyw[:, :, 4] = ~real
    r, c = np.nonzero(sp)  # item r's special keys c, in key order: slots 0, 1, ... of that item
    slot = (np.cumsum(sp, 1) - 1)[r, c]
    idx[r, slot] = c
    keep[r, slot] = True
    keyw[r, c, k + slot] = 1.0
    # kept slots hold weights in [0, 1], the others weight - 2 < 0: ArgMax never picks one while any is kept
    sp_off = np.full((b, 2, k + n), -np.inf, np.float32)  # [B, 2, K]
    sp_off[:, 0, k:] = np.where(keep, 0.0, -2.0)
    sp_off[:, 1, k:] = np.where(keep & (idx > 0), 0.0, -2.0)
    valid, seen = valid_rows(lengths, t, causal)
    common = valid[ROW_STATS[0]]  # valid_rows' real rows: most statistics' mask is that one array
    ok = np.empty((b, len(ROW_STATS), t), bool)  # [B, S, T]
    ok[:] = common[:, None]
    for s, name in enumerate(ROW_STATS):  # (compared with valid_rows' own array: the local real is another)
        if valid[name] is not common:
            ok[:, s] = valid[name]
    # finite / inf = 0: rows that do not count add nothing.  [B, 1, T, S]: the values are divided rows first;
    # "broad"'s divisor is log2 of the keys a row sees (float64, then float32 as the feed).  Made [B, S, T] and
    # copied C-ordered once: np.where of the transposed mask was laid out as the mask, and every run's binding (or
    # onnxruntime's own run) copied the feed to read it (~14 µs a run of a MiniLM batch, bench/RESULTS.md session 24)
    divisor = np.where(ok, _ONE, _INF)
    divisor[:, _BROAD] = np.where(ok[:, _BROAD], np.log2(np.maximum(seen, 2)).astype(np.float32), _INF)
    divisor = np.ascontiguousarray(divisor.transpose(0, 2, 1))
    dist, near = _per_length(t)
    feeds = {
        REAL: real.astype(np.float32)[:, None, None, :],
        KEYW: keyw[:, None],
        DIST: dist,
        SP_OFF: sp_off[:, None],
        OFF: np.where(ok, _ZERO, -_INF)[:, None],
        DIVISOR: divisor[:, None],
        NEAR: near,
        BHTT: np.array([b, -1, t, t], np.int64),
    }
    for a in (*feeds.values(), idx):
        a.flags.writeable = False
    return feeds, idx


def item_stats(sums: np.ndarray, picks: np.ndarray, feeds: dict[str, np.ndarray], idx: np.ndarray) -> ItemStats:
    """One site's outputs as :class:`ItemStats`: key slots of the special statistics mapped back to key
    positions ``idx``, keys of the fixed statistics (diag, prev, next, first) taken from their rows.
    ``sums`` are of the signed values (:data:`SIGN`): times SIGN again they are the values' sums."""
    s = len(ROW_STATS)
    picks = picks.reshape(*picks.shape[:2], 2 * s)
    rows, keys = picks[..., :s], picks[..., s:].copy()
    b = np.arange(idx.shape[0])[:, None]
    off = feeds[SP_OFF][:, 0, :, len(KEY_COLUMNS) :]  # [B, 2, n]
    for j, name in enumerate(("special", "special_other")):
        c = ROW_STATS.index(name)
        any_key = (off[:, j] == 0).any(-1)[:, None]
        # none kept: numpy's argmax of all -1 is 0
        keys[..., c] = np.where(any_key, idx[b, keys[..., c] - len(KEY_COLUMNS)], 0)
    return ItemStats.with_fixed_keys(sums * SIGN64, counted(feeds), rows, keys)


def counted(feeds: dict[str, np.ndarray]) -> np.ndarray:
    """:func:`item_stats`' ``counts [B, S]``: the rows each statistic counts in each item."""
    return (feeds[OFF][:, 0] == 0).sum(-1).astype(np.int64)


def picked_keys(
    picks: np.ndarray, feeds: dict[str, np.ndarray], idx: np.ndarray
) -> Callable[[tuple[np.ndarray, ...]], tuple[np.ndarray, np.ndarray]]:
    """:func:`item_stats`' ``rows`` and ``keys`` at chosen entries only: ``chosen`` = (batch position, head,
    statistic, their flat index in a C-ordered [B, heads, S]), arrays of one shape, each statistic's along the
    first axis (corpus/fold.py fold_stats) -> the rows and keys there, each key completed as :func:`item_stats`
    completes it (a special slot to its key position, a fixed statistic's key from its row).  A fold needs k of
    each (head, statistic)'s B."""
    s = len(ROW_STATS)
    picks = np.ascontiguousarray(picks)

    def at(chosen: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
        pos, _, stat, flat = chosen
        where = 2 * flat - stat  # (b, h, 0, s) of [B, heads, 2, S]: its key lies S after it
        rows = picks.take(where)
        keys = picks.take(where + s).astype(np.int64, copy=False)
        any_key = (feeds[SP_OFF][:, 0, :, len(KEY_COLUMNS) :] == 0).any(-1)  # [B, 2]: an item with a slot kept
        p = pos[_SPECIAL_KEYED]  # [2, ...]: special, special_other
        # none kept: numpy's argmax of all -1 is 0
        keys[_SPECIAL_KEYED] = np.where(any_key[p, _SPECIAL_SIDE], idx[p, keys[_SPECIAL_KEYED] - len(KEY_COLUMNS)], 0)
        keys[_FIXED_STATS] = rows[_FIXED_STATS] * _FIXED_MUL + _FIXED_ADD  # (first: row · 0 + 0)
        return rows, keys

    return at
