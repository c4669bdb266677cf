"""A tokenizer encode on one thread mutes stderr (fd 2 → /dev/null, runtime/quiet_stderr.py) for its few
microseconds; the crash-isolation child spawned meanwhile on another thread must still get the terminal's stderr
(its onnxruntime messages, a crash's last words), not /dev/null for its whole life."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import os, sys, threading
from attnviz.runtime import quiet_stderr
from attnviz.runtime.child import ChildProcess
terminal = os.readlink("/proc/self/fd/2")
inside, done = threading.Event(), threading.Event()
def encode_in_progress():  # a muted span held open while the main thread spawns the child
    with quiet_stderr.muted():
        inside.set()
        done.wait(60)
t = threading.Thread(target=encode_in_progress)
t.start()
inside.wait(60)
muted = os.readlink("/proc/self/fd/2")
child = ChildProcess()
theirs = os.readlink(f"/proc/{child.proc.pid}/fd/2")
done.set()
t.join()
child.kill()
print(muted == os.path.realpath(os.devnull), theirs == terminal, os.readlink("/proc/self/fd/2") == terminal)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_child_spawned_while_another_thread_mutes_stderr_keeps_the_terminals():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    # the span was in force; the child got the terminal's stderr (a pipe here); the span put it back after
    assert r.stdout.split() == ["True", "True", "True"]
