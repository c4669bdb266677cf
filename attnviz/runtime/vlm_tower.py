"""A vision–language model's vision file opened alone (``REPO/onnx/vision_encoder.onnx`` of the Hub's three-file
layout, :mod:`attnviz.runtime.vlm`), for a family whose tower takes an image as several frames
(Idefics3 / SmolVLM: ``pixel_values [batch, images, 3, M, M]``, the processor's tiles then its global image, and
``pixel_attention_mask``).

The family is read from the folder's config.json as for the whole model (``model_type``, registered in
:mod:`attnviz.runtime.vlm_families` with ``tower_alone``), its processor from the folder's
preprocessor_config.json: ``--image`` goes through the family's own preprocessing (the same code the whole model
runs), the mask is made as the whole model makes it, and each row's frames' maps (the file gives one map per real
frame) become one map per row, each frame attending within itself (:class:`~attnviz.core.frames.FramesMap`, as
the whole model's tower block: the frames' maps kept, the block-diagonal map never made).  The processor's split is known here without a decoder, so the tower's grid names
the tiles' arrangement (``PatchGrid.tile_layout``) and Image regions lays every tile out beside the global image.

:class:`TowerFrames` is what the file's :class:`~attnviz.runtime.model.AttentionModel` consults for all of that
(its ``frames``, set by :func:`attnviz.runtime.folder.open_model` as it sets ``encoder_pairing``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnviz import AttnvizError
from attnviz.core.attention import PatchGrid
from attnviz.core.frames import FramesMap
from attnviz.core.setting_words import fix
from attnviz.runtime import inputs as ip
from attnviz.runtime.sidecar import sidecar, sidecar_json
from attnviz.runtime.vlm_families import FAMILIES, Family, LoadedImage, Tiles, family_for, laid_out

PREPROCESSOR = "preprocessor_config.json"


def tower_family(path: Path, roles: dict[str, str], inputs: list[ip.IOInfo]) -> type[Family] | None:
    """The family whose vision file ``path`` is, where its tower runs alone through the family: config.json beside
    it (or in the repository above onnx/) names one with ``tower_alone`` and the file takes its images with an
    images axis (rank 5); None for every other file."""
    kind = sidecar_json(path, "config.json").get("model_type")
    cls = FAMILIES.get(kind) if isinstance(kind, str) else None
    if cls is None or not cls.tower_alone:
        return None
    return cls if any(roles[i.name] == "image" and i.rank == 5 for i in inputs) else None


class TowerFrames:
    """A VLM's vision file alone: its images through the family (see the module); ``inputs``: the file's, its
    rank-5 pixel input among them."""

    def __init__(self, path: Path, cls: type[Family], inputs: list[ip.IOInfo]):
        self.path, self.family_name, self.inputs = path, cls.name, inputs
        self.image_input = next(i for i in inputs if i.rank == 5)
        self.family: Family | None = None
        self.family_error = ""
        try:
            self.family = family_for(
                sidecar_json(path, "config.json"),
                sidecar_json(path, PREPROCESSOR),
                sidecar_json(path, "processor_config.json"),
                path.name,
            )
        except AttnvizError as e:  # raw pixel values still run; an image says what is missing (load_image)
            self.family_error = str(e)
        self._loaded: tuple[np.ndarray, Tiles] | None = None  # the latest image's pixel values and split
        self._split: Tiles | None = None  # the split of the image the latest run was fed (None: raw pixel values)
        self._frame_keys = 0  # the latest run's keys per frame
        self._row_frames: list[int] = []  # the latest run's real frames of each row
        # False (a corpus run, attnviz.corpus.tower): the maps are left one per real frame, as the file gives them;
        # the corpus reduces each frame's map itself, and never makes the block-diagonal map (the frames' maps
        # times the frame count: ~15 GB a layer for SmolVLM's 17 frames of 1024 patches)
        self.whole = True

    # -- the image -------------------------------------------------------------------
    def load_image(self, source, spec: ip.ImageSpec) -> LoadedImage | None:
        """The family's own processor: the tiles and the global image, as the whole model's run makes them."""
        family = self.require_family()
        loaded = family.load_image(source, spec)
        self._loaded = (loaded.pixels, loaded.tiles) if loaded is not None else None
        return loaded

    def require_family(self, raw: bool = True) -> Family:
        """The family's processor, or one line naming the missing file and the fix (an image cannot be split
        into the tiles and global image without it); ``raw``: the fix may also be the pixel values given raw
        (``--inputs``; a corpus run has no such flag)."""
        if self.family is None:
            param = "image" if raw else None
            if sidecar(self.path, PREPROCESSOR) is None:
                also = fix("feeds", what=self.image_input.describe()) if raw else ""
                raise AttnvizError(
                    f"{self.path.name}: {self.family_name}'s vision encoder takes an image as its processor's tiles "
                    f"and global image, and no {PREPROCESSOR} is beside it (or in the repository above onnx/) to say "
                    f"how; put the repository's {PREPROCESSOR} there{also}",
                    param=param,
                )
            raise AttnvizError(self.family_error, param=param)
        return self.family

    # -- running ---------------------------------------------------------------------
    def feeds(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The frames' mask made as the whole model makes it where not given; a pixel array without the images
        axis is refused in one line that says how to give it."""
        name = self.image_input.name
        px = feeds.get(name)
        if px is not None and np.ndim(px) == 4:
            raise AttnvizError(
                f"{self.path.name} takes {self.image_input.describe()}: each row's images (the processor's tiles "
                f"and its global image) on an axis of their own, and {name!r} has shape "
                f"{tuple(np.shape(px))}; give {name}[:, None] for one image a row, or give the image itself (--image)",
                param="feeds",
            )
        if px is not None and self.family is not None and np.ndim(px) == 5:
            return {**self.family.vision_feeds(self.inputs, np.asarray(px)), **feeds}
        return feeds

    def per_row(self, pixels: np.ndarray) -> list[int]:
        """Each row's real frames (the family's count: padding frames are all zero), every frame without one."""
        if self.family is not None:
            return self.family.images_per_row(pixels)
        return [int(pixels.shape[1])] * int(pixels.shape[0])

    def mode(self, feeds: dict, mode: str) -> str:
        """Dense where a row holds several frames (they are put together in :meth:`maps`)."""
        px = feeds.get(self.image_input.name)
        several = px is not None and np.ndim(px) == 5 and any(k > 1 for k in self.per_row(np.asarray(px)))
        return "dense" if several else mode

    def maps(self, feeds: dict, maps: list) -> list:
        """The maps one per row, each row's frames on the diagonal (a :class:`FramesMap`: the frames' maps kept,
        the whole model's tower block without laying it out); the split of the image fed kept, where it is the
        latest image loaded."""
        pixels = np.asarray(feeds[self.image_input.name])
        per_row = self.per_row(pixels)
        self._frame_keys = int(maps[0].shape[-1]) if maps else 0
        self._row_frames = per_row
        loaded = self._loaded
        self._split = loaded[1] if loaded is not None and np.array_equal(loaded[0], pixels) else None
        if maps and sum(per_row) != maps[0].shape[0]:
            raise AttnvizError(
                f"{self.path.name} gave maps for {maps[0].shape[0]} images and {self.image_input.name} holds "
                f"{sum(per_row)} real ones (all-zero frames are padding); give each row's images, padding last"
            )
        if all(k == 1 for k in per_row) or not self.whole:
            return maps
        return [FramesMap(m.array(), per_row) for m in maps]  # the frames' maps kept, never laid out whole

    # -- the grid --------------------------------------------------------------------
    def grid(self, n_keys: int) -> PatchGrid | None:
        """A frame's patch grid repeated: the tiles' patches before the global image's (``lead_images``), the
        tiles' arrangement named where the image fed was split by the processor here (``tile_layout``); None:
        the file's own guess."""
        per = self._frame_keys
        frame = (self.family.vision_grid(per) if self.family is not None and per else None) or (
            PatchGrid.infer(per) if per else None
        )
        if frame is None or frame.offset or n_keys % per:
            return None
        return laid_out(PatchGrid(frame.rows, frame.cols, n_keys - per, lead_images=n_keys // per - 1), self._split)

    def rows(self, n_keys: int) -> list[PatchGrid]:
        """A padded batch's rows of different numbers of frames: each row's own frames' grid among the ``n_keys``
        keys (its padding's keys after them); [] where every row's are all."""
        per, rows = self._frame_keys, self._row_frames
        if len(set(rows)) < 2 or max(rows) * per != n_keys:
            return []
        grids = [self.grid(k * per) for k in rows]
        return [g for g in grids if g is not None] if all(g is not None for g in grids) else []
