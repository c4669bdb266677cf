"""A role per head from its corpus means: positional, sink, special, induction (focused), broad, or mixed;
cross-attention heads: monotone (mass on the monotone source diagonal, an alignment head), sink, special,
broad, or mixed (previous / next token mean nothing across two sequences).

Scores are attention masses or a normalised entropy, all in [0, 1].
"""

from __future__ import annotations

import math

import numpy as np

MIN_FOCUSED = 0.4  # a focused role needs this much of the head's mass on its target
MIN_BROAD = 0.7  # "broad" needs row entropy at least this fraction of uniform's

# focused role -> score from a head's mean statistics (registry); the highest one at MIN_FOCUSED or more wins
FOCUSED = {
    "positional": lambda m: max(m["prev"], m["next"], m["diag"]),
    "sink": lambda m: m["first"],
    "special": lambda m: m["special_other"],
    "induction": lambda m: m.get("induction", math.nan),
}
CROSS_FOCUSED = {
    "monotone": lambda m: m["diag"],
    "sink": lambda m: m["first"],
    "special": lambda m: m["special_other"],
}
FOCUSED_BY_KIND = {"self": FOCUSED, "cross": CROSS_FOCUSED}


def role_of(means: dict[str, float], kind: str = "self") -> tuple[str, float]:
    """Focused roles first (a head spending 40 % of its mass on [CLS] is a sink even if the rest is spread out),
    then "broad" for near-uniform heads, else "mixed" with its best focused score."""
    focused = FOCUSED_BY_KIND[kind]
    scores = {r: float(f(means)) for r, f in focused.items()}
    scores = {r: s for r, s in scores.items() if np.isfinite(s)}
    best = max(scores, key=lambda r: (scores[r], -list(focused).index(r))) if scores else None
    if best is not None and scores[best] >= MIN_FOCUSED:
        return best, scores[best]
    broad = float(means.get("broad", math.nan))
    if np.isfinite(broad) and broad >= MIN_BROAD:
        return "broad", broad
    return "mixed", scores[best] if best is not None else math.nan


def induction_scores(model, groups, n: int = 8, half: int = 16, seed: int = 0) -> np.ndarray | None:
    """Decoders: mean mass from each token of a repeated random sequence onto the token that followed its
    first occurrence (query i -> key i - half + 1, second half only); None for other models."""
    if model.kind != "decoder" or not groups:
        return None
    src, tgt = model.tokenizers
    tok = tgt or src
    size = tok.size if tok is not None else 100
    rng = np.random.default_rng(seed)
    pool = np.array([i for i in range(size) if tok is None or not tok.is_special(i)][:50000])
    base = rng.choice(pool, size=(n, half))
    ids = np.concatenate([base, base], 1)
    from attnviz.corpus.plan import BatchSpec, text_feeds

    spec = BatchSpec(-1, list(range(n)), np.full(n, 2 * half), ids, np.zeros_like(ids), np.zeros(ids.shape, bool))
    feeds, _, _ = text_feeds(model, spec)
    r = model.run(feeds, mode="dense")
    q = np.arange(half, 2 * half)
    out = np.zeros(sum(g.heads for g in groups))
    for g in groups:
        p = r.maps[g.site].array()
        out[g.offset : g.offset + g.heads] = p[:, :, q, q - half + 1].mean((0, 2))
    return out
