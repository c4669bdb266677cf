"""Evaluation metrics for the seed tasks: BLEU, alignment error rate from attention, pointing game.

numpy only (no torch) so ``attnviz eval`` can score exported ONNX models without the training extra.

BLEU
    :func:`corpus_bleu` is corpus-level BLEU-4 (Papineni et al. 2002) with uniform weights, one reference per
    segment and the standard brevity penalty, no smoothing, reported on a 0-100 scale as sacrebleu does.
    Tokenisation (:func:`tokenize_13a`) follows sacrebleu's default ``13a`` (mteval-v13a): unescape a few
    HTML entities, split off punctuation and symbols, split ``.``/``,`` unless between digits, split ``-``
    after a digit.  It is case-sensitive.  Scores should agree with ``sacrebleu`` to ~0.01 on plain text.

Alignment from attention
    A decoder cross-attention map has rows = target subword positions and columns = source subword positions.
    :func:`attention_to_links` turns it into word links:

    1. merge subwords: columns of one source word are **summed** (the attention mass a word receives is the mass
       of its pieces; averaging would penalise words that the tokenizer splits), rows of one target word are
       **averaged** (each row is a distribution, so the mean stays a distribution and long words do not
       dominate);
    2. **argmax per target word**: each target word is linked to the source word with the most mass.

    Why argmax and not the intersection heuristic: intersection needs alignments in both directions (two
    models or a second target→source pass); an encoder-decoder gives one direction.  Argmax per target word is
    the usual attention-alignment extraction (Garg et al. 2019; Zenkel et al. 2019) and gives every target word
    exactly one link, which matches this data well (most gold records are 1 Greek word → 1-3 English words).
    A threshold variant (``method="threshold"``) also links every source word whose merged mass exceeds
    ``threshold``; it is there for experiments.

    Which row belongs to which target word: at decoder step ``t`` the query is the *input* token ``y[t-1]`` and
    the step predicts ``y[t]``.  Pass ``query_words`` for the convention you want; the translation evaluation
    uses the *predicted* token (row ``t`` → word of ``y[t]``), which aligns better in practice.

AER
    ``AER = 1 − (|A∩S| + |A∩P|) / (|A| + |S|)`` (Och & Ney 2003) with ``P ⊇ S``; the bible data has sure links
    only, so ``AER = 1 − 2|A∩S| / (|A| + |S|)``.  Counts are summed over the corpus (not averaged per sentence).
    Target words flagged ``skip`` (punctuation that annotators never align) are removed from ``A``.

Pointing game (Zhang et al. 2016)
    For an object word, take the decoder's attention row over the image grid; the hit counts when the centre of
    the peak grid cell lies inside the object's gold box (optionally grown by ``tolerance`` pixels).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

Link = tuple[int, int]  # (source word, target word)

# ---------------------------------------------------------------------------------------------------------
# BLEU

_13A_RULES = [
    (re.compile(r"([\{-\~\[-\` -\&\(-\+\:-\@\/])"), r" \1 "),  # split symbols / punctuation
    (re.compile(r"([^0-9])([\.,])"), r"\1 \2 "),  # tokenize period and comma unless preceded by a digit
    (re.compile(r"([\.,])([^0-9])"), r" \1 \2"),  # tokenize period and comma unless followed by a digit
    (re.compile(r"([0-9])(-)"), r"\1 \2 "),  # tokenize dash when preceded by a digit
]


def tokenize_13a(line: str) -> list[str]:
    """sacrebleu's default ``13a`` tokenisation (mteval-v13a.pl), returned as a token list."""
    line = line.replace("<skipped>", "").replace("-\n", "").replace("\n", " ")
    if "&" in line:
        line = line.replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")
    line = f" {line} "
    for pat, rep in _13A_RULES:
        line = pat.sub(rep, line)
    return line.split()


def _ngrams(tokens: Sequence[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str], max_n: int = 4, tokenize=tokenize_13a) -> dict:
    """Corpus BLEU on a 0-100 scale.

    Returns ``{"bleu", "precisions" (per n, %), "bp", "ratio", "hyp_len", "ref_len"}``.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    match = [0] * max_n
    total = [0] * max_n
    hyp_len = ref_len = 0
    for h, r in zip(hypotheses, references):
        ht, rt = tokenize(h), tokenize(r)
        hyp_len += len(ht)
        ref_len += len(rt)
        for n in range(1, max_n + 1):
            hc, rc = _ngrams(ht, n), _ngrams(rt, n)
            match[n - 1] += sum(min(c, rc[g]) for g, c in hc.items())
            total[n - 1] += max(len(ht) - n + 1, 0)
    precisions = [100.0 * m / t if t else 0.0 for m, t in zip(match, total)]
    if min(match) == 0:
        bleu = 0.0
    else:
        log_p = sum(math.log(m / t) for m, t in zip(match, total)) / max_n
        bp = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / max(hyp_len, 1))
        bleu = 100.0 * bp * math.exp(log_p)
    bp = 1.0 if hyp_len > ref_len else (math.exp(1 - ref_len / hyp_len) if hyp_len else 0.0)
    return {"bleu": bleu, "precisions": precisions, "bp": bp, "ratio": hyp_len / max(ref_len, 1),
            "hyp_len": hyp_len, "ref_len": ref_len}


# ---------------------------------------------------------------------------------------------------------
# attention -> word links, AER


def merge_subwords(attn: np.ndarray, query_words: Sequence[int], key_words: Sequence[int],
                   n_query_words: int | None = None, n_key_words: int | None = None) -> np.ndarray:
    """``[Tq, Tk]`` subword attention -> ``[n_query_words, n_key_words]`` word attention.

    ``query_words[i]`` / ``key_words[j]``: word index of row i / column j, or -1 for positions that belong to
    no word (BOS, EOS, padding) and are dropped.  Rows of a word are averaged, columns summed.
    """
    a = np.asarray(attn, dtype=np.float64)
    qw = np.asarray(query_words, dtype=np.int64)
    kw = np.asarray(key_words, dtype=np.int64)
    if a.shape != (len(qw), len(kw)):
        raise ValueError(f"attention {a.shape} does not match {len(qw)} query and {len(kw)} key word ids")
    nq = n_query_words if n_query_words is not None else int(qw.max(initial=-1)) + 1
    nk = n_key_words if n_key_words is not None else int(kw.max(initial=-1)) + 1
    kmask = kw >= 0
    # sum columns per key word: [Tq, nk]
    cols = np.zeros((len(qw), nk))
    np.add.at(cols.T, kw[kmask], a[:, kmask].T)
    qmask = qw >= 0
    out = np.zeros((nq, nk))
    np.add.at(out, qw[qmask], cols[qmask])
    counts = np.bincount(qw[qmask], minlength=nq).astype(np.float64)
    return out / np.maximum(counts, 1)[:, None]


def attention_to_links(attn: np.ndarray, query_words: Sequence[int], key_words: Sequence[int],
                       n_query_words: int | None = None, n_key_words: int | None = None,
                       skip: Sequence[bool] = (), method: str = "argmax", threshold: float = 0.5) -> set[Link]:
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


class AERCounter:
    """Accumulates ``|A∩S|``, ``|A∩P|``, ``|A|``, ``|S|`` over a corpus."""

    def __init__(self) -> None:
        self.a_s = self.a_p = self.a = self.s = 0

    def add(self, predicted: Iterable[Link], sure: Iterable[Link], possible: Iterable[Link] | None = None) -> None:
        A, S = set(predicted), set(sure)
        P = S | set(possible or ())
        self.a_s += len(A & S)
        self.a_p += len(A & P)
        self.a += len(A)
        self.s += len(S)

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


def aer(predicted: Iterable[Iterable[Link]], sure: Iterable[Iterable[Link]],
        possible: Iterable[Iterable[Link]] | None = None) -> float:
    """Corpus AER over parallel lists of per-sentence link sets."""
    c = AERCounter()
    sure = list(sure)
    poss = list(possible) if possible is not None else [None] * len(sure)
    for a, s, p in zip(predicted, sure, poss):
        c.add(a, s, p)
    return c.aer


def alignment_table(samples: Iterable[dict], method: str = "argmax") -> dict:
    """Per-layer / per-head AER of cross-attention against gold links.

    Each sample: ``{"attn": [L, H, Tq, Tk] array, "query_words", "key_words", "n_tgt", "n_src", "gold": links,
    "skip": per target word}``.  Returns::

        {"heads": [[aer]*H]*L, "layers": [aer of the head-mean of layer l]*L,
         "best_head": {"layer", "head", "aer"}, "best_layer": {"layer", "aer"},
         "average": aer of the mean over all layers and heads, "n_sentences", "n_gold_links"}
    """
    heads: list[list[AERCounter]] | None = None
    layers: list[AERCounter] = []
    avg = AERCounter()
    n = n_gold = 0
    for s in samples:
        att = np.asarray(s["attn"], dtype=np.float64)
        L, H = att.shape[:2]
        if heads is None:
            heads = [[AERCounter() for _ in range(H)] for _ in range(L)]
            layers = [AERCounter() for _ in range(L)]
        kw = dict(n_query_words=s["n_tgt"], n_key_words=s["n_src"], skip=s.get("skip", ()), method=method)
        gold = set(s["gold"])
        for l in range(L):
            for h in range(H):
                heads[l][h].add(attention_to_links(att[l, h], s["query_words"], s["key_words"], **kw), gold)
            layers[l].add(attention_to_links(att[l].mean(0), s["query_words"], s["key_words"], **kw), gold)
        avg.add(attention_to_links(att.mean((0, 1)), s["query_words"], s["key_words"], **kw), gold)
        n += 1
        n_gold += len(gold)
    if heads is None:
        raise ValueError("alignment_table needs at least one sample")
    head_aer = [[c.aer for c in row] for row in heads]
    bl, bh = min(((l, h) for l in range(len(head_aer)) for h in range(len(head_aer[l]))), key=lambda x: head_aer[x[0]][x[1]])
    layer_aer = [c.aer for c in layers]
    best_layer = int(np.argmin(layer_aer))
    return {"heads": head_aer, "layers": layer_aer, "best_head": {"layer": bl, "head": bh, "aer": head_aer[bl][bh]},
            "best_layer": {"layer": best_layer, "aer": layer_aer[best_layer]}, "average": avg.aer,
            "n_sentences": n, "n_gold_links": n_gold}


def format_aer_table(table: dict) -> str:
    """Markdown table: rows = layers, columns = heads + layer mean; best head in bold."""
    heads = table["heads"]
    H = max(len(r) for r in heads)
    lines = ["| layer | " + " | ".join(f"head {h}" for h in range(H)) + " | head mean |",
             "|---" * (H + 2) + "|"]
    bl, bh = table["best_head"]["layer"], table["best_head"]["head"]
    for l, row in enumerate(heads):
        cells = [(f"**{v:.3f}**" if (l, h) == (bl, bh) else f"{v:.3f}") for h, v in enumerate(row)]
        lines.append(f"| {l} | " + " | ".join(cells) + f" | {table['layers'][l]:.3f} |")
    lines.append(f"\nbest head: layer {bl} head {bh}, AER {table['best_head']['aer']:.3f}; "
                 f"mean of all heads and layers: AER {table['average']:.3f} "
                 f"({table['n_sentences']} sentences, {table['n_gold_links']} gold links)")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# pointing game

Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in pixels, x1/y1 exclusive


def peak_cell(grid_attn: np.ndarray) -> tuple[int, int]:
    """(row, col) of the maximum of a ``[rows, cols]`` attention map."""
    g = np.asarray(grid_attn)
    r, c = np.unravel_index(int(np.argmax(g)), g.shape)
    return int(r), int(c)


def pointing_hit(grid_attn: np.ndarray, box: Box, image_size: tuple[int, int], tolerance: float = 0.0) -> bool:
    """True when the centre of the peak cell of ``grid_attn`` ([rows, cols] over an image of
    ``image_size = (H, W)``) lies inside ``box`` grown by ``tolerance`` pixels."""
    g = np.asarray(grid_attn)
    rows, cols = g.shape
    r, c = peak_cell(g)
    H, W = image_size
    cy, cx = (r + 0.5) * H / rows, (c + 0.5) * W / cols
    x0, y0, x1, y1 = box
    return (x0 - tolerance) <= cx < (x1 + tolerance) and (y0 - tolerance) <= cy < (y1 + tolerance)


def pointing_table(samples: Iterable[dict], image_size: tuple[int, int], grid: tuple[int, int],
                   tolerance: float = 0.0) -> dict:
    """Pointing-game accuracy per layer / head / layer mean.

    Each sample: ``{"attn": [L, H, Tq, rows*cols] cross-attention over image patches (patch keys only),
    "targets": [(query_row, box), ...]}`` (one entry per object word, ``query_row`` = decoder position whose
    attention is tested).  Returns ``{"heads": [[acc]*H]*L, "layers": [acc of head mean]*L, "best_head",
    "best_layer", "average", "n_words"}`` with accuracies in [0, 1].
    """
    rows, cols = grid
    hits_h = hits_l = None
    hits_avg = 0
    n = 0
    for s in samples:
        att = np.asarray(s["attn"], dtype=np.float64)
        L, H = att.shape[:2]
        if hits_h is None:
            hits_h = np.zeros((L, H))
            hits_l = np.zeros(L)
        lmean = att.mean(1)  # [L, Tq, K]
        amean = lmean.mean(0)  # [Tq, K]
        for q, box in s["targets"]:
            for l in range(L):
                for h in range(H):
                    hits_h[l, h] += pointing_hit(att[l, h, q].reshape(rows, cols), box, image_size, tolerance)
                hits_l[l] += pointing_hit(lmean[l, q].reshape(rows, cols), box, image_size, tolerance)
            hits_avg += pointing_hit(amean[q].reshape(rows, cols), box, image_size, tolerance)
            n += 1
    if hits_h is None or n == 0:
        raise ValueError("pointing_table needs at least one object word")
    acc_h = hits_h / n
    acc_l = hits_l / n
    bl, bh = np.unravel_index(int(np.argmax(acc_h)), acc_h.shape)
    best_layer = int(np.argmax(acc_l))
    return {"heads": acc_h.tolist(), "layers": acc_l.tolist(),
            "best_head": {"layer": int(bl), "head": int(bh), "accuracy": float(acc_h[bl, bh])},
            "best_layer": {"layer": best_layer, "accuracy": float(acc_l[best_layer])},
            "average": hits_avg / n, "n_words": n}


def exact_match(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Fraction of hypotheses equal to their reference after whitespace normalisation."""
    if not references:
        return 0.0
    return sum(" ".join(h.split()) == " ".join(r.split()) for h, r in zip(hypotheses, references)) / len(references)
