"""Per-row statistics of cross-attention (decoder queries over encoder keys), for corpus runs.

Query i and key i are different sequences in a cross map, so "previous" and "next" token have no meaning there
and are never counted.  What does carry meaning is the *monotone diagonal*: the source position a decoder
position would look at if the translation kept the source's word order, d_i = i * (n_k - 1) / (n_q - 1).
"diag" is the mass on key round(d_i) (high = a monotone-alignment head) and "distance" the mean distance of the
attended keys from d_i in source tokens (low = close to monotone).  The other statistics mean what they mean on
self-attention, over the source keys: entropy, "broad" (entropy / log2 of the source length), first key (a
sink on the source's first token), special keys (e.g. the source's </s>), the row's largest weight.
"""

from __future__ import annotations

import numpy as np

from attnviz.core.stats import ROW_STATS

CROSS_STAT_HELP = {
    "diag": "cross: mean mass on the monotone-diagonal source key round(i·(n_src−1)/(n_tgt−1))",
    "distance": "cross: mean distance (source tokens) of the attended keys from the monotone diagonal",
    "prev": "not defined on cross-attention (query and key are different sequences)",
    "next": "not defined on cross-attention (query and key are different sequences)",
}


def monotone_diagonal(q_lengths: np.ndarray, k_lengths: np.ndarray, tq: int) -> np.ndarray:
    """d [B, Tq]: the source position query i maps to under a monotone alignment (float; 0 for a 1-row target)."""
    nq = np.asarray(q_lengths, np.float64)[:, None]
    nk = np.asarray(k_lengths, np.float64)[:, None]
    i = np.arange(tq, dtype=np.float64)[None, :]
    return np.where(nq > 1, i * (nk - 1) / np.maximum(nq - 1, 1), 0.0)


def diagonal_key(q_lengths: np.ndarray, k_lengths: np.ndarray, tq: int) -> np.ndarray:
    """The key column of the monotone diagonal, [B, Tq] int64 (round half up, so ties do not depend on numpy)."""
    return np.floor(monotone_diagonal(q_lengths, k_lengths, tq) + 0.5).astype(np.int64)


def cross_row_stats(
    p: np.ndarray, q_lengths: np.ndarray, k_lengths: np.ndarray, key_special: np.ndarray | None = None
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per-row statistics of right-padded cross-attention ``p [B, H, Tq, Tk]`` (same keys as
    :func:`attnviz.core.stats.row_stats`).  Padded keys are dropped and each row renormalised over the real
    keys; padded query rows never count, nor do "prev" / "next" (undefined here)."""
    p = np.asarray(p, dtype=np.float32)
    b, _, tq, tk = p.shape
    q_lengths = np.asarray(q_lengths, np.int64)
    k_lengths = np.asarray(k_lengths, np.int64)
    kreal = np.arange(tk)[None, :] < k_lengths[:, None]  # [B, Tk]
    qreal = np.arange(tq)[None, :] < q_lengths[:, None]  # [B, Tq]
    pm = p * kreal[:, None, None, :]
    s = pm.sum(-1)
    inv = 1.0 / np.maximum(s, 1e-30)
    plogp = np.einsum("bhij,bhij->bhi", pm, np.log2(pm + np.float32(1e-30)))
    ent = (-plogp * inv + np.log2(np.maximum(s, 1e-30))).astype(np.float64)
    nk = np.broadcast_to(k_lengths[:, None], (b, tq))
    with np.errstate(divide="ignore", invalid="ignore"):
        broad = np.where(nk[:, None, :] >= 2, ent / np.log2(np.maximum(nk, 2))[:, None, :], 0.0)
    sp = np.zeros((b, tk), bool) if key_special is None else np.asarray(key_special, bool)[:, :tk]
    weights = np.stack([sp, sp & (np.arange(tk)[None, :] > 0)], -1).astype(np.float32)  # [B, Tk, 2]
    spm = np.matmul(pm, weights[:, None]) * inv[..., None]  # [B, H, Tq, 2]
    d = monotone_diagonal(q_lengths, k_lengths, tq)  # [B, Tq]
    dist = np.abs(np.arange(tk)[None, None, :] - d[:, :, None]).astype(np.float32)  # [B, Tq, Tk]
    dk = np.clip(diagonal_key(q_lengths, k_lengths, tq), 0, tk - 1)
    diag = np.take_along_axis(pm, np.broadcast_to(dk[:, None, :, None], (*pm.shape[:3], 1)), -1)[..., 0]
    nan = np.full(pm.shape[:3], np.nan)
    values = {
        "entropy": ent,
        "broad": broad,
        "distance": np.einsum("bhij,bij->bhi", pm, dist) * inv,
        "prev": nan,
        "next": nan,
        "diag": diag * inv,
        "first": pm[:, :, :, 0] * inv,
        "special": spm[..., 0],
        "special_other": spm[..., 1],
        "max": pm.max(-1) * inv,
        "sink_share": pm[:, :, :, 0],  # not rescaled (core/stats.py SINK_SHARE_HELP)
    }
    assert set(values) == set(ROW_STATS)  # one registry of names for self and cross rows
    valid = {k: qreal for k in values}
    valid["prev"] = valid["next"] = np.zeros_like(qreal)
    valid["broad"] = qreal & (nk >= 2)
    return {k: np.asarray(v, np.float64) for k, v in values.items()}, valid
