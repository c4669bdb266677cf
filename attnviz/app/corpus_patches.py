"""A tower corpus example's patches (``attnviz corpus VISION_ENCODER.onnx --images DIR``, corpus/tower.py): its
query and key named as the view names them, and where they lie on the image.

examples.parquet names an example's row and key as the view's axis does (``row_patch`` / ``col_patch``:
``tile k·(r,c)`` for tile ``k``'s patch, ``(r,c)`` for the global image's: :mod:`attnviz.core.patch_names`).  The
Corpus view shows those labels where a text corpus shows its row and key, and their names in words ("tile 0 patch
(2, 3)", Image regions' wording:
:func:`attnviz.core.view.patch_label`).  Where the run's model and the image are still there, the image goes through
the family's processor again (a preprocessing, no model run) to find the processor's split, so each patch gets its
box on the image as the processor resized it: a tile's patch on its tile, in place; a global image's patch on the
whole picture (the global image is the whole picture resized to one tile).  An image that no longer splits into the
frames the labels name (it changed since the run) keeps the names and says why it has no boxes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from attnviz import AttnvizError
from attnviz.core.attention import PatchGrid
from attnviz.core.patch_names import TILE_PATCH, canonical
from attnviz.core.view.patches import GLOBAL_PANEL, patch_label, tiles_in_place

Box = tuple[float, float, float, float]  # (top, left, bottom, right) in the shown image's pixels

_GLOBAL = re.compile(r"\((\d+),(\d+)\)")


@dataclass(frozen=True)
class PatchRegion:
    """One patch of an example: its axis label, its name in words, and (with the image) its box and its frame's
    (its tile's, or the whole picture for the global image's)."""

    label: str
    name: str
    box: Box | None = None
    frame: Box | None = None


@dataclass(frozen=True)
class ExampleImage:
    """An example's query and key patches, and the image they lie on (None: names only, ``note`` says why)."""

    query: PatchRegion
    key: PatchRegion
    shown: np.ndarray | None = None  # [H, W, 3] uint8, the image as the processor resized it (its tiles cover it)
    note: str = ""


def is_tower_example(example: dict) -> bool:
    return isinstance(example.get("row_patch"), str) and isinstance(example.get("col_patch"), str)


def label_name(label: str, frames: int | None = None) -> str:
    """A patch's name from its axis label and its image's ``frames`` (no image at hand), as the drawn view names
    it (:func:`patch_label`): "tile k patch (r, c)"; "global image patch (r, c)" beside tiles (several frames);
    "patch (r, c)" of an image the processor did not split (one frame: its picture alone, no global image beside
    anything), and where the frames are not known (results written before examples.parquet held them: the label
    ``(r,c)`` reads the same either way)."""
    m = TILE_PATCH.fullmatch(canonical(label))  # a label written before session 19 (t1(0,4)) reads the same
    if m:
        return f"tile {m[1]} patch ({m[2]}, {m[3]})"
    m = _GLOBAL.fullmatch(label)
    if m is None:
        return label
    return f"{GLOBAL_PANEL + ' ' if frames is not None and frames > 1 else ''}patch ({m[1]}, {m[2]})"


def frames_of(example: dict) -> int | None:
    """The example's image's frames (examples.parquet's ``frames``; None in results written before it)."""
    n = example.get("frames")
    return int(n) if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def names_only(example: dict, note: str = "") -> ExampleImage:
    q, k, n = str(example["row_patch"]), str(example["col_patch"]), frames_of(example)
    return ExampleImage(PatchRegion(q, label_name(q, n)), PatchRegion(k, label_name(k, n)), note=note)


def example_image(example: dict, model_path: str) -> ExampleImage:
    """The example's patches on its image (see the module); names only, with a one-line ``note``, where the model,
    its processor or the image cannot be read, or the image no longer matches the labels."""
    from attnviz.runtime.adapters import patch_axis  # the view's axis names (as corpus/tower.patch_names)

    try:
        frame, shown, rows, cols = _processed(model_path, str(example.get("image") or ""))
    except AttnvizError as e:
        return names_only(example, str(e))
    per, frames = frame.n, rows * cols + 1 if rows else 1
    glob = PatchGrid(frame.rows, frame.cols, (frames - 1) * per, lead_images=frames - 1)
    laid = tiles_in_place(glob, (rows, cols)) if rows else None
    labels = list(patch_axis(glob, frames * per).labels)
    q, k = int(example["row"]), int(example["col"])
    if not (0 <= q < len(labels) and 0 <= k < len(labels)) or [labels[q], labels[k]] != [
        canonical(str(example["row_patch"])),
        canonical(str(example["col_patch"])),
    ]:
        split = f"{rows} x {cols} tiles and a global image" if rows else "one frame"
        return names_only(
            example,
            f"{Path(str(example['image'])).name} now splits into {split}, not the frames the corpus run named; "
            "run the corpus again to see its patches on the image",
        )
    h, w = shown.shape[:2]
    return ExampleImage(_region(glob, laid, labels[q], q, h, w), _region(glob, laid, labels[k], k, h, w), shown)


def _region(glob: PatchGrid, laid: PatchGrid | None, label: str, key: int, h: int, w: int) -> PatchRegion:
    """Key ``key``: a tile's patch in its cell of the tiled picture (``laid``, its frame its tile), else the global
    image's (or an unsplit image's) patch over the whole picture."""
    grid = laid or glob
    name = patch_label(grid, key)
    at = laid.cell(key) if laid is not None else None
    if laid is not None and at is not None:
        down, across = laid.rows // glob.rows, laid.cols // glob.cols
        tile = key // glob.n
        frame = _cell(tile // across, tile % across, down, across, h, w)
        return PatchRegion(label, name, _cell(*at, laid.rows, laid.cols, h, w), frame)
    at = glob.cell(key)
    box = _cell(*at, glob.rows, glob.cols, h, w) if at is not None else None
    return PatchRegion(label, name, box, (0.0, 0.0, float(h), float(w)))


def _cell(r: int, c: int, rows: int, cols: int, h: int, w: int) -> Box:
    return (r * h / rows, c * w / cols, (r + 1) * h / rows, (c + 1) * w / cols)


def _processed(model_path: str, image: str) -> tuple[PatchGrid, np.ndarray, int, int]:
    """A frame's patch grid, and the image through the run's model's family processor: the picture its tiles cover
    and the split (rows, cols; 0, 0 unsplit).  Kept for the latest few (each selection change asks again)."""
    m, p = Path(model_path), Path(image)
    if not model_path or not m.is_file():
        raise AttnvizError(f"the model {model_path} is gone; its patches are named, not drawn")
    if not image or not p.is_file():
        raise AttnvizError(f"the image {image} is gone; its patches are named, not drawn")
    return _loaded(str(m), m.stat().st_mtime_ns, str(p), p.stat().st_mtime_ns)


@lru_cache(maxsize=8)
def _loaded(model: str, _model_mtime: int, image: str, _image_mtime: int) -> tuple[PatchGrid, np.ndarray, int, int]:
    from attnviz.runtime import inputs as ip
    from attnviz.runtime.sidecar import sidecar_json
    from attnviz.runtime.vlm_families import family_for

    # the family from the config files beside the model, as its tower opened alone reads them (runtime/vlm_tower.py)
    family = family_for(
        sidecar_json(model, "config.json"),
        sidecar_json(model, "preprocessor_config.json"),
        sidecar_json(model, "processor_config.json"),
        Path(model).name,
    )
    most = family.frames_at_most()
    frame = family.vision_grid(most[1]) if most is not None else None
    # the family's processor reads its own config files; the spec is attnviz's own image path's, unused here
    loaded = family.load_image(image, ip.image_spec({}, []))
    if frame is None or loaded is None:
        raise AttnvizError(f"{family.name}'s processor does not split images; its patches are named, not drawn")
    return frame, loaded.shown, loaded.tiles.rows, loaded.tiles.cols
