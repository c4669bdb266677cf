"""Per-head statistics that help find interesting heads."""

from __future__ import annotations

import numpy as np

# name -> (column title, help text); the GUI table and the CLI read this
STAT_COLUMNS = {
    "entropy": ("entropy", "mean row entropy in bits (low = focused)"),
    "distance": ("mean dist.", "mean |query - key| distance weighted by attention"),
    "prev": ("prev. token", "mean mass on the previous token (query i -> key i-1)"),
    "first": ("first token", "mean mass on key position 0 (CLS/BOS sink)"),
    "special": ("special", "mean mass on special tokens"),
    "diag": ("diagonal", "mean mass on the same position (query i -> key i)"),
    "max": ("max weight", "mean of each row's largest weight"),
}


def head_stats(m: np.ndarray, key_special: np.ndarray | None = None) -> dict[str, float]:
    """Statistics of one head ``[Tq, Tk]``; diagonal and previous-token use aligned positions."""
    m = np.asarray(m, dtype=np.float64)
    tq, tk = m.shape
    rows = m / np.maximum(m.sum(-1, keepdims=True), 1e-12)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.nansum(np.where(rows > 0, rows * np.log2(rows), 0.0), axis=-1)
    qi = np.arange(tq)[:, None]
    kj = np.arange(tk)[None, :]
    # queries that are a suffix of the keys (decoder self-attention with prompt) align at the end
    shift = tk - tq if tk >= tq else 0
    dist = np.abs(qi + shift - kj)
    out = {
        "entropy": float(ent.mean()),
        "distance": float((rows * dist).sum(-1).mean()),
        "prev": float(np.mean([rows[i, i + shift - 1] for i in range(tq) if 0 <= i + shift - 1 < tk])) if tq > 1 or shift else 0.0,
        "first": float(rows[:, 0].mean()),
        "special": float(rows[:, np.asarray(key_special, bool)].sum(-1).mean()) if key_special is not None and np.any(key_special) else 0.0,
        "diag": float(np.mean([rows[i, i + shift] for i in range(tq) if i + shift < tk])),
        "max": float(rows.max(-1).mean()),
    }
    return out


def block_stats(block) -> list[dict]:
    """One row per (layer, head) of a :class:`~attnviz.core.attention.Block`."""
    special = np.asarray(block.key_axis.special, bool)
    out = []
    for layer in range(block.n_layers):
        for h in range(block.heads_in(layer)):
            row = {"layer": layer, "head": h}
            row.update(head_stats(block.head(layer, h), special))
            out.append(row)
    return out
