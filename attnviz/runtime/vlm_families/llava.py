"""LLaVA (CLIP-ViT + Llama): ``<image>`` becomes one token per patch of the vision grid (the CLS token dropped,
``vision_feature_select_strategy`` "default"), as ``LlavaProcessor`` expands it; the image is resized to the
tower's size by attnviz's own preprocessing (the folder's preprocessor_config.json mean / std)."""

from __future__ import annotations

import functools
from typing import Protocol

from attnviz import AttnvizError
from attnviz.core.attention import PatchGrid
from attnviz.core.patch_names import in_image, patch_name
from attnviz.runtime import inputs as ip
from attnviz.runtime.vlm_families.base import Family, Tiles

SELECT_STRATEGIES = {"default": 1, "full": 0}  # vision_feature_select_strategy -> leading tokens dropped (CLS)


class Llava(Family):
    name = "llava"
    several_images = True  # LlavaProcessor expands each <image> to one image's tokens, in order

    def __init__(self, config: dict, preprocessor: dict, processor: dict, where: str):
        super().__init__(config, preprocessor, processor, where)
        token = config.get("image_token_index", config.get("image_token_id"))
        vision = config.get("vision_config")
        strategy = config.get("vision_feature_select_strategy", "default")
        if not isinstance(token, int) or not isinstance(vision, dict) or strategy not in SELECT_STRATEGIES:
            raise AttnvizError(
                f"{where}: config.json lacks image_token_index, vision_config or a known "
                "vision_feature_select_strategy; give the repository's own config.json"
            )
        image, patch = vision.get("image_size"), vision.get("patch_size")
        if not isinstance(image, int) or not isinstance(patch, int) or patch <= 0:
            raise AttnvizError(f"{where}: config.json's vision_config has no image_size / patch_size")
        self.token = token
        self.rows = self.cols = image // patch
        declared = preprocessor.get("image_seq_length", config.get("image_seq_length"))
        if isinstance(declared, int) and declared != self.n + (1 - SELECT_STRATEGIES[strategy]):
            raise AttnvizError(
                f"{where}: the processor expands <image> to {declared} tokens and the vision grid has {self.n} "
                "patches; the config files do not belong together"
            )
        if strategy == "full":
            raise AttnvizError(
                f"{where}: vision_feature_select_strategy 'full' (CLS kept) is not placed on the grid yet"
            )

    @property
    def n(self) -> int:
        return self.rows * self.cols

    def label(self, k: int) -> str:
        return patch_name(*divmod(k % self.n, self.cols))  # as the tower names its patch (core/patch_names.py)

    def tokens(self, inner: ip.TextEncoder) -> ip.TextEncoder:
        return LlavaTokens(inner, self)

    def probe_ids(self) -> list[int]:
        return [self.token] * self.n

    def describe(self) -> dict:
        return super().describe() | {"grid": [self.rows, self.cols]}


class ImageRun(Protocol):
    """What a tokenizer needs of a family whose prompt holds one run of ``n`` image tokens on one grid."""

    @property
    def token(self) -> int: ...
    @property
    def n(self) -> int: ...
    @property
    def rows(self) -> int: ...
    @property
    def cols(self) -> int: ...
    def label(self, k: int) -> str: ...
    @property
    def placeholder(self) -> str: ...
    def placeholder_count(self, found: int, count: int) -> AttnvizError: ...


class LlavaTokens(ip.TextEncoder):
    """The folder's tokenizer with LLaVA's placeholder expansion: each ``<image>`` becomes one token per image
    feature (as ``LlavaProcessor`` expands it), labelled ``(r,c)`` by its patch's row and column, as the tower names the patch."""

    def __init__(self, inner: ip.TextEncoder, family: ImageRun, count: int = 1):
        self.inner, self.family, self.count = inner, family, count
        self.unk_id = inner.unk_id
        # each id's label and specialness, looked up once: every call labels its whole prompt again (221 ids:
        # ~0.3 ms of a 30 ms caption through the tokenizer's id_to_token and clean_token)
        self._labels: dict[int, str] = {}
        self._special: dict[int, bool] = {}

    def for_image(self, tiles: Tiles | None) -> ip.TextEncoder:
        return self  # one image, one grid: nothing depends on the image

    def for_images(self, tiles_each: list) -> ip.TextEncoder:
        return self if len(tiles_each) <= 1 else LlavaTokens(self.inner, self.family, len(tiles_each))

    def encode(self, text: str, pair: str | None = None, add_special: bool = True) -> ip.Encoded:
        e = self.inner.encode(text, pair, add_special)
        if self.count > 1:  # several images: one placeholder each, matched in order
            found = sum(i == self.family.token for i in e.ids)
            if found != self.count:
                raise self.family.placeholder_count(found, self.count)
        out = ip.Encoded([], [], [], [])
        fam = self.family
        for i, t, s, ty in zip(e.ids, e.tokens, e.special, e.type_ids):
            if i == fam.token:
                out.ids += [i] * fam.n
                out.tokens += [fam.label(k) for k in range(fam.n)]
                out.special += [False] * fam.n
                out.type_ids += [ty] * fam.n
            else:
                out.ids.append(i)
                out.tokens.append(t)
                out.special.append(s)
                out.type_ids.append(ty)
        if self.count > 1:  # img1(r,c), img2(r,c), ...: which image each token belongs to
            out.tokens = self.row_labels(out.ids)
        return out

    def label(self, i: int) -> str:
        return self.inner.label(i)

    def row_labels(self, ids) -> list[str]:
        """Each run of placeholder ids numbered along the grid (every run, and every n ids of a run, start again at
        (0,0): one image's features each)."""
        out, k = [], 0
        run = self._run_labels
        token, labels = self.family.token, self._labels
        n = len(run)
        several = sum(int(i) == token for i in ids) > n
        image = 0
        for i in map(int, ids):
            if i == token:
                image += k % n == 0
                out.append(in_image(image, run[k % n]) if several else run[k % n])
                k += 1
            else:
                lab = labels.get(i)
                if lab is None:
                    lab = labels[i] = self.inner.label(i)
                out.append(lab)
                k = 0
        return out

    @functools.cached_property
    def _run_labels(self) -> list[str]:
        """One run's labels, made once (a run's n labels anew cost ~0.1 ms of each 196-token run)."""
        return [self.family.label(k) for k in range(self.family.n)]

    def image_grid(self, ids) -> PatchGrid | None:
        """The first image's run of tokens on the vision grid (Image regions draws the words' attention to it)."""
        placed = [k for k, i in enumerate(ids) if int(i) == self.family.token]
        if len(placed) < self.family.n:
            return None
        return PatchGrid(self.family.rows, self.family.cols, placed[0])

    def image_grids(self, ids) -> list[PatchGrid]:
        """Each image's run of ``n`` tokens on the vision grid, in order (adjacent images share one run of ids)."""
        placed = [k for k, i in enumerate(ids) if int(i) == self.family.token]
        n = self.family.n
        return [PatchGrid(self.family.rows, self.family.cols, placed[j]) for j in range(0, len(placed) - n + 1, n)]

    def is_special(self, i: int) -> bool:
        got = self._special.get(i)
        if got is None:
            got = self._special[i] = i != self.family.token and bool(self.inner.is_special(i))
        return got

    @property
    def size(self) -> int:
        return self.inner.size
