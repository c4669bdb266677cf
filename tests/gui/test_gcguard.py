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
