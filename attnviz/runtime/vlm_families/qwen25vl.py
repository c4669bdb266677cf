"""Qwen2.5-VL: Qwen2-VL's processor, placeholder expansion and M-RoPE decoder, with a vision tower that attends
within **windows** in most blocks.

``Qwen2_5_VisionTransformerPretrainedModel`` reorders the patches merge unit by merge unit
(``get_vision_window_index``): windows of ``window_size`` pixels (``window_size / merge / patch`` merge units a
side; the last row and column of windows cut short by the image's edge) row by row, the units row by row inside
each, a unit's ``merge²`` patches as they were.  Every block then sees the patches in that order -- those in
``fullatt_block_indexes`` over the whole image, the others within their window only -- and the merger's output is
put back in the image's order before the decoder.  So a vision block's keys (and queries) are in the window
order: :meth:`Qwen25VL.vision_grid` places each on the image, and the windowed blocks say so in their label.
"""

from __future__ import annotations

import numpy as np

from attnviz import AttnvizError
from attnviz.core.attention import PatchGrid
from attnviz.runtime.vlm_families.base import config_int
from attnviz.runtime.vlm_families.qwen2vl import Qwen2VL


def window_order(rows: int, cols: int, units: int) -> np.ndarray:
    """The merge units of a ``rows`` × ``cols`` merged grid (row-major indices) in get_vision_window_index's
    order: windows of ``units`` × ``units`` row by row, the units row by row inside each."""
    i, j = np.divmod(np.arange(rows * cols), cols)
    # cols >= the windows a row, so this key sorts windows row-major, then the units inside one row-major
    key = (((i // units) * cols + j // units) * units + i % units) * units + j % units
    return np.argsort(key, kind="stable")


class Qwen25VL(Qwen2VL):
    name = "qwen2.5-vl"
    # several images: each one's run of the vision file orders and windows its own patches (transformers'
    # get_vision_window_index windows each image apart, and its full blocks attend within one image too)

    def __init__(self, config: dict, preprocessor: dict, processor: dict, where: str):
        super().__init__(config, preprocessor, processor, where)
        vision = config["vision_config"]
        self.window = config_int(vision, "window_size", where)
        self.units = max(1, self.window // self.merge // self.patch)
        full = vision.get("fullatt_block_indexes", [])
        if not isinstance(full, list) or not all(isinstance(k, int) and not isinstance(k, bool) for k in full):
            raise AttnvizError(
                f"{where}: config.json's vision fullatt_block_indexes is {full!r}, not a list of block numbers; "
                "give the repository's own config.json"
            )
        self.full = frozenset(full)

    def vision_window(self, layer: int) -> str | None:
        return None if layer in self.full else f"{self.window}-px windows"

    def vision_grid(self, n_keys: int, merged: tuple[int, int] | None = None) -> PatchGrid | None:
        """The vision block's keys are the patches in the window order (see the module's doc): each cell of the
        patch grid names its key.  ``merged``: the image's merged grid (default the latest image's)."""
        m = self.merge
        rows, cols = merged or self.merged
        gh, gw = rows * m, cols * m
        if n_keys != gh * gw:
            return None
        place = np.empty(rows * cols, np.int64)
        place[window_order(rows, cols, self.units)] = np.arange(rows * cols)  # each unit's rank in the order
        keys = [
            int(place[(r // m) * cols + c // m]) * m * m + (r % m) * m + c % m for r in range(gh) for c in range(gw)
        ]
        return PatchGrid(gh, gw, 0, columns=tuple(keys), stop=n_keys)

    def describe(self) -> dict:
        return super().describe() | {
            "vision_windows": {"pixels": self.window, "full_attention_blocks": sorted(self.full)},
        }
