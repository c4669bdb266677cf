"""Corpus row statistics from per-row sums computed elsewhere (inside onnxruntime: runtime/statgraph.py).

:func:`attnviz.core.stats.row_stats` needs the whole map ``[B, H, T, T]``; every statistic it returns but
entropy is linear in the masked row, and entropy follows from ``sum p log p`` and the row sum.  So the maps can be
reduced where they are made to the ``[B, H, T]`` sums named in :data:`LINEAR`, and :func:`stats_from_sums` finishes
here with the same arithmetic (float32, as ``row_stats``) on arrays ``T`` times smaller.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# sums over the keys of each query row of the masked map pm (padded keys zeroed): s = sum pm, plogp = sum pm log pm,
# distance = sum pm |i - j|, max, and the single weights pm[i,i], pm[i,i-1], pm[i,i+1], pm[i,0], then the mass on
# special keys and on special keys after position 0
LINEAR = ("s", "plogp", "distance", "max", "diag", "prev", "next", "first", "special", "special_other")
# per row, the key of the largest weight among: real keys, real special keys, real special keys after position 0
ARGMAX = ("real", "special", "special_other")
_COL_OF = {"special": "special", "special_other": "special_other"}  # every other non-fixed statistic: "real"
_FIXED = {"prev": -1, "next": 1, "diag": 0}
FIXED_KEYS = {**_FIXED, "first": None}  # statistics whose key follows from the row (None: always key 0)


def key_table(stat: str) -> str:
    """The :data:`ARGMAX` table a statistic not in :data:`FIXED_KEYS` takes its key from."""
    return _COL_OF.get(stat, "real")


@dataclass(frozen=True)
class RowSums:
    """One site's per-row sums (:data:`LINEAR`, float32 ``[B, H, T]``) and argmax keys (:data:`ARGMAX`, int)."""

    sums: dict[str, np.ndarray]
    cols: dict[str, np.ndarray]
    log_base: float = 2.0  # of plogp (onnxruntime has only the natural log)

    def key_of(self, stat: str, rows: np.ndarray) -> np.ndarray:
        """The key that goes with each chosen query row ``rows [B, H]`` for ``stat`` (as corpus.reduce._cols)."""
        if stat in _FIXED:
            return rows + _FIXED[stat]
        if stat == "first":
            return np.zeros_like(rows)
        return np.take_along_axis(self.cols[key_table(stat)], rows[..., None], -1)[..., 0]


def stats_from_sums(
    rs: RowSums, lengths: np.ndarray, causal: bool = False
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``(values, valid)`` exactly as :func:`attnviz.core.stats.row_stats` returns them for the same maps."""
    s = np.asarray(rs.sums["s"], np.float32)
    b, _, t = s.shape
    lengths = np.asarray(lengths, np.int64)
    ar = np.arange(t)
    real = ar[None, :] < lengths[:, None]
    inv = 1.0 / np.maximum(s, np.float32(1e-30))
    plogp = np.asarray(rs.sums["plogp"], np.float32)
    if rs.log_base != 2.0:
        plogp = plogp * np.float32(np.log2(rs.log_base))  # log2 x = log_b x · log2 b
    ent = (-plogp * inv + np.log2(np.maximum(s, np.float32(1e-30)))).astype(np.float64)
    seen = np.minimum(ar[None, :] + 1, lengths[:, None]) if causal else np.broadcast_to(lengths[:, None], (b, t))
    with np.errstate(divide="ignore", invalid="ignore"):
        broad = np.where(seen[:, None, :] >= 2, ent / np.log2(np.maximum(seen, 2))[:, None, :], 0.0)
    prev = rs.sums["prev"] * inv
    prev[..., 0] = 0.0  # no previous key (row_stats pads this column with 0)
    nxt = rs.sums["next"] * inv
    nxt[..., -1] = 0.0
    values = {
        "entropy": ent,
        "broad": broad,
        "distance": rs.sums["distance"] * inv,
        "prev": prev,
        "next": nxt,
        "diag": rs.sums["diag"] * inv,
        "first": rs.sums["first"] * inv,
        "special": rs.sums["special"] * inv,
        "special_other": rs.sums["special_other"] * inv,
        "max": rs.sums["max"] * inv,
    }
    valid = {k: real for k in values}
    valid["prev"] = real & (ar[None, :] >= 1)
    valid["next"] = real & (ar[None, :] < lengths[:, None] - 1)
    valid["broad"] = real & (seen >= 2)
    return {k: np.asarray(v).astype(np.float64, copy=False) for k, v in values.items()}, valid
