"""The whole-tree code-quality gates of tests/test_code_quality.py (``ruff check``, ``ruff format --check``, ``mypy``)
as processes started when the run has collected them (tests/conftest.py: ``pytest_collection_finish``), each test
then reading its own gate's exit code and output.

Why in the background: they are processes of their own that read the checkout's files and nothing the tests make,
so their verdict is the same whenever they start; run in turn where the test file comes (late in the suite), mypy
alone kept the suite's one process waiting ~30 s (a fresh clone's cold cache), while on a 2-core machine the
suite's single pytest process leaves the second core mostly idle for them to use.
"""

from __future__ import annotations

import atexit
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from optimum_env import CACHE

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 600  # from the test's call: a gate that hangs fails its test, never the run


def _ruff() -> list[str] | None:
    exe = shutil.which("ruff")
    return None if exe is None else [exe]


def _mypy() -> list[str] | None:
    return None if shutil.which("mypy") is None else [sys.executable, "-m", "mypy"]


# test name -> (the tool a test skips without, its command after the tool)
GATES: dict[str, tuple[str, Callable[[], list[str] | None], list[str]]] = {
    "test_ruff_lint_is_clean": ("ruff", _ruff, ["check", "--no-cache", "."]),
    "test_ruff_format_is_applied": ("ruff", _ruff, ["format", "--check", "--no-cache", "."]),
    # incremental, with a cache kept per machine (not in the checkout): a fresh clone (CI) reuses the analysis of
    # every module whose source hash is unchanged (~6 s instead of ~30 s of CPU); mypy checks each hash itself
    "test_mypy_is_clean": ("mypy", _mypy, ["--cache-dir", str(CACHE / "mypy")]),
}

_started: dict[str, subprocess.Popen] = {}


def start(names) -> None:
    """Start the gates of the test ``names`` not started yet (a missing tool: nothing; its test skips)."""
    for name in names:
        if name not in GATES or name in _started:
            continue
        _, tool, args = GATES[name]
        exe = tool()
        if exe is None:
            continue
        _started[name] = subprocess.Popen(
            [*exe, *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )


def result(name: str) -> subprocess.CompletedProcess | str:
    """The gate's finished process (started now if the run did not start it), or the missing tool's name."""
    start([name])
    if name not in _started:
        return GATES[name][0]
    proc = _started.pop(name)
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"{' '.join(map(str, proc.args))} still ran after {TIMEOUT_S} s") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@atexit.register
def _stop_unread() -> None:  # a run stopped before a gate's test (Ctrl-C, -x): no gate outlives it
    for proc in _started.values():
        proc.kill()
        proc.wait()
