"""Qt's Linux (xcb) platform plugin needs X11/xcb system libraries that pip cannot install; when one is
missing Qt aborts the process (SIGABRT, exit 134) with a long plugin dump. Check them before Qt starts and
raise one line naming the Debian/Ubuntu packages instead. Imports no Qt.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable

from attnviz import AttnvizError

# soname that libqxcb.so / libQt6XcbQpa.so load -> the Debian/Ubuntu package providing it
# (read from `ldd` of PySide6 6.11's xcb plugin; the first three are the ones a bare desktop image lacks)
XCB_LIBS = {
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libxcb.so.1": "libxcb1",
}


def qt_platform(env=None, platform: str | None = None) -> str:
    """The platform plugin Qt will pick: QT_QPA_PLATFORM's first entry, else Qt 6's Linux default."""
    env = os.environ if env is None else env
    platform = platform or sys.platform
    forced = env.get("QT_QPA_PLATFORM", "").split(";")[0].split(":")[0].strip()
    if forced:
        return forced
    if not platform.startswith("linux"):
        return "native"  # cocoa / windows: Qt's own plugin, nothing to check
    if env.get("WAYLAND_DISPLAY") and env.get("XDG_SESSION_TYPE") == "wayland":
        return "wayland"
    return "xcb"


def _loads(soname: str) -> bool:
    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True


def missing_xcb_packages(loads: Callable[[str], bool] = _loads) -> list[str]:
    return [pkg for soname, pkg in XCB_LIBS.items() if not loads(soname)]


def check_platform(env=None, platform: str | None = None, loads: Callable[[str], bool] = _loads) -> None:
    """Raise AttnvizError (one line) when Qt would abort for a missing xcb library or X display."""
    env = os.environ if env is None else env
    if qt_platform(env, platform) != "xcb":
        return
    missing = missing_xcb_packages(loads)
    if missing:
        raise AttnvizError(
            f"the Qt window system (xcb) needs system libraries that are missing: install them with "
            f"`sudo apt-get install {' '.join(missing)}` (Debian/Ubuntu names), "
            f"or render offscreen with --screenshot PATH"
        )
    if not env.get("DISPLAY"):
        raise AttnvizError(
            "no X display (DISPLAY is not set): run attnviz in a desktop session, use ssh -X, "
            "or render offscreen with --screenshot PATH"
        )
