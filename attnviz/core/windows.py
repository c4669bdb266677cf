"""Windowed attention (Swin) placed back on the image's patch grid.

A Swin block attends within windows: its probabilities come as ``[B·nW, H, N, N]`` (``nW`` windows of
``N = window²`` patches per image, windows row-major, patches row-major inside a window), and on every other
block the grid is cyclically rolled by ``-window // 2`` on both axes before it is cut into windows.  Between
stages, patch merging halves the grid (rounding up).  Shown as it comes, one image would pass for a batch of
``B·nW`` inputs of N tokens each: numbers right, axes wrong.

:class:`WindowedMap` shows such a site as what it is on the image: a ``[B, H, T, T]`` map over the stage's
``T = rows·cols`` patches (row-major), where a query's row holds its window's weights at its window's keys
(positions un-rolled back to the image) and 0 elsewhere.  Rows keep summing to 1.  Pairs that a shifted window
holds but that are not neighbours on the image (the wrap-around the roll creates) are masked by the model
(-100 before the softmax, ~1e-44 after), so their places in the full map hold ~0.

The layout (patch size, window, blocks per stage) comes from the model's ``attnviz.windows`` metadata or its
export folder's ``config.json`` (``model_type: swin``), never from a guess: every site's map must have the
shape the layout predicts for the size the image was fed, else the model is refused in one line.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnviz import AttnvizError
from attnviz.core.attention import PatchGrid

MAX_BLOCKS = 4096  # attention blocks a window layout may describe (Swin-L has 24; one per attention site)
MAX_SIDE = 1 << 16  # patch and window sizes, in pixels and patches


@dataclass(frozen=True)
class SiteWindows:
    """How one block's windows lie on its stage's grid."""

    stage: int  # 1-based
    rows: int  # the stage's patch grid
    cols: int
    window: int  # side of a window in patches (clamped to the grid where the grid is smaller)
    shift: int  # cyclic shift (patches, both axes) applied before partitioning; 0 on unshifted blocks

    @property
    def n_windows(self) -> int:
        return (self.rows // self.window) * (self.cols // self.window)

    @property
    def tokens(self) -> int:
        return self.rows * self.cols

    @property
    def grid(self) -> PatchGrid:
        return PatchGrid(self.rows, self.cols, 0)

    def positions(self) -> np.ndarray:
        """``[nW, N]``: the row-major image position of patch ``i`` of window ``w``.

        Windows are cut from the rolled grid, whose cell ``(y, x)`` holds the image's ``((y + s) % rows,
        (x + s) % cols)`` (``torch.roll(x, -s)``), so that is where each window's patch really lies.
        """
        w, s = self.window, self.shift
        wr, wc = np.divmod(np.arange(self.n_windows), self.cols // w)
        iy, ix = np.divmod(np.arange(w * w), w)
        y = (wr[:, None] * w + iy[None, :] + s) % self.rows
        x = (wc[:, None] * w + ix[None, :] + s) % self.cols
        return y * self.cols + x


@dataclass(frozen=True)
class WindowLayout:
    """A Swin-style model's windowing: patch size, window size and blocks per stage (``depths``)."""

    patch: int
    window: int
    depths: tuple[int, ...]

    @classmethod
    def from_meta(cls, d: dict) -> WindowLayout | None:
        """From ``attnviz.windows`` metadata ``{"patch_size", "window_size", "depths"}``; None when incomplete."""
        p, w, depths = d.get("patch_size"), d.get("window_size"), d.get("depths")
        if not (isinstance(p, int) and isinstance(w, int) and isinstance(depths, list) and depths):
            return None
        if not all(_positive_int(v) for v in (p, w, *depths)):
            return None
        # the values come from a stranger's config.json: `depths: [10**12]` would plan 10**12 blocks (a hang)
        if len(depths) > MAX_BLOCKS or sum(depths) > MAX_BLOCKS or max(p, w) > MAX_SIDE:
            raise AttnvizError(
                f"window layout (config.json or attnviz.windows): depths {_short(depths)}, patch_size {p}, "
                f"window_size {w} are out of range (at most {MAX_BLOCKS} blocks, sizes up to {MAX_SIDE}); "
                "fix the model's config.json"
            )
        return cls(p, w, tuple(int(n) for n in depths))

    def sites(self, image_hw: tuple[int, int]) -> list[SiteWindows]:
        """Every block's windows, in block order, for an image fed at ``image_hw`` pixels.

        As transformers' Swin: the patch grid is ``ceil(size / patch)`` (the image is padded), each stage after
        the first halves it rounding up (patch merging pads an odd side); a stage whose grid is no larger than
        the window is one window with no shift, else odd blocks of the stage shift by ``window // 2``.
        """
        rows, cols = -(-image_hw[0] // self.patch), -(-image_hw[1] // self.patch)
        out = []
        for stage, depth in enumerate(self.depths, start=1):
            if stage > 1:
                rows, cols = -(-rows // 2), -(-cols // 2)
            small = min(rows, cols) <= self.window
            window = min(rows, cols) if small else self.window
            for block in range(depth):
                shift = 0 if small or block % 2 == 0 else self.window // 2
                out.append(SiteWindows(stage, rows, cols, window, shift))
        return out


def stage_grid(first: PatchGrid, stage: int) -> PatchGrid:
    """The grid of ``stage`` (1-based) from the first stage's: patch merging halves each side, rounding up."""
    rows, cols = first.rows, first.cols
    for _ in range(stage - 1):
        rows, cols = -(-rows // 2), -(-cols // 2)
    return PatchGrid(rows, cols, 0)


def layout_problem(sw: SiteWindows, shape: tuple[int, ...], batch: int) -> str | None:
    """Why a site's map of ``shape`` is not this block's windows (None when it is)."""
    if sw.rows % sw.window or sw.cols % sw.window:
        return (
            f"stage {sw.stage}'s {sw.rows}x{sw.cols} patch grid is not a whole number of {sw.window}x{sw.window} "
            "windows (the model pads it, and padded patches take attention)"
        )
    n = sw.window * sw.window
    want = (batch * sw.n_windows, n, n)
    if len(shape) != 4 or (shape[0], shape[2], shape[3]) != want:
        return (
            f"its map is {list(shape)} where stage {sw.stage} predicts [{want[0]}, heads, {n}, {n}] "
            f"({sw.n_windows} windows of {sw.window}x{sw.window} patches per image)"
        )
    return None


class WindowedMap:
    """One windowed site as a :class:`~attnviz.core.attention.MapSource` over its stage's whole patch grid.

    Holds the compact ``[B·nW, H, N, N]`` probabilities; a head's ``[T, T]`` map is laid out when asked for
    (the full map is nW times larger: 64x for Swin-T's first stage at 224 pixels).
    """

    def __init__(self, windows: np.ndarray, batch: int, sw: SiteWindows):
        a = np.asarray(windows, dtype=np.float32)
        nw, n = sw.n_windows, sw.window * sw.window
        self._w = a.reshape(batch, nw, a.shape[1], n, n)  # [B, nW, H, N, N]: the batch axis is outermost
        self._pos = sw.positions()
        self.layout = sw
        self.shape = (batch, int(a.shape[1]), sw.tokens, sw.tokens)

    def head(self, b: int, h: int) -> np.ndarray:
        out = np.zeros(self.shape[2:], np.float32)
        out[self._pos[:, :, None], self._pos[:, None, :]] = self._w[b, :, h]
        return out

    def array(self) -> np.ndarray:
        out = np.zeros(self.shape, np.float32)
        out[:, :, self._pos[:, :, None], self._pos[:, None, :]] = self._w.transpose(0, 2, 1, 3, 4)
        return out

    @property
    def nbytes(self) -> int:
        return self._w.nbytes


def _short(values: list) -> str:
    shown = ", ".join(str(v)[:20] for v in values[:4])
    return f"[{shown}{', ...' if len(values) > 4 else ''}]"


def _positive_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0
