"""File ▸ Export width: the column width File ▸ Export view draws a figure at, as ``attnviz figure --width`` does.

A figure from the window was always sized to its content (the captioning demo's heatmap came out 10 in wide), so a
paper's column figure had to be made again on the command line.  The choice is remembered with the export folder
and format; "sized to the content" is ``figure`` without ``--width``.
"""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtGui import QAction, QActionGroup
from PySide6.QtWidgets import QMenu

from attnviz.figures.spec import WIDTH_PRESETS, FigureStyle

SETTING = "export/width"
CONTENT = ""  # no preset: sized to the content

# the menu's entries in order: setting value -> text (the presets' inches from figures.spec, as --help says them)
CHOICES = {CONTENT: "Sized to the &content"} | {
    name: f"&{name.capitalize()} column ({inches:g} in)" for name, inches in WIDTH_PRESETS.items()
}


def export_width(settings) -> str | None:
    """The remembered preset (a key of WIDTH_PRESETS), or None: sized to the content (also for a value that is
    no preset any more)."""
    value = settings.value(SETTING, CONTENT) or CONTENT
    return value if value in WIDTH_PRESETS else None


def with_width(style: FigureStyle | None, settings) -> FigureStyle | None:
    """``style`` (None: the default one) at the remembered width; None where nothing is to change."""
    width = export_width(settings)
    if width is None:
        return style
    return replace(style or FigureStyle(), width=width)


def add_width_menu(parent: QMenu, settings) -> QMenu:
    """The submenu: one checked entry, the remembered one; choosing another remembers it."""
    menu = parent.addMenu("Export wi&dth")  # W is Compare &with's
    group = QActionGroup(menu)
    group.setExclusive(True)
    chosen = export_width(settings) or CONTENT
    for value, text in CHOICES.items():
        action = QAction(text, menu, checkable=True)
        action.setData(value)
        action.setChecked(value == chosen)
        group.addAction(action)
        menu.addAction(action)

    def remember(action: QAction) -> None:
        settings.setValue(SETTING, action.data())
        settings.sync()

    group.triggered.connect(remember)
    return menu
