"""The CUDA context made on a thread at a corpus worker's start (runtime/cuda_warm.py): plain Python (it overlaps the
numpy/onnxruntime imports, so it must not import them), once a process, silent where no NVIDIA driver library
is found, and started by a worker exactly when its sessions will ask for CUDA (engines._cuda_early)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

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


def _environ_after_exec(pid: int) -> dict[bytes, bytes]:
    """The environment ``pid`` was started with, read once it runs worker.py: before its exec /proc shows the
    environment this process started with (a spawn read too soon on a loaded machine saw no word at all)."""
    deadline = time.monotonic() + 60
    while b"worker.py" not in Path(f"/proc/{pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline, "the child never ran worker.py"
        time.sleep(0.01)
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(kv.split(b"=", 1) for kv in raw.split(b"\0") if b"=" in kv)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/PID/environ")
@pytest.mark.parametrize("cuda", [True, False])
def test_a_spawned_isolation_child_is_told_to_make_the_context(monkeypatch, cuda):
    """A child spawned (not forked: a process holding Qt, torch or threads) gets the word in its environment and
    worker.py acts on it first; one whose sessions stay on the CPU does not, even where the parent's has it."""
    from attnviz.runtime import child_start

    monkeypatch.setenv(child_start.CUDA_EARLY_ENV, "1")  # (a parent that is itself such a child)
    started = child_start.spawn(cuda)
    try:
        env = _environ_after_exec(started.proc.pid)
    finally:
        started.stop()
    assert (env.get(child_start.CUDA_EARLY_ENV.encode()) == b"1") is cuda


@pytest.mark.parametrize(
    ("provider", "gpu", "cuda_build", "started"),
    [
        ("cuda", False, False, True),
        ("cpu", True, True, False),
        ("auto", True, True, True),
        ("auto", False, True, False),
        ("auto", True, False, False),
    ],
)
def test_the_windows_child_is_asked_to_make_it_where_its_sessions_ask_for_cuda(
    monkeypatch, provider, gpu, cuda_build, started
):
    """The window opens a model through app.jobs.open_model_ready, whose prestart starts the isolation child: it is
    started asking for the context exactly where extract's is (device.asks_cuda), and only where no child serves
    the window yet (a second model keeps the first one's child)."""
    import attnviz.runtime as runtime
    from attnviz.app import jobs
    from attnviz.runtime import child_start, host

    asked, hosts, alive = [], [], [False]
    monkeypatch.delenv("ATTNVIZ_INPROCESS", raising=False)
    monkeypatch.setattr(child_start, "start_early", lambda cuda=False: asked.append(cuda))
    monkeypatch.setattr(host, "_current_host", lambda: hosts.append(1))
    monkeypatch.setattr(host, "running", lambda: alive[0])
    monkeypatch.setattr(isolation, "gpu_present", lambda: gpu)
    monkeypatch.setattr(ort_build, "installed", lambda: "build")
    monkeypatch.setattr(ort_build, "has_cuda", lambda build: cuda_build)
    monkeypatch.setattr(runtime, "open_model", lambda path, **kw: type("Unrunnable", (), {"sites": []})())
    jobs.open_model_ready("model.onnx", provider=provider)
    assert asked == ([True] if started else []) and hosts == [1]
    alive[0] = True
    jobs.open_model_ready("model.onnx", provider=provider)
    assert asked == ([True] if started else []) and hosts == [1, 1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/PID/environ")
@pytest.mark.parametrize("cuda", [True, False])
def test_the_windows_spawned_child_gets_the_word(monkeypatch, cuda):
    """The window's process holds Qt, so its child is spawned: the word reaches the child's environment, which
    worker.py reads first; a child for CPU sessions does not get it."""
    from attnviz.runtime import child_start, host

    monkeypatch.delenv("ATTNVIZ_INPROCESS", raising=False)
    monkeypatch.setattr(child_start, "forkable", lambda: False)  # (PySide6 loaded: runtime/child_start.py)
    host.shutdown()
    try:
        host.prestart(cuda=cuda)
        env = _environ_after_exec(host._host.proc.pid)
    finally:
        host.shutdown()
    assert (env.get(child_start.CUDA_EARLY_ENV.encode()) == b"1") is cuda
