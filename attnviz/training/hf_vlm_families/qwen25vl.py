"""Qwen2.5-VL: Qwen2-VL's files (flattened patches and ``image_grid_thw`` in, the merger's features out; the
decoder on ``position_ids [3, B, T]``), with a vision tower that attends within **windows** in most blocks.

``Qwen2_5_VisionTransformerPretrainedModel`` reorders the patches merge unit by merge unit
(``get_vision_window_index``: windows of ``window_size`` pixels row by row, the units row by row inside each), every
block but those in ``fullatt_block_indexes`` attends within its window, and the merger's output is put back in the
image's order.  transformers' eager path splits the sequence by ``cu_window_seqlens`` with ``.tolist()``
(constants under tracing), so the exported forward computes the order and each unit's window from
``image_grid_thw`` in the graph and writes a window's attention as the whole sequence's softmax with the other
windows' keys masked out: one file serves every image size, and its vision maps' keys are in the window order,
as transformers' blocks see them (attnviz's runtime places each on the image and labels the windowed blocks).
"""

from __future__ import annotations

import numpy as np

from attnviz.training.hf_vlm_families.base import Sample
from attnviz.training.hf_vlm_families.qwen2vl import Qwen2VL, Qwen2VLVision


class Qwen25VLVision(Qwen2VLVision):
    modeling = "qwen2_5_vl"

    def __init__(self, model):
        super().__init__(model)
        v = model.config.vision_config
        self.units = max(1, int(v.window_size) // int(v.spatial_merge_size) // int(v.patch_size))
        self.full = frozenset(int(k) for k in v.fullatt_block_indexes)

    def windows(self, h, w):
        """get_vision_window_index's order of the merge units (row-major over the merged grid) and, per patch
        pair in that order, whether the two lie in different windows (tensors of ``h``, ``w``: traceable)."""
        import torch

        s, u = self.v.spatial_merge_size, self.units
        gh, gw = h // s, w // s
        i = torch.arange(gh)[:, None].expand(gh, gw).flatten()
        j = torch.arange(gw)[None, :].expand(gh, gw).flatten()
        window = (i // u) * gw + j // u  # gw >= the windows a row: any such stride keeps the windows row-major
        order = torch.argsort((window * u + i % u) * u + j % u)
        per_patch = window[order].repeat_interleave(s * s)
        return order, per_patch[:, None] != per_patch[None, :]

    def windowed(self, layer: int) -> bool:
        return layer not in self.full


class Qwen25VL(Qwen2VL):
    modeling = Qwen25VLVision.modeling

    def vision(self, model):
        return Qwen25VLVision(model)

    def pixels(self, model, g) -> tuple[np.ndarray, np.ndarray]:
        """Images that end in part windows both ways, at two sizes: ``units + 1`` × ``2·units + 1`` merge units,
        then the transpose (traced on), so the windowed blocks differ from a full block and a traced grid shows."""
        import torch

        v = model.config.vision_config
        f = v.patch_size * v.spatial_merge_size
        u = max(1, v.window_size // f)
        return (
            torch.randn(1, 3, (u + 1) * f, (2 * u + 1) * f, generator=g).numpy(),
            torch.randn(1, 3, (2 * u + 1) * f, (u + 1) * f, generator=g).numpy(),
        )

    def vision_maps(self, model, s: Sample) -> list[np.ndarray]:
        """transformers' eager maps of each block, its chunks (the windows, or the whole image) placed on the
        diagonal of one ``[1, heads, N, N]`` map in the window order, as the export computes them."""
        chunks = iter(self.recorded(model, s))
        n = int(np.prod(s.torch_kw["image_grid_thw"][0].tolist()))
        heads = int(model.config.vision_config.num_heads)
        maps = []
        for _ in model.model.visual.blocks:
            full = np.zeros((1, heads, n, n), np.float32)
            at = 0
            while at < n:
                w = next(chunks)
                full[:, :, at : at + w.shape[-1], at : at + w.shape[-1]] = w
                at += w.shape[-1]
            maps.append(full)
        return maps
