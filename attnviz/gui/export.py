"""Exports: a view as PNG / SVG / PDF, the maps as .npz -- always written atomically.

Vector and publication figures go through the shared matplotlib renderer
(:mod:`attnviz.figures`) when it is installed; otherwise the view is rendered with Qt
(PNG by grab, SVG with QSvgGenerator, PDF with QPdfWriter).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from PySide6.QtCore import QMarginsF, QRect, QSize
from PySide6.QtGui import QPageLayout, QPageSize, QPainter, QPdfWriter
from PySide6.QtWidgets import QWidget

from attnviz import AttnvizError
from attnviz.core.io import save_npz

VIEW_FORMATS = (".png", ".svg", ".pdf")


def _tmp_beside(path: Path) -> str:
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise AttnvizError(f"cannot write {path}: folder {parent} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".attnviz-", suffix=path.suffix, dir=parent)
    except OSError as e:
        raise AttnvizError(f"cannot write {path}: {e.strerror}; choose a writable folder") from None
    os.close(fd)
    return tmp


def _finish(tmp: str, path: Path, ok: bool) -> Path:
    if not ok or not Path(tmp).exists() or Path(tmp).stat().st_size == 0:
        Path(tmp).unlink(missing_ok=True)
        raise AttnvizError(f"could not write {path}; check the folder is writable and has space")
    os.replace(tmp, path)
    return path


def export_widget(widget: QWidget, path: str | os.PathLike) -> Path:
    """Render ``widget`` to PNG / SVG / PDF by extension (GUI thread only)."""
    path = Path(path)
    ext = path.suffix.lower()
    if ext not in VIEW_FORMATS:
        raise AttnvizError(f"cannot export to {path.name}: use a .png, .svg or .pdf file name (or .npz for the maps)")
    tmp = _tmp_beside(path)
    ok = False
    try:
        size = widget.size()
        if ext == ".png":
            pm = widget.grab()
            ok = pm.save(tmp, "PNG")
        elif ext == ".svg":
            from PySide6.QtSvg import QSvgGenerator

            gen = QSvgGenerator()
            gen.setFileName(tmp)
            gen.setSize(size)
            gen.setViewBox(QRect(0, 0, size.width(), size.height()))
            gen.setTitle("attnviz")
            p = QPainter(gen)
            widget.render(p)
            ok = p.end()
        else:
            w = QPdfWriter(tmp)
            w.setResolution(96)
            w.setPageSize(QPageSize(QSize(size.width(), size.height()), QPageSize.Point))
            w.setPageMargins(QMarginsF(0, 0, 0, 0), QPageLayout.Point)
            p = QPainter(w)
            widget.render(p)
            ok = p.end()
    except AttnvizError:
        raise
    except Exception:
        ok = False
    return _finish(tmp, path, ok)


def export_npz(result, path: str | os.PathLike) -> Path:
    """The raw maps in the ``attnviz extract`` format (worker-safe)."""
    path = Path(path)
    if path.suffix.lower() != ".npz":
        path = path.with_suffix(".npz")
    return save_npz(result, path)


def figures_renderer():
    """``attnviz.figures.render_figure`` when the figures package is available, else None."""
    try:
        from attnviz.figures import render_figure  # type: ignore[attr-defined]
    except Exception:
        return None
    return render_figure
