"""QApplication set-up, the bundled demo model, and the screenshot mode."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import attnviz

DEMO_PREFERENCE = (
    "translation.onnx",
    "captioning.onnx",
    "sequence-classification.onnx",
    "vit-classification.onnx",
    "forecasting.onnx",
    "spoken-digits",  # a speech folder (encoder_model.onnx + decoder_model.onnx + its configs and sample clip)
)
SPEECH_ENCODER = "encoder_model.onnx"  # what makes a folder under models/ a (speech) demo


def models_dir() -> Path:
    """The demo models: ``attnviz/demos`` in an installed wheel, else the checkout's ``models/`` (editable install)."""
    pkg = Path(attnviz.__file__).resolve().parent
    packaged = pkg / "demos"
    return packaged if packaged.is_dir() else pkg.parent / "models"


def demo_models(folder: Path | None = None) -> list[Path]:
    """Every bundled demo (the .onnx files and the speech folders), in :data:`DEMO_PREFERENCE` order, others after
    by name (File ▸ Open demo lists them)."""
    folder = folder or models_dir()
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if (p.suffix == ".onnx" and p.is_file()) or (p / SPEECH_ENCODER).is_file()]
    rank = {name: i for i, name in enumerate(DEMO_PREFERENCE)}
    return sorted(found, key=lambda p: (rank.get(p.name, len(rank)), p.name))


def demo_model(folder: Path | None = None) -> Path | None:
    """The bundled demo: translation first, then the others in a fixed order."""
    found = demo_models(folder)
    return found[0] if found else None


def scratch_settings():
    """Settings of one scripted run (``open --screenshot``), in a new temporary folder (:func:`drop_scratch` removes
    it): a screenshot neither restores the user's saved layout (a window once narrowed left every later screenshot a
    sliver of a Model dock) nor records its own session, layout and recent files over theirs."""
    import tempfile

    from PySide6.QtCore import QSettings

    folder = tempfile.mkdtemp(prefix="attnviz-screenshot-")
    return QSettings(os.path.join(folder, "settings.ini"), QSettings.Format.IniFormat)


def drop_scratch(settings) -> None:
    """Remove what :func:`scratch_settings` made (written out first, so nothing is left to write it back)."""
    import shutil

    settings.sync()
    shutil.rmtree(os.path.dirname(settings.fileName()), ignore_errors=True)


def make_settings():
    """The app's QSettings: ``ATTNVIZ_SETTINGS=FILE.ini`` redirects them (the test suite sets it, so it never
    touches the user's recent files, window layout or session)."""
    from PySide6.QtCore import QSettings

    path = os.environ.get("ATTNVIZ_SETTINGS")
    if path:
        return QSettings(path, QSettings.Format.IniFormat)
    return QSettings("attnviz", "attnviz")


def make_app(argv=None):
    """The QApplication (created once), with pyqtgraph configured."""
    from PySide6.QtWidgets import QApplication

    from attnviz.gui import gcguard, style

    app = QApplication.instance()
    if app is None:
        app = QApplication(list(argv or sys.argv[:1]))
        app.setApplicationName("attnviz")
        app.setOrganizationName("attnviz")
    gcguard.install(app)  # cycles holding Qt objects are collected in this thread, never a worker's
    style.configure()
    return app


# the offscreen plugin (screenshots without a display) says "This plugin does not support propagateSizeHints()"
# for every window it shows: a limit of the plugin, nothing a user can act on
PLUGIN_LIMITS = "This plugin does not support "


def quiet_plugin_limits() -> None:
    """Drop the platform plugin's "does not support" lines; every other Qt message is passed on unchanged."""
    from PySide6.QtCore import qInstallMessageHandler

    previous: list = []

    def handler(mode, context, message: str) -> None:
        if message.startswith(PLUGIN_LIMITS):
            return
        if previous and previous[0] is not None:
            previous[0](mode, context, message)
        else:
            print(message, file=sys.stderr)

    previous.append(qInstallMessageHandler(handler))


def ensure_platform(screenshot: bool) -> None:
    """Screenshots render offscreen when there is no display; otherwise check the window system before Qt
    starts (Qt aborts the process when an xcb library or the display is missing)."""
    if screenshot and not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from attnviz.gui.platform_check import check_platform

    check_platform()
