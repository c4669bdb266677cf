"""Image regions, the drawing: the smoothed heat and what lies under it.

Upsampling a patch map to the image (a Gaussian blur of half a cell, so a hot cell's contours are round), the
bases under the heat (:data:`IMAGE_BASES`), the heat's opacity and the composite.  Numbers only: the screen and the
figure paint these arrays alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from attnviz.core.view.selection import ViewError

SMOOTH_SIGMA = 0.5  # cells: the blur that makes a lone hot cell's contours round (and no wider than its neighbours)
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _cell_weights(n_out: int, n_in: int) -> np.ndarray:
    """``[n_out, n_in]``: how much of each cell a Gaussian (σ = ``SMOOTH_SIGMA`` cells) centred on each output pixel
    covers, the edge cells reaching out to infinity so that every row sums to 1."""
    x = (np.arange(n_out) + 0.5) * n_in / n_out - 0.5  # the pixel's position in cell units
    edges = np.arange(n_in + 1) - 0.5
    edges[0], edges[-1] = -np.inf, np.inf
    cdf = 0.5 * (1.0 + _erf((edges[None, :] - x[:, None]) / (SMOOTH_SIGMA * math.sqrt(2.0))))
    return np.diff(cdf, axis=1).astype(np.float32)


def upsample(patch: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Smooth upsampling of a ``[rows, cols]`` map to ``size``: the map as cells, blurred by a Gaussian of half a
    cell.  Bilinear interpolation drew "+"-shaped streaks around a hot cell (a product of two tents has
    star-shaped contours); the blurred cells' contours are round, and each pixel is a weighted mean of the cells
    (within the map's range, 0 stays ≥ 0)."""
    h, w = size
    r, c = patch.shape
    p = np.asarray(patch, np.float32)
    return (_cell_weights(h, r) @ p @ _cell_weights(w, c).T).astype(np.float32)


def grey_base(image: np.ndarray) -> np.ndarray:
    """Lightened luminance ``[H, W]`` in [0.25, 1] of an image: a neutral base that does not fight the heat."""
    img = np.asarray(image, np.float32)
    lum = img if img.ndim == 2 else img[..., :3] @ np.array([0.299, 0.587, 0.114], np.float32)
    lum = lum / 255.0 if img.max() > 1.0 else lum
    return 0.25 + 0.75 * np.clip(lum, 0.0, 1.0)


def _colour_base(image: np.ndarray) -> np.ndarray:
    img = np.asarray(image, np.float32)
    img = np.stack([img] * 3, axis=-1) if img.ndim == 2 else img[..., :3]
    return np.clip(img / 255.0 if img.max() > 1.0 else img, 0.0, 1.0)


def _grey_rgb(image: np.ndarray) -> np.ndarray:
    return np.repeat(grey_base(image)[..., None], 3, axis=-1)


def _no_base(image: np.ndarray) -> np.ndarray:
    return np.ones(np.asarray(image).shape[:2] + (3,), np.float32)  # never seen: the heat is opaque


# image regions: what lies under the heat -> (menu text, base [H, W, 3] in [0, 1]); screen and figure draw this
IMAGE_BASES: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]] = {
    "grey": ("grey image", _grey_rgb),  # the default: colours of the image cannot be mistaken for heat
    "colour": ("colour image", _colour_base),  # where colour is the content (which object is where)
    "none": ("heat only", _no_base),  # the smoothed map alone, opaque
}


def check_image_base(name: str) -> str:
    if name not in IMAGE_BASES:
        raise ViewError(f"unknown image base {name!r}; use one of {', '.join(IMAGE_BASES)}", param="image_base")
    return name


def base_rgb(image: np.ndarray, base: str = "grey") -> np.ndarray:
    """``[H, W, 3]`` float32 in [0, 1]: what the image-regions view shows under the heat."""
    return np.asarray(IMAGE_BASES[check_image_base(base)][1](image), np.float32)


def overlay_alpha(heat: np.ndarray, base: str = "grey") -> np.ndarray:
    """Opacity of the heat: grows with the weight over an image (unattended regions keep it visible); opaque alone."""
    if check_image_base(base) == "none":
        return np.ones_like(heat, dtype=np.float32)
    return (0.2 + 0.7 * heat).astype(np.float32)


def composite(image: np.ndarray, heat_rgb: np.ndarray, alpha: np.ndarray, base: str = "grey") -> np.ndarray:
    """``[H, W, 3]`` uint8: the chosen base under the heat colours (``heat_rgb`` in [0, 1]) at ``alpha``."""
    under = base_rgb(image, base)
    a = alpha[..., None]
    return np.clip(255.0 * (under * (1 - a) + heat_rgb[..., :3] * a), 0, 255).round().astype(np.uint8)
