"""A beam search's hypotheses as one result: its batch rows, best first.

Each hypothesis comes labelled as a greedy generation of its ids would be (one row); here they become the rows
of one padded batch, as a padded batch of inputs is held (:mod:`attnviz.core.rows`): every map right-padded with
zeros to the longest row's queries and keys, each row's own axes with the positions past its end marked padding
(``TokenAxis.pad``: the views offer only a row's own tokens).  ``info["beams"]`` keeps each row's generated ids,
words and score (:data:`attnviz.core.rows.BEAMS_KEY`: the views call such a result's rows "beams").  A vision
tower's frames (Idefics3 / SmolVLM's tiles, one prompt's several images) are the one run on the image all beams
share: one set of frames' maps every row shows (:meth:`attnviz.core.frames.FramesMap.shared`), not K copies; and
so is a dense map the same in every hypothesis (a tower's one image, an encoder's one source:
:meth:`attnviz.core.attention.DenseMap.shared`, each row a read-only view of one array).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from attnviz import AttnvizError
from attnviz.core.attention import AttentionResult, DenseMap, MapSource, TokenAxis
from attnviz.core.frames import FramesMap
from attnviz.core.rows import BEAMS_KEY, RowAxes, set_row_axes
from attnviz.core.setting_words import fix
from attnviz.runtime.beams import Hypothesis


def _padded_axis(ax: TokenAxis | None, n: int) -> TokenAxis | None:
    """``ax`` grown to ``n`` positions, the new ones padding (special, and marked pad)."""
    if ax is None or len(ax.labels) >= n:
        return ax
    extra = n - len(ax.labels)
    pad = (list(ax.pad) if ax.pad is not None else [False] * len(ax.labels)) + [True] * extra
    special = list(ax.special or [False] * len(ax.labels)) + [True] * extra
    values = list(ax.values) + [0.0] * extra if ax.values is not None else None
    return TokenAxis(list(ax.labels) + ["<pad>"] * extra, special, values, pad)


def _shared(maps: list[FramesMap], label: str) -> FramesMap:
    """A vision tower's frames (an image's tiles): the tower ran once on the image every beam shares, so its maps
    are one set, shown for each of the K rows (:meth:`FramesMap.shared`), not K copies.  (Without a cache each
    hypothesis' re-run ran the tower again on the same pixels: the first run's maps are kept.)"""
    first = maps[0]
    if any(m.shape != first.shape or m.sizes != first.sizes for m in maps):  # never: one image, one processor
        raise AttnvizError(fix("beams_frames", label=label))
    return first.shared(len(maps))


def _stacked(maps: list[MapSource], label: str) -> MapSource:
    """One site's maps of every hypothesis ``[1, H, q_i, k_i]`` as ``[K, H, max q, max k]``, zero past a row's end
    (a vision tower's frames: one set every row shows)."""
    if all(isinstance(m, FramesMap) for m in maps):
        return _shared([m for m in maps if isinstance(m, FramesMap)], label)
    if any(isinstance(m, FramesMap) for m in maps):  # never: a site is a tower's in every run or in none
        raise AttnvizError(fix("beams_frames_some", label=label))
    arrays = [np.asarray(m.array(), np.float32) for m in maps]
    first = arrays[0]
    if first.shape[0] == 1 and all(a is first or (a.shape == first.shape and np.array_equal(a, first)) for a in arrays):
        # a map every beam shares (a vision tower's or an encoder's: one run of the same input; the cache's steps
        # hand each hypothesis the very array): held once, each row a read-only view of it (DenseMap.shared)
        return DenseMap(first).shared(len(arrays))
    b, h = len(arrays), first.shape[1]
    tq = max(a.shape[2] for a in arrays)
    tk = max(a.shape[3] for a in arrays)
    out = np.zeros((b, h, tq, tk), np.float32)
    for i, a in enumerate(arrays):
        out[i, :, : a.shape[2], : a.shape[3]] = a[0]
    return DenseMap(out)


def merge_beams(results: list[AttentionResult], hyps: list[Hypothesis]) -> AttentionResult:
    """The hypotheses' one-row results as one result whose batch rows they are, in their order (best first)."""
    if not results:
        raise AttnvizError(f"beam search finished no hypothesis; {fix('more_steps')}")
    first = results[0]
    maps: list[MapSource] = [_stacked([r.maps[i] for r in results], s.label) for i, s in enumerate(first.sites)]
    axes = [r.row_axes(0) for r in results]
    n_tok = max((len(t.labels) for t, _ in axes if t is not None), default=0)
    n_key = max((len(k.labels) for _, k in axes if k is not None), default=0)
    rows = [RowAxes(_padded_axis(t, n_tok), _padded_axis(k, n_key)) for t, k in axes]
    info = dict(first.info)
    info["batch"] = len(results)
    info[BEAMS_KEY] = [
        {"ids": [int(t) for t in h.ids], "generated": list(r.generated), "score": float(h.score)}
        for h, r in zip(hyps, results)
    ]
    out = dataclasses.replace(
        first,
        maps=maps,
        sites=[dataclasses.replace(s) for s in first.sites],
        outputs={},  # each hypothesis' own outputs differ in length; the cached steps keep none either
        info=info,
        decoder_ids=[list(r.decoder_ids[0]) if r.decoder_ids else [] for r in results],
    )
    set_row_axes(out, rows)
    return out
