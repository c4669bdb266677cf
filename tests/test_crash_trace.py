"""A native crash after tests/corpus's Ray tests still prints where it happened (tests/crash_trace.py).

Session 12's fresh-clone suite died twice with SIGSEGV (rc 139) and printed nothing: ``ray.shutdown`` resets the
SIGSEGV handler to the default, which silences pytest's faulthandler for every later test.  A child pytest runs a
Ray start and stop as tests/corpus/conftest.py does, then a test that really segfaults; its output must name that
test.
"""

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent

CHILD = """
import ctypes

import ray


def test_ray_starts_and_stops():
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.shutdown()


def test_crashes_natively():
    ctypes.string_at(0)
"""


def _no_core() -> None:  # the crash is the point: no core file for it
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))


def test_a_segfault_after_ray_shutdown_prints_the_crashing_test(tmp_path):
    pytest.importorskip("ray")
    (tmp_path / "test_child.py").write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "crash_trace", "test_child.py"]
    r = subprocess.run(
        [sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, preexec_fn=_no_core
    )
    assert r.returncode == -signal.SIGSEGV, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "Fatal Python error: Segmentation fault" in r.stderr, r.stderr[-2000:]
    assert 'test_child.py", line 13 in test_crashes_natively' in r.stderr, r.stderr[-3000:]
