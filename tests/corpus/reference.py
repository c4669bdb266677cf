"""Corpus statistics recomputed the plain way: one item at a time from `analyze` maps, row by row in numpy.

Deliberately loop-based and independent of attnviz.core.stats.row_stats (the vectorised code under test).
"""

from __future__ import annotations

import math

import numpy as np

STATS = ("entropy", "broad", "distance", "prev", "next", "diag", "first", "special", "special_other", "max")


def item_rows(m: np.ndarray, special: list[bool], causal: bool) -> dict[str, list[float]]:
    """Per-row values of one head ``m [T, T]`` of one unpadded item."""
    n = m.shape[0]
    out = {k: [] for k in STATS}
    for i in range(n):
        r = m[i].astype(np.float64) / m[i].sum()
        ent = -sum(x * math.log2(x) for x in r if x > 0)
        seen = i + 1 if causal else n
        out["entropy"].append(ent)
        if seen >= 2:
            out["broad"].append(ent / math.log2(seen))
        out["distance"].append(sum(r[j] * abs(i - j) for j in range(n)))
        if i >= 1:
            out["prev"].append(r[i - 1])
        if i < n - 1:
            out["next"].append(r[i + 1])
        out["diag"].append(r[i])
        out["first"].append(r[0])
        out["special"].append(sum(r[j] for j in range(n) if special[j]))
        out["special_other"].append(sum(r[j] for j in range(1, n) if special[j]))
        out["max"].append(r.max())
    return out


def corpus_reference(model, texts: list[str], causal: bool) -> tuple[dict, dict]:
    """(means[(layer, head)][stat] over all counted rows, per_item[(layer, head)][stat] -> list of item means)."""
    sums, counts, per_item = {}, {}, {}
    for text in texts:
        r = model.analyze(text=text)
        special = list(r.tokens.special)
        for layer, src in enumerate(r.maps):
            a = src.array()[0]
            for h in range(a.shape[0]):
                rows = item_rows(a[h], special, causal)
                key = (layer, h)
                for s in STATS:
                    sums.setdefault(key, {}).setdefault(s, 0.0)
                    counts.setdefault(key, {}).setdefault(s, 0)
                    sums[key][s] += sum(rows[s])
                    counts[key][s] += len(rows[s])
                    per_item.setdefault(key, {}).setdefault(s, []).append(np.mean(rows[s]) if rows[s] else -np.inf)
    means = {k: {s: sums[k][s] / counts[k][s] if counts[k][s] else math.nan for s in STATS} for k in sums}
    return means, per_item
