"""SVG output whose images are scaled by the viewer without smoothing (as :mod:`attnviz.figures.pdf_out`).

matplotlib marks an unsampled image ``image-rendering:crisp-edges;image-rendering:pixelated``, which a
renderer that knows neither value ignores and smooths (cairosvg 2.9 drew a 9 x 9 map as a blur; it knows
``optimizeSpeed``, CSS Images 3's deprecated name of ``crisp-edges``): that is added last.  A browser that takes
it draws crisp edges, one that rejects it keeps ``pixelated`` (librsvg 2.54 smooths an image whatever it asks:
bench/RESULTS.md session 21, pdfcells21).
"""

from __future__ import annotations

SVG_PIXELATED = b'style="image-rendering:crisp-edges;image-rendering:pixelated"'
SVG_CRISP = b'style="image-rendering:crisp-edges;image-rendering:pixelated;image-rendering:optimizeSpeed"'


def crisp_svg(data: bytes) -> bytes:
    """matplotlib's SVG with its unsampled images' style made crisp in older renderers too (an attribute's
    quotes are never in an SVG's text, which is escaped: only the images' ``style`` attributes match)."""
    return data.replace(SVG_PIXELATED, SVG_CRISP)
