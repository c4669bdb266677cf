"""Two models' attention head by head: how far apart are the same head's rows?

For one site (same stack, kind and layer in both models) and one head, given the two maps ``[B, H, Q, K]`` on the
same input:

- **Jensen–Shannon divergence** of the two rows, in bits (log base 2, so 0 ≤ JS ≤ 1), averaged over the real query
  rows (padding rows left out).  Symmetric and finite where a KL divergence would not be (a key one model ignores
  entirely);
- the **largest absolute weight difference** over those rows and every key;
- **top-1 agreement**: the share of those rows whose most-attended key is the same key in both models.

And the models' outputs: the largest absolute difference of each output both have, and for logits (a classifier's
or a language model's) the mean KL divergence of model B's output distribution from model A's, in bits.

numpy only: the CLI (``attnviz compare``), a corpus run and the window compute the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LOG2 = np.log(2.0)
# heads.parquet's measure columns (after stack, kind, layer, head) and their pyarrow types, in both forms
MEASURES = (("js_divergence", "float64"), ("max_abs_diff", "float64"), ("top1_agreement", "float64"))


def _xlogy(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x · log y with 0 · log 0 = 0 (a key neither model attends to adds nothing)."""
    out = np.zeros(np.broadcast_shapes(x.shape, y.shape), np.float64)
    np.multiply(x, np.log(y, where=x > 0, out=np.zeros_like(out)), out=out, where=x > 0)
    return out


def js_bits(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Row-wise Jensen–Shannon divergence in bits over the last axis (rows renormalised first, so rounding in
    an export's softmax does not count as divergence)."""
    p = np.asarray(p, np.float64)
    q = np.asarray(q, np.float64)
    p = np.clip(p, 0.0, None)
    q = np.clip(q, 0.0, None)
    p = p / np.maximum(p.sum(-1, keepdims=True), 1e-300)
    q = q / np.maximum(q.sum(-1, keepdims=True), 1e-300)
    m = 0.5 * (p + q)
    js = 0.5 * (_xlogy(p, p) - _xlogy(p, m)).sum(-1) + 0.5 * (_xlogy(q, q) - _xlogy(q, m)).sum(-1)
    return np.clip(js / LOG2, 0.0, 1.0)


@dataclass(frozen=True)
class HeadDiff:
    """Per head of one site (arrays of length H): the three measures, and how many rows they cover."""

    js_divergence: np.ndarray
    max_abs_diff: np.ndarray
    top1_agreement: np.ndarray
    rows: int


def head_differences(a: np.ndarray, b: np.ndarray, real_rows: np.ndarray | None = None) -> HeadDiff:
    """``a``, ``b``: ``[B, H, Q, K]`` maps of one site; ``real_rows``: ``[B, Q]`` bool, the query rows that are
    real tokens (None: all).  Each measure is over the real rows of every batch row, per head."""
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    if a.shape != b.shape:
        raise ValueError(f"maps of different shapes {a.shape} and {b.shape}")
    n_b, n_h, n_q, _ = a.shape
    keep = np.ones((n_b, n_q), bool) if real_rows is None else np.asarray(real_rows, bool)
    if keep.shape != (n_b, n_q):
        raise ValueError(f"real_rows has shape {keep.shape}, the maps have {n_b} rows of {n_q} queries")
    rows = int(keep.sum())
    if rows == 0:
        return HeadDiff(np.zeros(n_h), np.zeros(n_h), np.zeros(n_h), 0)
    got = batch_head_sums(a, b, keep)
    return HeadDiff(got.js_sum.sum(0) / rows, got.max_abs_diff.max(0), got.agree.sum(0) / rows, rows)


@dataclass(frozen=True)
class OutputDiff:
    """One output both models have: the largest absolute difference, and for logits the mean KL(A ‖ B) of the
    softmax over the last axis, in bits (None for other outputs)."""

    name: str
    max_abs_diff: float
    kl_bits: float | None


def log_softmax(a: np.ndarray) -> np.ndarray:
    """log softmax over the last axis, in float64."""
    a = np.asarray(a, np.float64)
    a = a - a.max(-1, keepdims=True)
    return a - np.log(np.exp(a).sum(-1, keepdims=True))


def output_difference(
    name: str, a: np.ndarray, b: np.ndarray, real_rows: np.ndarray | None = None, log_a: np.ndarray | None = None
) -> OutputDiff:
    """``real_rows`` ([B, T] bool) restricts a per-token output ([B, T, ...]) to real tokens.  ``log_a``: A's
    :func:`log_softmax` over those rows, when many B are measured against one A (head ablation)."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    if real_rows is not None and a.ndim >= 3 and a.shape[:2] == np.shape(real_rows):
        a, b = a[np.asarray(real_rows, bool)], b[np.asarray(real_rows, bool)]
    diff = float(np.abs(a - b).max()) if a.size else 0.0
    kl = None
    if is_logits(name) and a.size and a.shape[-1] > 1:
        la = log_softmax(a) if log_a is None else log_a
        lb = log_softmax(b)
        kl = float((np.exp(la) * (la - lb)).sum(-1).mean() / LOG2)
    return OutputDiff(name, diff, kl)


def is_logits(name: str) -> bool:
    """An output whose last axis is a distribution's logits (classifiers, language models), by its name."""
    return "logit" in name.lower()


@dataclass(frozen=True)
class BatchHeadSums:
    """One site's measures over a padded batch, per item and head (arrays ``[B, H]``), as sums a corpus folds:
    the JS divergence summed over real query rows (bits), the rows whose most-attended key agrees, and the
    largest |A − B| over real rows."""

    js_sum: np.ndarray
    agree: np.ndarray
    max_abs_diff: np.ndarray


# d = (p − q)/(p + q) is kept within 1 − 2⁻²⁴ of ±1: a key that only one model attends to (p = 0) then adds
# 0 · log1p(−1 + 2⁻²⁴) = 0, and where p/(p + q) < 2⁻²⁴ the clip moves the term by at most 2⁻²⁴ (p + q)/e
# (≤ 3·10⁻⁸ bits over a whole row, the keys' weights summing to 1)
_LIM = np.float32(1.0 - 2.0**-24)
_TINY = np.float32(1e-30)  # p + q = 0 (a key masked in both): d = 0, not 0/0


def batch_head_sums(a: np.ndarray, b: np.ndarray, real: np.ndarray) -> BatchHeadSums:
    """``a``, ``b``: ``[B, H, Q, K]`` maps of one site on one batch; ``real``: ``[B, Q]`` bool, the query rows
    that count.  Padded keys weigh 0 in both (masked before the softmax), so they add nothing.

    JS is taken as ½ Σ p·ln(1 + d) + q·ln(1 − d), d = (p − q)/(p + q), in float32 (numpy's log1p is vectorised;
    no masked ufuncs, which cost ~15× an unmasked pass): no difference of entropies and no ratio near 1 under a
    log, so two near-equal rows keep their small divergence to the precision of their difference, and a model
    against itself is exactly 0.  Rows are not renormalised (a softmax row sums to 1 within float32 rounding,
    whose effect on the divergence is of its square)."""
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    if a.shape != b.shape:
        raise ValueError(f"maps of different shapes {a.shape} and {b.shape}")
    n_b, n_h, n_q, _ = a.shape
    real = np.asarray(real, bool)
    # 0 on padded query rows (None: every row is real, as in a batch of equal lengths or one input)
    rows = None if real.all() else real[:, None, :, None].astype(np.float32)
    delta = a - b
    d = a + b
    d += _TINY
    np.divide(delta, d, out=d)
    np.clip(d, -_LIM, _LIM, out=d)
    t = np.log1p(d)
    t *= a
    np.negative(d, out=d)
    np.log1p(d, out=d)
    d *= b
    t += d
    if rows is not None:
        t *= rows
    # reductions over each head's whole [Q, K] block: one long axis (numpy reduces a short last axis row by row,
    # ~50x slower for max over 32 keys)
    js = t.reshape(n_b, n_h, -1).sum(-1, dtype=np.float64) * (0.5 / LOG2)
    np.abs(delta, out=delta)
    if rows is not None:
        delta *= rows
    diff = delta.reshape(n_b, n_h, -1).max(-1, initial=0.0)
    agree = (a.argmax(-1) == b.argmax(-1)) & real[:, None]
    return BatchHeadSums(np.maximum(js, 0.0), agree.sum(-1).astype(np.int64), diff.astype(np.float64))
