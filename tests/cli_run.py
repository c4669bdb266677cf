"""``attnviz`` run as a user runs it, in a fresh interpreter, bounded in time (hostile-input tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BOUND_S = 120  # generous for a loaded machine: what these tests guard against is a hang or a crash, not slowness


def run_cli(*argv, cwd=None, bound_s: float = BOUND_S, memory_gb: float | None = None, env=None) -> tuple[int, str]:
    """(exit code, stderr) of ``python -m attnviz.cli ARGV`` with this checkout first on the path; a run past
    ``bound_s`` fails the test (a hang), it is never waited on.  ``memory_gb``: the address space of the run and
    its children is capped there (RLIMIT_AS), so a run that would allocate past it fails instead of swapping.
    ``env``: variables added to this process's environment."""
    env = dict(os.environ, **(env or {}))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    limit = None
    if memory_gb is not None:
        import resource

        cap = int(memory_gb * 2**30)

        def limit():
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    try:
        done = subprocess.run(
            [sys.executable, "-m", "attnviz.cli", *map(str, argv)],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=bound_s,
            stdin=subprocess.DEVNULL,
            preexec_fn=limit,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"attnviz {' '.join(map(str, argv))} still ran after {bound_s} s")
    return done.returncode, done.stderr
