"""Word alignment from cross-attention, gold alignments in Pharaoh format, and AER / precision / recall.

numpy only: the training evaluation, ``attnviz align`` and the GUI's Head stats all score with this module.

Attention -> word links
    A decoder cross-attention map has rows = decoder positions and columns = source subword positions.
    :func:`attention_to_links`:

    1. merge subwords: columns of one source word are **summed** (the mass a word receives is the mass of its
       pieces; averaging would penalise words the tokenizer splits), rows of one target word are **averaged**
       (each row is a distribution, so the mean stays one and long words do not dominate);
    2. **argmax per target word**: each target word is linked to the source word with the most mass (Garg et
       al. 2019; Zenkel et al. 2019).  An encoder-decoder gives one direction only, so no intersection
       heuristic; every target word gets exactly one link.  ``method="threshold"`` also links every source
       word whose merged mass exceeds ``threshold`` (for experiments).

Row convention (:func:`row_words`)
    Decoder position ``t`` reads the *input* token ``y[t-1]`` (``y[-1]`` = BOS) and *predicts* ``y[t]``.
    ``"predict"``: row ``t`` stands for the target token it predicts; ``"input"``: for its input token
    ("Shift-Att", Chen et al. 2020).  Which one aligns better depends on the model; a model trained with
    guided alignment names its convention in ``attnviz.alignment``.

Gold alignments (:func:`parse_pharaoh`)
    One sentence per line, links ``i-j`` (sure) or ``i?j`` (possible), 0-based ``source-target`` word indices
    (the format of fast_align, eflomal and the WMT alignment test sets).  Words are whitespace-separated tokens of the source / target lines.

AER (Och & Ney 2003)
    ``AER = 1 − (|A∩S| + |A∩P|) / (|A| + |S|)`` with ``P ⊇ S``; precision ``|A∩P| / |A|``, recall
    ``|A∩S| / |S|``.  Counts are summed over the corpus, not averaged per sentence.  Target words flagged
    ``skip`` (e.g. punctuation that annotators never align) get no predicted link.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attnviz.core.untrusted import read_text

Link = tuple[int, int]  # (source word, target word)
WordIds = Sequence[int] | np.ndarray  # word index per position (-1: none): a list, or the int array a run gives
CONVENTIONS = ("predict", "input")


# ---------------------------------------------------------------------------------------------------------
# attention -> links


def row_words(tgt_word_ids: WordIds, convention: str, n_rows: int | None = None) -> np.ndarray:
    """Word index of each decoder row for a teacher-forced run on ``[BOS] + target subwords``.

    ``tgt_word_ids[k]``: word of target subword ``k`` (-1 for none).  ``n_rows`` defaults to
    ``len(tgt_word_ids) + 1`` (BOS plus every subword); rows that stand for BOS / EOS get -1.
    """
    if convention not in CONVENTIONS:
        raise ValueError(f"row convention {convention!r}: use one of {', '.join(CONVENTIONS)}")
    w = np.asarray(tgt_word_ids, dtype=np.int64)
    n = len(w) + 1 if n_rows is None else n_rows
    out = np.full(n, -1, dtype=np.int64)
    if convention == "predict":  # row t predicts subword t
        k = min(n, len(w))
        out[:k] = w[:k]
    else:  # row t reads subword t-1
        k = min(n - 1, len(w))
        out[1 : k + 1] = w[:k]
    return out


def convention_rows(producing: Sequence[int], convention: str, n_rows: int) -> list[tuple[int, int]]:
    """``(word k, decoder row)`` for generated words, given the row that *produced* each word.

    ``"predict"``: the producing row itself; ``"input"``: the next row, where word k is the decoder's input
    (the last generated word is never fed back, so it has no such row and is left out).
    """
    if convention not in CONVENTIONS:
        raise ValueError(f"row convention {convention!r}: use one of {', '.join(CONVENTIONS)}")
    shift = 1 if convention == "input" else 0
    return [(k, int(r) + shift) for k, r in enumerate(producing) if 0 <= int(r) + shift < n_rows]


def merge_subwords(
    attn: np.ndarray,
    query_words: WordIds,
    key_words: WordIds,
    n_query_words: int | None = None,
    n_key_words: int | None = None,
) -> np.ndarray:
    """``[..., Tq, Tk]`` subword attention -> ``[..., n_query_words, n_key_words]`` word attention.

    ``query_words[i]`` / ``key_words[j]``: word index of row i / column j, or -1 for positions that belong to
    no word (BOS, EOS, padding) and are dropped.  Rows of a word are averaged, columns summed.  Leading axes
    (heads) are merged alike, each map with exactly the additions a map of its own would get.
    """
    a = np.asarray(attn, dtype=np.float64)
    qw = np.asarray(query_words, dtype=np.int64)
    kw = np.asarray(key_words, dtype=np.int64)
    if a.shape[-2:] != (len(qw), len(kw)):
        raise ValueError(f"attention {a.shape} does not match {len(qw)} query and {len(kw)} key word ids")
    nq = n_query_words if n_query_words is not None else int(qw.max(initial=-1)) + 1
    nk = n_key_words if n_key_words is not None else int(kw.max(initial=-1)) + 1
    kmask = kw >= 0
    cols = np.zeros((*a.shape[:-1], nk))  # [..., Tq, nk]: columns summed per key word, in column order
    np.add.at(np.moveaxis(cols, -1, 0), kw[kmask], np.moveaxis(a[..., kmask], -1, 0))  # (a view: adds into cols)
    qmask = qw >= 0
    out = np.zeros((*a.shape[:-2], nq, nk))
    np.add.at(np.moveaxis(out, -2, 0), qw[qmask], np.moveaxis(cols[..., qmask, :], -2, 0))
    counts = np.bincount(qw[qmask], minlength=nq).astype(np.float64)
    return out / np.maximum(counts, 1)[:, None]


def best_source_words(
    attn: np.ndarray,
    query_words: WordIds,
    key_words: WordIds,
    n_query_words: int,
    n_key_words: int,
    skip: Sequence[bool] | np.ndarray = (),
) -> np.ndarray:
    """``[..., n_query_words]``: the source word each target word links to in each map of ``attn [..., Tq, Tk]``
    (argmax links, as :func:`attention_to_links`), -1 where a word gets none (skipped, or no rows)."""
    w = merge_subwords(attn, query_words, key_words, n_query_words, n_key_words)
    qw = np.asarray(query_words, np.int64)
    linked = np.zeros(n_query_words, bool)
    linked[qw[qw >= 0]] = True
    flags = np.asarray(skip, bool)[:n_query_words]
    linked[: len(flags)] &= ~flags
    if n_key_words == 0:
        linked[:] = False
    best = w.argmax(-1) if n_key_words else np.zeros(w.shape[:-1], np.int64)
    return np.where(linked, best, -1)


def many_link_counts(best: np.ndarray, sure: Iterable[Link], possible: Iterable[Link] | None, n_src: int) -> np.ndarray:
    """``[M, 4]`` :func:`link_counts` of M link sets given as :func:`best_source_words` rows ``best [M, n_tgt]``."""
    best = np.asarray(best, np.int64)
    S = np.zeros((max(n_src, 1), best.shape[-1]), bool)
    for i, j in sure:
        S[i, j] = True
    P = S.copy()
    for i, j in possible or ():
        P[i, j] = True
    on = best >= 0
    src = np.where(on, best, 0)
    tgt = np.broadcast_to(np.arange(best.shape[-1]), best.shape)
    out = np.empty((best.shape[0], 4), np.int64)
    out[:, 0] = (S[src, tgt] & on).sum(-1)
    out[:, 1] = (P[src, tgt] & on).sum(-1)
    out[:, 2] = on.sum(-1)
    out[:, 3] = int(S.sum())
    return out


def attention_to_links(
    attn: np.ndarray,
    query_words: WordIds,
    key_words: WordIds,
    n_query_words: int | None = None,
    n_key_words: int | None = None,
    skip: Sequence[bool] | np.ndarray = (),
    method: str = "argmax",
    threshold: float = 0.5,
) -> set[Link]:
    """Word links ``{(source_word, target_word)}`` from one cross-attention map (see module doc).

    ``skip[j]`` True: target word j gets no link.  Target words with no rows (e.g. truncated) get none either.
    """
    w = merge_subwords(attn, query_words, key_words, n_query_words, n_key_words)
    present = np.zeros(w.shape[0], dtype=bool)
    qw = np.asarray(query_words)
    present[qw[qw >= 0]] = True
    links: set[Link] = set()
    if w.shape[1] == 0:
        return links
    for j in range(w.shape[0]):
        if not present[j] or (j < len(skip) and skip[j]):
            continue
        row = w[j]
        if method == "argmax":
            links.add((int(row.argmax()), j))
        elif method == "threshold":
            links.add((int(row.argmax()), j))
            links.update((int(i), j) for i in np.flatnonzero(row > threshold))
        else:
            raise ValueError(f"unknown method {method!r}: use 'argmax' or 'threshold'")
    return links


def diagonal_links(n_src: int, n_tgt: int, skip: Sequence[bool] = ()) -> set[Link]:
    """Baseline: target word j linked to the source word at the same relative position."""
    return {
        (min(n_src - 1, int((j + 0.5) * n_src / n_tgt)), j) for j in range(n_tgt) if not (j < len(skip) and skip[j])
    }


# ---------------------------------------------------------------------------------------------------------
# AER


def link_counts(
    predicted: Iterable[Link], sure: Iterable[Link], possible: Iterable[Link] | None = None
) -> tuple[int, int, int, int]:
    """``(|A∩S|, |A∩P|, |A|, |S|)`` of one sentence, ``P = S ∪ possible``: what AER sums over a corpus."""
    A, S = set(predicted), set(sure)
    P = S | set(possible or ())
    return len(A & S), len(A & P), len(A), len(S)


class AERCounter:
    """Accumulates ``|A∩S|``, ``|A∩P|``, ``|A|``, ``|S|`` over a corpus."""

    def __init__(self) -> None:
        self.a_s = self.a_p = self.a = self.s = 0

    def add(self, predicted: Iterable[Link], sure: Iterable[Link], possible: Iterable[Link] | None = None) -> None:
        self.add_counts(link_counts(predicted, sure, possible))

    def add_counts(self, counts: Sequence[int]) -> None:
        """Add ``(|A∩S|, |A∩P|, |A|, |S|)`` counted elsewhere (a corpus worker's per-head totals)."""
        a_s, a_p, a, s = (int(x) for x in counts)
        self.a_s += a_s
        self.a_p += a_p
        self.a += a
        self.s += s

    @classmethod
    def of(cls, counts: Sequence[int]) -> AERCounter:
        c = cls()
        c.add_counts(counts)
        return c

    @property
    def aer(self) -> float:
        denom = self.a + self.s
        return 1.0 - (self.a_s + self.a_p) / denom if denom else 0.0

    @property
    def precision(self) -> float:
        return self.a_p / self.a if self.a else 0.0

    @property
    def recall(self) -> float:
        return self.a_s / self.s if self.s else 0.0

    def scores(self) -> Scores:
        return Scores(self.aer, self.precision, self.recall)


@dataclass(frozen=True)
class Scores:
    aer: float
    precision: float
    recall: float


def aer(
    predicted: Iterable[Iterable[Link]],
    sure: Iterable[Iterable[Link]],
    possible: Iterable[Iterable[Link]] | None = None,
) -> float:
    """Corpus AER over parallel lists of per-sentence link sets."""
    c = AERCounter()
    sure = list(sure)
    poss = list(possible) if possible is not None else [None] * len(sure)
    for a, s, p in zip(predicted, sure, poss):
        c.add(a, s, p)
    return c.aer


@dataclass
class AlignmentSample:
    """One sentence pair's cross-attention and gold, ready for :func:`alignment_table`.

    ``attn``: ``[L, H, Tq, Tk]``; ``query_words`` / ``key_words``: word index per row / column (-1: none);
    ``skip``: target words that get no predicted link.
    """

    attn: np.ndarray
    query_words: WordIds
    key_words: WordIds
    n_src: int
    n_tgt: int
    sure: set = field(default_factory=set)
    possible: set = field(default_factory=set)
    skip: Sequence[bool] | np.ndarray = ()


def _as_sample(s: AlignmentSample | dict[str, Any]) -> AlignmentSample:
    if isinstance(s, AlignmentSample):
        return s
    return AlignmentSample(
        s["attn"],
        s["query_words"],
        s["key_words"],
        s["n_src"],
        s["n_tgt"],
        set(s.get("gold", s.get("sure", ()))),
        set(s.get("possible", ())),
        s.get("skip", ()),
    )


def alignment_table(samples: Iterable, method: str = "argmax") -> dict:
    """Per-layer / per-head AER, precision and recall of cross-attention against gold links.

    ``samples``: :class:`AlignmentSample` (or dicts with the same keys; ``gold`` = sure links).  Returns::

        {"heads": [[aer]*H]*L, "layers": [aer of the head mean of layer l]*L,
         "precision": {"heads", "layers"}, "recall": {"heads", "layers"},
         "best_head": {"layer", "head", "aer"}, "best_layer": {"layer", "aer"},
         "average": aer of the mean over all layers and heads, "n_sentences", "n_gold_links"}
    """
    heads: list[list[AERCounter]] | None = None
    layers: list[AERCounter] = []
    avg = AERCounter()
    n = n_gold = 0
    for raw in samples:
        s = _as_sample(raw)
        att = np.asarray(s.attn, dtype=np.float64)
        L, H = att.shape[:2]
        if heads is None:
            heads = [[AERCounter() for _ in range(H)] for _ in range(L)]
            layers = [AERCounter() for _ in range(L)]
        kw: dict[str, Any] = dict(n_query_words=s.n_tgt, n_key_words=s.n_src, skip=s.skip, method=method)
        for layer in range(L):
            for h in range(H):
                heads[layer][h].add(
                    attention_to_links(att[layer, h], s.query_words, s.key_words, **kw), s.sure, s.possible
                )
            layers[layer].add(
                attention_to_links(att[layer].mean(0), s.query_words, s.key_words, **kw), s.sure, s.possible
            )
        avg.add(attention_to_links(att.mean((0, 1)), s.query_words, s.key_words, **kw), s.sure, s.possible)
        n += 1
        n_gold += len(s.sure)
    if heads is None:
        raise ValueError("alignment_table needs at least one sample")
    head_aer = [[c.aer for c in row] for row in heads]
    bl, bh = min(
        ((l_, h) for l_ in range(len(head_aer)) for h in range(len(head_aer[l_]))), key=lambda x: head_aer[x[0]][x[1]]
    )
    layer_aer = [c.aer for c in layers]
    best_layer = int(np.argmin(layer_aer))
    return {
        "heads": head_aer,
        "layers": layer_aer,
        "precision": {"heads": [[c.precision for c in row] for row in heads], "layers": [c.precision for c in layers]},
        "recall": {"heads": [[c.recall for c in row] for row in heads], "layers": [c.recall for c in layers]},
        "best_head": {"layer": bl, "head": bh, "aer": head_aer[bl][bh]},
        "best_layer": {"layer": best_layer, "aer": layer_aer[best_layer]},
        "average": avg.aer,
        "n_sentences": n,
        "n_gold_links": n_gold,
    }


def ranked_heads(table: dict) -> list[tuple[int, int, float]]:
    """``(layer, head, aer)`` of every head, best (lowest AER) first: "which heads align?"."""
    cells = [(l_, h, v) for l_, row in enumerate(table["heads"]) for h, v in enumerate(row)]
    return sorted(cells, key=lambda c: (c[2], c[0], c[1]))


def format_aer_table(table: dict) -> str:
    """Markdown table: rows = layers, columns = heads + layer mean; best head in bold."""
    heads = table["heads"]
    H = max(len(r) for r in heads)
    lines = ["| layer | " + " | ".join(f"head {h}" for h in range(H)) + " | head mean |", "|---" * (H + 2) + "|"]
    bl, bh = table["best_head"]["layer"], table["best_head"]["head"]
    for layer, row in enumerate(heads):
        cells = [(f"**{v:.3f}**" if (layer, h) == (bl, bh) else f"{v:.3f}") for h, v in enumerate(row)]
        lines.append(f"| {layer} | " + " | ".join(cells) + f" | {table['layers'][layer]:.3f} |")
    lines.append(
        f"\nbest head: layer {bl} head {bh}, AER {table['best_head']['aer']:.3f}; "
        f"mean of all heads and layers: AER {table['average']:.3f} "
        f"({table['n_sentences']} sentences, {table['n_gold_links']} gold links)"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# Pharaoh files


_MAX_INDEX_DIGITS = 9  # a word index of a sentence: 10^9 words is past any text a model reads


class PharaohError(ValueError):
    """A malformed Pharaoh line; the message names the line and the bad item."""


def parse_pharaoh(line: str, where: str = "") -> tuple[set[Link], set[Link]]:
    """``"0-0 1?2 3-1"`` -> (sure, possible) link sets of ``(source, target)`` word indices."""
    sure: set[Link] = set()
    possible: set[Link] = set()
    for item in line.split():
        sep = "-" if "-" in item else "?" if "?" in item else None
        named = item if len(item) <= 40 else item[:40] + "…"
        parts = item.split(sep) if sep else []
        # ASCII digits only: str.isdigit() also passes '²' and other digits int() refuses (a ValueError that is
        # no PharaohError); and a bounded count, as int() refuses past 4,300 digits and no sentence has 10^9 words
        if len(parts) != 2 or not all(p.isascii() and p.isdigit() for p in parts):
            raise PharaohError(f"{where}'{named}' is not a Pharaoh link (expected i-j or i?j, 0-based word indices)")
        if any(len(p) > _MAX_INDEX_DIGITS for p in parts):
            raise PharaohError(
                f"{where}'{named}' names a word index over {_MAX_INDEX_DIGITS} digits long; "
                "give 0-based word indices of the sentence"
            )
        (sure if sep == "-" else possible).add((int(parts[0]), int(parts[1])))
    return sure, possible


def format_pharaoh(links: Iterable[Link]) -> str:
    """Links as one Pharaoh line, sorted by target then source word (``i-j`` = source-target)."""
    return " ".join(f"{i}-{j}" for i, j in sorted(links, key=lambda x: (x[1], x[0])))


def read_lines(path: str | Path, what: str = "file") -> list[str]:
    """Lines of a UTF-8 text file without their line ends (a last empty line is no sentence); a regular file only
    (``what`` names it in the error: a FIFO is refused, never waited on)."""
    text = read_text(path, what, limit=None)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln.rstrip("\r") for ln in lines]


def read_pharaoh(path: str | Path) -> list[tuple[set[Link], set[Link]]]:
    """(sure, possible) per line of a Pharaoh file; :class:`PharaohError` names the first bad line."""
    return [parse_pharaoh(ln, f"{Path(path).name} line {k + 1}: ") for k, ln in enumerate(read_lines(path))]


def check_gold(gold: tuple[set[Link], set[Link]], n_src: int, n_tgt: int, where: str = "") -> None:
    """:class:`PharaohError` when a link points past the sentence's words."""
    for i, j in gold[0] | gold[1]:
        if i >= n_src or j >= n_tgt:
            raise PharaohError(f"{where}link {i}-{j} points past the sentence ({n_src} source, {n_tgt} target words)")


def check_gold_set(gold: list[tuple[set[Link], set[Link]]], where: str) -> None:
    """:class:`PharaohError` when no line holds a sure link: every head would score AER 1.000 against it (recall
    has nothing to find), a ranking that looks like a result and means nothing."""
    if not any(sure for sure, _ in gold):
        raise PharaohError(
            f"{where}: no sure link (i-j) in any of its {len(gold)} lines, so every head would score AER 1.000; "
            "give gold alignments with sure links"
        )


__all__ = [
    "Link",
    "CONVENTIONS",
    "row_words",
    "convention_rows",
    "merge_subwords",
    "attention_to_links",
    "diagonal_links",
    "AERCounter",
    "Scores",
    "aer",
    "AlignmentSample",
    "alignment_table",
    "ranked_heads",
    "format_aer_table",
    "PharaohError",
    "parse_pharaoh",
    "format_pharaoh",
    "read_lines",
    "read_pharaoh",
    "check_gold",
    "check_gold_set",
]
