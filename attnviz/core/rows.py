"""Batch rows: each row of a padded batch has its own token axes; one row can be taken out as a result.

A run on a batch keeps every row in its maps (``[B, H, Tq, Tk]``).  ``AttentionResult.tokens`` /
``key_tokens`` describe row 0; the axes of every row travel in ``result.info["rows"]`` (plain lists, so an
extracted ``.npz`` keeps them).  Padded positions are marked special, so "hide special tokens" drops them, and
marked padding (``TokenAxis.pad``, the attention mask's 0s), so the views offer and label only a row's own tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from attnviz.core.attention import (
    ROW_IMAGES_KEY,
    TOKEN_GRIDS_KEY,
    AttentionResult,
    MapSource,
    PooledSource,
    RowSource,
    TokenAxis,
)
from attnviz.core.frames import FramesMap

ROWS_KEY = "rows"
# a beam search's result (``--beams K``): its batch rows are the K finished hypotheses, best first, and this info key
# holds each one's ``{"ids", "generated", "score"}`` (runtime/beam_result.py); the views call its rows "beams"
BEAMS_KEY = "beams"


SCORE_PLACES = 3  # a beam's score (a length-normalised log-probability) to this many decimal places


def score_text(score: float) -> str:
    """A beam's score as every view and command prints it (the CLI's lines, a figure's title, the window): three
    decimals, ``-0.555``; an exact 0 as ``0.000`` (a negative zero is no score below 0); a score that rounds to
    zero but is not, with two significant digits (``-0.00031``, ``-3.1e-07``): "score -0.000" read as a rounding
    slip or a negative zero, and a researcher ranking beams could not tell which beam scored higher."""
    x = float(score)
    if x == 0.0:  # -0.0 too
        return f"{0.0:.{SCORE_PLACES}f}"
    said = f"{x:.{SCORE_PLACES}f}"
    if float(said) != 0.0 or not math.isfinite(x):
        return said
    return f"{x:.2g}"


def row_noun(result: AttentionResult | None) -> str:
    """What the views call one of the result's batch rows: "beam" for a beam search's hypotheses; a dual encoder's
    "text" (one image's candidate texts), "image" (one text's images) or "pair" (every image against every text)."""
    if result is None:
        return "batch row"
    if beam_rows(result) is not None:
        return "beam"
    if scored_rows(result):  # one image's texts, one text's images, or every image × text pair
        from attnviz.core.text_scores import TextScores

        scores = TextScores.from_info(result.info)
        return scores.kind if scores is not None else "batch row"
    return "batch row"


def scored_rows(result: AttentionResult) -> bool:
    """The rows are a dual encoder's scored pairs (several texts, or images, against the other: each row's score in
    ``info["text_scores"]``), not a batch of unrelated inputs."""
    from attnviz.core.text_scores import TextScores

    scores = TextScores.from_info(result.info) if result.batch_size > 1 else None
    if scores is None or len(scores.scores) != result.batch_size:
        return False
    # typed texts or several images (raw feeds' rows, image i with text i, are a batch like any other)
    return scores.images is not None or isinstance((result.info or {}).get("texts"), list)


def beam_rows(result: AttentionResult) -> list[dict] | None:
    """Each batch row's hypothesis where the result is a beam search's, best first (None: it is not)."""
    beams = (result.info or {}).get(BEAMS_KEY)
    if not isinstance(beams, list) or len(beams) != max(1, result.batch_size) or len(beams) < 2:
        return None
    return [b if isinstance(b, dict) else {} for b in beams]


def _axis_dict(ax: TokenAxis | None) -> dict | None:
    if ax is None:
        return None
    d: dict = {"labels": list(ax.labels), "special": list(ax.special) if ax.special else None}
    d |= {"values": list(ax.values)} if ax.values is not None else {}
    return d | ({"pad": list(ax.pad)} if ax.pad is not None else {})  # a padded row: which positions are padding


def _axis_from(d: dict | None) -> TokenAxis | None:
    return None if not d else TokenAxis(list(d["labels"]), d.get("special"), d.get("values"), d.get("pad"))


@dataclass(frozen=True)
class RowAxes:
    """The token axes of one batch row: encoder / only sequence, and the decoder's."""

    tokens: TokenAxis | None
    key_tokens: TokenAxis | None

    def to_dict(self) -> dict:
        return {"tokens": _axis_dict(self.tokens), "key_tokens": _axis_dict(self.key_tokens)}

    @classmethod
    def from_dict(cls, d: dict) -> RowAxes:
        return cls(_axis_from(d.get("tokens")), _axis_from(d.get("key_tokens")))


def set_row_axes(result: AttentionResult, rows: list[RowAxes]) -> None:
    """Record every row's axes; row 0's become ``result.tokens`` / ``key_tokens``."""
    if rows:
        result.tokens, result.key_tokens = rows[0].tokens, rows[0].key_tokens
    if len(rows) > 1:
        result.info[ROWS_KEY] = [r.to_dict() for r in rows]
    else:
        result.info.pop(ROWS_KEY, None)


class RowMap:
    """One batch row of a map source, as a batch of one (no copy until asked)."""

    def __init__(self, src: MapSource, b: int):
        self.src, self.b = src, b
        _, h, tq, tk = src.shape
        self.shape = (1, h, tq, tk)

    def head(self, b: int, h: int) -> np.ndarray:
        if b != 0:
            raise IndexError(f"batch row {b} of a one-row map")
        return self.src.head(self.b, h)

    def heads(self, b: int) -> np.ndarray:
        """``[H, Tq, Tk]``, as its source brings a row's heads (:class:`~attnviz.core.attention.RowSource`: one
        request for an on-demand map kept on a device) or one head at a time."""
        if b != 0:
            raise IndexError(f"batch row {b} of a one-row map")
        if isinstance(self.src, RowSource):
            return self.src.heads(self.b)
        return np.stack([self.src.head(self.b, h) for h in range(self.shape[1])])

    def array(self) -> np.ndarray:
        return self.heads(0)[None]

    def pooled(self, b: int, n_q: int, n_k: int, max_side: int) -> np.ndarray | None:
        """Its source's thumbnails where it pools them (:class:`~attnviz.core.attention.PooledSource`), else None."""
        if b != 0:
            raise IndexError(f"batch row {b} of a one-row map")
        return self.src.pooled(self.b, n_q, n_k, max_side) if isinstance(self.src, PooledSource) else None


class RowsOf:
    """Batch rows of a map source picked by index: row ``b`` is its source's row ``rows[b]`` (a dual encoder's
    tower run once an image or text, each of its rows shown by every pair that holds it: runtime/dual_towers.py),
    asked of the source when wanted, never copied ahead.  A dense map does this itself (``DenseMap.rows``)."""

    def __init__(self, src: MapSource, rows: list[int]):
        self.src, self.rows = src, [int(r) for r in rows]
        _, h, tq, tk = src.shape
        self.shape = (len(self.rows), h, tq, tk)

    def head(self, b: int, h: int) -> np.ndarray:
        return self.src.head(self.rows[b], h)

    def heads(self, b: int) -> np.ndarray:
        """``[H, Tq, Tk]`` of row ``b``, as its source brings a row's heads (or one head at a time)."""
        if isinstance(self.src, RowSource):
            return self.src.heads(self.rows[b])
        return np.stack([self.src.head(self.rows[b], h) for h in range(self.shape[1])])

    def array(self) -> np.ndarray:
        return np.stack([self.heads(b) for b in range(self.shape[0])])

    def pooled(self, b: int, n_q: int, n_k: int, max_side: int) -> np.ndarray | None:
        """Its source's thumbnails of the row where it pools them, else None (the caller pools)."""
        return self.src.pooled(self.rows[b], n_q, n_k, max_side) if isinstance(self.src, PooledSource) else None


def check_row(result: AttentionResult, b: int) -> int:
    n = max(1, result.batch_size)
    if not 0 <= int(b) < n:
        raise IndexError(f"batch row {b} is out of range: this result has rows 0..{n - 1}")
    return int(b)


def pick_row(result: AttentionResult, b: int) -> AttentionResult:
    """The result of batch row ``b`` alone (maps, axes, outputs), e.g. to draw or export that row."""
    b = check_row(result, b)
    tokens, key_tokens = result.row_axes(b)
    outputs = {
        k: (v[b : b + 1] if np.ndim(v) >= 1 and v.shape[0] == result.batch_size else v)
        for k, v in result.outputs.items()
    }
    # (a dual encoder's row images: the row's own is its image)
    info = {k: v for k, v in result.info.items() if k not in (ROWS_KEY, TOKEN_GRIDS_KEY, ROW_IMAGES_KEY)}
    info["batch_row"] = b
    generated = result.generated
    beams = beam_rows(result)
    if beams is not None:  # a beam's row: its own words (the result's are the best hypothesis')
        generated = [str(w) for w in beams[b].get("generated") or []]
        info["generated_ids"] = [int(t) for t in beams[b].get("ids") or []]
        info["beam_score"] = beams[b].get("score")
    return replace(
        result,
        maps=[m.row(b) if isinstance(m, FramesMap) else RowMap(m, b) for m in result.maps],  # a tower's: frames
        tokens=tokens,
        key_tokens=key_tokens,
        token_grid=result.token_grid_of(b),  # where this row's image tokens lie (a VLM's padded batch)
        image=result.image_of(b),  # a dual encoder's several images: this row's
        outputs=outputs,
        generated=generated,
        info=info,
    )
