"""Idefics3 / SmolVLM (SigLIP-style tower, pixel shuffle, Llama decoder): each row holds several frames (the
processor's tiles and the global image), each ``S × S``.

The vision file takes ``pixel_values [batch, images, 3, S, S]`` and ``pixel_attention_mask [batch, images, S, S]``
(bool), as onnx-community's SmolVLM exports do, drops the all-zero padding frames as
``Idefics3Model.get_image_features`` does and gives ``image_features [real frames, features, hidden]``.  Every
frame is of the full tile size (the processor's tiles and global image always are), so every patch is real and the
vision embeddings' position ids are those of a full grid: computed once, by transformers' own embeddings, when the
module is built (``torch.bucketize``, which they use, has no ONNX form).  attnviz shows a row's frames as one
block-diagonal map (each frame attends to its own patches).
"""

from __future__ import annotations

import numpy as np

from attnviz.training.hf_onnx import _torch_nn_module
from attnviz.training.hf_vlm_families.base import Recipe, Sample


def full_grid_positions(vision_model, tile: int):
    """The position ids the vision embeddings compute for a full ``tile × tile`` frame, seen by a hook on their
    position embedding."""
    import torch

    emb = vision_model.embeddings
    seen: dict = {}
    hook = emb.position_embedding.register_forward_hook(lambda mod, args, out: seen.update(ids=args[0]))
    side = tile // vision_model.config.patch_size
    try:
        with torch.no_grad():
            emb(torch.zeros(1, 3, tile, tile), torch.ones(1, side, side, dtype=torch.bool))
    finally:
        hook.remove()
    return seen["ids"].reshape(-1).long().clone()


class Idefics3Vision(_torch_nn_module()):  # type: ignore[misc]
    """``pixel_values [B, N, 3, S, S]``, ``pixel_attention_mask [B, N, S, S]`` -> ``image_features``."""

    def __init__(self, model):
        super().__init__()
        self.inner = model.model
        tile = model.config.vision_config.image_size
        self.register_buffer("positions", full_grid_positions(self.inner.vision_model, tile))

    def forward(self, pixel_values, pixel_attention_mask):
        b, n = pixel_values.shape[:2]
        px = pixel_values.reshape(b * n, *pixel_values.shape[2:])
        # padding frames are all zero (and wholly masked): dropped, as get_image_features drops them
        real = (px != 0).flatten(1).any(dim=1) & pixel_attention_mask.reshape(b * n, -1).any(dim=1)
        px = px[real]
        vis = self.inner.vision_model
        x = vis.embeddings.patch_embedding(px).flatten(2).transpose(1, 2)
        x = x + vis.embeddings.position_embedding(self.positions)[None]
        x = vis.encoder(inputs_embeds=x, attention_mask=None).last_hidden_state
        return self.inner.connector(vis.post_layernorm(x))


class Idefics3(Recipe):
    def vision(self, model):
        return Idefics3Vision(model)

    def vision_inputs(self, model, pixels: np.ndarray) -> dict:
        import torch

        px = torch.as_tensor(pixels)
        return {"pixel_values": px, "pixel_attention_mask": torch.ones(*px.shape[:2], *px.shape[-2:], dtype=torch.bool)}

    def vision_axes(self) -> dict:
        return {
            "pixel_values": {0: "batch", 1: "images"},
            "pixel_attention_mask": {0: "batch", 1: "images"},
            "image_features": {0: "real_images"},
        }

    def pixels(self, model, g) -> tuple[np.ndarray, np.ndarray]:
        """Two rows of one frame each, then one row of three frames (two tiles and the global image)."""
        import torch

        size = model.config.vision_config.image_size
        px = torch.randn(5, 3, size, size, generator=g).numpy()
        return px[:2, None], px[None, 2:]

    def vision_maps(self, model, s: Sample) -> list[np.ndarray]:
        import torch

        from attnviz.runtime.vlm_families import block_diagonal

        px = torch.as_tensor(s.pixel_values)
        with torch.no_grad():
            v = model.model.vision_model(px.reshape(-1, *px.shape[2:]), output_attentions=True)
        per_row = [int(px.shape[1])] * int(px.shape[0])
        if px.shape[1] == 1:
            return [a.numpy() for a in v.attentions]
        return [block_diagonal(a.numpy(), per_row) for a in v.attentions]
