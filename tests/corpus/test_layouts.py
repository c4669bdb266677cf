"""The local engine's worker layouts (engines.LAYOUTS): one process running several batches at once on its one
session (the GPU default) writes the very bytes of one process per worker (the CPU default)."""

from __future__ import annotations

import json
import multiprocessing as mp

import pytest

from attnviz.cli import main
from attnviz.corpus import CorpusConfig, engines, run_corpus


def _cfg(model, texts, out, **kw):
    kw.setdefault("batch_size", 6)
    return CorpusConfig(model=str(model), texts=str(texts), out=str(out), progress=False, provider="cpu", **kw)


def test_the_shared_layout_writes_the_process_layouts_bytes_from_one_process(planted, tmp_path, monkeypatch):
    """Three batches in flight in one process (forced on the CPU by the environment, in tasks of two batches so
    that several follow one another) against three processes: the same heads and examples, byte for byte."""
    import dataclasses

    model, texts = planted
    monkeypatch.setitem(engines.LAYOUTS, "threads", dataclasses.replace(engines.LAYOUTS["threads"], chunk_cpu=2))
    pools: dict[str, list[int]] = {}
    real = engines.WarmPool.start.__func__  # type: ignore[attr-defined]

    def start(cls, setup, processes, **kw):
        warm = real(cls, setup, processes, **kw)
        pools.setdefault(setup.layout, []).append(warm.pool._max_workers)
        return warm

    monkeypatch.setattr(engines.WarmPool, "start", classmethod(start))
    for name in ("processes", "threads"):
        monkeypatch.setenv(engines.LAYOUT_ENV, name)
        run_corpus(_cfg(model, texts, tmp_path / name, workers=3, threads=1))
    assert pools == {"processes": [3], "threads": [1]}  # each started early and fitted: no second pool
    assert mp.active_children() == []
    for name in ("heads.parquet", "examples.parquet"):
        assert (tmp_path / "threads" / name).read_bytes() == (tmp_path / "processes" / name).read_bytes(), name
    run = json.loads((tmp_path / "threads" / "run.json").read_text())
    assert run["workers"] == 3 and run["batches"] == 7 and run["worker_layout"] == "threads"
    assert json.loads((tmp_path / "processes" / "run.json").read_text())["worker_layout"] == "processes"
    # each says the environment chose it, the sessions that ran the batches and the batches each ran at once
    assert _placed(tmp_path / "threads") == ("threads", engines.LAYOUT_ENV, 1, 3, 1, False)
    assert _placed(tmp_path / "processes") == ("processes", engines.LAYOUT_ENV, 3, 1, 1, False)


PLACED = ("worker_layout", "worker_layout_from", "sessions", "batches_per_session", "threads_per_worker", "gpu")


def _placed(out) -> tuple:
    run = json.loads((out / "run.json").read_text())
    return tuple(run[k] for k in PLACED)


def test_run_json_says_the_device_chose_the_layout(planted, tmp_path, monkeypatch):
    model, texts = planted
    monkeypatch.delenv(engines.LAYOUT_ENV, raising=False)
    run_corpus(_cfg(model, texts, tmp_path / "dev", workers=2, threads=1))
    assert _placed(tmp_path / "dev") == ("processes", "the device", 2, 1, 1, False)


def test_the_process_layout_forced_on_a_gpu_is_recorded(planted, tmp_path):
    """Session 21: a run with the process layout forced on a GPU (its device's own is threads) wrote the layout's
    name alone, no word that it was forced nor how many sessions ran.  A GPU stood in by tests/corpus/as_cuda_site
    (a CPU session that says it runs on CUDA), the command in its own process."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).parent
    model, texts = planted
    log = tmp_path / "log"
    log.mkdir()
    path = os.pathsep.join([str(here / "as_cuda_site"), str(here.parents[1]), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "ATTNVIZ_TEST_AS_CUDA": str(log), engines.LAYOUT_ENV: "processes"}
    out = tmp_path / "gpu"
    argv = ["corpus", str(model), "--texts", str(texts), "--out", str(out), "--provider", "cuda", "--no-progress"]
    p = subprocess.run(
        [sys.executable, "-m", "attnviz", *argv, "--workers", "2", "--threads", "1", "--batch-size", "6"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
        cwd=here.parents[1],
    )
    assert p.returncode == 0, p.stderr
    assert _placed(out) == ("processes", engines.LAYOUT_ENV, 2, 1, 1, True)


def test_the_layout_follows_the_device_unless_the_environment_names_one(monkeypatch):
    monkeypatch.delenv(engines.LAYOUT_ENV, raising=False)
    assert engines.choose_layout(gpu=True) == "threads" and engines.choose_layout(gpu=False) == "processes"
    assert engines.LAYOUTS["threads"].processes(4) == 1 and engines.LAYOUTS["threads"].depth(4) == 4
    assert engines.LAYOUTS["processes"].processes(4) == 4 and engines.LAYOUTS["processes"].depth(4) == 1
    monkeypatch.setenv(engines.LAYOUT_ENV, "processes")
    assert engines.choose_layout(gpu=True) == "processes"


def test_the_shared_layout_on_cuda_probes_in_its_worker_and_the_process_layout_does_not():
    """On CUDA the shared layout's one process answers the driver's probe (no isolation child with a CUDA session
    of its own); the process layout's GPU workers do not (their sessions are built while the driver probes)."""

    def setup(provider, name):
        return engines.WorkerSetup("m.onnx", provider, None, 1, 5, (), 4, layout=name)

    assert engines._probes_in_worker(setup("cuda", "threads"))
    assert not engines._probes_in_worker(setup("cuda", "processes"))
    assert engines._probes_in_worker(setup("cpu", "processes")) and engines._probes_in_worker(setup("cpu", "threads"))


def test_an_unknown_layout_in_the_environment_is_one_line(planted, tmp_path, capsys, monkeypatch):
    model, texts = planted
    monkeypatch.setenv(engines.LAYOUT_ENV, "fibres")
    args = ["corpus", str(model), "--texts", str(texts), "--out", str(tmp_path / "o"), "--no-progress"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and engines.LAYOUT_ENV in err[0] and "processes or threads" in err[0], err
    assert not (tmp_path / "o").exists() and mp.active_children() == []


def test_a_shared_worker_killed_mid_run_is_the_crash_error(planted, tmp_path, monkeypatch):
    """The shared layout's one process is the crash boundary as each of the process layout's is (tasks of one
    batch here, so that batches are left to run when it dies)."""
    import dataclasses
    import os
    import signal

    model, texts = planted
    monkeypatch.setenv(engines.LAYOUT_ENV, "threads")
    monkeypatch.setitem(engines.LAYOUTS, "threads", dataclasses.replace(engines.LAYOUTS["threads"], chunk_cpu=1))
    killed = []

    def kill_worker(done):
        if not killed:
            kids = mp.active_children()
            assert len(kids) == 1  # one process however many batches are in flight
            os.kill(kids[0].pid, signal.SIGKILL)
            killed.append(kids[0].pid)

    from attnviz.runtime.host import ModelCrashed

    with pytest.raises(ModelCrashed, match="crashed onnxruntime"):
        run_corpus(_cfg(model, texts, tmp_path / "o", workers=3, threads=1), on_batch=kill_worker)
    assert killed and mp.active_children() == []
