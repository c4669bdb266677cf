"""Corpus statistics per item: what a batch hands to the fold, whichever path (maps or the graph) made it.

A corpus partial needs, per item and head, each statistic's sum over the item's counted query rows, how many rows
counted, the item's best row and the key that row looked at.  :class:`ItemStats` holds exactly that (``[B, H, S]``,
S = ``len(ROW_STATS)``); :meth:`ItemStats.from_rows` makes it from ``row_stats``' per-row values (the numpy maps
path), ``runtime/statgraph.py`` inside onnxruntime.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from attnviz.core.stats import ROW_STATS

_COL_OF = {"special": "special", "special_other": "special_other"}  # every other non-fixed statistic: "real"
_FIXED = {"prev": -1, "next": 1, "diag": 0}
FIXED_KEYS = {**_FIXED, "first": None}  # statistics whose key follows from the row (None: always key 0)
ROW_TIE = 1e-6  # relative: rows scoring this close to an item's best row are tied


def key_table(stat: str) -> str:
    """Which per-row argmax a statistic not in :data:`FIXED_KEYS` takes its key from: the largest weight among
    real keys ("real"), real special keys ("special"), or real special keys after position 0 ("special_other")."""
    return _COL_OF.get(stat, "real")


def valid_rows(lengths: np.ndarray, t: int, causal: bool = False) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Which query rows count per statistic ``[B, T]`` (as ``row_stats``' valid masks), and the keys each row may
    see ``[B, T]``: previous-token needs i >= 1, next-token i < n - 1, "broad" a row that sees two keys or more."""
    lengths = np.asarray(lengths, np.int64)
    ar = np.arange(t)
    real = ar[None, :] < lengths[:, None]
    seen = np.minimum(ar[None, :] + 1, lengths[:, None]) if causal else np.broadcast_to(lengths[:, None], real.shape)
    valid = dict.fromkeys(ROW_STATS, real)
    valid["prev"] = real & (ar[None, :] >= 1)
    valid["next"] = real & (ar[None, :] < lengths[:, None] - 1)
    valid["broad"] = real & (seen >= 2)
    return valid, seen


def first_top_row(v: np.ndarray) -> np.ndarray:
    """The first row scoring within ``ROW_TIE`` of the best one, per (item, head) of ``v [B, H, T]``.

    onnxruntime's reductions group a row's additions by where the row lies in the batch, so two equal rows
    (the same token twice) or the same item in another engine's batch differ in the last bit; a plain argmax
    would then pick the example's row by float noise.  No counted row (all -inf): row 0, as ``argmax``."""
    best = v.max(-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        near = v >= best - ROW_TIE * np.maximum(1.0, np.abs(best))
    return near.argmax(-1)


@dataclass(frozen=True)
class ItemStats:
    """One head group's batch, per item ``b``, head ``h`` and statistic ``s`` (in ROW_STATS order):
    ``sums [B, H, S]`` float64 sum of the row values over the counted rows, ``counts [B, S]`` counted rows,
    ``rows [B, H, S]`` the item's best row (at the statistic's interesting end), ``keys [B, H, S]`` the key
    that row looked at."""

    sums: np.ndarray
    counts: np.ndarray
    rows: np.ndarray
    keys: np.ndarray

    @classmethod
    def with_fixed_keys(cls, sums: np.ndarray, counts: np.ndarray, rows: np.ndarray, keys: np.ndarray) -> ItemStats:
        """``keys`` completed for the statistics whose key follows from the row (diag, prev, next, first)."""
        keys = np.array(keys, np.int64)
        for name, off in FIXED_KEYS.items():
            s = ROW_STATS.index(name)
            keys[..., s] = 0 if off is None else rows[..., s] + off
        return cls(sums, np.asarray(counts, np.int64), rows, keys)

    @classmethod
    def from_rows(
        cls,
        values: dict[str, np.ndarray],
        valid: dict[str, np.ndarray],
        key_of: Callable[[str, np.ndarray], np.ndarray],
        tie: bool = False,
        signs: Sequence[int] | None = None,
    ) -> ItemStats:
        """From per-row ``values[name] [B, H, T]`` and ``valid[name] [B, T]`` (``row_stats``); ``key_of(stat,
        rows [B, H]) -> keys [B, H]``.  ``tie``: best rows by :func:`first_top_row`, else the exact argmax.
        ``signs`` (per statistic, ROW_STATS order): the best row is the highest of ``sign · value`` (-1: the
        lowest value, e.g. entropy; :mod:`attnviz.core.score_direction`); None: all +1."""
        v0 = values[ROW_STATS[0]]
        b, h, _ = v0.shape
        S = len(ROW_STATS)
        sums, rows, keys = np.empty((b, h, S)), np.empty((b, h, S), np.int64), np.empty((b, h, S), np.int64)
        counts = np.empty((b, S), np.int64)
        for s, name in enumerate(ROW_STATS):
            ok = valid[name][:, None, :]
            sums[..., s] = np.where(ok, values[name], 0.0).sum(-1)
            counts[:, s] = valid[name].sum(1)
            sign = 1 if signs is None else signs[s]
            masked = np.where(ok, values[name] if sign == 1 else -values[name], -np.inf)
            rows[..., s] = first_top_row(masked) if tie else masked.argmax(-1)
            keys[..., s] = key_of(name, rows[..., s])
        return cls(sums, counts, rows, keys)
