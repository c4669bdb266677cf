"""A Ctrl-C whose handler runs inside a callback Python cannot raise from (CI: importlib's module-lock weakref
callback, while `attnviz corpus` imported as its workers spawned) printed "Exception ignored in: ...
KeyboardInterrupt" with a traceback, and the interrupt was lost.  The CLI delivers it again to the main thread."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import signal, sys
from attnviz import cli
cli._count_interrupts()  # the command's Ctrl-C handler, as _run_command sets it
class Dropped:
    def __del__(self):  # a place Python cannot raise from: the handler's KeyboardInterrupt is "ignored" there
        signal.raise_signal(signal.SIGINT)
import time
try:
    Dropped()
    deadline = time.monotonic() + 20  # ordinary code, running until the interrupt comes (or long past it)
    while time.monotonic() < deadline:
        pass
    print("went on")
except KeyboardInterrupt:
    print("interrupted")
"""


def test_an_interrupt_raised_where_python_cannot_raise_reaches_the_command():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "interrupted"
    assert "Exception ignored" not in r.stderr and "Traceback" not in r.stderr, r.stderr
