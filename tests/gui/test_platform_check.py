"""Missing xcb system libraries (or no X display) give one line naming the fix, before Qt can abort."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnviz import AttnvizError
from attnviz.gui import platform_check as pc

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "env,platform,expected",
    [
        ({}, "linux", "xcb"),
        ({"QT_QPA_PLATFORM": "offscreen"}, "linux", "offscreen"),
        ({"QT_QPA_PLATFORM": "wayland;xcb"}, "linux", "wayland"),
        ({"WAYLAND_DISPLAY": "wayland-0", "XDG_SESSION_TYPE": "wayland"}, "linux", "wayland"),
        ({"WAYLAND_DISPLAY": "wayland-0", "XDG_SESSION_TYPE": "x11", "DISPLAY": ":0"}, "linux", "xcb"),
        ({}, "darwin", "native"),
        ({}, "win32", "native"),
    ],
)
def test_platform_qt_will_pick(env, platform, expected):
    assert pc.qt_platform(env, platform) == expected


def test_missing_libraries_are_named_by_package():
    gone = {"libxcb-icccm.so.4", "libxcb-keysyms.so.1"}
    with pytest.raises(AttnvizError) as e:
        pc.check_platform({"DISPLAY": ":0"}, "linux", loads=lambda so: so not in gone)
    msg = str(e.value)
    assert "sudo apt-get install libxcb-icccm4 libxcb-keysyms1`" in msg and "libxcb-cursor0" not in msg
    assert "\n" not in msg


def test_checks_only_when_qt_would_use_xcb():
    def boom(so):
        raise AssertionError("no library check outside xcb")

    pc.check_platform({"QT_QPA_PLATFORM": "offscreen"}, "linux", loads=boom)
    pc.check_platform({}, "darwin", loads=boom)
    pc.check_platform({"DISPLAY": ":0"}, "linux", loads=lambda so: True)  # all present, a display: Qt may start
    with pytest.raises(AttnvizError, match="DISPLAY is not set"):
        pc.check_platform({}, "linux", loads=lambda so: True)


def test_cli_exits_2_with_one_line_instead_of_qt_aborting(tmp_path):
    # a real dlopen of a library that does not exist, through the real `attnviz` entry point, in a process
    # where Qt would otherwise start the xcb plugin (no QT_QPA_PLATFORM, a DISPLAY set)
    code = (
        "import sys; import attnviz.gui.platform_check as pc; pc.XCB_LIBS['libattnviz-missing.so.9'] = 'libfake9'; "
        "from attnviz.cli import main; sys.exit(main([]))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    env["DISPLAY"] = ":99"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    if not sys.platform.startswith("linux"):
        pytest.skip("xcb is the Linux platform")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnviz: error: ") and "libfake9" in lines[0]


@pytest.mark.parametrize("flags", [[], ["--screenshot", "x.txt"], ["--size", "big"]])
def test_a_bad_argument_is_named_before_the_missing_display(tmp_path, flags):
    """No display (ssh without -X) and a mistyped model path or flag: the path or flag is the problem to name,
    not the display the user may not need once it is fixed (e.g. with --screenshot)."""
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY", "DISPLAY")}
    model = [str(tmp_path / "typo.onnx")] if not flags else []
    argv = [sys.executable, "-m", "attnviz.cli", "open", *model, *flags]
    r = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    if not sys.platform.startswith("linux"):
        pytest.skip("the display check is the Linux one")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "DISPLAY" not in lines[0], lines
    assert ("typo.onnx" in lines[0]) if model else (flags[0] in lines[0])
