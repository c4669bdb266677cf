"""The vision–language families :class:`attnviz.runtime.vlm.VLMSet` runs, by config.json ``model_type``."""

from __future__ import annotations

from attnviz import AttnvizError
from attnviz.core.setting_words import fix
from attnviz.runtime.vlm_families.base import Family, LoadedImage, Tiles, block_diagonal, laid_out
from attnviz.runtime.vlm_families.idefics3 import Idefics3
from attnviz.runtime.vlm_families.llava import Llava
from attnviz.runtime.vlm_families.paligemma import PaliGemma
from attnviz.runtime.vlm_families.qwen2vl import Qwen2VL
from attnviz.runtime.vlm_families.qwen25vl import Qwen25VL

# model_type -> the family whose processor and placeholder expansion attnviz follows (SmolVLM v1 is idefics3)
FAMILIES: dict[str, type[Family]] = {
    "llava": Llava,
    "idefics3": Idefics3,
    "paligemma": PaliGemma,
    "qwen2_vl": Qwen2VL,
    "qwen2_5_vl": Qwen25VL,
}


def family_for(config: dict, preprocessor: dict, processor: dict, where: str) -> Family:
    family = config.get("model_type")
    cls = FAMILIES.get(family) if isinstance(family, str) else None
    if cls is None:
        raise AttnvizError(
            f"{where}: a vision–language model of type {family!r}; attnviz runs the three-file layout for "
            f"{', '.join(FAMILIES)} only (its placeholder expansion and positions are not derived for others)"
        )
    return cls(config, preprocessor, processor, where)


def check_several(family: Family, count: int) -> None:
    """Refuse ``count`` > 1 images in one prompt in one line where the family runs one image per prompt."""
    if count > 1 and not family.several_images:
        takes = ", ".join(cls.name for cls in FAMILIES.values() if cls.several_images)
        raise AttnvizError(
            f"{count} images given and attnviz runs one image per prompt for {family.name} (several images per "
            f"prompt: {takes}); {fix('one_image')}, or ask about each image in a run of its own",
            param="image",
        )


__all__ = ["FAMILIES", "Family", "LoadedImage", "Tiles", "block_diagonal", "check_several", "family_for", "laid_out"]
