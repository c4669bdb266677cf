"""The overview: every head max-pooled to a thumbnail, cached per result and filter setting.

:func:`thumbnails` pools each head's full map (after the step, hidden special tokens and kept mass) to at most
:data:`THUMB` cells a side, on threads for large layers, and keeps the result with the result object.  The "shared"
colour scale's top is the block's largest pooled weight (max-pooling keeps maxima), so :func:`block_top` and
:func:`scale_top` live here too and every map view reads its scale from this module.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from attnviz.core import reduce
from attnviz.core.attention import AttentionResult, Block, PooledSource
from attnviz.core.frames import FramesMap
from attnviz.core.interrupts import result_of
from attnviz.core.leaving import ends_with_process
from attnviz.core.view.clip import clip_cut
from attnviz.core.view.colourbar import check_scale
from attnviz.core.view.pooling import _pool_axis, pool_to
from attnviz.core.view.selection import (
    Selection,
    _pad,
    _special,
    blk_len,
    hide_mask,
    layer_range,
    result_blocks,
)
from attnviz.core.view.steps import step_rows

THUMB = 64  # overview maps are max-pooled to at most this many cells a side (screen and figure)

# a block whose layers attend over different spans (Qwen2.5-VL's vision tower: windows in most blocks, the whole
# image in ``fullatt_block_indexes``): each layer's label says which, and the block's title says what the words mean
WINDOW_TAG, FULL_TAG = "win", "full"


def layer_windows(blk: Block) -> list[str | None]:
    """Each layer's span when not the whole sequence (SiteInfo.window, e.g. "32-px windows"), else None."""
    return [blk.result.sites[i].window for i in blk.sites]


def layer_labels(blk: Block) -> list[str]:
    """The overview's row labels: ``L0`` ..., or, when some layers attend within windows, ``L0 win`` / ``L1 full``
    (the thumbnails alone do not tell a windowed layer from a full one whose heads happen to look nearby)."""
    wins = layer_windows(blk)
    if not any(wins):
        return [f"L{i}" for i in range(len(wins))]
    return [f"L{i} {WINDOW_TAG if w else FULL_TAG}" for i, w in enumerate(wins)]


def windows_note(blk: Block) -> str | None:
    """What the labels' ``win`` means, for the block's title (short: the screen's title is one line):
    ``win: within 32-px windows``; None when every layer attends over the whole sequence."""
    spans = sorted({w for w in layer_windows(blk) if w})
    return f"{WINDOW_TAG}: within {' / '.join(spans)}" if spans else None


def focus_heads(blk: Block, sel: Selection) -> list[tuple[int, int]]:
    """The (layer, head) thumbnails the selection's map is made of: its one head, or every head of the layer
    range an aggregate or rollout reduces (the overview frames them all; framing head 0 under "mean over heads"
    said one head was shown while every other view drew the mean)."""
    if sel.mode == "head":
        return [(sel.layer, sel.head)]
    lo, hi = layer_range(sel, blk.n_layers)
    return [(layer, h) for layer in range(lo, hi + 1) for h in range(blk.heads_in(layer))]


def block_top(result: AttentionResult, sel: Selection, block: int, blocks: list[Block] | None = None) -> float:
    """The largest weight any head of ``block`` gives, after the selection's step, hidden tokens and kept mass:
    the top of the "shared" scale (the overview's thumbnails keep it: max-pooling keeps maxima)."""
    thumbs = thumbnails(result, sel, THUMB, blocks, only_block=block)
    return max((float(m.max()) for m in thumbs.values() if m.size), default=1.0)


def scale_top(
    result: AttentionResult, sel: Selection, block: int, m: np.ndarray, blocks: list[Block] | None = None
) -> float:
    """The top of the colour scale for map ``m`` of ``block`` on the selection's scale (or the top set by hand)."""
    if sel.vmax:
        return float(sel.vmax)
    top = _TOPS[check_scale(sel.scale)](result, sel, block, m, blocks)
    return max(top, 1e-6)


# each colour scale's top (palette.SCALES): fixed and row 1 (a row scale's cells are each row over its maximum)
_TOPS: dict[str, Callable[[AttentionResult, Selection, int, np.ndarray, list[Block] | None], float]] = {
    "fixed": lambda *_: 1.0,
    "shared": lambda result, sel, block, _m, blocks: block_top(result, sel, block, blocks),
    "map": lambda _r, _s, _b, m, _bl: float(np.nanmax(m)) if m.size else 0.0,
    "row": lambda *_: 1.0,
}


def downsample(m: np.ndarray, max_side: int = THUMB) -> np.ndarray:
    """Max-pool ``[..., Tq, Tk]`` so neither side exceeds ``max_side`` (keeps sharp peaks visible).

    Cells are runs of ``ceil(T / max_side)`` positions from the start; a short last run is pooled as if padded
    with zeros.  Rows first, through a reshape: that reads the map once, contiguously (72 maps of 2,048² in
    about the time memory takes to deliver them), and leaves a map ``f`` times smaller for the columns.
    """
    return pool_to(m, max_side, max_side)[0]


def pool_dropped(m: np.ndarray, drop_q: np.ndarray, drop_k: np.ndarray, max_side: int = THUMB) -> np.ndarray:
    """``downsample(reduce.drop_positions(m, drop_q, drop_k), max_side)`` bit for bit, without making the
    renormalised map: hiding two special tokens of a 2,048-token head made a 16 MB map (a write to fresh pages) read
    twice more (the overview's "hidden" redraw was ~3x its plain one).  Here each band of rows that pools into one
    cell row is cut (kept keys only), summed, divided and max-pooled while it sits in the cache: the map is read
    from memory once.  The same arithmetic: each row's sum over the same contiguous kept keys, the same division,
    and maxima, which are exact in any order (the zero padding of a short last cell included)."""
    m = np.asarray(m, dtype=np.float32)
    rows, cols = reduce._kept(drop_q), reduce._kept(drop_k)
    n_q = rows.stop - rows.start if isinstance(rows, slice) else rows.size
    n_k = cols.stop - cols.start if isinstance(cols, slice) else cols.size
    if not (n_q and n_k):  # every row or every key hidden: nothing to pool, as drop_positions + downsample give
        return downsample(np.zeros((*m.shape[:-2], n_q, n_k), np.float32), max_side)
    fq = -(-n_q // max_side)
    buf = np.empty((*m.shape[:-2], fq, n_k), np.float32)  # one band's renormalised rows, reused (stays cached)
    bands = []
    for start in range(0, n_q, fq):
        if isinstance(rows, slice):
            band = m[..., rows.start + start : rows.start + min(start + fq, n_q), :]
        else:
            band = np.take(m, rows[start : start + fq], axis=-2)
        band = band[..., cols] if isinstance(cols, slice) else np.take(band, cols, axis=-1)
        total = band.sum(axis=-1, keepdims=True)
        out = buf[..., : band.shape[-2], :]
        out.fill(0)  # a row whose kept sum is not positive stays zeros, as in drop_positions
        band = np.divide(band, total, out=out, where=total > 0)
        top = band.max(axis=-2)
        bands.append(np.maximum(top, 0) if band.shape[-2] < fq else top)  # a short last cell holds a 0 too
    small = np.stack(bands, axis=-2)
    fk = -(-n_k // max_side)
    return _pool_axis(small, fk, -1) if fk > 1 else small


THUMB_CACHE_ENTRIES = 64  # filter settings (per block) remembered per result: a keep slider drag adds one each


class _ThumbCache:
    """The overview's reductions of one result, per block and per filter setting that changes them.

    Only the step, the hidden special tokens, the kept mass and the batch row change the numbers: the colour
    scale, log and focus only change how they are drawn, so they never reach this cache.  None of the filters
    can be derived from another setting's 64-cell reduction -- a step or hidden tokens move the cell borders and
    cut cells in two, hiding renormalises each row by its own kept mass, keeping mass thresholds each row by its
    own weights -- so each setting is pooled from the full maps once and kept.  Settings that leave a block
    unchanged (a step on an encoder block, hiding where the block has no special token) share its entry.
    """

    def __init__(self) -> None:
        self.entries: dict[tuple, list[np.ndarray]] = {}

    def get(self, key: tuple) -> list[np.ndarray] | None:
        return self.entries.get(key)

    def put(self, key: tuple, layers: list[np.ndarray]) -> None:
        if len(self.entries) >= THUMB_CACHE_ENTRIES:
            self.entries.pop(next(iter(self.entries)))
        self.entries[key] = layers


_THUMB_CACHES: dict[int, tuple[weakref.ref, _ThumbCache]] = {}


def _thumb_cache(result: AttentionResult) -> _ThumbCache:
    """The result's cache; it goes with the result (a weak reference: results are not hashable)."""
    key = id(result)
    entry = _THUMB_CACHES.get(key)
    if entry is None or entry[0]() is not result:

        def forget(_: weakref.ref) -> None:  # the result is gone: so is what was kept for it
            _THUMB_CACHES.pop(key, None)

        entry = (weakref.ref(result, forget), _ThumbCache())
        _THUMB_CACHES[key] = entry
    return entry[1]


@dataclass(frozen=True, eq=False)
class _Filters:
    """What the filters do to one block: the rows / keys a step leaves (``step`` None: all) and the special
    positions hiding drops on each axis."""

    step: int | None
    n_q: int
    n_k: int
    drop_q: np.ndarray
    drop_k: np.ndarray

    @property
    def hides(self) -> bool:
        return bool(self.drop_q.any() or self.drop_k.any())


def _block_filters(result: AttentionResult, blk: Block, sel: Selection) -> _Filters:
    q_pos, k_pos = np.arange(blk_len(blk, 0)), np.arange(blk_len(blk, 1))
    n = step_rows(result, blk, sel.step)
    if n is not None:
        q_pos = q_pos[:n]
        k_pos = k_pos[:n] if blk.kind == "self" else k_pos
    cut = clip_cut(result, blk, sel)
    if cut is not None:  # a speech clip's frames: the padding after it is not the user's sound (as compute_map)
        q_pos, k_pos = q_pos[: cut.rows], k_pos[: cut.keys]
    q_sp = _special(blk.query_axis, q_pos, blk_len(blk, 0))
    k_sp = _special(blk.key_axis, k_pos, blk_len(blk, 1))
    dq, dk = (hide_mask(q_sp), hide_mask(k_sp)) if sel.hide_special else (q_sp & False, k_sp & False)
    # a padded batch's row: its padding goes as in the heatmap (compute_map), whatever hiding says
    dq = dq | _pad(blk.query_axis, q_pos, blk_len(blk, 0))
    dk = dk | _pad(blk.key_axis, k_pos, blk_len(blk, 1))
    return _Filters(n, len(q_pos), len(k_pos), dq, dk)


def _block_key(result: AttentionResult, bi: int, blk: Block, sel: Selection, max_side: int, f: _Filters) -> tuple:
    """The cache key of one block's thumbnails: only what changes their numbers."""
    hidden = (np.flatnonzero(f.drop_q).tobytes(), np.flatnonzero(f.drop_k).tobytes()) if f.hides else None
    maps = tuple(id(result.maps[i]) for i in blk.sites)  # the result holds them: ids stay theirs
    return (max_side, sel.batch, bi, maps, f.n_q, f.n_k, hidden, float(sel.keep) if sel.keep < 1.0 else 1.0)


# Pooling 72 maps of 2,048² reads 1.2 GB: one core delivers it in ~155 ms of CPU, so the heads are shared among
# threads (numpy's reductions release the GIL).  Below this many cells a layer the threads' start-up costs more.
POOL_THREADS_FROM = 4_000_000
_POOL: list = []  # the shared executor, made on first use (a result of 512 tokens never needs one)


def _pool_map(fn: Callable[[int], np.ndarray], n: int, cells: int) -> list[np.ndarray]:
    """``[fn(i) for i in range(n)]``, on threads when the layer is large enough to pay for them."""
    import os

    workers = min(n, os.cpu_count() or 1, 8)
    if workers < 2 or cells < POOL_THREADS_FROM:
        return [fn(i) for i in range(n)]
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor

        _POOL.append(ThreadPoolExecutor(min(os.cpu_count() or 1, 8), thread_name_prefix="attnviz-pool"))
        ends_with_process("attnviz-pool_")  # (its threads: attnviz-pool_0, ...) a Ctrl-C's exit cuts a head short
    # each head waited for in slices (core.interrupts.result_of), not Executor.map's plain wait: a Ctrl-C that the
    # kernel hands to a pooling thread is raised at once, not when the head in progress is done (a head's kept
    # mass at 8,192 tokens sorts every row: seconds); the heads not started yet are cancelled (as map does)
    heads = [_POOL[0].submit(fn, i) for i in range(n)]
    try:
        return [result_of(h) for h in heads]
    finally:
        for h in heads:
            h.cancel()


def _pool_block(blk: Block, sel: Selection, max_side: int, f: _Filters) -> list[np.ndarray]:
    """``[H, <=max_side, <=max_side]`` per layer of one block, pooled from its full maps.

    Every head is pooled on its own (a contiguous read of its map), large layers on threads; a map that pools its
    heads where they are (:class:`~attnviz.core.attention.PooledSource`: on-demand Q and Kᵀ kept on a GPU) does,
    when neither hiding nor kept mass change the numbers first, and only the thumbnails come back.  Hiding and kept
    mass make a new map per head (one head at a time per thread: a 2,048-token layer would need 200 MB for each
    temporary); a tower's frames, filtered, one band of rows at a time (:func:`pool_frames_filtered`)."""
    hide = f.hides
    out = []
    for layer in range(blk.n_layers):
        src = blk.result.maps[blk.sites[layer]]
        if not hide and sel.keep >= 1.0 and isinstance(src, PooledSource):  # pooled where its numbers are
            pooled = src.pooled(blk.batch, f.n_q, f.n_k, max_side)
            if pooled is not None:
                pooled.flags.writeable = False
                out.append(pooled)
                continue
        if isinstance(src, FramesMap):  # a tower's frames, filtered: band by band, never a whole head laid out
            fn = functools.partial(pool_frames_filtered, src, blk.batch, f, sel.keep, max_side)
            small = np.stack(_pool_map(fn, src.shape[1], src.shape[1] * f.n_q * f.n_k))
            small.flags.writeable = False
            out.append(small)
            continue
        a = np.asarray(blk.layer(layer), np.float32)  # [H, Tq, Tk]
        if a.shape[1:] != (f.n_q, f.n_k):  # a step, a clip's frames: slice (a view), never copy the full layer
            a = a[:, : f.n_q, : f.n_k]
        one: Callable[[int], np.ndarray] = a.__getitem__  # head h's map after the step
        n_heads, cells = a.shape[0], a.size

        def head(h: int, one: Callable[[int], np.ndarray] = one) -> np.ndarray:
            if hide and sel.keep >= 1.0:  # hidden tokens alone: pooled without making the renormalised map
                return pool_dropped(one(h), f.drop_q, f.drop_k, max_side)
            m = reduce.drop_positions(one(h), f.drop_q, f.drop_k) if hide else one(h)  # the head map's numbers
            if sel.keep < 1.0:
                m = reduce.keep_mass(m, max(sel.keep, 1e-3))
            return downsample(m, max_side)

        small = np.stack(_pool_map(head, n_heads, cells))
        small.flags.writeable = False  # shared by every later draw: nobody may change it in place
        out.append(small)
    return out


def pool_frames_filtered(src: FramesMap, b: int, f: _Filters, keep: float, max_side: int, h: int) -> np.ndarray:
    """Head ``h`` of a tower's frames after the step, hidden positions and kept mass, max-pooled: bit for bit what
    ``downsample(keep_mass(drop_positions(src.head(b, h)[:n_q, :n_k])))`` gives, one band of rows at a time.

    Laying the head out is the frame count times its frames' maps (17 frames of 1,024 patches: 1.2 GB a head, and
    keep mass's sort and sums ~6x that), yet both filters are row-local: a row keeps (or renormalises over) its own
    weights alone.  So each band of kept rows that pools into one cell row is laid out by itself
    (:meth:`FramesMap.head_rows`: the very rows of the laid-out head, their zeros off the frame's block included,
    so each row is sorted, summed and divided exactly as the whole head's is), filtered by the same functions and
    max-pooled (maxima are exact in any order; a short last cell holds the zero padding's 0).  A dropped position
    moves every later row and key up one: the rows are the kept ones and the keys are cut by ``drop_positions``
    itself, so cells straddle frame borders exactly as they do in the laid-out head."""
    rows = np.flatnonzero(~np.asarray(f.drop_q, bool))  # the kept rows among the step's n_q
    n_k = int((~np.asarray(f.drop_k, bool)).sum())
    if not (rows.size and n_k):  # every row or every key hidden: nothing to pool, as the laid-out path gives
        return downsample(np.zeros((rows.size, n_k), np.float32), max_side)
    fq = -(-rows.size // max_side)
    no_rows = np.zeros(min(fq, rows.size), bool)
    bands = []
    for start in range(0, rows.size, fq):
        band = src.head_rows(b, h, rows[start : start + fq], f.n_k)
        if f.hides:
            band = reduce.drop_positions(band, no_rows[: band.shape[0]], f.drop_k)
        if keep < 1.0:
            band = reduce.keep_mass(band, max(keep, 1e-3))
        top = band.max(axis=-2)
        bands.append(np.maximum(top, 0) if band.shape[-2] < fq else top)  # a short last cell holds a 0 too
    small = np.stack(bands)
    fk = -(-n_k // max_side)
    return _pool_axis(small, fk, -1) if fk > 1 else small


def thumbnails(
    result: AttentionResult,
    sel: Selection | int = -1,
    max_side: int = THUMB,
    blocks: list[Block] | None = None,
    only_block: int | None = None,
    use_cache: bool = True,
) -> dict:
    """``{(block, layer, head): [<=max_side, <=max_side]}``: every head after the step, special-token
    and kept-mass filters, max-pooled.  The app's analyze job calls it in the inference worker for a new
    result, so the GUI thread only uploads small images; each filter setting is pooled once per result and
    kept with it (``use_cache=False`` pools again and replaces what was kept).
    """
    if isinstance(sel, (int, np.integer)):
        sel = Selection(step=int(sel))
    blocks = result_blocks(result, sel, blocks)
    cache = _thumb_cache(result)
    out = {}
    for bi, blk in enumerate(blocks):
        if only_block is not None and bi != only_block:
            continue
        filters = _block_filters(result, blk, sel)
        key = _block_key(result, bi, blk, sel, max_side, filters)
        layers = cache.get(key) if use_cache else None
        if layers is None:
            layers = _pool_block(blk, sel, max_side, filters)
            cache.put(key, layers)
        for layer, small in enumerate(layers):
            for h in range(small.shape[0]):
                out[(bi, layer, h)] = small[h]
    return out


def thumbnails_kept(
    result: AttentionResult, sel: Selection, max_side: int = THUMB, blocks: list[Block] | None = None
) -> bool:
    """Whether every block's thumbnails for ``sel`` are already kept with ``result`` (no pooling to do)."""
    blocks = result_blocks(result, sel, blocks)
    cache = _thumb_cache(result)
    return all(
        cache.get(_block_key(result, bi, blk, sel, max_side, _block_filters(result, blk, sel))) is not None
        for bi, blk in enumerate(blocks)
    )
