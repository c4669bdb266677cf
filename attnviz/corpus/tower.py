"""A vision–language model's vision file alone (Idefics3 / SmolVLM's ``onnx/vision_encoder.onnx``,
:mod:`attnviz.runtime.vlm_tower`) over a folder of images (``attnviz corpus VISION_ENCODER.onnx --images DIR``).

Each image goes through the family's processor, as ``attnviz open --image`` sends it: its tiles, then its global
image, one frame each.  A batch's images are one run, a shorter image's row padded with all-zero frames (the
processor's own padding: the file drops them, and gives one map per real frame).

The statistics are each frame's, over that frame's own map, and not over the block-diagonal map the view draws
(the image's frames' maps on the diagonal, nothing off it).  The tower runs each frame by itself: a patch can only
see its own frame's patches, so the off-diagonal zeros are the packing, not the head's choice.  Over the
block-diagonal map, "broad" would divide each row's entropy by the log of every frame's keys (with SmolVLM's 1024
patches a frame a uniform row would score 0.81 in a 2 × 2-tile image, 0.86 in a 2 × 1 one and 1 in an image of one
frame: the split, not the head), "first" would be the mass on tile 0's corner seen only by tile 0's rows, and "prev" would count each frame's first row against the last patch of the frame
before it, which it cannot see.  Per frame, a head's statistics mean the same whatever the split, and they are the
statistics of the tower run on that frame alone (transformers' vision model's attention).

An item is still the image: its rows are every frame's rows (its per-item mean and its best row are over all of
them), numbered as the view numbers them (frame ``f``'s patch ``i`` at ``f · P + i``, the global image last), so an
example's row and key are the view's and are named as its axis names them: ``tile k·(r,c)`` for tile ``k``'s patch,
``(r,c)`` for the global image's (:func:`patch_names`; examples.parquet's ``row_patch`` and ``col_patch``).
"""

from __future__ import annotations

import numpy as np

from attnviz.core.attention import PatchGrid
from attnviz.core.row_sums import FIXED_KEYS, ItemStats
from attnviz.core.stats import row_stats
from attnviz.core.view.frame_map import tile_name
from attnviz.core.view.patches import GLOBAL_PANEL
from attnviz.corpus.fold import HeadGroup, Partial, fold_items, signs
from attnviz.corpus.plan import MAP_BUDGET_BYTES
from attnviz.runtime.vlm_families import Tiles


def images_per_batch(family, heads: int, batch_size: int, budget: int = MAP_BUDGET_BYTES) -> int:
    """At most ``batch_size`` images a batch, fewer where their maps (``heads`` in all layers, each image's most
    frames, each frame's keys squared, float32) would pass ``budget`` (as text batches end: plan.plan_encoded); at
    least one.  SmolVLM's 17 frames of 1024 patches are ~10 GB of maps an image: one image a batch."""
    most = family.frames_at_most()
    if most is None:
        return batch_size
    frames, per = most
    return max(1, min(batch_size, budget // max(1, frames * heads * per * per * 4)))


def tower_feeds(model, images: list[str], image_spec) -> tuple[dict[str, np.ndarray], list[int], list[Tiles]]:
    """The images through the family's processor, one row each (padded with all-zero frames to the batch's most
    frames), each image's frame count and its split (its frames' names: :func:`frame_name`).  A missing preprocessor_config.json or an image that cannot be read is
    one line (:meth:`~attnviz.runtime.vlm_tower.TowerFrames.require_family`, the raster reader)."""
    family = model.frames.require_family(raw=False)
    loaded = [family.load_image(p, image_spec) for p in images]
    pixels = [im.pixels for im in loaded]  # each [1, frames, 3, M, M]
    counts = [int(px.shape[1]) for px in pixels]
    batch = np.zeros((len(pixels), max(counts), *pixels[0].shape[2:]), np.float32)
    for b, px in enumerate(pixels):
        batch[b, : px.shape[1]] = px[0]
    return {model.frames.image_input.name: batch}, counts, [im.tiles for im in loaded]


def reduce_tower(
    maps: list[np.ndarray], groups: list[HeadGroup], counts: list[int], items: list[int], k: int, batch_id: int
) -> Partial:
    """A batch's :class:`Partial` from the file's maps, one per real frame ``[frames, H, P, P]`` (the images'
    frames one after another, ``counts`` of each image): each frame's rows' statistics (:func:`row_stats` over
    its own map), an image's rows gathered in the view's order (see the module)."""
    counts_a = np.asarray(counts, np.int64)
    most = int(counts_a.max())
    starts = np.concatenate([[0], np.cumsum(counts_a)[:-1]])
    have = np.arange(most)[None, :] < counts_a[:, None]  # [B, most]: the image has that frame
    frame_of = np.where(have, starts[:, None] + np.arange(most)[None, :], 0)  # [B, most] its row in the maps
    parts = []
    for g in groups:
        p = maps[g.site]
        n_frames, _, per, _ = p.shape
        values, valid = row_stats(p, np.full(n_frames, per, np.int64))
        b = len(counts)

        def gathered(a: np.ndarray) -> np.ndarray:  # [frames, H, P] -> [B, H, most · P], frame by frame
            return a[frame_of].transpose(0, 2, 1, 3).reshape(b, a.shape[1], most * per)

        vals = {name: gathered(v) for name, v in values.items()}
        ok = {name: (v[frame_of] & have[..., None]).reshape(b, most * per) for name, v in valid.items()}

        def key_of(name: str, rows: np.ndarray, p=p, per=per) -> np.ndarray:
            """The key (in the image's numbering) that row ``rows [B, H]`` scored with: within its own frame."""
            frame, local = np.divmod(rows, per)
            if name in FIXED_KEYS:
                off = FIXED_KEYS[name]
                return frame * per if off is None else rows + off  # "first": the frame's first patch
            if name in ("special", "special_other"):  # a tower's frames have no special keys: the frame's first
                return frame * per
            heads = np.arange(rows.shape[1])[None, :]
            at = np.take_along_axis(frame_of, frame, 1)  # [B, H] the frame's row in the maps
            return frame * per + p[at, heads, local].argmax(-1)

        parts.append((g, ItemStats.from_rows(vals, ok, key_of, False, signs(g.kind))))
    tokens = int(sum(counts)) * int(maps[groups[0].site].shape[-1])
    return fold_items(parts, items, k, batch_id, tokens)


def patch_names(frames: int, rows: int, cols: int) -> list[str]:
    """The view's names of an image's keys (its ``frames`` of ``rows`` × ``cols`` patches, the global image last):
    ``tile k·(r,c)`` (core/patch_names.py), then ``(r,c)`` (:func:`attnviz.runtime.adapters.patch_axis` on the tower's grid)."""
    from attnviz.runtime.adapters import patch_axis

    per = rows * cols
    grid = PatchGrid(rows, cols, (frames - 1) * per, lead_images=frames - 1)
    return list(patch_axis(grid, frames * per).labels)


def frame_name(frame: int, frames: int, layout: tuple[int, int]) -> str:
    """Frame ``frame`` of an image's ``frames`` as the Head map's frame box names it (the whole model's and the tower
    alone's alike): "tile 1 (row 0, col 1)" by its place in the processor's split ``layout`` (tile rows, columns;
    0, 0 unsplit or not known), "global image" last beside tiles, "image" for an image not split."""
    if frames == 1:
        return "image"
    return GLOBAL_PANEL if frame == frames - 1 else tile_name(frame, layout if layout[0] else None)
