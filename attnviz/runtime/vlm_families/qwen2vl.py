"""Qwen2-VL: a ViT over 14-pixel patches of the
image at (nearly) its own size, each 2 × 2 window of patches merged into one image token, a Qwen2 decoder whose
rotary positions are three-dimensional.

The processor (``Qwen2VLImageProcessor``, PIL backend): ``smart_resize`` rounds each side to a multiple of
``patch_size · merge_size`` keeping the pixel count within ``[min_pixels, max_pixels]``; bicubic resize, rescale,
normalise; a still image is its own second frame (``temporal_patch_size`` 2), and the patches are flattened
window by window into ``[grid_t·grid_h·grid_w, C·T·P·P]`` with ``image_grid_thw = [1, grid_h, grid_w]``.  attnviz
keeps the resized image itself as the set's ``pixel_values`` (``[1, 3, H, W]``: the grid is its size) and
flattens it for the vision file (:func:`patchify`).  ``Qwen2VLProcessor`` repeats ``<|image_pad|>``
``grid_t·grid_h·grid_w / merge²`` times, inside ``<|vision_start|> … <|vision_end|>`` (a prompt without them gets
them in front, as the chat template puts the image before the text).

Positions (``get_rope_index``): text tokens count on all three M-RoPE axes; an image's tokens get (t, row, column)
of the merged grid, each offset by the position the image starts at; the text after it continues from the
largest position + 1.  A cached step's position is its count of tokens before it plus the prompt's delta (largest
position + 1 − its length), on all three axes.  The Hub's decoder takes ``position_ids [3, B, T]``; attnviz builds
them (:func:`rope_index`), numpy only.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from attnviz import AttnvizError
from attnviz.core.attention import PatchGrid
from attnviz.core.patch_names import patch_name
from attnviz.runtime import inputs as ip
from attnviz.runtime.vlm_families.base import Family, LoadedImage, Tiles, config_int

PAD, START, END = "<|image_pad|>", "<|vision_start|>", "<|vision_end|>"
RESAMPLE = {0: "NEAREST", 1: "LANCZOS", 2: "BILINEAR", 3: "BICUBIC", 4: "BOX", 5: "HAMMING"}  # PIL's numbering
CLIP_MEAN, CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen2VLImageProcessor's target size: sides multiples of ``factor``, pixels within the bounds, the aspect
    ratio kept as closely as the rounding allows."""
    if max(height, width) / min(height, width) > 200:
        raise AttnvizError(f"the image is {width}x{height}; Qwen2-VL takes aspect ratios up to 200, crop it")
    h, w = round(height / factor) * factor, round(width / factor) * factor
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h, w = (
            max(factor, math.floor(height / beta / factor) * factor),
            max(factor, math.floor(width / beta / factor) * factor),
        )
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h, w = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h, w


def patchify(image: np.ndarray, patch: int, merge: int, temporal: int) -> tuple[np.ndarray, np.ndarray]:
    """One normalised image ``[C, H, W]`` -> the processor's ``pixel_values [gh·gw, C·T·P·P]`` (merge windows row
    by row, their patches row by row; the image repeated ``temporal`` times) and ``image_grid_thw [1, 3]``."""
    c, height, width = image.shape
    gh, gw = height // patch, width // patch
    p = image.reshape(c, gh // merge, merge, patch, gw // merge, merge, patch).transpose(1, 4, 2, 5, 0, 3, 6)
    p = np.broadcast_to(p[:, :, :, :, :, None], (*p.shape[:5], temporal, *p.shape[5:]))
    return np.ascontiguousarray(p.reshape(gh * gw, c * temporal * patch * patch), np.float32), np.asarray(
        [[1, gh, gw]], np.int64
    )


def rope_index(ids: np.ndarray, mask: np.ndarray, image: int, grids: list[tuple[int, int, int]], merge: int):
    """transformers' ``Qwen2VLModel.get_rope_index`` for images: ``position_ids [3, B, T]`` (0 on padding) and the
    rope deltas ``[B, 1]`` (largest position + 1 − the row's real tokens).  ``grids``: every image's
    ``(t, h, w)`` in order over the batch (each run of ``image`` ids is one image's tokens)."""
    out = np.zeros((3, *ids.shape), np.int64)
    deltas = np.zeros((ids.shape[0], 1), np.int64)
    todo = iter(grids)
    for b in range(ids.shape[0]):
        real = mask[b] != 0
        row = ids[b][real]
        pieces, pos, k = [], 0, 0
        while k < len(row):
            end = k
            kind = row[k] == image
            while end < len(row) and (row[end] == image) == kind:
                end += 1
            if not kind:
                pieces.append(np.broadcast_to(np.arange(pos, pos + end - k), (3, end - k)))
                pos += end - k
            else:
                t, h, w = next(todo, (0, 0, 0))
                gt, gh, gw = t, h // merge, w // merge
                if gt * gh * gw != end - k:
                    raise AttnvizError(
                        f"a run of {end - k} image tokens and an image of {gt * gh * gw} tokens ({gh} x {gw}); "
                        f"write {PAD} once per image (it is expanded to the image's tokens)"
                    )
                tt, hh, ww = np.meshgrid(np.arange(gt), np.arange(gh), np.arange(gw), indexing="ij")
                pieces.append(np.stack([tt, hh, ww]).reshape(3, -1) + pos)
                pos += max(gh, gw)
            k = end
        got = np.concatenate(pieces, axis=1) if pieces else np.zeros((3, 0), np.int64)
        out[:, b, real] = got
        deltas[b, 0] = (got.max() + 1 if got.size else 0) - len(row)
    return out, deltas


class Qwen2VL(Family):
    name = "qwen2-vl"
    placeholder = PAD
    placed_when_missing = True  # the chat template's <|vision_start|><|image_pad|><|vision_end|> before the text
    position_axes = (3,)  # M-RoPE's temporal, row and column positions
    several_images = True  # Qwen2VLProcessor expands each <|image_pad|> to its image's tokens, in order
    separate_vision_runs = True  # the vision file attends within one image: each image is a run of its own
    sized_images = True  # the processor resizes each image to its own size (smart_resize)

    def __init__(self, config: dict, preprocessor: dict, processor: dict, where: str):
        super().__init__(config, preprocessor, processor, where)
        vision = config.get("vision_config")
        if not isinstance(vision, dict):
            raise AttnvizError(f"{where}: config.json has no vision_config; give the repository's own")
        self.token = config_int(config, "image_token_id", where)
        self.patch = config_int(vision, "patch_size", where)
        self.merge = config_int(vision, "spatial_merge_size", where)
        self.temporal = config_int(vision, "temporal_patch_size", where)
        for key, mine in (
            ("patch_size", self.patch),
            ("merge_size", self.merge),
            ("temporal_patch_size", self.temporal),
        ):
            theirs = preprocessor.get(key, mine)
            if theirs != mine:
                raise AttnvizError(
                    f"{where}: preprocessor_config.json's {key} is {theirs} and config.json's vision tower's {mine}; "
                    "the config files do not belong together"
                )
        # the pixel bounds: min_pixels / max_pixels (older files) or size's shortest_edge / longest_edge
        size: dict = preprocessor["size"] if isinstance(preprocessor.get("size"), dict) else {}
        bounds = {
            "min_pixels": size.get("shortest_edge", 56 * 56),
            "max_pixels": size.get("longest_edge", 28 * 28 * 1280),
        }
        bounds |= {k: preprocessor[k] for k in bounds if k in preprocessor}
        for k, v in bounds.items():
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise AttnvizError(
                    f"{where}: preprocessor_config.json's {k} is {v!r}, not a positive integer; give the repository's own"
                )
        self.min_pixels, self.max_pixels = bounds["min_pixels"], bounds["max_pixels"]
        self.resample = RESAMPLE.get(preprocessor.get("resample", 3), "BICUBIC")
        self.rescale = (
            float(preprocessor.get("rescale_factor", 1 / 255)) if preprocessor.get("do_rescale", True) else 1.0
        )
        norm = preprocessor.get("do_normalize", True)
        self.mean = np.asarray(preprocessor.get("image_mean", CLIP_MEAN) if norm else [0.0] * 3, np.float32)
        self.std = np.asarray(preprocessor.get("image_std", CLIP_STD) if norm else [1.0] * 3, np.float32)
        # the merged grid of the latest image (rows, columns of image tokens): its tokens' labels and place
        self.merged = (1, 1)
        # the latest run's several images (one prompt's), each one's merged grid in order; None: one image
        self.merged_each: list[tuple[int, int]] | None = None

    @property
    def factor(self) -> int:
        return self.patch * self.merge

    # -- the image -------------------------------------------------------------------
    def pixel_shape(self, px: ip.IOInfo) -> list:
        return ["batch", 3, "height", "width"]  # the resized image; the vision file's patches are made from it

    def load_image(self, source: str | Path, spec: ip.ImageSpec) -> LoadedImage:
        from PIL import Image

        from attnviz.runtime.raster import open_raster

        with open_raster(Path(source)) as im:  # raster formats only, pixel cap, first frame
            img = im.convert("RGB")
        h, w = smart_resize(img.height, img.width, self.factor, self.min_pixels, self.max_pixels)
        img = img.resize((w, h), getattr(Image.Resampling, self.resample))
        shown = np.asarray(img)
        a = (shown.astype(np.float64) * self.rescale).astype(np.float32)
        px = ((a - self.mean) / self.std).transpose(2, 0, 1)[None].astype(np.float32)
        self.merged, self.merged_each = (h // self.factor, w // self.factor), None
        info = (
            f"Qwen2-VL processor: {h}x{w} ({h // self.patch}x{w // self.patch} patches, "
            f"{self.merged[0]}x{self.merged[1]} image tokens), mean {'/'.join(f'{v:.3g}' for v in self.mean)}, "
            f"std {'/'.join(f'{v:.3g}' for v in self.std)}"
        )
        return LoadedImage(px, shown, Tiles(*self.merged), info)

    def grid_thw(self, pixels: np.ndarray) -> tuple[int, int, int]:
        h, w = pixels.shape[-2:]
        if h % self.factor or w % self.factor:
            raise AttnvizError(
                f"pixel_values of {h}x{w}: Qwen2-VL's sides are multiples of {self.factor} (patch × merge); "
                "give the image (attnviz resizes it as the processor does)"
            )
        return 1, h // self.patch, w // self.patch

    def vision_feeds(self, vision_inputs: list[ip.IOInfo], pixels: np.ndarray) -> dict[str, np.ndarray]:
        if pixels.ndim != 4 or pixels.shape[0] != 1:
            raise AttnvizError(
                f"pixel_values of shape {tuple(pixels.shape)}: Qwen2-VL's vision file takes one image "
                "[1, 3, H, W]; analyse one image at a time"
            )
        self.grid_thw(pixels)  # sides the processor makes (multiples of patch × merge)
        flat, thw = patchify(pixels[0], self.patch, self.merge, self.temporal)
        self.merged, self.merged_each = (int(thw[0, 1]) // self.merge, int(thw[0, 2]) // self.merge), None
        feeds = {vision_inputs[0].name: flat}
        for i in vision_inputs[1:]:  # image_grid_thw
            feeds[i.name] = thw.astype(np.dtype(i.dtype))
        return feeds

    def one_image_feeds(
        self, vision_inputs: list[ip.IOInfo], pixels: np.ndarray, sizes: np.ndarray | None = None
    ) -> list[dict[str, np.ndarray]]:
        each = super().one_image_feeds(vision_inputs, pixels, sizes)
        # the tokens' labels of a prompt given as raw feeds follow each image's grid (as the latest image's for one)
        hw = sizes if sizes is not None else [pixels.shape[-2:]] * pixels.shape[0]
        self.merged_each = [(int(h) // self.factor, int(w) // self.factor) for h, w in hw]
        return each

    def vision_batch(self, vision_inputs: list[ip.IOInfo]) -> str | None:
        """image_grid_thw counts the images (the flattened patches' first axis is their count)."""
        return vision_inputs[1].name if len(vision_inputs) > 1 else None

    def vision_grid(self, n_keys: int, merged: tuple[int, int] | None = None) -> PatchGrid | None:
        """The vision block's keys are the patches merge window by merge window (the processor's order): each
        cell names its key.  ``merged``: the image's merged grid (default the latest image's)."""
        m = self.merge
        rows, cols = merged or self.merged
        gh, gw = rows * m, cols * m
        if n_keys != gh * gw:
            return None
        keys = [((r // m) * (gw // m) + c // m) * m * m + (r % m) * m + c % m for r in range(gh) for c in range(gw)]
        return PatchGrid(gh, gw, 0, columns=tuple(keys), stop=n_keys)

    def vision_grid_of(self, image: int, n_keys: int) -> PatchGrid | None:
        """Each image of one prompt's several on its own merged grid (the latest run's)."""
        each = self.merged_each
        return self.vision_grid(n_keys, each[image] if each and image < len(each) else None)

    def probe_pixels(self, spec: ip.ImageSpec) -> np.ndarray:
        return np.zeros((1, 3, self.factor, self.factor), np.float32)

    # -- the prompt ------------------------------------------------------------------
    @property
    def n(self) -> int:
        return self.merged[0] * self.merged[1]

    def label(self, k: int) -> str:
        return patch_name(*divmod(k % self.n, self.merged[1]))  # as the tower names a patch (core/patch_names.py)

    def tokens(self, inner: ip.TextEncoder) -> ip.TextEncoder:
        return QwenTokens(inner, self)

    def probe_ids(self) -> list[int]:
        self.merged, self.merged_each = (1, 1), None  # probe_pixels: one merge window, one image token
        end = self.config.get("vision_end_token_id")
        return [self.token, end if isinstance(end, int) and end != self.token else 0]

    # -- the decoder -----------------------------------------------------------------
    def positions(
        self, ids: np.ndarray, mask: np.ndarray, pixels: np.ndarray, sizes: np.ndarray | None = None
    ) -> np.ndarray:
        """The prompt's M-RoPE ``position_ids [3, B, T]`` (each row's image the set's pixel_values; one prompt's
        several images of their own ``sizes``: each one's grid, in order)."""
        if sizes is not None:
            grids = [self.grid_thw(pixels[:1, :, : int(h), : int(w)]) for h, w in sizes]
        else:
            grids = [self.grid_thw(pixels)] * int(sum(_runs(row[m != 0], self.token) for row, m in zip(ids, mask)))
        return rope_index(ids, mask, self.token, grids, self.merge)[0]

    def describe(self) -> dict:
        return super().describe() | {
            "grid": list(self.merged),
            "merge": self.merge,
            "positions": "M-RoPE [3, B, T] (temporal, row, column)",
        }


def _runs(row: np.ndarray, token: int) -> int:
    """How many runs of ``token`` a row holds (one image each)."""
    on = row == token
    return int(on[0]) + int(np.count_nonzero(on[1:] & ~on[:-1])) if on.size else 0


class QwenTokens(ip.TextEncoder):
    """The folder's tokenizer with Qwen2VLProcessor's expansion: ``<|image_pad|>`` repeated once per merged image
    token, labelled ``(r,c)`` on the merged grid."""

    def __init__(
        self,
        inner: ip.TextEncoder,
        family: Qwen2VL,
        merged: tuple[int, int] | None = None,
        each: list[tuple[int, int]] | None = None,
    ):
        # each: one prompt's several images, every one's merged grid in order (merged: the first's)
        self.inner, self.family, self.merged, self.each = inner, family, merged, each
        self.count = len(each) if each else 1
        self.unk_id = inner.unk_id

    def for_image(self, tiles: Tiles | None) -> ip.TextEncoder:
        # the family's Tiles are the merged grid of image tokens (rows × columns)
        return self if not tiles or not tiles.rows else QwenTokens(self.inner, self.family, (tiles.rows, tiles.cols))

    def for_images(self, tiles_each: list) -> ip.TextEncoder:
        if len(tiles_each) <= 1:
            return self.for_image(tiles_each[0] if tiles_each else None)
        each = [(t.rows, t.cols) if t and t.rows else self.family.merged for t in tiles_each]
        return QwenTokens(self.inner, self.family, each[0], each)

    def _grids(self) -> list[tuple[int, int]]:
        """Each image's merged grid, in order (one image: the one grid; raw feeds: the latest run's images')."""
        return self.each or (None if self.merged else self.family.merged_each) or [self.merged or self.family.merged]

    def encode(self, text: str, pair: str | None = None, add_special: bool = True) -> ip.Encoded:
        if PAD not in text:  # the chat template's place for the images: before the text, one after the other
            text = (START + PAD + END) * self.count + text
        elif self.count > 1 and text.count(PAD) != self.count:
            raise self.family.placeholder_count(text.count(PAD), self.count)
        if self.each:  # several images: each placeholder becomes its own image's tokens, in order
            parts = text.split(PAD)
            text = parts[0] + "".join(PAD * (r * c) + rest for (r, c), rest in zip(self.each, parts[1:]))
            want = sum(r * c for r, c in self.each)
        else:
            rows, cols = self.merged or self.family.merged
            text = text.replace(PAD, PAD * (rows * cols))
            want = rows * cols
        e = self.inner.encode(text, pair, add_special)
        if sum(i == self.family.token for i in e.ids) % want:
            raise AttnvizError(f"the tokenizer does not keep {PAD} as one token; give the repository's own tokenizer")
        return ip.Encoded(e.ids, self._labels(e.ids), [self.is_special(i) for i in e.ids], e.type_ids)

    def label(self, i: int) -> str:
        return self.inner.label(i)

    def _labels(self, ids) -> list[str]:
        """``(r,c)`` along the merged grid; several images in the row: ``img1(r,c)``, ``img2(r,c)``, ... (each
        run of image tokens is one image, numbered in order, on its own grid)."""
        token, grids = self.family.token, self._grids()
        several = _runs(np.asarray(ids, np.int64), token) > 1
        out, k, image, cols = [], 0, 0, grids[0][1]
        for i in ids:
            if int(i) == token:
                if k == 0:
                    image += 1
                    cols = grids[min(image, len(grids)) - 1][1]
                out.append(patch_name(k // cols, k % cols, image=image if several else None))
                k += 1
            else:
                out.append(self.inner.label(int(i)))
                k = 0
        return out

    def row_labels(self, ids) -> list[str]:
        """Each run of image tokens numbered row by row along the merged grid."""
        return self._labels(ids)

    def image_grid(self, ids) -> PatchGrid | None:
        rows, cols = self._grids()[0]
        placed = [k for k, i in enumerate(ids) if int(i) == self.family.token]
        if len(placed) < rows * cols:
            return None
        return PatchGrid(rows, cols, placed[0])

    def image_grids(self, ids) -> list[PatchGrid]:
        """Each run of image tokens on its image's merged grid, in order."""
        grids = self._grids()
        on = np.asarray([int(i) == self.family.token for i in ids], bool)
        starts = [int(k) for k in np.flatnonzero(on & ~np.concatenate([[False], on[:-1]]))]
        out = []
        for j, k in enumerate(starts):
            rows, cols = grids[min(j, len(grids) - 1)]
            if on[k : k + rows * cols].sum() == rows * cols:
                out.append(PatchGrid(rows, cols, k))
        return out

    def is_special(self, i: int) -> bool:
        return i != self.family.token and self.inner.is_special(i)

    def decode(self, ids) -> str:
        return self.inner.decode(ids)

    @property
    def size(self) -> int:
        return self.inner.size
