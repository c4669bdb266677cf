"""runtime/child_start.py: ``attnviz extract`` starts its crash-isolation child before it imports numpy, onnx or
onnxruntime, as a fork once numpy is loaded; the maps that child makes are the bytes an in-process session makes;
a command refused for its arguments starts none; and a process a fork must not copy spawns instead.  Each command
runs in a fresh interpreter (what is imported when is the point), watched from inside by wrapping the module's
functions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnviz.runtime import child_start

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "sequence-classification.onnx"

# runs `attnviz ARGV...` in this interpreter with start_early and fork wrapped; prints what they saw, as JSON
WATCHED = """
import json, os, sys
from attnviz.runtime import child_start, cuda_warm, device
seen = {"starts": [], "forks": 0, "cuda": []}
start, fork = child_start.start_early, child_start.fork
def watched_start(cuda=False):
    seen["starts"].append(sorted(m for m in ("numpy", "onnx", "onnxruntime") if m in sys.modules))
    seen["cuda"].append(cuda)
    start(cuda=cuda)
def watched_fork(cuda=False):
    seen["forks"] += 1
    return fork(cuda)
child_start.start_early, child_start.fork = watched_start, watched_fork
if os.environ.get("WATCH_CUDA_MARK"):  # the CUDA context's start, as the child calls it, leaves the caller's pid
    cuda_warm.start = lambda device=0: open(os.environ["WATCH_CUDA_MARK"], "a").write(f"{os.getpid()}\\n") > 0
    device.asks_cuda = lambda model, provider: True  # (this machine's sessions then land on the CPU: auto's way)
from attnviz.cli import main
seen["code"] = main(sys.argv[1:])
seen["onnxruntime_here"] = "onnxruntime" in sys.modules
print(json.dumps(seen))
"""


def _env(**extra) -> dict:
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return env


def _watched(*argv, **extra) -> dict:
    env = _env(**extra)
    env.pop("ATTNVIZ_INPROCESS", None)
    done = subprocess.run(
        [sys.executable, "-c", WATCHED, *map(str, argv)], env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    *printed, last = done.stdout.strip().splitlines()
    return json.loads(last) | {"stderr": done.stderr, "stdout": "\n".join(printed)}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the child is forked on Linux only")
def test_extract_forks_its_child_before_onnx_and_its_maps_are_an_in_process_sessions_bytes(tmp_path):
    forked, inproc = tmp_path / "forked.npz", tmp_path / "inproc.npz"
    seen = _watched("extract", MODEL, "--text", "1 2 3 4 5 6 7", "--out", forked)
    assert seen["code"] == 0, seen["stderr"]
    # started once, before numpy, onnx and onnxruntime were imported, as a fork; the parent never loads onnxruntime
    assert seen["starts"] == [[]] and seen["forks"] == 1 and not seen["onnxruntime_here"]

    # the same command with the session in its own process (ATTNVIZ_INPROCESS): no child at all
    done = subprocess.run(
        [sys.executable, "-m", "attnviz.cli", "extract", str(MODEL), "--text", "1 2 3 4 5 6 7", "--out", str(inproc)],
        env=_env(ATTNVIZ_INPROCESS="1"),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    a, b = np.load(forked), np.load(inproc)
    assert sorted(a.files) == sorted(b.files)
    maps = [k for k in a.files if k.startswith("attn_")]
    assert maps
    for k in maps:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes(), k


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the child is forked on Linux only")
def test_a_session_that_asks_for_cuda_has_its_child_make_the_context_first(tmp_path):
    """runtime/cuda_warm.py: the child makes the CUDA context on a thread from its start (while it imports
    onnxruntime), not the parent (which never touches CUDA); only where the session will ask for CUDA."""
    seen = _watched("extract", MODEL, "--text", "1 2 3", "--provider", "cuda", "--out", tmp_path / "c.npz")
    assert seen["cuda"] == [True]  # (refused after: this onnxruntime has no CUDA provider, or it ran on CUDA)
    assert _watched("extract", MODEL, "--text", "1 2 3", "--provider", "cpu", "--out", tmp_path / "p.npz")["cuda"] == [
        False
    ]
    mark = tmp_path / "mark"
    seen = _watched(
        "extract",
        MODEL,
        "--text",
        "1 2 3",
        "--provider",
        "auto",
        "--out",
        tmp_path / "a.npz",
        WATCH_CUDA_MARK=str(mark),
    )
    assert seen["code"] == 0 and seen["forks"] == 1 and seen["cuda"] == [True], seen["stderr"]
    pids = mark.read_text().split()  # written by the forked child before it served the run, once
    assert len(pids) == 1 and int(pids[0]) != os.getpid()


def test_a_command_refused_for_its_arguments_starts_no_child(tmp_path):
    seen = _watched("extract", MODEL, "--out", tmp_path / "x.npz")  # no input at all
    assert seen["code"] == 2 and "no input" in seen["stderr"]
    assert seen["starts"] == [] and seen["forks"] == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the child is forked on Linux only")
def test_inspect_forks_its_probes_child_before_onnx_and_no_probe_starts_none():
    seen = _watched("inspect", MODEL, "--json")
    assert seen["code"] == 0, seen["stderr"]
    assert seen["starts"] == [[]] and seen["forks"] == 1 and not seen["onnxruntime_here"]
    assert json.loads(seen["stdout"])["probed"] is True  # the probe ran, in that child
    seen = _watched("inspect", MODEL, "--no-probe")
    assert seen["code"] == 0 and seen["starts"] == [] and seen["forks"] == 0


# run in a fresh interpreter: the test process itself runs other threads (Qt, Ray, pools of earlier tests), and a
# process with other threads must refuse the fork, so the single-threaded case can only be seen in one of its own
FORKABLE = """
import os, sys, threading
from attnviz.runtime import child_start
os.environ.pop("ATTNVIZ_HUGEPAGES", None)
for name in child_start.NO_FORK_WITH:
    sys.modules.pop(name, None)
assert threading.active_count() == 1
assert child_start.forkable()
for name in ("torch", "onnxruntime"):  # their threads and state (onnxruntime's environment) must not be copied
    sys.modules[name] = sys
    assert not child_start.forkable(), name
    del sys.modules[name]
os.environ["ATTNVIZ_HUGEPAGES"] = "1"  # a malloc tunable is set at exec only
assert not child_start.forkable()
del os.environ["ATTNVIZ_HUGEPAGES"]
stop = threading.Event()
t = threading.Thread(target=stop.wait)
t.start()
try:
    assert not child_start.forkable()  # another thread: it could hold a lock the child would need
finally:
    stop.set()
    t.join()
assert child_start.forkable()
print("checked")
"""


def test_a_process_a_fork_must_not_copy_spawns_its_child():
    if not sys.platform.startswith("linux"):
        assert not child_start.forkable()
        return
    env = {k: v for k, v in os.environ.items() if k != "ATTNVIZ_HUGEPAGES"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", FORKABLE], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "checked", done.stderr[-2000:]


def test_no_second_child_is_started_beside_a_running_one(monkeypatch):
    """A second command in one process (tests, a notebook) already has its child: nothing is forked or spawned."""
    from attnviz.runtime import host

    started = []
    monkeypatch.setattr(child_start, "fork", lambda cuda=False: started.append("fork"))
    monkeypatch.setattr(child_start, "spawn", lambda cuda=False: started.append("spawn"))
    monkeypatch.delenv("ATTNVIZ_INPROCESS", raising=False)
    monkeypatch.setattr(child_start, "_early", None)
    monkeypatch.setattr(host, "running", lambda: True)
    child_start.start_early()
    assert started == [] and child_start._early is None
    monkeypatch.setattr(host, "running", lambda: False)
    child_start.start_early()
    assert len(started) == 1 or os.name != "posix"
