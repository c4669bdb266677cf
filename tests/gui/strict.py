"""Fail a window test on anything the user would meet as a traceback or a Qt complaint.

:func:`strict` installs its own ``sys.excepthook`` (an exception raised in a slot, a timer or a paint reaches it)
and a Qt message handler (a warning or critical message from Qt), collects what arrives and raises at the end.
The offscreen plugin's "does not support" lines are a limit of the plugin (gui/app.py drops them too).
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager

from PySide6.QtCore import QtMsgType, qInstallMessageHandler

from attnviz.gui.app import PLUGIN_LIMITS


class Unhandled(list):
    """What reached the hooks, oldest first (each a formatted traceback or a Qt message)."""

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
        yield seen
    finally:
        sys.excepthook = old_hook
        qInstallMessageHandler(old_handler)
    seen.check()
