"""PDF output whose images are scaled by the viewer without smoothing: a map's cells, embedded a pixel a cell
(:class:`attnviz.figures.cells.VectorCells`), stay crisp squares at any zoom; every image says ``/Interpolate false``.

``/Interpolate`` defaults to false in the PDF specification (ISO 32000 §8.9.5.3), but matplotlib omits the key; it
is written out, so that the file says what it means whatever a viewer's default. matplotlib's PDF writer has no
option for it: its :class:`PdfFile` is swapped for one that adds the key to every image XObject's dictionary (the
figures embed no image that wants smoothing: maps are cells, a photo is shown at its own pixels), through
:class:`PdfPages`, matplotlib's public way of handing ``savefig`` a writer.
"""

from __future__ import annotations

from typing import IO

from matplotlib.backends.backend_pdf import Name, PdfFile, PdfPages


class _CrispPdfFile(PdfFile):
    def beginStream(self, id, len, extra=None, png=None):
        if extra is not None and extra.get("Subtype") == Name("Image"):
            extra = {**extra, "Interpolate": False}
        super().beginStream(id, len, extra, png)


class _CrispPages(PdfPages):
    # matplotlib 3.11: where PdfPages opens its PdfFile (private; tests/figures/test_vector_cells.py checks the key)
    def _ensure_file(self):
        if self._file is None:
            self._file = _CrispPdfFile(self._filename, metadata=self._metadata)
        return self._file


def crisp_pages(out: IO[bytes], metadata: dict) -> PdfPages:
    """A :class:`PdfPages` into ``out`` whose images say ``/Interpolate false``: its ``savefig`` of a figure writes
    what the figure's own ``savefig`` to a PDF writes, with that key (``render.figure_bytes`` saves through it, in
    memory)."""
    return _CrispPages(out, metadata=metadata)
