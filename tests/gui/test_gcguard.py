"""Cyclic garbage made in a worker thread is collected in the GUI thread (attnviz/gui/gcguard.py)."""

from __future__ import annotations

import gc
import threading
import weakref

from attnviz.gui import gcguard
from attnviz.gui.app import make_app


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_cycles_made_in_a_worker_thread_are_collected_in_the_gui_thread(qtbot):
    app = make_app()
    guard = gcguard.install(app)
    assert guard.timer.isActive()
    assert not gc.isenabled()
    gc.collect()  # start from empty generations
    threads: list[str] = []

    def seen(phase: str, info: dict) -> None:
        if phase == "start":
            threads.append(threading.current_thread().name)

    gc.callbacks.append(seen)
    try:
        ref: list[weakref.ref] = []
        kept: list[list] = []  # alive until the check: freeing them would take the counts back under the threshold

        def work() -> None:
            node = _Node()
            ref.append(weakref.ref(node))
            del node
            # far past generation 0's threshold: CPython with automatic collection would collect here
            kept.append([[i] for i in range(50 * gc.get_threshold()[0])])

        t = threading.Thread(target=work, name="a-worker")
        t.start()
        t.join()
        assert ref[0]() is not None, "the cycle was collected in the worker thread"
        assert "a-worker" not in threads
        qtbot.waitUntil(lambda: ref[0]() is None, timeout=5000)  # the timer's pass, in this thread
        assert threads and set(threads) == {threading.current_thread().name}
    finally:
        gc.callbacks.remove(seen)


def test_a_full_collection_waits_as_cpythons_for_a_quarter_more_long_lived_objects(qtbot):
    """Past generation 2's threshold CPython runs a full pass only once the objects that reached the oldest
    generation since the last one are a quarter of those that one kept (Modules/gcmodule.c); the collector counts
    them as CPython does, the survivors of each generation-1 pass.  Without that rule a full pass (every object in
    the process traversed) ran every tenth generation-1 pass."""
    guard = gcguard.install(make_app())
    t0, t1, t2 = guard.thresholds
    generations: list[int] = []

    def seen(phase: str, info: dict) -> None:
        if phase == "start":
            generations.append(info["generation"])

    kept: list[list] = []  # every object made here survives: each generation-1 pass moves them to the oldest

    def due_passes(n: int) -> None:
        for _ in range(n):
            kept.append([[i] for i in range(t0 + 1)])  # past generation 0's threshold: a pass is due
            guard.collect_due()

    gc.collect()
    guard.long_lived_total, guard.long_lived_pending = 10**12, 0  # as if the last full pass kept that many
    gc.callbacks.append(seen)
    try:
        n = (t1 + 2) * (t2 + 2)  # generation 1's passes well past generation 2's threshold
        due_passes(n)
        assert gc.get_count()[2] > t2
        assert 2 not in generations and generations.count(1) > t2
        # each generation-1 pass counted what it moved on: all but the last few passes' lists are there
        assert guard.long_lived_pending >= (n - 2 * (t1 + 1)) * (t0 + 2)
        guard.long_lived_total = 4 * guard.long_lived_pending  # a quarter reached
        generations.clear()
        due_passes(1)
        assert generations == [2]
        assert guard.long_lived_pending == 0
        assert guard.long_lived_total >= sum(len(k) + 1 for k in kept)  # what the full pass kept, counted anew
    finally:
        gc.callbacks.remove(seen)
