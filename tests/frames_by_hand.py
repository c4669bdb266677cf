"""A tower's frames by hand: laid out block-diagonally, and their per-frame head statistics (tests of core/frames.py,
core.stats.frames_head_stats and the Head stats tab)."""

from __future__ import annotations

import numpy as np


def per_frame_first_prev(head: np.ndarray, sizes: list[int]) -> tuple[float, float]:
    """By hand, from a laid-out head ``[T, T]`` whose frames of ``sizes`` patches lie on its diagonal from key 0
    (padding rows after them): the mean mass on each frame's first patch over all T rows, and on the patch before
    within the frame over the rows that have one (T less one row a frame)."""
    rows = head.astype(np.float64) / np.maximum(head.astype(np.float64).sum(-1, keepdims=True), 1e-12)
    first = prev = 0.0
    o = 0
    for p in sizes:
        first += rows[o : o + p, o].sum()
        prev += sum(rows[o + i, o + i - 1] for i in range(1, p))
        o += p
    return first / len(head), prev / (len(head) - len(sizes))


def per_frame_sink_share(head: np.ndarray, sizes: list[int]) -> float:
    """By hand, as :func:`per_frame_first_prev`'s first but of the rows as they are (not rescaled): the mean weight
    on each frame's first patch over all T rows (a corpus's sink_share over a tower's frames)."""
    rows = head.astype(np.float64)
    o, first = 0, 0.0
    for p in sizes:
        first += rows[o : o + p, o].sum()
        o += p
    return first / len(head)


def block_diagonal_by_hand(frames: list[np.ndarray], per_row: list[int], side: int) -> np.ndarray:
    """The dense ``[rows, H, side, side]`` of ``frames`` (``[H, P, P]`` each, ``per_row[b]`` of them in row b): each
    row's frames on the diagonal one after another, zeros elsewhere."""
    out = np.zeros((len(per_row), frames[0].shape[0], side, side), np.float32)
    k = 0
    for b, n in enumerate(per_row):
        at = 0
        for _ in range(n):
            p = frames[k].shape[-1]
            out[b, :, at : at + p, at : at + p] = frames[k]
            at += p
            k += 1
    return out
