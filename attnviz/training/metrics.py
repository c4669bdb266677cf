"""Evaluation metrics for the seed tasks: BLEU, alignment error rate from attention, pointing game.

numpy only (no torch) so ``attnviz eval`` can score exported ONNX models without the training extra.

BLEU
    :func:`corpus_bleu` is corpus-level BLEU-4 (Papineni et al. 2002) with uniform weights, one reference per
    segment and the standard brevity penalty, no smoothing, reported on a 0-100 scale as sacrebleu does.
    Tokenisation (:func:`tokenize_13a`) follows sacrebleu's default ``13a`` (mteval-v13a): unescape a few
    HTML entities, split off punctuation and symbols, split ``.``/``,`` unless between digits, split ``-``
    after a digit.  It is case-sensitive.  Scores should agree with ``sacrebleu`` to ~0.01 on plain text.

Alignment from attention, AER
    :mod:`attnviz.core.align` (numpy, shared with ``attnviz align`` and the GUI); re-exported here.

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

from attnviz.core.align import (  # noqa: F401  (re-exported: the tasks score alignment through this module)
    AERCounter,
    Link,
    aer,
    alignment_table,
    attention_to_links,
    diagonal_links,
    format_aer_table,
    merge_subwords,
)

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
    return {
        "bleu": bleu,
        "precisions": precisions,
        "bp": bp,
        "ratio": hyp_len / max(ref_len, 1),
        "hyp_len": hyp_len,
        "ref_len": ref_len,
    }


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


def pointing_table(
    samples: Iterable[dict], image_size: tuple[int, int], grid: tuple[int, int], tolerance: float = 0.0
) -> dict:
    """Pointing-game accuracy per layer / head / layer mean.

    Each sample: ``{"attn": [L, H, Tq, rows*cols] cross-attention over image patches (patch keys only),
    "targets": [(query_row, box), ...]}`` (one entry per object word, ``query_row`` = decoder position whose
    attention is tested).  Returns ``{"heads": [[acc]*H]*L, "layers": [acc of head mean]*L, "best_head",
    "best_layer", "average", "n_words"}`` with accuracies in [0, 1].
    """
    rows, cols = grid
    hits_h: np.ndarray | None = None  # [L, H], sized by the first sample
    hits_l: np.ndarray | None = None  # [L]
    hits_avg = 0
    n = 0
    for s in samples:
        att = np.asarray(s["attn"], dtype=np.float64)
        L, H = att.shape[:2]
        if hits_h is None or hits_l is None:
            hits_h, hits_l = np.zeros((L, H)), np.zeros(L)
        lmean = att.mean(1)  # [L, Tq, K]
        amean = lmean.mean(0)  # [Tq, K]
        for q, box in s["targets"]:
            for l in range(L):
                for h in range(H):
                    hits_h[l, h] += pointing_hit(att[l, h, q].reshape(rows, cols), box, image_size, tolerance)
                hits_l[l] += pointing_hit(lmean[l, q].reshape(rows, cols), box, image_size, tolerance)
            hits_avg += pointing_hit(amean[q].reshape(rows, cols), box, image_size, tolerance)
            n += 1
    if hits_h is None or hits_l is None or n == 0:
        raise ValueError("pointing_table needs at least one object word")
    acc_h = hits_h / n
    acc_l = hits_l / n
    bl, bh = np.unravel_index(int(np.argmax(acc_h)), acc_h.shape)
    best_layer = int(np.argmax(acc_l))
    return {
        "heads": acc_h.tolist(),
        "layers": acc_l.tolist(),
        "best_head": {"layer": int(bl), "head": int(bh), "accuracy": float(acc_h[bl, bh])},
        "best_layer": {"layer": best_layer, "accuracy": float(acc_l[best_layer])},
        "average": hits_avg / n,
        "n_words": n,
    }


def pointing_baselines(
    samples: Iterable[dict], image_size: tuple[int, int], grid: tuple[int, int], tolerance: float = 0.0
) -> dict:
    """Expected pointing accuracy of two attention-free pointers over the same words as :func:`pointing_table`.

    ``either_object``: knows where the scene's objects are but not which one the word names; points at the
    grid cell holding the centre of one of them, chosen uniformly.  ``random_cell``: a uniformly random cell.
    """
    rows, cols = grid
    H, W = image_size
    either = random_cell = 0.0
    n = 0

    def cell_of(box: Box) -> np.ndarray:
        g = np.zeros((rows, cols))
        cy, cx = (box[1] + box[3]) / 2, (box[0] + box[2]) / 2
        g[min(rows - 1, int(cy * rows / H)), min(cols - 1, int(cx * cols / W))] = 1.0
        return g

    for s in samples:
        boxes = list(dict.fromkeys(tuple(b) for _, b in s["targets"]))  # the scene's objects, in order
        for _, box in s["targets"]:
            either += float(np.mean([pointing_hit(cell_of(b), box, image_size, tolerance) for b in boxes]))
            hits = 0
            for r in range(rows):
                for c in range(cols):
                    g = np.zeros((rows, cols))
                    g[r, c] = 1.0
                    hits += pointing_hit(g, box, image_size, tolerance)
            random_cell += hits / (rows * cols)
            n += 1
    if n == 0:
        raise ValueError("pointing_baselines needs at least one object word")
    return {"either_object": either / n, "random_cell": random_cell / n, "n_words": n}


def exact_match(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Fraction of hypotheses equal to their reference after whitespace normalisation."""
    if not references:
        return 0.0
    return sum(" ".join(h.split()) == " ".join(r.split()) for h, r in zip(hypotheses, references)) / len(references)
