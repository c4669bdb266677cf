"""A dual encoder's scores (CLIP, SigLIP whole): each batch row's image against its text, as the model defines it.

A zero-shot run scores one image against N candidate texts (row i is the image and text i; the image runs once,
runtime/dual_towers.py lays its run out as the rows); the graph's ``logits_per_image`` is ``[images, texts]``.  CLIP's score of text i is the softmax over
the texts of image i's logits (the texts compete: the scores of one image sum to 1); SigLIP's is the sigmoid of
the pair's own logit (each text judged alone, ``logit_bias`` in the graph).  Retrieval feeds one text against
several images (its softmax over the images: ``logits_per_text``), and several of each every image against every
text (:class:`PairLayout`: which image and text each row holds; the scores a table, each image's softmax over the
texts).  Kept in ``result.info`` under
:data:`TEXT_SCORES_KEY` (plain JSON, so an .npz keeps it) and said by extract, open and the window alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TEXT_SCORES_KEY = "text_scores"
TITLE_CHARS = 40  # a candidate text in a figure's title is cut to this many characters
SHOWN_MARK = "◀ shown"  # the row the views draw
# a pair a line (TextScores._pair_lines, the window's narrow Run column): the columns' header and the shown pair's mark
PAIR_HEADER = "image × text  score"
PAIR_MARK = "◀"
# what marks a run's notes about the scores and the texts' padding (printed by extract and figure: run_notes.py)
SCORE_NOTE_MARKS = ("no score", "zero-shot pipeline pads", "texts were padded with id 0", "padding is attended")


def score_notes(notes: object) -> list[str]:
    """The notes of a run (``info["notes"]``) about a dual encoder's scores and its texts' padding."""
    if not isinstance(notes, list):
        return []
    return [n for n in notes if isinstance(n, str) and any(m in n for m in SCORE_NOTE_MARKS)]


@dataclass(frozen=True)
class PairLayout:
    """Which image and which text each batch row holds (indices into the run's images and texts, in order), and
    what CLIP's softmax runs over: ``"texts"`` (each image's scores over the texts: zero-shot) or ``"images"`` (one
    text's over the images: retrieval)."""

    row_image: list[int]
    row_text: list[int]
    over: str = "texts"

    @classmethod
    def grid(cls, images: int, texts: int) -> PairLayout:
        """Every image against every text, row ``r`` = image ``r // texts``, text ``r % texts`` (one image: the
        texts; one text: the images, its scores over them)."""
        rows = range(images * texts)
        return cls([r // texts for r in rows], [r % texts for r in rows], "images" if texts == 1 < images else "texts")

    @classmethod
    def diagonal(cls, rows: int) -> PairLayout:
        """Raw feeds: row i is image i and text i."""
        return cls(list(range(rows)), list(range(rows)))


@dataclass(frozen=True)
class ScoreRule:
    """How a family turns ``logits_per_image`` into a text's score."""

    name: str  # "softmax" | "sigmoid"
    words: str  # what the score is, for the reader

    def matrix(self, logits_per_image: np.ndarray, layout: PairLayout) -> np.ndarray:
        """``[images, texts]`` scores from the rows' ``[rows, rows]`` logits: image i's row against text j's
        column (the first row holding each), CLIP's softmax over ``layout.over``, SigLIP's sigmoid per pair."""
        z = np.asarray(logits_per_image, np.float64)
        first_image = {i: r for r, i in reversed(list(enumerate(layout.row_image)))}
        first_text = {j: r for r, j in reversed(list(enumerate(layout.row_text)))}
        m = np.array([[z[first_image[i], first_text[j]] for j in sorted(first_text)] for i in sorted(first_image)])
        if self.name == "sigmoid":
            return 1.0 / (1.0 + np.exp(-m))
        axis = 1 if layout.over == "texts" else 0
        p = np.exp(m - m.max(axis=axis, keepdims=True))
        return p / p.sum(axis=axis, keepdims=True)

    def scores(self, logits_per_image: np.ndarray, layout: PairLayout | None = None) -> list[float]:
        """Row i's score: its image against its text (``layout``: row i is image i and text i, a square batch)."""
        z = np.asarray(logits_per_image)
        layout = layout or PairLayout.diagonal(min(z.shape))
        m = self.matrix(z, layout)
        return [float(m[i, j]) for i, j in zip(layout.row_image, layout.row_text)]


# what CLIP's softmax runs over, for the reader: the texts of one image (zero-shot) or the images of one text
SOFTMAX_WORDS = {
    "texts": "CLIP's softmax over the texts of logits_per_image, {each}summing to 1",
    "images": "CLIP's softmax over the images of the text's logits (logits_per_text), summing to 1",
}

# the family's rule by name (config.json model_type, or what the graph shows: SigLIP's attention-pooling head)
RULES = {
    "softmax": ScoreRule("softmax", "CLIP's softmax over the texts of logits_per_image, summing to 1"),
    "sigmoid": ScoreRule("sigmoid", "SigLIP's sigmoid of each pair's logits_per_image, each text on its own"),
}


def _cut_middle(name: str, chars: int) -> str:
    """A file name cut to ``chars`` in its middle: its start and its end (the extension, a version suffix) are what
    tell files apart; one title line cannot wrap inside a name, and a long one ran off both edges of a figure."""
    if len(name) <= chars:
        return name
    tail = (chars - 1) // 2
    return name[: chars - 1 - tail] + "…" + name[len(name) - tail :]


def _names(per_row: list[str]) -> list[str]:
    """The distinct values of a per-row list, in first-seen order (the run's images, or its texts)."""
    return list(dict.fromkeys(per_row))


@dataclass(frozen=True)
class TextScores:
    """Each batch row's text (and image) and its score, the rule that made them and the graph output they came from.

    One image against several texts (``images`` None: every row's image is the one image), several images against
    one text (``over`` "images": CLIP's softmax runs over the images), or several of each: every image against
    every text, row ``r`` = image ``r // texts``, text ``r % texts`` (:meth:`table`)."""

    texts: list[str]
    scores: list[float]
    rule: str  # a key of RULES
    output: str  # the graph output read (logits_per_image, or logits_per_text for one text's images)
    images: list[str] | None = None  # each row's image name where the run had several images
    over: str = "texts"  # what CLIP's softmax runs over: "texts" (each image's) or "images" (one text's)

    def to_dict(self) -> dict:
        d: dict = {"texts": list(self.texts), "scores": list(self.scores), "rule": self.rule, "output": self.output}
        if self.images is not None:  # (a one-image run's entry stays as session 26 wrote it)
            d.update(images=list(self.images), over=self.over)
        return d

    @classmethod
    def from_info(cls, info: dict | None) -> TextScores | None:
        """The scores a result's info holds (None: none, or a value of another shape)."""
        d = (info or {}).get(TEXT_SCORES_KEY)
        if not isinstance(d, dict):
            return None
        texts, scores, images = d.get("texts"), d.get("scores"), d.get("images")
        if not isinstance(texts, list) or not isinstance(scores, list) or len(texts) != len(scores):
            return None
        if d.get("rule") not in RULES or not all(isinstance(s, (int, float)) for s in scores):
            return None
        if images is not None and (not isinstance(images, list) or len(images) != len(texts)):
            return None
        over = "images" if d.get("over") == "images" else "texts"
        return cls(
            [str(t) for t in texts],
            [float(s) for s in scores],
            str(d["rule"]),
            str(d.get("output", "")),
            [str(i) for i in images] if images is not None else None,
            over,
        )

    @property
    def words(self) -> str:
        if self.rule == "softmax":
            each = "each image's " if self.images is not None and len(self.image_names) > 1 else ""
            return SOFTMAX_WORDS[self.over].format(each=each)
        if self.rule == "sigmoid" and self.kind != "text":  # one text's images, or every pair: each pair judged alone
            return "SigLIP's sigmoid of each pair's logits_per_image, each pair on its own"
        return RULES[self.rule].words

    @property
    def image_names(self) -> list[str]:
        return _names(self.images) if self.images is not None else []

    @property
    def text_names(self) -> list[str]:
        return _names(self.texts)

    @property
    def kind(self) -> str:
        """What one row is called: "text" (one image's candidates), "image" (one text's), "pair" (several of each)."""
        n_images, n_texts = len(self.image_names), len(self.text_names)
        if n_images > 1 and n_texts > 1:
            return "pair"
        return "image" if n_images > 1 else "text"

    def row_label(self, row: int) -> str:
        """``text 1 'a dog'``, ``image 1 cat.png``, ``image 1 × text 0`` for batch row ``row``."""
        kind = self.kind
        if kind == "text":
            return f"text {row} ({self.texts[row]!r})"
        assert self.images is not None
        i = self.image_names.index(self.images[row])
        if kind == "image":
            return f"image {i} ({self.images[row]})"
        return f"image {i} ({self.images[row]}) × text {self.text_names.index(self.texts[row])} ({self.texts[row]!r})"

    def row_short(self, row: int, chars: int = 24) -> str:
        """Batch row ``row`` in a few words, for the window's row box: ``image 1 × text 0``, ``“a photo of a cat”``
        (one image's texts: the text, cut to ``chars``), ``cat.png`` (one text's images)."""
        kind = self.kind
        if kind == "text":
            t = self.texts[row]
            return f"“{t if len(t) <= chars else t[: chars - 1].rstrip() + '…'}”"
        assert self.images is not None
        if kind == "image":
            return _cut_middle(self.images[row], chars)
        i, j = self.image_names.index(self.images[row]), self.text_names.index(self.texts[row])
        return f"image {i} × text {j}"

    def title_parts(self, row: int, chars: int = TITLE_CHARS) -> list[str]:
        """Batch row ``row`` for a figure's title, in parts it may wrap between: ``image 1 cat.png``, ``text 0 “a
        cat”`` (a long text cut to ``chars`` at its end, a long image name in its middle), ``score 0.873``."""
        parts = []
        if self.kind != "text":
            assert self.images is not None
            parts.append(f"image {self.image_names.index(self.images[row])} {_cut_middle(self.images[row], chars)}")
        if self.kind != "image":
            t = self.texts[row]
            t = t if len(t) <= chars else t[: chars - 1].rstrip() + "…"
            parts.append(f"text {self.text_names.index(self.texts[row])} “{t}”")
        return parts + [f"score {self.scores[row]:.3f}"]

    def table(self) -> list[list[float]]:
        """``[images][texts]`` of the scores (one image: one row)."""
        if self.images is None:
            return [list(self.scores)]
        imgs, txts = self.image_names, self.text_names
        out = [[float("nan")] * len(txts) for _ in imgs]
        for im, t, s in zip(self.images, self.texts, self.scores):
            out[imgs.index(im)][txts.index(t)] = s
        return out

    def lines(self, shown: int | None = None, table: bool = True) -> list[str]:
        """One line a row, in row order: ``text 0  0.873  a photo of a cat`` (``image 0  0.873  cat.png`` for one
        text's images), or several of each: the table, an image a line, a text a column (``table`` False: a pair a
        line, for a column too narrow for a table), then what each image and text is (``shown``: marked as the
        row the views draw)."""
        kind = self.kind
        if kind == "pair":
            return self._table_lines(shown) if table else self._pair_lines(shown)
        names = self.texts if kind == "text" else (self.images or [])
        return [
            f"{kind} {i}  {s:.3f}  {t}" + (f"  {SHOWN_MARK}" if shown == i and len(self.texts) > 1 else "")
            for i, (t, s) in enumerate(zip(names, self.scores))
        ]

    def _pair_lines(self, shown: int | None) -> list[str]:
        """A pair a line, in row order, under a header naming the columns (``image × text  score``, then ``0 × 1
        0.127``), the shown pair marked ``◀``; then each image's and text's name.  Short lines for the window's
        narrow Run column: "image 0 × text 1  0.127  ◀ shown" wrapped there, the mark alone on a second line."""
        imgs, txts = self.image_names, self.text_names
        assert self.images is not None
        rows = [PAIR_HEADER] + [
            f"{imgs.index(im)} × {txts.index(t)}  {s:.3f}" + (f" {PAIR_MARK}" if shown == r else "")
            for r, (im, t, s) in enumerate(zip(self.images, self.texts, self.scores))
        ]
        return rows + [f"image {i}: {n}" for i, n in enumerate(imgs)] + [f"text {j}: {t}" for j, t in enumerate(txts)]

    def _table_lines(self, shown: int | None) -> list[str]:
        """Images down, texts across, then what each text is; the shown row's cell in brackets."""
        imgs, txts = self.image_names, self.text_names
        assert self.images is not None
        mark = None
        if shown is not None and 0 <= shown < len(self.texts):
            mark = (imgs.index(self.images[shown]), txts.index(self.texts[shown]))
        width = max(len(f"image {len(imgs) - 1}"), 7)
        head = " " * width + "".join(f"  {'text ' + str(j):>8}" for j in range(len(txts)))
        rows = [head]
        for i, row in enumerate(self.table()):
            cells = "".join(
                f"  {('[' + format(v, '.3f') + ']') if mark == (i, j) else format(v, '.3f'):>8}"
                for j, v in enumerate(row)
            )
            rows.append(f"{'image ' + str(i):<{width}}{cells}  {imgs[i]}")
        return rows + [f"text {j}: {t}" for j, t in enumerate(txts)]
