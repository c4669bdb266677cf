"""Gold word alignments over a parallel corpus (``--gold-column``): AER, precision and recall of every
cross-attention head, of each layer's head mean and of the mean of all heads, summed over the corpus.

The numbers are those of ``attnviz align --gold`` (and the window's alignment test sets) on the same pairs:
sentences are encoded as their whitespace-separated words (the words the Pharaoh indices count), each map is
merged to words and read as links by :mod:`attnviz.core.align`, and the counts ``|A∩S|``, ``|A∩P|``, ``|A|``,
``|S|`` are summed over items, so the batches a corpus is cut into change nothing.  Workers return counts,
not maps: a corpus of any size costs four integers per head and batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attnviz import AttnvizError
from attnviz.core import align

COUNTS = 4  # |A∩S|, |A∩P|, |A|, |S| (core.align.link_counts)


@dataclass(frozen=True)
class GoldPair:
    """One item's gold and the word of each piece the model reads."""

    src_words: tuple[int, ...]  # word of each source piece (-1: a special token)
    tgt_words: tuple[int, ...]  # word of each target piece after the decoder start token
    n_src: int
    n_tgt: int
    sure: frozenset[align.Link]
    possible: frozenset[align.Link]
    skip: tuple[bool, ...] = ()  # target words that get no predicted link (punctuation a gold set never aligns)


@dataclass(frozen=True)
class GoldBatch:
    """What a worker needs to score a batch: the row convention and each item's :class:`GoldPair`, batch order."""

    convention: str
    pairs: tuple[GoldPair, ...]


def parse(items, src_words: list[list[int]], tgt_words: list[list[int]], where: str) -> list[GoldPair]:
    """Each item's :class:`GoldPair`; a malformed line or an index past a sentence's words is one line naming
    the item.  Punctuation-only target words are skipped when no gold link of the corpus touches one (as the
    window's test sets: such a gold set does not ask for them)."""
    parsed = []
    for k, it in enumerate(items):
        here = f"{where} item {k + 1}: "
        try:
            sure, possible = align.parse_pharaoh(it.gold or "", here)
            n_src, n_tgt = len(it.text.split()), len(it.pair.split())
            align.check_gold((sure, possible), n_src, n_tgt, here)
        except align.PharaohError as e:
            raise AttnvizError(str(e)) from None
        parsed.append((sure, possible, n_src, n_tgt))
    try:
        align.check_gold_set([(s, p) for s, p, _, _ in parsed], where.rstrip(": "))
    except align.PharaohError as e:
        raise AttnvizError(str(e)) from None
    from attnviz.runtime.align import is_punctuation

    punct = [[is_punctuation(w) for w in it.pair.split()] for it in items]
    touched = any(punct[k][j] for k, (s, p, _, _) in enumerate(parsed) for _, j in s | p)
    return [
        GoldPair(
            tuple(src_words[k]),
            tuple(tgt_words[k]),
            n_src,
            n_tgt,
            frozenset(sure),
            frozenset(possible),
            () if touched else tuple(punct[k]),
        )
        for k, (sure, possible, n_src, n_tgt) in enumerate(parsed)
    ]


def skips_punctuation(pairs: Sequence[GoldPair]) -> bool:
    return any(any(p.skip) for p in pairs)


def rows(nh: int, cross_layers: int) -> int:
    """Rows of a counts array: every head (zero but for cross heads), each cross site's head mean, the mean of all."""
    return nh + cross_layers + 1


def counts(maps: list[np.ndarray], groups, batch: GoldBatch, src_lengths, dec_lengths, nh: int) -> np.ndarray:
    """``[B, rows(nh, C), 4]`` int64 link counts of each item of a batch (``groups``: the run's head groups; C:
    its cross ones); summed over items they are the batch's counts.

    ``maps[g.site]``: ``[B, H, Td, Ts]`` decoder-over-source probabilities, right-padded; row ``t`` of item ``b``
    is real below ``dec_lengths[b]``, column ``j`` below ``src_lengths[b]``."""
    cross = [g for g in groups if g.kind == "cross"]
    out = np.zeros((len(batch.pairs), rows(nh, len(cross)), COUNTS), np.int64)
    for b, gp in enumerate(batch.pairs):
        nq, nk = int(dec_lengths[b]), int(src_lengths[b])
        if len(gp.src_words) != nk or len(gp.tgt_words) + 1 != nq:
            raise AttnvizError("internal: a gold item's word map does not match its batch row")
        qw = align.row_words(gp.tgt_words, batch.convention, n_rows=nq)
        # float64 before any mean, as core.align.alignment_table does with `attnviz align`'s maps
        every = [np.asarray(maps[g.site][b, :, :nq, :nk], np.float64) for g in cross]
        # every head, then each layer's head mean, then the mean of all: one merge and argmax for them all
        stacked = np.concatenate(
            [*every, *(a.mean(0, keepdims=True) for a in every), np.concatenate(every).mean(0)[None]]
        )
        best = align.best_source_words(stacked, qw, gp.src_words, gp.n_tgt, gp.n_src, gp.skip)
        got = align.many_link_counts(best, gp.sure, gp.possible, gp.n_src)
        heads = np.concatenate([np.arange(g.offset, g.offset + g.heads) for g in cross])
        out[b, heads] = got[: len(heads)]
        out[b, nh:] = got[len(heads) :]
    return out


def item_aer(per_item: np.ndarray) -> np.ndarray:
    """AER of each item (``[..., 4]`` counts -> ``[...]``); NaN where an item has neither links nor gold."""
    a_s, a_p, a, s = (per_item[..., i].astype(np.float64) for i in range(COUNTS))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(a + s > 0, 1.0 - (a_s + a_p) / (a + s), np.nan)


def worst_items(per_item: np.ndarray, items, nh: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per head the ``k`` items it aligns worst: ``(item AER [nh, kb], Item.index [nh, kb])``, highest AER first,
    ties to the lower item index (so engines and batchings agree); -inf / -1 where a head has no such item."""
    ids = np.asarray(items, np.int64)
    v = item_aer(per_item[:, :nh]).T  # [nh, B]
    v = np.where(np.isfinite(v), v, -np.inf)
    return top_k(v, np.broadcast_to(ids, v.shape), k)


def top_k(values: np.ndarray, items: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` highest ``values [nh, n]`` per row with their ``items``; ties to the lower item, -1 items last."""
    big = np.iinfo(np.int64).max
    order = np.lexsort((np.where(items < 0, big, items), -values), axis=-1)[..., :k]
    return np.take_along_axis(values, order, -1), np.take_along_axis(items, order, -1)


@dataclass(frozen=True)
class GoldScores:
    """Corpus totals read back as scores (``heads``: per flat head index, NaN where a head is not cross)."""

    aer: np.ndarray
    precision: np.ndarray
    recall: np.ndarray


def scores(total: np.ndarray) -> GoldScores:
    cs = [align.AERCounter.of(r) for r in total]
    return GoldScores(*(np.array([getattr(c, f) for c in cs]) for f in ("aer", "precision", "recall")))
