"""An in-process session run from several threads at once (a corpus worker's runs in flight on its one session,
attnviz/corpus/engines.py LAYOUTS): its memory check makes the model's plan once and lets every run through."""

from __future__ import annotations

import threading

import numpy as np
from test_host_slots import _double_model  # y = x + x on float[rows, n]

from attnviz.runtime import guard, memory


def test_the_memory_check_of_runs_started_together_makes_one_plan(tmp_path, monkeypatch):
    made = []
    real = memory.MemoryPlan

    class Counted(real):  # type: ignore[misc, valid-type]
        def __init__(self, *a, **kw):
            made.append(threading.get_ident())
            super().__init__(*a, **kw)

    monkeypatch.setattr(memory, "MemoryPlan", Counted)
    check = guard.MemoryCheck(str(_double_model(tmp_path / "double.onnx")), "double.onnx")
    start = threading.Barrier(6, timeout=60)
    errors: list[BaseException] = []

    def run(rows: int) -> None:
        start.wait()  # every thread checks its first run at once
        try:
            check.check({"x": np.zeros((rows, 300), np.float32)}, ["y"])
        except BaseException as e:  # any failure in a thread is the test's
            errors.append(e)

    threads = [threading.Thread(target=run, args=(8 + i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(made) == 1
