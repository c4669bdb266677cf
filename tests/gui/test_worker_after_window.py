"""A job still running when its window has closed (the window waits 5 s for its jobs; the head statistics of a
4,096-token map kept per head take longer) finds its signals deleted as the process ends: it must end quietly,
not raise the RuntimeError that Qt printed as a traceback on the terminal."""

from __future__ import annotations

import shiboken6

from attnviz.gui.workers import Worker


def _job(progress=None):
    progress(50, "half")  # the window is gone by now
    return 3


def test_a_job_outliving_its_window_ends_quietly(qtbot):
    w = Worker(_job, request_id=7)
    shiboken6.delete(w.signals)  # what closing the window and ending the process do to them
    assert not shiboken6.isValid(w.signals)
    w.run()  # raised "Signal source has been deleted" from each emit


def test_a_failing_job_outliving_its_window_ends_quietly(qtbot):
    def broken():
        raise ValueError("no")

    w = Worker(broken, request_id=8)
    shiboken6.delete(w.signals)
    w.run()
