"""Qwen2-VL (ViT with 2-D rotary patches and a 2 × 2 patch merger, Qwen2 decoder with 3-D M-RoPE positions).

The vision file takes what ``Qwen2VisionTransformerPretrainedModel.forward`` takes for one image: the processor's
flattened patches ``pixel_values [grid_t·grid_h·grid_w, C·T·P·P]`` and ``image_grid_thw [1, 3]``, and gives the
merger's ``image_features [tokens, hidden]``; the patches' rotary positions (rows and columns, block-major over
the merge windows) are computed in the graph from ``image_grid_thw``, so one file serves every image size.
transformers' eager vision attention splits the sequence by ``cu_seqlens`` with ``.tolist()`` (constants under
tracing), so the exported forward writes the same attention out over the one image.  The decoder takes
``position_ids [3, B, T]`` (temporal, row, column), which attnviz builds as transformers' ``get_rope_index`` does.
attnviz's set takes the resized image ``[1, 3, H, W]`` and runs one image at a time.
"""

from __future__ import annotations

import numpy as np

from attnviz.training.hf_onnx import _torch_nn_module
from attnviz.training.hf_vlm_families.base import Recipe, Sample


class Qwen2VLVision(_torch_nn_module()):  # type: ignore[misc]
    """``pixel_values [N, C·T·P·P]``, ``image_grid_thw [1, 3]`` -> ``image_features [N / merge², hidden]``."""

    modeling = "qwen2_vl"  # transformers' module whose apply_rotary_pos_emb_vision the blocks use

    def __init__(self, model):
        super().__init__()
        self.v = model.model.visual

    def windows(self, h, w):
        """The merge units' order the blocks see and, per patch pair, whether a windowed block hides the key from
        the query; None: every block attends over the whole image in the image's order (Qwen2-VL)."""
        return None

    def windowed(self, layer: int) -> bool:
        return False

    def forward(self, pixel_values, image_grid_thw):
        import importlib

        import torch

        rotate = importlib.import_module(f"transformers.models.{self.modeling}.modeling_{self.modeling}")
        v, s = self.v, self.v.spatial_merge_size
        t, h, w = image_grid_thw[0, 0], image_grid_thw[0, 1], image_grid_thw[0, 2]
        # the patches' rows and columns, block-major over merge windows (transformers' get_vision_position_ids)
        rows = torch.arange(h)[:, None].expand(h, w).reshape(h // s, s, w // s, s).transpose(1, 2).flatten()
        cols = torch.arange(w)[None, :].expand(h, w).reshape(h // s, s, w // s, s).transpose(1, 2).flatten()
        x = v.patch_embed(pixel_values)
        cos, sin = v.rotary_pos_emb(x, torch.stack([rows, cols], dim=-1).repeat(t, 1))
        n = x.shape[0]
        windows = self.windows(h, w)
        if windows is not None:  # permute_input_for_window_attn: the patches merge unit by merge unit, reordered
            order, apart = windows
            x, cos, sin = (z.reshape(n // (s * s), s * s, -1)[order].reshape(n, -1) for z in (x, cos, sin))
        for layer, blk in enumerate(v.blocks):  # the vision block, VisionAttention's eager path over one image
            a = blk.attn
            q, k, val = a.qkv(blk.norm1(x)).reshape(n, 3, a.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
            q, k = rotate.apply_rotary_pos_emb_vision(q, k, cos, sin)
            q, k, val = (z.transpose(0, 1).unsqueeze(0) for z in (q, k, val))
            scores = torch.matmul(q, k.transpose(2, 3)) * a.scaling
            if windows is not None and self.windowed(layer):
                # one softmax over the image with the other windows' keys at the dtype's minimum: exactly 0 after
                # it, so each window's rows are transformers' softmax over that window's chunk of cu_window_seqlens
                scores = scores.masked_fill(apart, torch.finfo(scores.dtype).min)
            weights = torch.softmax(scores, dim=-1)
            x = x + a.proj(torch.matmul(weights, val).transpose(1, 2).reshape(n, -1))
            x = x + blk.mlp(blk.norm2(x))
        out = v.merger(x)
        return out if windows is None else out[torch.argsort(windows[0])]  # back in the image's order


def flatten(image: np.ndarray, patch: int, merge: int, temporal: int) -> tuple[np.ndarray, np.ndarray]:
    """One image ``[C, H, W]`` -> the processor's flattened patches (merge windows row by row, their patches row
    by row, the still image as each of its ``temporal`` frames) and ``image_grid_thw [[1, H/p, W/p]]``."""
    c, height, width = image.shape
    gh, gw = height // patch, width // patch
    p = image.reshape(c, gh // merge, merge, patch, gw // merge, merge, patch).transpose(1, 4, 2, 5, 0, 3, 6)
    p = np.repeat(p[:, :, :, :, :, None], temporal, axis=5)
    return np.ascontiguousarray(p.reshape(gh * gw, c * temporal * patch * patch), np.float32), np.asarray(
        [[1, gh, gw]], np.int64
    )


class Qwen2VL(Recipe):
    needs = ("vision_start_token_id", "vision_end_token_id")  # the image's tokens sit between them
    modeling = Qwen2VLVision.modeling

    def vision(self, model):
        return Qwen2VLVision(model)

    def _flat(self, model, pixels: np.ndarray):
        v = model.config.vision_config
        return flatten(pixels[0], v.patch_size, v.spatial_merge_size, v.temporal_patch_size)

    def vision_inputs(self, model, pixels: np.ndarray) -> dict:
        import torch

        flat, thw = self._flat(model, pixels)
        return {"pixel_values": torch.as_tensor(flat), "image_grid_thw": torch.as_tensor(thw)}

    def vision_axes(self) -> dict:
        return {"pixel_values": {0: "patches"}, "image_features": {0: "tokens"}}

    def pixels(self, model, g) -> tuple[np.ndarray, np.ndarray]:
        """One image of 2 × 3 merge windows, then one of 3 × 2 (the set runs one image at a time; two sizes show a
        traced grid)."""
        import torch

        v = model.config.vision_config
        f = v.patch_size * v.spatial_merge_size
        return (
            torch.randn(1, 3, 2 * f, 3 * f, generator=g).numpy(),
            torch.randn(1, 3, 3 * f, 2 * f, generator=g).numpy(),
        )

    def layout(self, model, tok, text: str, token: int, n: int, bos: int | None) -> list[int]:
        """Qwen2VLProcessor's: ``<|vision_start|>``, the image's tokens, ``<|vision_end|>``, then the text."""
        cfg = model.config
        return [cfg.vision_start_token_id, *[token] * n, cfg.vision_end_token_id, *tok(text)["input_ids"]]

    def torch_kw(self, model, pixels: np.ndarray, ids: np.ndarray) -> dict:
        import torch

        flat, thw = self._flat(model, pixels)
        t = torch.as_tensor(ids)
        return {
            "input_ids": t,
            "pixel_values": torch.as_tensor(flat),
            "image_grid_thw": torch.as_tensor(thw),
            "mm_token_type_ids": (t == model.config.image_token_id).long(),
            "attention_mask": torch.ones_like(t),
        }

    def vision_maps(self, model, s: Sample) -> list[np.ndarray]:
        """transformers' eager vision attention of every layer, recorded through its attention interface (the
        vision tower returns no weights of its own)."""
        return self.recorded(model, s)

    def recorded(self, model, s: Sample) -> list[np.ndarray]:
        """Every map transformers' eager vision attention computes, in its order: one a block over one image, or
        one a chunk (a window) where a block splits the image (Qwen2.5-VL)."""
        import importlib

        import torch
        import transformers

        mq = importlib.import_module(f"transformers.models.{self.modeling}.modeling_{self.modeling}")
        seen: list[np.ndarray] = []

        def record(module, q, k, v, attention_mask, **kw):
            out, w = mq.eager_attention_forward(module, q, k, v, attention_mask, **kw)
            seen.append(w.numpy())
            return out, w

        transformers.AttentionInterface.register("attnviz_record", record)
        vision = model.model.visual
        old = vision.config._attn_implementation
        vision.config._attn_implementation = "attnviz_record"
        try:
            with torch.no_grad():
                vision(s.torch_kw["pixel_values"], grid_thw=s.torch_kw["image_grid_thw"])
        finally:
            vision.config._attn_implementation = old
        return seen

    def decoder_inputs(self, past: int, new: int) -> tuple[dict, dict]:
        import torch

        pos = torch.arange(past, past + new)[None, None].expand(3, 1, -1).contiguous()
        return {"position_ids": pos}, {"position_ids": {1: "batch", 2: "sequence"}}

    def reset(self, model) -> None:
        model.model.rope_deltas = None  # computed afresh from the next prompt's image grid
