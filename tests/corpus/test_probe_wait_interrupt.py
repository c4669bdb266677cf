"""A Ctrl-C while the corpus driver waits on its model's probe (run._probe_while_reading: the probe in a thread, on
the driver's isolation child, while the corpus is read; the path of a run whose workers do not probe, e.g. CUDA
workers of the process layout) is raised at once, not once the probe is back (a CUDA session's creation: seconds).

The probe is held on an event until the test releases it; the Ctrl-C is delivered to another thread
(tests/other_thread_interrupt.py), as the kernel may hand a process-directed SIGINT to the probe's thread."""

from __future__ import annotations

import signal
import sys
import threading
from types import SimpleNamespace

import pytest
from other_thread_interrupt import GIVE_UP_S, signalled_from_another_thread

from attnviz.core import leaving
from attnviz.corpus import run as corpus_run

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pthread_kill is POSIX")


class _HeldProbe:
    """A model whose probe runs until released (or GIVE_UP_S), recording whether it is still running."""

    kind = "encoder"
    meta: dict = {}
    sites = [SimpleNamespace(kind="self")]
    path = SimpleNamespace(name="held.onnx")

    def __init__(self):
        self.release = threading.Event()
        self.running = threading.Event()
        self.done = threading.Event()

    def probe(self) -> bool:
        self.running.set()
        self.release.wait(GIVE_UP_S)
        self.done.set()
        return True


class _Hash:
    def result(self) -> str:
        return "0" * 64


@pytest.fixture
def reading(monkeypatch):
    """The corpus read and tokenised at once (the probe is what the driver waits on); the real SIGINT handler."""
    monkeypatch.setattr(corpus_run.starting, "overlaps", lambda cfg: True)
    monkeypatch.setattr(corpus_run, "check_model", lambda model: model.kind)
    monkeypatch.setattr(corpus_run, "_check_generate", lambda cfg, name, kind: None)
    monkeypatch.setattr(corpus_run.it, "read_texts", lambda *a: [])
    monkeypatch.setattr(corpus_run, "encode_items", lambda *a: None)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield SimpleNamespace(texts="corpus.txt", pair_column=None, max_items=None, max_tokens=None)
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture
def at_once():
    leaving.set_leaves_at_once(True)  # the command's process: it leaves through os._exit (core/leaving.py)
    try:
        yield
    finally:
        leaving.set_leaves_at_once(False)


def test_a_ctrl_c_received_by_another_thread_stops_the_wait_for_the_probe(reading, at_once):
    model = _HeldProbe()
    helper, caught = signalled_from_another_thread(model.release.set)
    helper.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            corpus_run._probe_while_reading(reading, model, _Hash())
        assert model.running.is_set() and not model.done.is_set()  # raised while the probe still ran
    finally:
        caught.set()
        model.release.set()
        helper.join(GIVE_UP_S + 5)


def _interrupted_reading(*args):
    raise KeyboardInterrupt  # a Ctrl-C while the driver reads the corpus, the probe running


def test_a_ctrl_c_while_reading_leaves_without_waiting_for_the_probe(reading, at_once, monkeypatch):
    monkeypatch.setattr(corpus_run.it, "read_texts", _interrupted_reading)
    model = _HeldProbe()
    safety = threading.Timer(GIVE_UP_S, model.release.set)  # ends a wait that the old code made
    safety.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            corpus_run._probe_while_reading(reading, model, _Hash())
        assert not model.done.is_set()
    finally:
        safety.cancel()
        model.release.set()


def test_a_library_callers_ctrl_c_still_waits_for_the_probe(reading, monkeypatch):
    """Its process tears the interpreter down after: the probe's thread is not left running through it."""
    monkeypatch.setattr(corpus_run.it, "read_texts", _interrupted_reading)
    model = _HeldProbe()
    threading.Timer(0.2, model.release.set).start()
    with pytest.raises(KeyboardInterrupt):
        corpus_run._probe_while_reading(reading, model, _Hash())
    assert model.done.is_set()


def test_the_probe_is_waited_for_and_its_result_read(reading):
    model = _HeldProbe()
    model.release.set()
    got = corpus_run._probe_while_reading(reading, model, _Hash())
    assert model.done.is_set() and got is not None and got.kind == "encoder" and got.provider is None
