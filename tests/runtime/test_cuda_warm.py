"""The CUDA context made on a thread at a corpus worker's start (runtime/cuda_warm.py): plain Python (it overlaps the
numpy/onnxruntime imports, so it must not import them), once a process, silent where no NVIDIA driver library
is found, and started by a worker exactly when its sessions will ask for CUDA (engines._cuda_early)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from attnviz.corpus import engines
from attnviz.runtime import cuda_warm, isolation, ort_build


def test_plain_python_once_a_process_and_silent_without_a_driver():
    code = (
        "import sys; from attnviz.runtime import cuda_warm as c\n"
        "c._LIBRARIES[sys.platform] = ('libattnviz-no-such-driver.so.1',)\n"
        "print(c.start(), c.start(), 'numpy' in sys.modules, 'onnxruntime' in sys.modules); c.wait(10)\n"
        "print(c._started.is_alive())"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0 and p.stderr == ""
    assert p.stdout.split() == ["True", "False", "False", "False", "False"]


@pytest.mark.parametrize(
    ("provider", "gpu", "cuda_build", "started"),
    [
        ("cuda", False, False, True),  # asked for CUDA: it runs there or stops (session.py)
        ("cpu", True, True, False),
        ("auto", True, True, True),
        ("auto", False, True, False),  # no GPU: auto lands on the CPU
        ("auto", True, False, False),  # a CPU-only onnxruntime on a GPU machine
    ],
)
def test_a_worker_starts_it_where_its_sessions_ask_for_cuda(monkeypatch, provider, gpu, cuda_build, started):
    calls = []
    monkeypatch.setattr(cuda_warm, "start", lambda device=0: calls.append(device) or True)
    monkeypatch.setattr(isolation, "gpu_present", lambda: gpu)
    monkeypatch.setattr(ort_build, "installed", lambda: "build")
    monkeypatch.setattr(ort_build, "has_cuda", lambda build: cuda_build)
    engines._cuda_early(engines.WorkerSetup("model.onnx", provider, None, 1, 5, (), 2))
    assert calls == ([0] if started else [])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/PID/environ")
@pytest.mark.parametrize("cuda", [True, False])
def test_a_spawned_isolation_child_is_told_to_make_the_context(monkeypatch, cuda):
    """A child spawned (not forked: a process holding Qt, torch or threads) gets the word in its environment and
    worker.py acts on it first; one whose sessions stay on the CPU does not, even where the parent's has it."""
    from attnviz.runtime import child_start

    monkeypatch.setenv(child_start.CUDA_EARLY_ENV, "1")  # (a parent that is itself such a child)
    started = child_start.spawn(cuda)
    try:
        with open(f"/proc/{started.proc.pid}/environ", "rb") as f:
            env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    finally:
        started.stop()
    assert (env.get(child_start.CUDA_EARLY_ENV.encode()) == b"1") is cuda
