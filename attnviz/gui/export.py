"""Exports: a view as PNG / SVG / PDF, the maps as .npz -- always written atomically.

Vector and publication figures go through the shared matplotlib renderer
(:mod:`attnviz.figures`) when it is installed; otherwise the view is rendered with Qt
(PNG by grab, SVG with QSvgGenerator, PDF with QPdfWriter).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QMarginsF, QPoint, QRect, QSizeF
from PySide6.QtGui import QPageLayout, QPageSize, QPainter, QPdfWriter
from PySide6.QtWidgets import QHeaderView, QWidget

from attnviz import AttnvizError
from attnviz.core.io import save_npz
from attnviz.core.writes import atomic_path

VIEW_FORMATS = (".png", ".svg", ".pdf")


def _render(widget: QWidget, device) -> bool:
    """Paint ``widget`` on ``device``; the painter always ends before the device goes away."""
    p = QPainter(device)
    if not p.isActive():
        return False
    try:
        QWidget.render(widget, p, QPoint(0, 0))  # the QWidget overload, also for QGraphicsViews
    finally:
        ok = p.end()
    return ok


# Fusion paints table header sections with gradients between colours of different specs (RGB and HSV), which
# QPdfEngine cannot express: it prints "unable to create a gradient between colors of different spec" once per
# section and drops the fill.  For a PDF the headers are painted flat (the button colour, thin rules) instead.
FLAT_HEADERS = (
    "QHeaderView::section { background-color: palette(button); border: 0px; "
    "border-right: 1px solid palette(mid); border-bottom: 1px solid palette(mid); padding: 2px; }"
)


@contextmanager
def _flat_headers(widget: QWidget) -> Iterator[None]:
    if not widget.findChildren(QHeaderView):
        yield
        return
    before = widget.styleSheet()
    widget.setStyleSheet(before + "\n" + FLAT_HEADERS)
    try:
        yield
    finally:
        widget.setStyleSheet(before)


def export_widget(widget: QWidget, path: str | os.PathLike) -> Path:
    """Render ``widget`` to PNG / SVG / PDF by extension (GUI thread only)."""
    path = Path(path)
    ext = path.suffix.lower()
    if ext not in VIEW_FORMATS:
        raise AttnvizError(f"cannot export to {path.name}: use a .png, .svg or .pdf file name (or .npz for the maps)")
    with atomic_path(path) as tmp_path:
        tmp = str(tmp_path)
        ok = _paint(widget, ext, tmp)
        if not ok or tmp_path.stat().st_size == 0:
            raise AttnvizError(f"could not write {path}; check the folder is writable and has space")
    return path


def _paint(widget: QWidget, ext: str, tmp: str) -> bool:
    ok = False
    try:
        size = widget.size()
        if ext == ".png":
            # encoded in memory, written by Python: a write that fails (a full disk) is the OSError atomic_path
            # words, not libpng's "libpng error: Write Error" printed on the terminal beside it
            data = QByteArray()
            buf = QBuffer(data)
            buf.open(QIODevice.OpenModeFlag.WriteOnly)
            ok = widget.grab().save(buf, "PNG")
            buf.close()
            if ok:
                Path(tmp).write_bytes(data.data())
        elif ext == ".svg":
            from PySide6.QtSvg import QSvgGenerator

            gen = QSvgGenerator()
            gen.setFileName(tmp)
            gen.setSize(size)
            gen.setViewBox(QRect(0, 0, size.width(), size.height()))
            gen.setTitle("attnviz")
            ok = _render(widget, gen)
            del gen
        else:
            w = QPdfWriter(tmp)
            w.setResolution(96)
            # 96 dpi device pixels -> points, so the page is exactly the widget
            w.setPageSize(QPageSize(QSizeF(size.width() * 0.75, size.height() * 0.75), QPageSize.Unit.Point))
            w.setPageMargins(QMarginsF(0, 0, 0, 0), QPageLayout.Unit.Point)
            with _flat_headers(widget):
                ok = _render(widget, w)
            del w  # QPdfWriter writes the file when it is destroyed
    except (AttnvizError, OSError):  # (an OSError: atomic_path names the file and the fix)
        raise
    except Exception as e:
        raise AttnvizError(f"could not export {Path(tmp).name}: {type(e).__name__}: {e}") from None
    return ok


def export_npz(result, path: str | os.PathLike) -> Path:
    """The raw maps in the ``attnviz extract`` format (worker-safe)."""
    path = Path(path)
    if path.suffix.lower() != ".npz":
        path = path.with_suffix(".npz")
    return save_npz(result, path)


def figures_renderer():
    """``attnviz.figures.render_figure`` when the figures package (and matplotlib) is available, else None."""
    try:
        from attnviz.figures import render_figure
    except Exception:
        return None
    return render_figure


# --------------------------------------------------------------------------- dialog memory
# file-dialog filters by extension; the remembered one is preselected next time
VIEW_FILTERS = {".png": "PNG image (*.png)", ".svg": "SVG vector (*.svg)", ".pdf": "PDF (*.pdf)"}


def view_dialog_start(settings, stem: str) -> tuple[str, str, str]:
    """(suggested path, all filters, selected filter) for Export view: the last folder and format used."""
    folder = settings.value("export/folder", "") or ""
    if folder and not Path(folder).is_dir():  # moved or deleted since: start where Qt starts
        folder = ""
    ext = settings.value("export/format", ".png") or ".png"
    if ext not in VIEW_FILTERS:
        ext = ".png"
    name = f"{stem}{ext}"
    start = str(Path(folder) / name) if folder else name
    filters = ";;".join([VIEW_FILTERS[ext]] + [f for e, f in VIEW_FILTERS.items() if e != ext])
    return start, filters, VIEW_FILTERS[ext]


def maps_dialog_start(settings, name: str = "attention.npz") -> str:
    folder = settings.value("export/folder", "") or ""
    return str(Path(folder) / name) if folder and Path(folder).is_dir() else name


def remember_export(settings, path: str | os.PathLike) -> None:
    """Keep the folder (and, for views, the format) of an export for the next dialog."""
    p = Path(path)
    settings.setValue("export/folder", str(p.parent.resolve()))
    if p.suffix.lower() in VIEW_FILTERS:
        settings.setValue("export/format", p.suffix.lower())
    settings.sync()
