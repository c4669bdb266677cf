"""Idefics3 / SmolVLM (SigLIP-style tower, pixel shuffle, Llama decoder).

The processor (``Idefics3ImageProcessor``, followed step by step): resize so the longest edge is
``size.longest_edge`` (even sides), then — with ``do_image_splitting`` — up to multiples of
``max_image_size.longest_edge`` (M) and cut into M × M tiles, row by row, followed by the whole image resized to
M × M (the global image); without splitting, the image resized to M × M alone.  Rescale, normalise.  Each M × M
image gives ``(M/p)² / s²`` features (``p`` the vision patch, ``s`` the pixel-shuffle ``scale_factor``: each
feature is an s × s block of patches), laid out as an ``M/(p·s)`` square.

The prompt (``Idefics3Processor``): each ``<image>`` becomes, per tile,
``<fake_token_around_image><row_r_col_c>`` and its features' ``<image>`` tokens, a newline after each row of tiles,
then ``\\n<fake_token_around_image><global-img>`` with the global image's tokens and a closing
``<fake_token_around_image>``; unsplit, only the global part.  The expanded text goes through the tokenizer whole
(its newlines are the tokenizer's own).  Image tokens are labelled as the tower labels its patches
(:func:`~attnviz.core.patch_names.patch_name`): ``tile k·(r,c)`` (tile ``k`` in reading order, feature row and
column) and ``(r,c)`` (the global image); the result's token grid places the tiles side by side
on the resized image, each key column on its tile and feature cell, and the global image's keys on a grid of their
own over the same picture (``PatchGrid.global_grid``: Image regions draws it beside the tiles).

Several images in one prompt (``Idefics3Processor`` with a list of images for one text): each ``<image>`` becomes
its own image's expansion, in order, and the row's ``pixel_values`` hold every image's frames one after another;
the tokens are labelled ``img1·tile 0·(r,c)``, ``img2(r,c)`` (each image ends with its global image's run).
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

MAX_IMAGE_SIZE = 4096  # the processor's absolute cap on a side
FAKE, GLOBAL, IMAGE = "<fake_token_around_image>", "<global-img>", "<image>"
MAX_TILES = 6  # the processor's <row_r_col_c> tokens go up to 6 x 6
RESAMPLE = {0: "NEAREST", 1: "LANCZOS", 2: "BILINEAR", 3: "BICUBIC", 4: "BOX", 5: "HAMMING"}  # PIL's numbering


def _longest_edge(d: object, key: str, where: str) -> int:
    v = d.get(key) if isinstance(d, dict) else None
    edge = v.get("longest_edge") if isinstance(v, dict) else None
    if not isinstance(edge, int) or edge <= 0:
        raise AttnvizError(f"{where}: preprocessor_config.json has no {key}.longest_edge; give the repository's own")
    return edge


def rescaled_to_max_len(h: int, w: int, max_len: int) -> tuple[int, int]:
    """The longest edge to ``max_len``, the other by the aspect ratio, made even (the processor's rounding)."""
    ratio = w / h
    if w >= h:
        w, h = max_len, int(max_len / ratio)
        h += h % 2
    else:
        h, w = max_len, int(max_len * ratio)
        w += w % 2
    return max(h, 1), max(w, 1)


def below_upper_bound(h: int, w: int, max_len: int = MAX_IMAGE_SIZE) -> tuple[int, int]:
    ratio = w / h
    if w >= h and w > max_len:
        w, h = max_len, int(max_len / ratio)
    elif h > w and h > max_len:
        h, w = max_len, int(max_len * ratio)
    return max(h, 1), max(w, 1)


def for_vision_encoder(h: int, w: int, m: int) -> tuple[int, int]:
    """Both sides up to multiples of the tile side ``m`` (the processor's resize_for_vision_encoder)."""
    ratio = w / h
    if w >= h:
        w = math.ceil(w / m) * m
        h = math.ceil(int(w / ratio) / m) * m
    else:
        h = math.ceil(h / m) * m
        w = math.ceil(int(h * ratio) / m) * m
    return h, w


class Idefics3(Family):
    name = "idefics3"
    placeholder = IMAGE
    # Idefics3Processor takes a list of images for one text: each <image> becomes its own image's tiles and global
    # image, in order; the row's pixel_values hold every image's frames one after another (its images axis)
    several_images = True
    tower_alone = True  # vision_encoder.onnx alone: the tiles and global image as pixel_values [1, frames, 3, M, M]
    glob: int | None = None  # the tokenizer's <global-img> (each image's last run follows it), once tokens() is made

    def __init__(self, config: dict, preprocessor: dict, processor: dict, where: str):
        super().__init__(config, preprocessor, processor, where)
        self.cells: dict[int, tuple[int, int]] = {}  # the tokenizer's <row_r_col_c> ids, each its cell (tokens())
        vision = config.get("vision_config")
        if not isinstance(vision, dict):
            raise AttnvizError(f"{where}: config.json has no vision_config; give the repository's own config.json")
        self.token = config_int(config, "image_token_id", where)
        self.scale = config_int(config, "scale_factor", where) if "scale_factor" in config else 2
        patch, tile = config_int(vision, "patch_size", where), config_int(vision, "image_size", where)
        self.tile = _longest_edge(preprocessor, "max_image_size", where)
        if tile != self.tile or tile % (patch * self.scale):
            raise AttnvizError(
                f"{where}: tiles of {self.tile} pixels (preprocessor_config.json max_image_size) do not fit the "
                f"vision tower ({tile} pixels, patch {patch}, scale factor {self.scale}); the config files do not "
                "belong together"
            )
        self.patches = tile // patch  # a tile's patch grid side
        self.side = self.patches // self.scale  # its feature grid side after the pixel shuffle
        declared = processor.get("image_seq_len")
        if isinstance(declared, int) and declared != self.n:
            raise AttnvizError(
                f"{where}: processor_config.json expands <image> to {declared} tokens and a tile gives {self.n} "
                "features; the config files do not belong together"
            )
        self.split = bool(preprocessor.get("do_image_splitting", True))
        self.longest = _longest_edge(preprocessor, "size", where) if preprocessor.get("do_resize", True) else None
        self.resample = RESAMPLE.get(preprocessor.get("resample", 1), "LANCZOS")
        self.rescale = (
            float(preprocessor.get("rescale_factor", 1 / 255)) if preprocessor.get("do_rescale", True) else 1.0
        )
        norm = preprocessor.get("do_normalize", True)
        self.mean = np.asarray(preprocessor.get("image_mean", [0.5] * 3) if norm else [0.0] * 3, np.float32)
        self.std = np.asarray(preprocessor.get("image_std", [0.5] * 3) if norm else [1.0] * 3, np.float32)

    @property
    def n(self) -> int:
        return self.side * self.side

    # -- the image -------------------------------------------------------------------
    def pixel_shape(self, px: ip.IOInfo) -> list:
        return ["batch", "images", 3, self.tile, self.tile]

    def _resize(self, img, h: int, w: int):
        from PIL import Image

        return img.resize((w, h), getattr(Image.Resampling, self.resample))

    def process(self, img) -> tuple[list, np.ndarray, Tiles]:
        """A PIL RGB image -> its M × M frames (tiles row by row, then the global image; or the image alone),
        the resized image the tiles cover, and the split (Idefics3ImageProcessor, PIL backend, in order)."""
        if self.longest is not None:
            h, w = below_upper_bound(*rescaled_to_max_len(img.height, img.width, self.longest))
            img = self._resize(img, h, w)
        m = self.tile
        if not self.split:
            img = self._resize(img, m, m)
            return [img], np.asarray(img), Tiles()
        img = self._resize(img, *for_vision_encoder(img.height, img.width, m))
        if img.height <= m and img.width <= m:
            return [img], np.asarray(img), Tiles()
        rows, cols = (img.height - m) // m + 1, (img.width - m) // m + 1
        frames = [img.crop((c * m, r * m, c * m + m, r * m + m)) for r in range(rows) for c in range(cols)]
        return [*frames, self._resize(img, m, m)], np.asarray(img), Tiles(rows, cols)

    def load_image(self, source: str | Path, spec: ip.ImageSpec) -> LoadedImage:
        from attnviz.runtime.raster import open_raster

        with open_raster(Path(source)) as im:  # raster formats only, pixel cap, first frame
            img = im.convert("RGB")
        frames, shown, tiles = self.process(img)
        if tiles.rows > MAX_TILES or tiles.cols > MAX_TILES:
            raise AttnvizError(
                f"the image splits into {tiles.rows} x {tiles.cols} tiles and the processor names at most "
                f"{MAX_TILES} x {MAX_TILES}; give a smaller image"
            )
        a = np.stack([np.asarray(f, np.float64) for f in frames]) * self.rescale
        px = (a.astype(np.float32) - self.mean) / self.std
        split = f"{tiles.rows}x{tiles.cols} tiles of {self.tile} and a global image" if tiles.rows else "one image"
        info = (
            f"Idefics3 processor: {shown.shape[0]}x{shown.shape[1]}, {split}, mean "
            f"{'/'.join(f'{v:.3g}' for v in self.mean)}, std {'/'.join(f'{v:.3g}' for v in self.std)}"
        )
        return LoadedImage(px.transpose(0, 3, 1, 2)[None].astype(np.float32), shown, tiles, info)

    def vision_feeds(self, vision_inputs: list[ip.IOInfo], pixels: np.ndarray) -> dict[str, np.ndarray]:
        feeds = {vision_inputs[0].name: pixels}
        for i in vision_inputs[1:]:  # pixel_attention_mask: every pixel of a real image (tiles are never padded)
            real = np.asarray(self.images_per_row(pixels))[:, None] > np.arange(pixels.shape[1])[None]
            mask = np.broadcast_to(real[:, :, None, None], (*pixels.shape[:2], *pixels.shape[-2:]))
            feeds[i.name] = mask.astype(np.dtype(i.dtype) if i.dtype != "bool" else np.bool_)
        return feeds

    def images_per_row(self, pixels: np.ndarray) -> list[int]:
        """The real images of each row: the processor pads rows with all-zero images (get_image_features drops
        them; they come last)."""
        real = np.abs(pixels).reshape(*pixels.shape[:2], -1).max(axis=2) > 0
        return [int(r.sum()) for r in real]

    def probe_pixels(self, spec: ip.ImageSpec) -> np.ndarray:
        return np.ones((1, 1, 3, self.tile, self.tile), np.float32)

    def vision_grid(self, n_keys: int) -> PatchGrid | None:
        """The vision block's keys are each image's patches, tile after tile; the last image is the global one,
        the whole image: its patches are placed."""
        per = self.patches * self.patches
        if n_keys < per or n_keys % per:
            return None
        return PatchGrid(self.patches, self.patches, n_keys - per, lead_images=n_keys // per - 1)

    def frames_at_most(self) -> tuple[int, int] | None:
        """Tiles up to the resized longest edge's multiple of the tile (at most MAX_TILES a side: more is refused)
        and the global image; an image alone where the processor does not split."""
        per = self.patches * self.patches
        if not self.split:
            return 1, per
        side = MAX_TILES if self.longest is None else min(MAX_TILES, -(-self.longest // self.tile))
        return side * side + 1, per

    # -- the prompt ------------------------------------------------------------------
    def expansion(self, tiles: Tiles) -> str:
        """What the processor writes for one ``<image>`` (Idefics3Processor.replace_image_token)."""
        run = IMAGE * self.n
        glob = f"{FAKE}{GLOBAL}{run}{FAKE}"
        if not tiles.rows:
            return glob
        rows = "".join(
            "".join(f"{FAKE}<row_{r + 1}_col_{c + 1}>{run}" for c in range(tiles.cols)) + "\n"
            for r in range(tiles.rows)
        )
        return f"{rows}\n{glob}"

    def tokens(self, inner: ip.TextEncoder) -> ip.TextEncoder:
        tok = Idefics3Tokens(inner, self)
        self.glob, self.cells = tok.glob, tok.cells
        return tok

    def frames_each(self, ids: np.ndarray, frames: int) -> list[int] | None:
        """Each image's frames from the prompt's ids: its runs of image tokens (a tile each) up to and with the run
        after ``<global-img>`` (its global image, the image's last)."""
        if self.glob is None:
            return None
        row = np.asarray(ids, np.int64)
        on = row == self.token
        starts = np.flatnonzero(on & ~np.concatenate([[False], on[:-1]]))
        out, k = [], 0
        for st in starts:
            k += 1
            if st > 0 and row[st - 1] == self.glob:
                out.append(k)
                k = 0
        return out if not k and sum(out) == frames else None

    def splits(self, ids: np.ndarray) -> list[Tiles | None] | None:
        """Each image's split from its tiles' ``<row_r_col_c>`` markers, which the decoder reads before each
        tile's tokens (the processor writes them from its own split, row by row)."""
        if self.glob is None:
            return None
        return [split_of(runs) for runs in by_image(image_runs(ids, self.token, self.cells, self.glob))]

    def probe_ids(self) -> list[int]:
        return [self.token] * self.n

    def describe(self) -> dict:
        return super().describe() | {
            "tile": self.tile,
            "grid": [self.side, self.side],
            "splitting": self.split,
            "scale_factor": self.scale,
        }


Run = tuple[tuple[int, int] | None, int, int]  # (a tile's cell, None for the global image; first key; length)


def image_runs(ids, token: int, cells: dict[int, tuple[int, int]], glob: int) -> list[Run]:
    """``(tile cell or None for the global image, first key, length)`` of each run of image tokens ``token``,
    with the marker just before it (``cells``: each ``<row_r_col_c>`` id's 0-based cell; ``glob``:
    ``<global-img>``)."""
    runs: list[Run] = []
    mark: tuple[int, int] | None = None
    k = 0
    ids = [int(i) for i in ids]
    while k < len(ids):
        i = ids[k]
        if i == token:
            start = k
            while k < len(ids) and ids[k] == token:
                k += 1
            runs.append((mark, start, k - start))
            continue
        if i in cells:
            mark = cells[i]
        elif i == glob:
            mark = None
        k += 1
    return runs


def by_image(runs: list[Run]) -> list[list[Run]]:
    """:func:`image_runs` by image: each image's tile runs and its global image's run, which ends it."""
    out: list[list[Run]] = [[]]
    for run in runs:
        out[-1].append(run)
        if run[0] is None:
            out.append([])
    return [r for r in out if r]


def split_of(runs: list[Run]) -> Tiles | None:
    """One image's split as its markers name it: its tiles' cells, row by row, fill ``rows`` × ``cols``
    (the processor writes them so); ``Tiles()`` for an image not split; None for markers out of that order."""
    cells = [cell for cell, _, _ in runs if cell is not None]
    if not cells:
        return Tiles()
    rows, cols = max(r for r, _ in cells) + 1, max(c for _, c in cells) + 1
    return Tiles(rows, cols) if cells == [(r, c) for r in range(rows) for c in range(cols)] else None


def _one_id(inner: ip.TextEncoder, text: str) -> int:
    ids = inner.encode(text, add_special=False).ids
    if len(ids) != 1:
        raise AttnvizError(f"the tokenizer has no {text} token; give the repository's own tokenizer")
    return ids[0]


class Idefics3Tokens(ip.TextEncoder):
    """The folder's tokenizer with the processor's expansion of ``<image>`` for one image's split."""

    def __init__(self, inner: ip.TextEncoder, family: Idefics3, tiles: Tiles | None = None):
        self.inner, self.family, self.tiles = inner, family, tiles
        self.each: list[Tiles] | None = None  # one prompt's several images: each one's split, in order
        self.unk_id = inner.unk_id
        self.fake, self.glob = _one_id(inner, FAKE), _one_id(inner, GLOBAL)
        self.cells = {
            _one_id(inner, f"<row_{r}_col_{c}>"): (r - 1, c - 1)
            for r in range(1, MAX_TILES + 1)
            for c in range(1, MAX_TILES + 1)
        }

    def for_image(self, tiles: Tiles | None) -> ip.TextEncoder:
        out = Idefics3Tokens.__new__(Idefics3Tokens)
        out.__dict__.update(self.__dict__, tiles=tiles, each=None)
        return out

    def for_images(self, tiles_each: list) -> ip.TextEncoder:
        if len(tiles_each) <= 1:
            return self.for_image(tiles_each[0] if tiles_each else None)
        out = Idefics3Tokens.__new__(Idefics3Tokens)
        out.__dict__.update(self.__dict__, tiles=tiles_each[0], each=[t or Tiles() for t in tiles_each])
        return out

    def encode(self, text: str, pair: str | None = None, add_special: bool = True) -> ip.Encoded:
        found = text.count(IMAGE)
        if self.each:  # several images: each <image> becomes its own image's tiles and global image, in order
            if found != len(self.each):
                raise self.family.placeholder_count(found, len(self.each))
            parts = text.split(IMAGE)
            text = parts[0] + "".join(self.family.expansion(t) + rest for t, rest in zip(self.each, parts[1:]))
        elif found > 1:  # one image given: its placeholder once (or an image for each)
            raise self.family.placeholder_count(found, 1)
        elif IMAGE in text:
            text = text.replace(IMAGE, self.family.expansion(self.tiles or Tiles()))
        e = self.inner.encode(text, pair, add_special)
        e.tokens = [lab if i == self.family.token else t for i, t, lab in zip(e.ids, e.tokens, self.row_labels(e.ids))]
        e.special = [s and i != self.family.token for i, s in zip(e.ids, e.special)]
        return e

    def label(self, i: int) -> str:
        return self.inner.label(i)

    def _runs(self, ids) -> list[Run]:
        return image_runs(ids, self.family.token, self.cells, self.glob)

    def _images(self, ids) -> list[list[Run]]:
        return by_image(self._runs(ids))

    def row_labels(self, ids) -> list[str]:
        """Tile ``k`` (reading order within its image) ``tile k·(r,c)``, the global image ``(r,c)``, as the tower
        names its patches (here on the decoder's feature grid); a run longer than one image's features counts on
        as the next image of that kind.  Several images in the row (each ending with its global image):
        ``img1·tile 0·(r,c)``, ``img2(r,c)``, ..."""
        out = [self.inner.label(int(i)) for i in ids]
        side, n = self.family.side, self.family.n
        images = self._images(ids)
        for k, runs in enumerate(images):
            which = k + 1 if len(images) > 1 else None
            tile = -1
            for cell, start, length in runs:
                tile = 0 if cell == (0, 0) else tile + 1
                for j in range(length):
                    r, c = divmod(j % n, side)
                    out[start + j] = patch_name(r, c, None if cell is None else tile, which)
        return out

    def image_grid(self, ids) -> PatchGrid | None:
        """The first image's tiles side by side (each key column on its tile's feature cell) with its global image
        (the whole picture at one tile's resolution) as the grid's ``global_grid``, or the global image alone when
        it was not split; ``stop`` after the global image's closing marker."""
        return self._grid(self._runs(ids), ids)

    def image_grids(self, ids) -> list[PatchGrid]:
        """Each image's tiles and global image on its grid (:meth:`image_grid`), in order."""
        grids = [self._grid(runs, ids) for runs in self._images(ids)]
        return [g for g in grids if g is not None] if all(g is not None for g in grids) else []

    def _grid(self, runs: list[Run], ids) -> PatchGrid | None:
        side, n = self.family.side, self.family.n
        tiles: dict[tuple[int, int], int] = {}
        for cell, start, length in runs:
            if length != n:
                return None
            if cell is not None:
                tiles[cell] = start
                continue
            stop = start + n + (1 if start + n < len(ids) and int(ids[start + n]) == self.fake else 0)
            if not tiles:
                return PatchGrid(side, side, start, stop=stop)
            rows, cols = max(r for r, _ in tiles) + 1, max(c for _, c in tiles) + 1
            if len(tiles) != rows * cols:
                return None
            columns = [
                tiles[y // side, x // side] + (y % side) * side + x % side
                for y in range(rows * side)
                for x in range(cols * side)
            ]
            whole = PatchGrid(side, side, start)
            return PatchGrid(
                rows * side, cols * side, min(columns), columns=tuple(columns), stop=stop, global_grid=whole
            )
        return None

    def is_special(self, i: int) -> bool:
        return i != self.family.token and self.inner.is_special(i)

    @property
    def size(self) -> int:
        return self.inner.size
