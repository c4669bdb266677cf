"""A role per head from its corpus means: the role whose score is highest, or "mixed" when none is clear.

Scores are all attention masses or normalised entropies in [0, 1], so they compare with one threshold.
"""

from __future__ import annotations

import math

import numpy as np

MIN_ROLE_SCORE = 0.4

# role -> score from a head's mean statistics (registry; the GUI colours follow this order)
ROLES = {
    "positional": lambda m: max(m["prev"], m["next"], m["diag"]),
    "sink": lambda m: m["first"],
    "special": lambda m: m["special_other"],
    "broad": lambda m: m["broad"],
    "induction": lambda m: m.get("induction", math.nan),
}
ROLE_NAMES = (*ROLES, "mixed")


def role_of(means: dict[str, float]) -> tuple[str, float]:
    scores = {r: float(f(means)) for r, f in ROLES.items()}
    scores = {r: s for r, s in scores.items() if np.isfinite(s)}
    if not scores:
        return "mixed", math.nan
    best = max(scores, key=lambda r: (scores[r], -list(ROLES).index(r)))
    return (best if scores[best] >= MIN_ROLE_SCORE else "mixed"), scores[best]


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

    spec = BatchSpec(-1, list(range(n)), ids.tolist(), np.zeros_like(ids).tolist(), np.zeros(ids.shape, bool).tolist())
    feeds, _, _ = text_feeds(model, spec)
    r = model.run(feeds, mode="dense")
    q = np.arange(half, 2 * half)
    out = np.zeros(sum(g.heads for g in groups))
    for g in groups:
        p = r.maps[g.site].array()
        out[g.offset : g.offset + g.heads] = p[:, :, q, q - half + 1].mean((0, 2))
    return out
