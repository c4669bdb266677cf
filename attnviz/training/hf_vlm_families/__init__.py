"""The vision–language families ``export-hf`` writes in the Hub's three-file layout, by config.json's
``model_type`` (the same keys as :data:`attnviz.runtime.vlm_families.FAMILIES`, which opens them)."""

from __future__ import annotations

from attnviz.training.hf_vlm_families.base import Recipe, Sample, image_token
from attnviz.training.hf_vlm_families.idefics3 import Idefics3
from attnviz.training.hf_vlm_families.llava import Llava
from attnviz.training.hf_vlm_families.paligemma import PaliGemma
from attnviz.training.hf_vlm_families.qwen2vl import Qwen2VL
from attnviz.training.hf_vlm_families.qwen25vl import Qwen25VL

RECIPES: dict[str, type[Recipe]] = {
    "llava": Llava,
    "idefics3": Idefics3,  # SmolVLM v1 is an Idefics3
    "paligemma": PaliGemma,
    "qwen2_vl": Qwen2VL,
    "qwen2_5_vl": Qwen25VL,
}

__all__ = ["RECIPES", "Recipe", "Sample", "image_token"]
