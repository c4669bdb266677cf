"""Synthetic scenes with captions and gold object boxes for the ``captioning`` task.

A scene is a small RGB canvas (default 64×64, dark background) with two coloured shapes that do not touch: one
*large* (side 22–28 px) and one *small* (side 14–18 px).  Its caption names both and their spatial relation,
always mentioning the large object first, so the caption is a function of the image:

    "a red circle to the left of a blue square"      (relations: to the left of / to the right of / above / below)

The relation is the dominant axis of the displacement between the two box centres; scenes where the two axes
are within ``margin`` pixels of each other are re-drawn, so no caption is ambiguous.

Gold boxes are the exact pixel bounding boxes of the drawn masks (``x0, y0, x1, y1``, exclusive ends).  Every
colour and shape word of the caption maps to the box of its object (``word_boxes``), which is what the pointing
game scores.  Generation is deterministic in the seed; :func:`scene_split` draws train and test from different
seeds.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

Box = tuple[int, int, int, int]  # x0, y0, x1, y1 (pixels, ends exclusive)

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (230, 40, 40),
    "green": (40, 200, 60),
    "blue": (60, 100, 255),
    "yellow": (235, 215, 40),
    "purple": (180, 60, 220),
}
SHAPES = ("circle", "square", "triangle", "cross")
RELATIONS = ("to the left of", "to the right of", "above", "below")
BACKGROUND = (24, 24, 24)

LARGE = (22, 28)  # side range (inclusive) of the first-mentioned object
SMALL = (14, 18)


def vocabulary() -> list[str]:
    """Every word a caption can contain, in a fixed order."""
    words = ["a"] + list(COLOURS) + list(SHAPES)
    for rel in RELATIONS:
        for w in rel.split():
            if w not in words:
                words.append(w)
    return words


@dataclass(frozen=True)
class Scene:
    """One image with its caption.

    ``objects``: ``(colour, shape, box)`` in caption order; ``word_boxes``: caption word index -> box of the
    object that word names (the colour and the shape word of each object).
    """

    image: np.ndarray  # [H, W, 3] uint8
    words: tuple[str, ...]
    objects: tuple[tuple[str, str, Box], ...]
    word_boxes: dict[int, Box]
    masks: tuple[np.ndarray, ...]  # per object, [H, W] bool, the drawn pixels

    @property
    def caption(self) -> str:
        return " ".join(self.words)

    @property
    def boxes(self) -> tuple[Box, ...]:
        return tuple(b for _, _, b in self.objects)


def shape_mask(shape: str, x0: int, y0: int, side: int, size: tuple[int, int]) -> np.ndarray:
    """[H, W] bool mask of ``shape`` inscribed in the square ``(x0, y0, x0+side, y0+side)``."""
    H, W = size
    yy, xx = np.mgrid[0:H, 0:W]
    px, py = xx + 0.5, yy + 0.5  # pixel centres
    inside = (px >= x0) & (px < x0 + side) & (py >= y0) & (py < y0 + side)
    cx, cy, r = x0 + side / 2, y0 + side / 2, side / 2
    if shape == "circle":
        m = (px - cx) ** 2 + (py - cy) ** 2 <= r * r
    elif shape == "square":
        m = inside
    elif shape == "triangle":  # apex at the top centre, base at the bottom edge
        frac = (py - y0) / side
        m = inside & (np.abs(px - cx) <= frac * r)
    elif shape == "cross":  # a plus sign, arms one third of the side thick
        t = side / 6
        m = inside & ((np.abs(px - cx) <= t) | (np.abs(py - cy) <= t))
    else:
        raise ValueError(f"unknown shape {shape!r}")
    return m & inside


def _bbox(mask: np.ndarray) -> Box:
    ys, xs = np.nonzero(mask)
    return int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1


def _relation(first: Box, second: Box) -> tuple[str, float]:
    """Relation of ``first`` to ``second`` and how clear it is (|dominant| − |other| axis, px)."""
    cx1, cy1 = (first[0] + first[2]) / 2, (first[1] + first[3]) / 2
    cx2, cy2 = (second[0] + second[2]) / 2, (second[1] + second[3]) / 2
    dx, dy = cx2 - cx1, cy2 - cy1
    if abs(dx) >= abs(dy):
        return ("to the left of" if dx > 0 else "to the right of"), abs(dx) - abs(dy)
    return ("above" if dy > 0 else "below"), abs(dy) - abs(dx)


def make_scene(
    rng: random.Random, size: tuple[int, int] = (64, 64), margin: float = 6.0, gap: int = 2, noise: int = 0
) -> Scene:
    """Draw one scene (see module doc).  ``noise`` > 0 adds uniform per-pixel noise in ``[0, noise)``
    to the background only, so the masks stay exact."""
    H, W = size
    for _ in range(1000):
        c1, c2 = rng.choice(list(COLOURS)), rng.choice(list(COLOURS))
        s1, s2 = rng.choice(SHAPES), rng.choice(SHAPES)
        side1, side2 = rng.randint(*LARGE), rng.randint(*SMALL)
        x1, y1 = rng.randint(1, W - side1 - 1), rng.randint(1, H - side1 - 1)
        x2, y2 = rng.randint(1, W - side2 - 1), rng.randint(1, H - side2 - 1)
        # keep the two squares apart by `gap` pixels
        if not (x1 + side1 + gap <= x2 or x2 + side2 + gap <= x1 or y1 + side1 + gap <= y2 or y2 + side2 + gap <= y1):
            continue
        m1, m2 = shape_mask(s1, x1, y1, side1, size), shape_mask(s2, x2, y2, side2, size)
        b1, b2 = _bbox(m1), _bbox(m2)
        rel, clarity = _relation(b1, b2)
        if clarity < margin:
            continue
        break
    else:  # pragma: no cover - the constraints above are loose enough for any canvas >= 48 px
        raise RuntimeError("could not place two objects; use a larger canvas")
    img = np.empty((H, W, 3), dtype=np.uint8)
    img[:] = BACKGROUND
    if noise:
        nrng = np.random.default_rng(rng.getrandbits(32))
        img = np.clip(img.astype(np.int16) + nrng.integers(0, noise, (H, W, 1)), 0, 255).astype(np.uint8)
    img[m1] = COLOURS[c1]
    img[m2] = COLOURS[c2]
    words = ["a", c1, s1, *rel.split(), "a", c2, s2]
    n_rel = len(rel.split())
    word_boxes = {1: b1, 2: b1, 3 + n_rel + 1: b2, 3 + n_rel + 2: b2}
    return Scene(
        image=img, words=tuple(words), objects=((c1, s1, b1), (c2, s2, b2)), word_boxes=word_boxes, masks=(m1, m2)
    )


def make_scenes(n: int, seed: int = 0, size: tuple[int, int] = (64, 64), noise: int = 0) -> list[Scene]:
    rng = random.Random(seed)
    return [make_scene(rng, size, noise=noise) for _ in range(n)]


def scene_split(
    n_train: int = 8000, n_test: int = 500, seed: int = 0, size: tuple[int, int] = (64, 64), noise: int = 0
) -> tuple[list[Scene], list[Scene]]:
    """Train and held-out scenes from different seeds (a scene is a continuous draw: repeats are negligible)."""
    return make_scenes(n_train, seed, size, noise), make_scenes(n_test, seed + 10_007, size, noise)
