"""``--provider cuda``'s corpus worker reads back what earlier commands kept, as the CPU's does (engines._device_known):
a second command's worker imports no onnx, opens and probes no model and makes one session (the statistics one),
where before it made the probe's session and the statistics session at every command; the bytes are the first
command's (which opened, probed and built everything, as every command did before).

No GPU here: tests/corpus/as_cuda_site stands a CPU session that says it runs on CUDA in for each CUDA session, in
every process of the command; every decision above the session (the layout, who probes, the records' keys, the
statistics graph's layout for CUDA, the page-locked outputs' path) is the one a GPU machine takes.  What a CUDA
session costs, and whether onnxruntime takes the kept statistics graph on a GPU, is measured only there
(bench/corpus_timeline.py --provider cuda)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import worker_modules

from attnviz.corpus import engines
from attnviz.runtime import isolation

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


def _sessions(folder: Path) -> dict[int, list[str]]:
    """Each process's sessions (as_cuda_site's log): provider and what the session is, in order."""
    return {int(f.stem): f.read_text().split("\n")[:-1] for f in folder.glob("*.log")}


def test_a_second_cuda_commands_worker_opens_nothing_and_makes_only_the_statistics_session(tmp_path):
    """The GPU's layout (engines.LAYOUTS "threads"): one process, which probes for the driver.  (The process layout,
    forced on a GPU, still opens the model in each worker: its driver probes in its isolation child and keeps no
    summary of the model for a light worker, runtime/model_summary.py.)"""
    code = worker_modules.command_script(
        tmp_path, ["--workers", "2", "--threads", "1", "--provider", "cuda", "--batch-size", "8"]
    )
    path = os.pathsep.join([str(HERE / "as_cuda_site"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "ATTNVIZ_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": path}
    env.pop(engines.LAYOUT_ENV, None)  # the device's own: threads on a GPU
    seen, made = {}, {}
    for name in ("make", "again", "third"):
        log = tmp_path / f"log_{name}"
        log.mkdir()
        out = subprocess.run(
            [sys.executable, "-c", code, name],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env={**env, "ATTNVIZ_TEST_AS_CUDA": str(log)},
        )
        assert out.returncode == 0, out.stderr
        seen[name] = eval(out.stdout.strip().splitlines()[-1])  # [[(pid, modules), ...]]: one pool
        made[name] = _sessions(log)
    workers = {name: [pid for pid, _ in seen[name][0]] for name in seen}
    assert all(len(w) == 1 for w in workers.values()), workers  # one process, as on a GPU
    # every session of every process was asked for on CUDA (none in the driver: its worker probes for it)
    assert all(s.startswith("cuda ") for m in made.values() for ss in m.values() for s in ss), made
    assert all(list(m) == workers[name] for name, m in made.items()), (made, workers)
    # the first command: the worker probes (the probe's session), then the statistics session replaces it
    assert made["make"][workers["make"][0]] == ["cuda model", "cuda stats"], made["make"]
    # a later command: the worker imports neither onnx nor the model's code and makes the statistics session only
    # (before: onnx, the model opened and probed, two sessions, at every command)
    for name in ("again", "third"):
        assert seen[name][0][0][1] == [], seen[name]
        assert made[name][workers[name][0]] == ["cuda stats"], made[name]
    for f in ("heads.parquet", "examples.parquet"):
        want = (tmp_path / "make" / f).read_bytes()
        assert (tmp_path / "again" / f).read_bytes() == want and (tmp_path / "third" / f).read_bytes() == want, f
    # CUDA unusable since: the kept probe says CUDA, and no session was made to say otherwise; the statistics
    # session's refusal is the command's one line, as when the probe's session was refused (nothing written)
    argv = [str(tmp_path / "m.onnx"), "--texts", str(tmp_path / "c.txt"), "--out", str(tmp_path / "gone")]
    gone = subprocess.run(
        [sys.executable, "-m", "attnviz", "corpus", *argv, "--provider", "cuda", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**env, "ATTNVIZ_TEST_AS_CUDA": str(tmp_path), "ATTNVIZ_TEST_CUDA_GONE": "1"},
        cwd=ROOT,
    )
    err = gone.stderr.strip().splitlines()
    assert gone.returncode == 2 and len(err) == 1 and "CUDA was requested" in err[0], gone.stderr
    assert not (tmp_path / "gone").exists()


@pytest.mark.parametrize(
    ("provider", "gpu", "known"),
    [
        ("cpu", False, True),
        ("cpu", True, True),
        ("cuda", True, True),
        ("cuda", False, True),  # (no device node: its session is refused in one line, nothing kept is read)
        ("auto", False, True),
        ("auto", True, False),  # a GPU build, nothing kept: CUDA or the CPU, only a session can tell (see
        # tests/corpus/test_auto_worker.py for auto where it landed before, and a CPU-only build)
    ],
)
def test_a_worker_reads_back_what_was_kept_wherever_its_device_is_known(provider, gpu, known, monkeypatch, tmp_path):
    """The light model and the kept probe (engines.WorkerSetup.light, engines._probe's key) and the probe's session
    closed before the statistics session (WorkerSetup.probed) follow whether the device is known before a session
    exists, on CUDA as on the CPU."""
    from attnviz.runtime import light_model, ort_build

    monkeypatch.setattr(isolation, "gpu_present", lambda: gpu)
    build = ["init", 1, 1, None, [[f"lib{ort_build.CUDA_LIBRARY}.so", 1, 1]]]  # a GPU build
    monkeypatch.setattr(ort_build, "installed", lambda: build)
    asked = []
    monkeypatch.setattr(light_model, "light", lambda *a: asked.append(a[1]))
    setup = engines.WorkerSetup(str(tmp_path / "m.onnx"), provider, None, 1, 5, (), 4, layout="threads")
    assert engines._device_known(setup) is known
    setup.light()
    assert asked == ([provider] if known else [])
