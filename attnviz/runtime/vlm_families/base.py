"""What a vision–language family contributes to :class:`attnviz.runtime.vlm.VLMSet`: how its processor turns an
image into ``pixel_values`` and the prompt's placeholder into image tokens, how the vision file is fed, and where
each image token lies on the image.  One subclass per family (``llava.py``, ``idefics3.py``), registered by
config.json's ``model_type`` in ``__init__.py``."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from attnviz import AttnvizError
from attnviz.core.attention import PatchGrid
from attnviz.runtime import inputs as ip


@dataclass(frozen=True)
class Tiles:
    """How the processor split one image: ``rows`` × ``cols`` tiles and a global image (0 × 0: the image alone)."""

    rows: int = 0
    cols: int = 0

    def layout(self, lead: int) -> tuple[int, int] | None:
        """``(rows, cols)`` of the tiles where they are the ``lead`` frames before the global image (a tower
        grid's ``lead_images``: ``PatchGrid.tile_layout``); None where the image was not split or the frames
        are not these tiles."""
        return (self.rows, self.cols) if lead and self.rows * self.cols == lead else None


def laid_out(grid: PatchGrid | None, split: Tiles | None) -> PatchGrid | None:
    """``grid`` (a vision tower's over an image's frames) naming its tiles' arrangement (``tile_layout``) where
    ``split`` is the split those frames came from; else ``grid`` as it is.  The tower alone
    (:mod:`attnviz.runtime.vlm_tower`: the processor's split) and the whole model (:class:`~attnviz.runtime.vlm.
    VLMSet`: the prompt's markers) both name it so: the same frame has the same name either way."""
    layout = split.layout(grid.lead_images) if grid is not None and split is not None else None
    return replace(grid, tile_layout=layout) if grid is not None and layout else grid


@dataclass(frozen=True)
class LoadedImage:
    """A family processor's output for one image: ``pixel_values`` as its vision file takes them (batch of one),
    the image the maps are drawn on (``[H, W, 3]`` uint8, the region the tokens cover) and the split."""

    pixels: np.ndarray
    shown: np.ndarray
    tiles: Tiles
    info: str  # how it was processed, in one line (the run info's image_preprocessing)


def config_int(d: dict, key: str, where: str, file: str = "config.json") -> int:
    v = d.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise AttnvizError(f"{where}: {file} has no positive integer {key!r}; give the repository's own {file}")
    return v


class Family:
    """The LLaVA-like default: one image of the vision tower's size per prompt row, one run of image tokens."""

    name = ""
    token: int  # the placeholder id (config.json image_token_index / image_token_id)
    placeholder = "<image>"  # what the prompt says where the image goes (the processor expands it)
    placed_when_missing = False  # the processor puts the placeholder in front of a prompt without one
    position_offset = 0  # added to the positions counted over the real tokens (PaliGemma counts from 1)
    # the decoder's position_ids axes before [B, T] (Qwen2-VL's M-RoPE: 3, a cached step's equal on each)
    position_axes: tuple[int, ...] = ()
    # the processor matches several placeholders to several images of one prompt, and attnviz runs them (each
    # image's tokens on its own grid); a family without it takes one image per prompt
    several_images = False
    separate_vision_runs = False  # several images: the vision file attends within one image, so a run each
    # several images of their own sizes in one prompt: pixel_values padded to the largest, each one's size in
    # the set's image_sizes feed (Qwen2-VL resizes each image to its own size)
    sized_images = False
    # its vision file opened alone runs through the family (attnviz.runtime.vlm_tower: the processor's frames, the
    # tower's block over them); a family without it leaves that file to attnviz's own image path
    tower_alone = False

    def __init__(self, config: dict, preprocessor: dict, processor: dict, where: str):
        self.config, self.preprocessor, self.where = config, preprocessor, where

    # -- the image -------------------------------------------------------------------
    def pixel_shape(self, px: ip.IOInfo) -> list:
        """The set's ``pixel_values`` shape (its first axis the prompt rows)."""
        return ["batch", *px.shape[1:]]

    def load_image(self, source: str | Path, spec: ip.ImageSpec) -> LoadedImage | None:
        """The family's own processor, or None: attnviz's resize / rescale / normalise to ``spec``."""
        return None

    def vision_feeds(self, vision_inputs: list[ip.IOInfo], pixels: np.ndarray) -> dict[str, np.ndarray]:
        return {vision_inputs[0].name: pixels}

    def one_image_feeds(
        self, vision_inputs: list[ip.IOInfo], pixels: np.ndarray, sizes: np.ndarray | None = None
    ) -> list[dict[str, np.ndarray]]:
        """The vision file's feeds for each of one prompt's images ``[N, ...]``, in order (a run each), each cut
        to its own ``sizes[i]`` (height, width) where they differ."""
        if sizes is None:
            return [self.vision_feeds(vision_inputs, pixels[i : i + 1]) for i in range(pixels.shape[0])]
        return [
            self.vision_feeds(vision_inputs, pixels[i : i + 1, ..., : int(h), : int(w)])
            for i, (h, w) in enumerate(sizes)
        ]

    def vision_batch(self, vision_inputs: list[ip.IOInfo]) -> str | None:
        """The vision input whose first axis counts the images (None: the first input, pixel_values)."""
        return None

    def images_per_row(self, pixels: np.ndarray) -> list[int]:
        """How many of the vision file's images (its output's first axis) each prompt row holds."""
        return [1] * int(pixels.shape[0])

    def vision_window(self, layer: int) -> str | None:
        """What a vision block attends within when not the whole image (Qwen2.5-VL's windows), for its label."""
        return None

    def probe_pixels(self, spec: ip.ImageSpec) -> np.ndarray:
        return np.zeros((1, spec.channels, spec.height, spec.width), np.float32)

    def vision_grid(self, n_keys: int) -> PatchGrid | None:
        """The patch grid of the vision block's keys (None: the vision file's own guess)."""
        return None

    def frames_at_most(self) -> tuple[int, int] | None:
        """The most frames the processor makes of one image and each frame's keys (a corpus over the vision file
        alone sizes its batches by them); None: not known."""
        return None

    def vision_grid_of(self, image: int, n_keys: int) -> PatchGrid | None:
        """One prompt's image ``image`` (0-based): the patch grid of its ``n_keys`` keys in the vision block, over
        its own keys (None: the vision file's own guess)."""
        return self.vision_grid(n_keys)

    def frames_each(self, ids: np.ndarray, frames: int) -> list[int] | None:
        """How many of the vision file's images (``frames`` in all, one run) each of one prompt's images is, in
        order, from the prompt's ids ``[T]``: one each (None: the ids do not tell)."""
        return [1] * frames

    def splits(self, ids: np.ndarray) -> list[Tiles | None] | None:
        """How the processor split each of one prompt's images, in order, as the prompt's ids ``[T]`` name it to
        the decoder (Idefics3's ``<row_r_col_c>`` before each tile's tokens): ``Tiles()`` for an image not split,
        None for one whose markers name no rows × columns; None: the family never splits an image."""
        return None

    # -- the prompt ------------------------------------------------------------------
    def tokens(self, inner: ip.TextEncoder) -> ip.TextEncoder:  # pragma: no cover - every family defines it
        raise NotImplementedError

    def probe_ids(self) -> list[int]:  # pragma: no cover - every family defines it
        raise NotImplementedError

    # -- the decoder -----------------------------------------------------------------
    def token_types(self, ids: np.ndarray) -> np.ndarray:
        """The decoder's ``token_type_ids`` where its file takes them (one segment unless the family says)."""
        return np.zeros(ids.shape, np.int64)

    def positions(
        self, ids: np.ndarray, mask: np.ndarray, pixels: np.ndarray, sizes: np.ndarray | None = None
    ) -> np.ndarray | None:
        """The prompt's ``position_ids`` where the family computes them (Qwen2-VL's M-RoPE ``[3, B, T]``, each
        image's grid its ``sizes`` where given); None: counted over the real tokens.  A cached step's position
        then continues from the largest + 1."""
        return None

    def decoder_notes(self, decoder_inputs: list[ip.IOInfo]) -> list[str]:
        """One line each for what the decoder file cannot do that the model does (the maps are the export's)."""
        return []

    def placeholder_fix(self) -> str:
        """How to write the prompt so that its image tokens are the image's features: the family's own
        placeholder, once."""
        fix = f"write {self.placeholder} once in the text (it is expanded to the image's tokens)"
        return fix + (" or leave it out (it is put before the text)" if self.placed_when_missing else "")

    def placeholder_count(self, found: int, count: int) -> AttnvizError:
        """The line for a prompt whose placeholders (``found``) are not one per image given (``count``)."""
        where = ", or leave them all out (the images go before the text)" if self.placed_when_missing else ""
        return AttnvizError(
            f"the prompt holds {found} {self.placeholder} placeholder{'s' if found != 1 else ''} and {count} "
            f"image{'s were' if count != 1 else ' was'} given; write {self.placeholder} once per image, where each image goes, in the images' order{where}",
            param="text",
        )

    def describe(self) -> dict:
        return {"family": self.name, "token": self.token, "placeholder": self.placeholder}


def block_diagonal(maps: np.ndarray, per_row: list[int]) -> np.ndarray:
    """The vision file's maps, one per image ``[images, H, P, P]``, as one map per prompt row: its images' patches
    one after another, each image attending only to its own (as the tower runs them), ``[rows, H, n·P, n·P]``."""
    p = maps.shape[-1]
    out = np.zeros((len(per_row), maps.shape[1], max(per_row) * p, max(per_row) * p), maps.dtype)
    i = 0
    for b, k in enumerate(per_row):
        for t in range(k):
            out[b, :, t * p : (t + 1) * p, t * p : (t + 1) * p] = maps[i]
            i += 1
    return out
