"""SVG output whose images are scaled by the viewer without smoothing (as :mod:`attnviz.figures.pdf_out`).

matplotlib marks an unsampled image ``image-rendering:crisp-edges;image-rendering:pixelated``, which a
renderer that knows neither value ignores and smooths (cairosvg 2.9 drew a 9 x 9 map as a blur; it knows
``optimizeSpeed``, CSS Images 3's deprecated name of ``crisp-edges``): that is added last.  A browser that takes
it draws crisp edges, one that rejects it keeps ``pixelated``.

librsvg (2.54: ``rsvg-convert``, GNOME's viewer, Inkscape's import on Linux, svg -> pdf in LaTeX pipelines)
smooths an image whatever it asks (bench/RESULTS.md session 21, pdfcells21): one pixel a cell came out a blur.
So in SVG only, each cell (an image pixel) is embedded as a block of ``ky x kx`` pixels, enough that the image
has at least ``PRINT_DPI`` pixels an inch at its size in the figure: a smoothing renderer then blends only a
pixel-wide band at a cell's edge, as crisp as print.  The blocks cost little in the file (PNG's row filters
turn a repeated row and a run of one colour into zeros); ``MAX_PIXELS`` bounds the image all the same.
PDF stays one pixel a cell (``/Interpolate false`` is honoured by every PDF viewer tried).
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.transforms import Affine2D, Transform

SVG_PIXELATED = b'style="image-rendering:crisp-edges;image-rendering:pixelated"'
SVG_CRISP = b'style="image-rendering:crisp-edges;image-rendering:pixelated;image-rendering:optimizeSpeed"'

PRINT_DPI = 300  # the embedded image has at least this many pixels an inch (cells permitting the cap below)
MAX_PIXELS = 16_000_000  # ~a 13 in map at 300 dpi; the blocks shrink (never below a pixel a cell) past it


def crisp_svg(data: bytes) -> bytes:
    """matplotlib's SVG with its unsampled images' style made crisp in older renderers too (an attribute's
    quotes are never in an SVG's text, which is escaped: only the images' ``style`` attributes match)."""
    return data.replace(SVG_PIXELATED, SVG_CRISP)


def writes_svg(renderer) -> bool:
    """Whether ``renderer`` writes SVG (itself, or under the mixed-mode renderer that ``savefig`` wraps it in)."""
    from matplotlib.backends.backend_svg import RendererSVG  # loaded by now whenever an SVG is being written

    return isinstance(getattr(renderer, "_renderer", renderer), RendererSVG)


def block_factors(shape: tuple[int, int], trans: Transform, units_per_inch: float) -> tuple[int, int]:
    """``(ky, kx)``: the pixels a cell takes down and across so that an image of ``shape`` cells, placed by
    ``trans`` (image pixels -> the renderer's units), has at least ``PRINT_DPI`` pixels an inch, both scaled
    down together (to no less than 1) where the image would pass ``MAX_PIXELS``."""
    h, w = shape
    o, x, y = trans.transform(np.array([[0.0, 0.0], [w, 0.0], [0.0, h]]))
    inches_w = float(np.hypot(*(x - o))) / units_per_inch
    inches_h = float(np.hypot(*(y - o))) / units_per_inch
    kx = max(1, math.ceil(PRINT_DPI * inches_w / w))
    ky = max(1, math.ceil(PRINT_DPI * inches_h / h))
    over = (h * ky) * (w * kx) / MAX_PIXELS
    if over > 1:
        s = 1 / math.sqrt(over)
        kx, ky = max(1, math.floor(kx * s)), max(1, math.floor(ky * s))
    return ky, kx


def in_blocks(im: np.ndarray, trans: Transform, units_per_inch: float) -> tuple[np.ndarray, Transform]:
    """``im`` (``[H, W, 4]`` uint8, an unsampled image) with each pixel a ``ky x kx`` block, and the transform
    that places the larger image where ``trans`` placed ``im``."""
    ky, kx = block_factors(im.shape[:2], trans, units_per_inch)
    if kx == ky == 1:
        return im, trans
    big = np.repeat(np.repeat(im, ky, axis=0), kx, axis=1)
    return big, Affine2D().scale(1 / kx, 1 / ky) + trans
