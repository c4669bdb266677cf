"""A map's cells drawn at the output's pixels in bytes: matplotlib's ``imshow`` with its float pipeline skipped.

Drawing an image, matplotlib resamples the map's values (or their float64 RGBA) to every output pixel and colours
them there: a map ~13 in square at 300 dpi is 15 million pixels, and its float64 RGBA copies (~0.5 GB each) made
a 16 in figure take 1.5 GB and 4-10 s of CPU whatever the token count (bench/RESULTS.md session 20 figmem20).
:class:`CellImage` colours each cell once, in bytes, and lets the same Agg resampler place a cell *number* per
output pixel (exact in float32 up to 2**24 cells; a map side is pooled to at most ``MAX_CELLS``): the pixels
are those of ``imshow(..., interpolation="nearest")`` (tests/figures/test_cells.py compares them), the memory a
few bytes a pixel.

In a vector output (PDF, SVG) the map is not rasterised at the figure's dpi at all: it is embedded at CELL
resolution, one image pixel a cell (or a pooled cell: the heat maps pool to at most a device pixel a cell at the
figure's dpi, ``views._cells_drawn``), and the viewer scales it without smoothing (matplotlib's "unsampled" image:
SVG ``image-rendering:pixelated``; PDF ``/Interpolate false``, written by ``render.figure_bytes``).  In SVG each
cell is a block of pixels (:mod:`attnviz.figures.svg_out`: librsvg smooths whatever the file asks).  Every cell
stays a crisp square at any zoom, and the file and the writer's memory are the cells', not ~15 M pixels
(bench/RESULTS.md session 21, pdfcells21).
"""

from __future__ import annotations

import numpy as np
from matplotlib import image as mimage
from matplotlib.image import AxesImage
from matplotlib.transforms import Affine2D, Bbox, IdentityTransform, Transform

from attnviz.figures.svg_out import in_blocks, writes_svg

EXACT_CELLS = 1 << 24  # float32 holds every whole number up to here: the most cells numbered exactly


def _svg_blocks(renderer, made: tuple) -> tuple:
    """``made`` (``make_image``'s answer for an image, unsampled) with each pixel a block of pixels when the
    output is SVG (:func:`attnviz.figures.svg_out.in_blocks`: librsvg smooths an embedded image)."""
    im, left, bottom, trans = made
    if im is None or not writes_svg(renderer):
        return made
    im, trans = in_blocks(im, trans, units_per_inch=renderer.points_to_pixels(72.0))  # SVG: 72 units an inch
    return im, left, bottom, trans


class VectorCells(AxesImage):
    """An :class:`AxesImage` that a vector backend embeds at its own pixels (a pixel a cell, or a photo's pixel,
    scaled by the viewer without smoothing; in SVG a block of pixels each, :func:`_svg_blocks`) instead of
    resampled to the figure's dpi.  Raster output (Agg) is untouched: Agg does not take a transformed image
    (``option_scale_image`` is False), so it never asks."""

    def _check_unsampled_image(self):
        return True

    def make_image(self, renderer, magnification=1.0, unsampled=False):
        made = super().make_image(renderer, magnification, unsampled)
        return _svg_blocks(renderer, made) if unsampled else made


def _vector(renderer) -> bool:
    """Whether ``renderer`` writes a vector file (PDF, SVG, PS: images placed by a transform) rather than pixels."""
    return bool(renderer.option_scale_image())


class RasterOnly(AxesImage):
    """Drawn in raster output only: in vector output a :class:`PhotoOverlay` above it draws it, composited.
    Never grouped with its neighbours by the backend (PDF and SVG would resample the group to the dpi)."""

    def can_composite(self):
        return False

    def draw(self, renderer):
        if not _vector(renderer):
            super().draw(renderer)


class PhotoOverlay(AxesImage):
    """A heat layer over a photo (a :class:`RasterOnly` below it): drawn as itself in raster output; in vector
    output as ``composite`` (``[H, W, 3|4]`` uint8 at the photo's pixels: the photo under the heat, what the two
    layers show), embedded at those pixels (one image, the photo at its own resolution)."""

    composite: np.ndarray

    def can_composite(self):
        return False

    def _check_unsampled_image(self):
        return True

    def make_image(self, renderer, magnification=1.0, unsampled=False):
        made = super().make_image(renderer, magnification, unsampled)
        return _svg_blocks(renderer, made) if unsampled else made

    def _make_image(self, A, *args, unsampled=False, **kw):
        # unsampled: only vector backends ask (Agg never does), and the composite has the heat's shape and extent
        return super()._make_image(self.composite if unsampled else A, *args, unsampled=unsampled, **kw)  # type: ignore[misc]


class CellImage(VectorCells):
    """An :class:`AxesImage` of a 2-D map drawn with nearest sampling: cells coloured once, in bytes, then placed
    (raster output); embedded a pixel a cell in vector output (:class:`VectorCells`)."""

    def _make_image(
        self, A, in_bbox, out_bbox, clip_bbox, magnification=1.0, unsampled=False, round_to_pixel_border=True
    ):
        plain = (
            unsampled
            or A.ndim != 2
            or self.get_interpolation() != "nearest"
            or A.size >= EXACT_CELLS
            or np.ma.getmask(A) is not np.ma.nomask
            or self.get_alpha() is not None
            or not hasattr(mimage, "_resample")  # a matplotlib without the private resampler: its own way
        )
        if plain:  # what this class does not cover is drawn the usual way
            return super()._make_image(  # type: ignore[misc]
                A, in_bbox, out_bbox, clip_bbox, magnification, unsampled, round_to_pixel_border
            )
        placed = _placement(self, A.shape, in_bbox, out_bbox, clip_bbox, magnification)
        if placed is None:
            return None, 0, 0, None
        x0, y0, (h, w), t = placed
        numbers = np.arange(1, A.size + 1, dtype=np.float32).reshape(A.shape)  # 0: a pixel outside the map
        # each output pixel's cell number, as Agg's nearest sampling picks it (imshow's own resampler)
        resample = mimage._resample  # type: ignore[attr-defined]
        at = resample(self, numbers, (h, w), t)
        del numbers
        colours = np.zeros(A.size + 1, np.uint32)
        colours[1:] = self.to_rgba(A, bytes=True).view(np.uint32).ravel()
        out = colours[at.astype(np.int32)].view(np.uint8).reshape(h, w, 4)
        return out, x0 / magnification, y0 / magnification, t


def _placement(image: AxesImage, shape, in_bbox, out_bbox, clip_bbox, magnification: float):
    """The output box (whole pixels) and the image-to-pixel transform, as ``AxesImage._make_image`` computes them
    for a resampled image (matplotlib 3.11; the pixel comparison in tests/figures/test_cells.py would catch a
    change): ``(x0, y0, (height, width), transform)``, or None when nothing shows."""
    clipped = Bbox.intersection(out_bbox, clip_bbox)
    if clipped is None:
        return None
    e = np.asarray(clipped.extents) * magnification
    # rounded to the nearest output pixel, with the base class's fudge on the sides away from Agg's anchor
    x0, y0 = np.floor(e[0] + 0.5), np.ceil(e[1] - 0.5 - 1e-8)
    x1, y1 = np.floor(e[2] + 0.5 + 1e-8), np.ceil(e[3] - 0.5)
    if x1 - x0 <= 0 or y1 - y0 <= 0:
        return None
    rows, cols = shape
    t0: Transform = Affine2D().translate(0, -rows).scale(1, -1) if image.origin == "upper" else IdentityTransform()
    t0 += (
        Affine2D().scale(in_bbox.width / cols, in_bbox.height / rows).translate(in_bbox.x0, in_bbox.y0)
        + image.get_transform()
    )
    t = t0 + Affine2D().scale(magnification).translate(-x0, -y0)
    return x0, y0, (int(y1 - y0), int(x1 - x0)), t


def as_vector_cells(image: AxesImage) -> VectorCells:
    """``image`` embedded at its own pixels in vector output, drawn exactly as before in raster output (its class
    swapped to :class:`VectorCells`, which changes nothing else)."""
    image.__class__ = VectorCells
    assert isinstance(image, VectorCells)
    return image


def raster_only(image: AxesImage) -> RasterOnly:
    """``image`` drawn as before in raster output and, in vector output, by the overlay above it (:class:`RasterOnly`)."""
    image.__class__ = RasterOnly
    assert isinstance(image, RasterOnly)
    return image


def photo_overlay(image: AxesImage, composite: np.ndarray) -> PhotoOverlay:
    """``image`` (a heat layer over a :func:`raster_only` photo) drawn as ``composite`` in vector output."""
    image.__class__ = PhotoOverlay
    assert isinstance(image, PhotoOverlay)
    image.composite = composite
    return image


def as_cells(image: AxesImage) -> CellImage:
    """``image`` (from ``ax.imshow``, which sets its limits, aspect and clip path) drawn as a :class:`CellImage`:
    its class swapped, its state the same (CellImage adds no state, only the way it is rasterised)."""
    image.__class__ = CellImage
    assert isinstance(image, CellImage)
    return image
