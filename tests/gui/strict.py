"""Fail a window test on anything the user would meet as a traceback or a Qt complaint.

:func:`strict` installs its own ``sys.excepthook`` (an exception raised in a slot, a timer or a paint reaches it)
a Qt message handler (a warning or critical message from Qt) and records Python's warnings (a RuntimeWarning
or UserWarning is printed on stderr), collects what arrives and raises at the end.
The offscreen plugin's "does not support" lines are a limit of the plugin (gui/app.py drops them too).
"""

from __future__ import annotations

import sys
import traceback
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from PySide6.QtCore import QtMsgType, qInstallMessageHandler

from attnviz.gui.app import PLUGIN_LIMITS

# warnings Python prints on stderr by default (a user sees them); deprecations are for developers
SHOWN_WARNINGS = (RuntimeWarning, UserWarning)


class Unhandled(list):
    """What reached the hooks, oldest first (each a formatted traceback, a Qt message or a warning)."""

    caught: list[warnings.WarningMessage]

    def take_warnings(self) -> None:
        for w in self.caught:
            if issubclass(w.category, SHOWN_WARNINGS):
                self.append(f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})")
        self.caught.clear()

    def __bool__(self) -> bool:
        self.take_warnings()
        return len(self) > 0

    def check(self, context: str = "") -> None:
        if self:
            raise AssertionError(f"{len(self)} unhandled: {context}\n" + "\n".join(self[:3]))


@contextmanager
def strict() -> Iterator[Unhandled]:
    seen = Unhandled()

    def hook(kind, value, tb):
        seen.append("".join(traceback.format_exception(kind, value, tb)))

    def messages(mode, _context, message: str) -> None:
        if mode in (QtMsgType.QtWarningMsg, QtMsgType.QtCriticalMsg, QtMsgType.QtFatalMsg):
            if not message.startswith(PLUGIN_LIMITS):
                seen.append(f"Qt {mode.name}: {message}")

    old_hook = sys.excepthook
    sys.excepthook = hook
    old_handler = qInstallMessageHandler(messages)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            seen.caught = caught
            yield seen
    finally:
        sys.excepthook = old_hook
        qInstallMessageHandler(old_handler)
    seen.check()
