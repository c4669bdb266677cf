"""LLaVA (CLIP-ViT + projector, Llama decoder): the features are the chosen vision layers' states."""

from __future__ import annotations

import numpy as np

from attnviz.training.hf_onnx import _torch_nn_module
from attnviz.training.hf_vlm_families.base import Recipe, Sample


class LlavaVision(_torch_nn_module()):  # type: ignore[misc]
    """``pixel_values`` -> ``image_features``, as ``LlavaModel.get_image_features``: the chosen layers' states
    (CLS dropped for the "default" strategy, several layers concatenated) through the projector."""

    def __init__(self, model):
        super().__init__()
        self.inner, cfg = model.model, model.config
        layer = cfg.vision_feature_layer
        self.layers = [layer] if isinstance(layer, int) else list(layer)
        self.drop = 1 if cfg.vision_feature_select_strategy == "default" else 0

    def forward(self, pixel_values):
        import torch

        out = self.inner.vision_tower(pixel_values, output_hidden_states=True)
        states = [out.hidden_states[k][:, self.drop :] for k in self.layers]
        return self.inner.multi_modal_projector(states[0] if len(states) == 1 else torch.cat(states, dim=-1))


def vision_layers(model) -> int:
    """How many vision layers the features read: up to the deepest chosen hidden state (hidden_states[0] is the
    embeddings); the export drops the layers after it, as the Hub's files do, so they have no maps."""
    cfg = model.config
    total = cfg.vision_config.num_hidden_layers
    layer = cfg.vision_feature_layer
    return max(k % (total + 1) for k in ([layer] if isinstance(layer, int) else layer))


class Llava(Recipe):
    needs = ("vision_feature_layer", "vision_feature_select_strategy")

    def vision(self, model):
        return LlavaVision(model)

    def vision_maps(self, model, s: Sample) -> list[np.ndarray]:
        import torch

        with torch.no_grad():
            v = model.model.vision_tower(torch.as_tensor(s.pixel_values), output_attentions=True)
        return [a.numpy() for a in v.attentions[: vision_layers(model)]]
