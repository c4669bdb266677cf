"""A tower run on several frames of one image (Idefics3 / SmolVLM: the processor's tiles, then its global image),
held as the frames' own maps.

The tower runs each frame by itself, so a row's map over all its frames' patches (the keys the view numbers:
frame ``f``'s patch ``i`` at ``f · P + i``, the global image last) is block-diagonal: each frame's ``[H, P, P]``
on the diagonal, zeros off it, and a row with fewer frames than the batch's most has all-zero padding after its
own.  Made dense, that map is the frame count times larger than the frames' maps (SmolVLM's 13 frames of 1,024
patches and 12 heads: 8.5 GB a layer instead of 0.65 GB), so :class:`FramesMap` keeps the frames' maps and lays
one head out (:meth:`FramesMap.head`) or pools the thumbnails (:meth:`FramesMap.pooled`) from them when asked;
what is drawn is the same block-diagonal map a dense one would give.  A function that works on a map row by row
and on zeros gives zeros (a head aggregate, rollout) is block-separable: :meth:`FramesMap.lay_out` applies it
to each diagonal block and lays the blocks out, never the whole map.

Frames of several sizes (one prompt's images each resized to its own size, Qwen2-VL's separate tower runs) are one
:class:`FramesMap` too: their maps one after another in one flat buffer (``blocks`` 1-D, ``sizes`` each frame's
patches), each frame a view of it; every method places frame ``f`` at the keys after its row's earlier frames
(:meth:`FramesMap.spans`), so no reader needs the frames to be of one size.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

MAX_FRAMES = 1024  # a row's frames a file may name (Idefics3 / SmolVLM split an image into at most ~17)


class FramesMap:
    """One site's maps as ``[B, H, Tq, Tk]`` (a :class:`~attnviz.core.attention.MapSource`), held as its frames'
    maps (every row's real frames one after another) and ``per_row`` (each row's count): row ``b``'s frames on the
    diagonal, its keys the sum of its frames' (``side``: more, its padding's after them, where given).

    ``blocks`` is ``[frames, H, P, P]`` where every frame has ``P`` patches (``keys``); frames of several sizes
    (``sizes``: each frame's patches) are one flat float32 buffer, frame after frame, each ``[H, P_f, P_f]``.

    ``rows`` (where given): batch row ``b`` shows the frames of group ``rows[b]``, ``per_row`` then counting each
    group's frames (``groups``) -- a beam search's K rows are one image's tower run, its frames held once and shown
    for every beam, not K copies.  ``per_row`` and ``starts`` as read afterwards are each batch row's."""

    def __init__(
        self,
        blocks: np.ndarray,
        per_row: list[int],
        side: int | None = None,
        sizes: list[int] | None = None,
        rows: list[int] | None = None,
    ):
        # kept as the very array (runtime/finite.py notes what it checked of that object)
        if not (type(blocks) is np.ndarray and blocks.dtype == np.float32):
            blocks = np.asarray(blocks, dtype=np.float32)
        per_row = [int(k) for k in per_row]
        if sizes is None:
            if blocks.ndim != 4 or blocks.shape[-1] != blocks.shape[-2]:
                raise ValueError(f"frames' maps must be [frames, H, P, P], got shape {blocks.shape}")
            n_frames, heads = int(blocks.shape[0]), int(blocks.shape[1])
            self.sizes = [int(blocks.shape[-1])] * n_frames
            self._frames: list[np.ndarray] | np.ndarray = blocks
        else:
            self.sizes = [int(p) for p in sizes]
            cells = sum(p * p for p in self.sizes)
            if blocks.ndim != 1 or not self.sizes or min(self.sizes) < 1 or blocks.size % cells:
                raise ValueError(
                    f"frames of {self.sizes} patches need a flat buffer of heads x {cells} weights, got {blocks.shape}"
                )
            n_frames, heads = len(self.sizes), blocks.size // cells
            self._frames = _views(blocks, heads, self.sizes)
        if not per_row or min(per_row) < 1 or sum(per_row) != n_frames:
            raise ValueError(f"frames per row {per_row} do not add up to the {n_frames} frames' maps")
        starts = np.concatenate([[0], np.cumsum(per_row)[:-1]]).astype(int).tolist()
        self.groups = per_row  # each group's frames (a group a row, unless rows share them)
        self.rows = None if rows is None else [int(g) for g in rows]
        if self.rows is not None:
            if not self.rows or min(self.rows) < 0 or max(self.rows) >= len(per_row):
                raise ValueError(f"rows {self.rows} name groups outside the {len(per_row)} groups of frames")
            per_row, starts = [per_row[g] for g in self.rows], [starts[g] for g in self.rows]
        self.blocks, self.per_row, self.starts = blocks, per_row, starts
        self.uniform = sizes is None
        least = max(self.row_keys(b) for b in range(len(per_row)))
        side = least if side is None else int(side)  # more: one row of a padded batch, its padding kept (row)
        if side < least:
            raise ValueError(f"{side} keys cannot hold a row's {least} frames' patches")
        self.shape = (len(per_row), heads, side, side)

    def shared(self, n: int) -> FramesMap:
        """``n`` batch rows each showing this one-row map's frames (the same arrays, no copy): the rows of a beam
        search, every beam's image the one tower run."""
        if self.shape[0] != 1:
            raise ValueError(f"only a one-row map's frames can be shared by rows, not {self.shape[0]} rows'")
        sizes = None if self.uniform else self.sizes
        return FramesMap(self.blocks, self.groups, self.shape[2], sizes, [0] * int(n))

    @classmethod
    def of(cls, frames: list[np.ndarray], per_row: list[int]) -> FramesMap:
        """From each frame's ``[H, P_f, P_f]``: one ``[frames, H, P, P]`` array where they are of one size, else
        the flat buffer of frames of several sizes (copied once; never laid out)."""
        sizes = [int(f.shape[-1]) for f in frames]
        if len(set(sizes)) == 1:
            return cls(np.stack(frames).astype(np.float32, copy=False), per_row)
        return cls(np.concatenate([np.asarray(f, np.float32).ravel() for f in frames]), per_row, sizes=sizes)

    @property
    def keys(self) -> int:
        """``P``: every frame's patches (frames of one size only: :meth:`spans` names each frame's)."""
        if not self.uniform:
            raise ValueError(f"frames of several sizes ({self.sizes} patches) have no one P; read spans(b)")
        return self.sizes[0]

    def frames(self, b: int) -> np.ndarray | list[np.ndarray]:
        """Row ``b``'s frames' maps, each ``[H, P_f, P_f]`` (an array ``[n_b, H, P, P]`` of frames of one size, a
        list of views of frames of several; no copy)."""
        s = self.starts[b]
        return self._frames[s : s + self.per_row[b]]

    def spans(self, b: int) -> list[tuple[int, int]]:
        """Row ``b``'s frames as ``(first key, patches)``: each frame's keys after its row's earlier frames'."""
        s = self.starts[b]
        sizes = self.sizes[s : s + self.per_row[b]]
        return [(int(o), p) for o, p in zip(np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes)]

    def row_keys(self, b: int) -> int:
        """Row ``b``'s frames' keys (its padding's, in a padded batch, not counted)."""
        s = self.starts[b]
        return sum(self.sizes[s : s + self.per_row[b]])

    def row(self, b: int) -> FramesMap:
        """Row ``b`` alone, as a batch of one (:func:`attnviz.core.rows.pick_row`): its frames' maps (a view) and
        its padding's keys (the row's axes still name them)."""
        s, n, h = self.starts[b], self.per_row[b], self.shape[1]
        if self.uniform:
            return FramesMap(self.blocks[s : s + n], [n], self.shape[2])
        lo = h * sum(p * p for p in self.sizes[:s])
        hi = lo + h * sum(p * p for p in self.sizes[s : s + n])
        return FramesMap(self.blocks[lo:hi], [n], self.shape[2], sizes=self.sizes[s : s + n])

    @property
    def natural(self) -> bool:
        """Whether the keys are the longest row's frames' (else a padded batch's row alone: its padding's keys
        after)."""
        return self.shape[2] == max(self.row_keys(b) for b in range(len(self.per_row)))

    def padding(self, b: int) -> int:
        """Row ``b``'s padding keys after its frames' (a shorter row of a padded batch): their rows are all zero."""
        return self.shape[2] - self.row_keys(b)

    def lay_out(self, b: int, fn: Callable[[list[np.ndarray]], np.ndarray], layers: list[FramesMap]) -> np.ndarray:
        """``[Tq, Tk]``: ``fn`` over several layers' maps of the same frames (``layers``: this one, or a layer range
        of the block), each diagonal block's ``[H, P, P]`` of every layer (a frame's, or the padding's zeros) to
        one ``[P, P]``, laid out on the diagonal, zeros elsewhere: what ``fn`` gives on the whole block-diagonal
        maps, where it is block-separable (see the module)."""
        out = np.zeros(self.shape[2:], np.float32)
        for f, (o, p) in enumerate(self.spans(b)):
            out[o : o + p, o : o + p] = fn([m.frames(b)[f] for m in layers])
        pad = self.padding(b)
        if pad:
            zeros = np.zeros((self.shape[1], pad, pad), np.float32)
            out[-pad:, -pad:] = fn([zeros] * len(layers))
        return out

    def row_sum(
        self, b: int, lo: int, hi: int, fn: Callable[[list[np.ndarray]], np.ndarray], layers: list[FramesMap]
    ) -> np.ndarray:
        """``[Tk]``: the sum of rows ``lo``–``hi - 1`` of :meth:`lay_out` (one row: that row), from the blocks those
        rows lie in alone, each reduced by ``fn`` by itself (``[P, P]``): what Image regions reads of the map, never
        the whole ``[Tq, Tk]``.  The same numbers as summing the laid-out rows (numpy adds them in order, and the
        other frames' rows add zeros)."""
        side, n = self.shape[2], self.row_keys(b)
        lo, hi = max(lo, 0), min(hi, side)
        out = np.zeros(side, np.float32)
        for f, (o, p) in enumerate(self.spans(b)):
            if o + p <= lo or o >= hi:
                continue
            block = fn([m.frames(b)[f] for m in layers])
            out[o : o + p] = block[max(lo - o, 0) : min(hi - o, p)].sum(axis=0)
        if hi > n:  # the padding's rows (a shorter row of a padded batch): what fn makes of its zeros
            zeros = np.zeros((self.shape[1], side - n, side - n), np.float32)
            out[n:] = fn([zeros] * len(layers))[max(lo - n, 0) : hi - n].sum(axis=0)
        return out

    def head_rows(self, b: int, h: int, rows: np.ndarray, n_k: int) -> np.ndarray:
        """``[len(rows), n_k]``: rows ``rows`` (ascending) of :meth:`head` ``(b, h)``, keys ``:n_k``, each row's
        frame's weights at its keys and zeros elsewhere (a padding row all zeros): the very rows of the laid-out
        head, so a row-local filter over them gives what it gives on the whole head, from a band of it."""
        rows = np.asarray(rows, dtype=np.intp)
        out = np.zeros((rows.size, n_k), np.float32)
        for m, (o, p) in zip(self.frames(b), self.spans(b)):
            lo, hi = np.searchsorted(rows, [o, o + p])  # the band's rows in this frame (ascending: one run)
            if lo == hi or o >= n_k:
                continue
            w = min(p, n_k - o)
            out[lo:hi, o : o + w] = m[h, rows[lo:hi] - o, :w]
        return out

    def head(self, b: int, h: int) -> np.ndarray:
        return self.lay_out(b, lambda ms: ms[0][h], [self])

    def heads(self, b: int) -> np.ndarray:
        """``[H, Tq, Tk]``: every head laid out (costly: the frame count times the frames' maps)."""
        return np.stack([self.head(b, h) for h in range(self.shape[1])])

    def array(self) -> np.ndarray:
        """``[B, H, Tq, Tk]`` dense (costly; what a file of the dense layout holds)."""
        return np.stack([self.heads(b) for b in range(self.shape[0])])

    def pooled(self, b: int, n_q: int, n_k: int, max_side: int) -> np.ndarray | None:
        """``[H, <=side, <=side]``: the heads of ``[:n_q, :n_k]`` max-pooled as
        :func:`attnviz.core.view.downsample` pools the dense map (runs of ``ceil(n / max_side)`` from the start, a
        short last run as if padded with zeros), from each frame's map alone: the off-diagonal zeros add nothing
        to a maximum of weights (never negative) that a cell does not get from its own zeros."""
        fq, fk = -(-n_q // max_side), -(-n_k // max_side)
        h = self.shape[1]
        out = np.zeros((h, -(-n_q // fq), -(-n_k // fk)), np.float32)
        for m, (o, p) in zip(self.frames(b), self.spans(b)):
            if o >= n_q or o >= n_k:
                break
            m = m[:, : min(p, n_q - o), : min(p, n_k - o)]
            r0, c0 = o // fq, o // fk
            rows, cols = -(-(o + m.shape[1]) // fq) - r0, -(-(o + m.shape[2]) // fk) - c0
            cell = np.zeros((h, rows * fq, cols * fk), np.float32)  # the block on whole cells, zeros around it
            cell[:, o - r0 * fq : o - r0 * fq + m.shape[1], o - c0 * fk : o - c0 * fk + m.shape[2]] = m
            small = cell.reshape(h, rows, fq, cols, fk).max(axis=(2, 4))
            np.maximum(out[:, r0 : r0 + rows, c0 : c0 + cols], small, out=out[:, r0 : r0 + rows, c0 : c0 + cols])
        return out

    @property
    def nbytes(self) -> int:
        return self.blocks.nbytes


def _views(flat: np.ndarray, heads: int, sizes: list[int]) -> list[np.ndarray]:
    """Each frame's ``[H, P_f, P_f]`` as a view of the flat buffer, frame after frame."""
    out, at = [], 0
    for p in sizes:
        out.append(flat[at : at + heads * p * p].reshape(heads, p, p))
        at += heads * p * p
    return out


def frames_of(maps: list) -> list[FramesMap] | None:
    """``maps`` as frames' maps where every one is (a tower's block), else None."""
    return maps if maps and all(isinstance(m, FramesMap) for m in maps) else None
