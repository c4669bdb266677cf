"""A dual encoder's scores (CLIP, SigLIP whole): each batch row's image against its text, as the model defines it.

A zero-shot run feeds one image against N candidate texts (the image repeated once per text, so row i is the image
and text i); the graph's ``logits_per_image`` is ``[images, texts]``.  CLIP's score of text i is the softmax over
the texts of image i's logits (the texts compete: the scores of one image sum to 1); SigLIP's is the sigmoid of
the pair's own logit (each text judged alone, ``logit_bias`` in the graph).  Kept in ``result.info`` under
:data:`TEXT_SCORES_KEY` (plain JSON, so an .npz keeps it) and said by extract, open and the window alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TEXT_SCORES_KEY = "text_scores"
# what marks a run's notes about the scores and the texts' padding (printed by extract and figure: run_notes.py)
SCORE_NOTE_MARKS = ("no score", "zero-shot pipeline pads", "texts were padded with id 0", "padding is attended")


def score_notes(notes: object) -> list[str]:
    """The notes of a run (``info["notes"]``) about a dual encoder's scores and its texts' padding."""
    if not isinstance(notes, list):
        return []
    return [n for n in notes if isinstance(n, str) and any(m in n for m in SCORE_NOTE_MARKS)]


@dataclass(frozen=True)
class ScoreRule:
    """How a family turns ``logits_per_image`` into a text's score."""

    name: str  # "softmax" | "sigmoid"
    words: str  # what the score is, for the reader

    def scores(self, logits_per_image: np.ndarray) -> list[float]:
        """Row i's score: image i against text i, from the ``[images, texts]`` logits (a square batch)."""
        z = np.asarray(logits_per_image, np.float64)
        n = min(z.shape)
        if self.name == "softmax":
            p = np.exp(z - z.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            return [float(p[i, i]) for i in range(n)]
        return [float(1.0 / (1.0 + np.exp(-z[i, i]))) for i in range(n)]


# the family's rule by name (config.json model_type, or what the graph shows: SigLIP's attention-pooling head)
RULES = {
    "softmax": ScoreRule("softmax", "CLIP's softmax over the texts of logits_per_image, summing to 1"),
    "sigmoid": ScoreRule("sigmoid", "SigLIP's sigmoid of each pair's logits_per_image, each text on its own"),
}


@dataclass(frozen=True)
class TextScores:
    """Each batch row's text and its score, the rule that made them and the graph output they came from."""

    texts: list[str]
    scores: list[float]
    rule: str  # a key of RULES
    output: str  # the graph output read (logits_per_image)

    def to_dict(self) -> dict:
        return {"texts": list(self.texts), "scores": list(self.scores), "rule": self.rule, "output": self.output}

    @classmethod
    def from_info(cls, info: dict | None) -> TextScores | None:
        """The scores a result's info holds (None: none, or a value of another shape)."""
        d = (info or {}).get(TEXT_SCORES_KEY)
        if not isinstance(d, dict):
            return None
        texts, scores = d.get("texts"), d.get("scores")
        if not isinstance(texts, list) or not isinstance(scores, list) or len(texts) != len(scores):
            return None
        if d.get("rule") not in RULES or not all(isinstance(s, (int, float)) for s in scores):
            return None
        return cls([str(t) for t in texts], [float(s) for s in scores], str(d["rule"]), str(d.get("output", "")))

    @property
    def words(self) -> str:
        return RULES[self.rule].words

    def lines(self, shown: int | None = None) -> list[str]:
        """One line a text, in row order: ``text 0  0.873  a photo of a cat`` (``shown``: marked as the row the
        views draw)."""
        return [
            f"text {i}  {s:.3f}  {t}" + ("  ◀ shown" if shown == i and len(self.texts) > 1 else "")
            for i, (t, s) in enumerate(zip(self.texts, self.scores))
        ]
