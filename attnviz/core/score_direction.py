"""Which end of each corpus score is the interesting one: the one registry the Corpus view and the examples use.

Most scores are interesting when high (mass on the previous token, a sink on the first key, a head's role
score).  Two are not: row **entropy** is low for a focused head, and cross-attention **distance** (keys' mean
distance from the monotone source diagonal) is low for an alignment head.  Listing the highest values of
those shows the least interesting items, so each score carries its direction here, per attention kind
(``self`` / ``cross``), and a ranking asks :func:`rank_order` instead of sorting by ``-value``.

``run.json``'s ``example_ranking`` says how a corpus run chose its top-k examples: ``"direction"`` (by this
registry) or absent / ``"highest"`` (every run written so far: the highest values of every score).

Pure Python + numpy: no Qt, no onnxruntime.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from attnviz import AttnvizError
from attnviz.core.stats import ROW_STATS

KINDS = ("self", "cross")


@dataclass(frozen=True)
class Direction:
    """``high``: the interesting end is the high one.  ``meaning``: what that end says about a head."""

    high: bool
    meaning: str
    # the end a corpus run's examples list when it is not the interesting one, and what those items are
    # (AER: the best heads have the lowest, but the pairs worth reading are the ones a head aligns worst)
    examples: tuple[str, str] | None = None

    @property
    def arrow(self) -> str:
        return "↑" if self.high else "↓"

    @property
    def end(self) -> str:
        return "highest" if self.high else "lowest"

    @property
    def sign(self) -> int:
        """Multiply values by this and the interesting end sorts first in descending order."""
        return 1 if self.high else -1

    def describe(self) -> str:
        return f"{'high' if self.high else 'low'} = {self.meaning}"


def _both(high: bool, meaning: str) -> dict[str, Direction]:
    return {k: Direction(high, meaning) for k in KINDS}


# score -> kind -> direction.  Statistics undefined on a kind (prev / next on cross) keep a direction anyway:
# their values are NaN and rank last whichever way.
DIRECTIONS: dict[str, dict[str, Direction]] = {
    "role_score": _both(True, "a clearer case of the head's role"),
    "entropy": _both(False, "focused on few keys"),
    "broad": _both(True, "spread evenly over the keys it may see"),
    "distance": {
        "self": Direction(True, "looks far from its own position (low = local)"),
        "cross": Direction(False, "close to the monotone source diagonal (an alignment head)"),
    },
    "prev": _both(True, "attends to the previous token"),
    "next": _both(True, "attends to the next token"),
    "diag": {
        "self": Direction(True, "attends to its own position"),
        "cross": Direction(True, "attends to the monotone source diagonal"),
    },
    # rescaled like every row statistic: at a site with an attention sink, of what the sink left (sink_share: whole)
    "first": _both(
        True,
        "a sink on the first key ([CLS]/BOS), of each row rescaled to 1 (at an attention-sink site: of what the "
        "sink left; sink_share is of the whole row)",
    ),
    "sink_share": _both(True, "a sink on the first key ([CLS]/BOS), as a share of the row before rescaling"),
    "special": _both(True, "attends to special tokens"),
    "special_other": _both(True, "attends to special tokens after the first ([SEP], </s>)"),
    "max": _both(True, "one key takes most of the row"),
    "induction": _both(True, "copies what followed an earlier occurrence of the token"),
    # --gold-column: a cross head's word links against gold alignments (self heads have none: NaN)
    "aer": {
        k: Direction(
            False,
            "its word links match the gold alignments (alignment error rate)",
            ("highest", "the pairs it aligns worst"),
        )
        for k in KINDS
    },
    "aer_precision": _both(True, "its word links are gold links"),
    "aer_recall": _both(True, "it finds the sure gold links"),
}
GOLD_SCORES = ("aer", "aer_precision", "aer_recall")  # counted over the corpus; examples for aer only
assert set(ROW_STATS) <= set(DIRECTIONS)  # every corpus row statistic has a direction
# what the position scores' interesting end means over a VLM's vision file alone (corpus/tower.py): each frame (a
# tile, the global image) by itself, its patches in raster order from its top-left one (no [CLS] or BOS)
TOWER_MEANINGS = {
    "first": "a sink on each frame's first patch (its top-left; a vision tower has no [CLS])",
    "prev": "attends to the patch before in raster order",
    "next": "attends to the patch after in raster order",
    "diag": "attends to the query patch itself",
}


def direction(score: str, kind: str = "self", vision_tower: bool = False) -> Direction:
    """The direction of ``score`` on ``kind`` attention (``vision_tower``: over a VLM's vision file alone's
    frames, which says what a position score means there); one message naming the known scores otherwise."""
    per_kind = DIRECTIONS.get(score)
    if per_kind is None:
        raise AttnvizError(f"score {score!r} has no direction; known scores: {', '.join(DIRECTIONS)}")
    if kind not in per_kind:
        raise AttnvizError(f"attention kind {kind!r} is not one of {', '.join(KINDS)}")
    meaning = TOWER_MEANINGS.get(score) if vision_tower and kind == "self" else None
    return dataclasses.replace(per_kind[kind], meaning=meaning) if meaning else per_kind[kind]


def rank_order(values: np.ndarray, score: str, kind: str = "self") -> np.ndarray:
    """Indices of ``values`` from the interesting end to the other (stable for ties; NaN last either way).

    The hook for the corpus fold: its top-k is ``rank_order(v, score, kind)[:k]`` instead of the ``k`` largest.
    """
    v = np.asarray(values, np.float64) * direction(score, kind).sign
    return np.argsort(np.where(np.isnan(v), np.inf, -v), kind="stable")


def examples_end(run: dict, score: str, kind: str) -> str:
    """Which end of ``score`` a corpus run's examples list: "highest" or "lowest" (from ``run.json``)."""
    if str(run.get("example_ranking") or "highest") == "direction":
        d = direction(score, kind)
        return d.examples[0] if d.examples else d.end
    return "highest"
