"""A Ctrl-C of `attnviz corpus` waited on the driver's pyarrow import thread (a join: seconds under load, right at
the start of a run).  The command leaves through ``os._exit`` (core/leaving.py), which ends a daemon thread with
the process, so on that path the interrupt no longer waits; a library caller's process tears the interpreter down
and still joins it (a daemon thread importing through the teardown may crash it).  The import is held here on an
event until the test releases it."""

from __future__ import annotations

import threading

import pytest

from attnviz.core import leaving
from attnviz.corpus import run as corpus_run
from attnviz.corpus.run import CorpusConfig, run_corpus

SAFETY_S = 120  # releases the held import if the run waited on it after all (the old code): the test then fails


def _loaders() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "attnviz-pyarrow"]


@pytest.fixture
def held_import(monkeypatch):
    release = threading.Event()
    monkeypatch.setattr(corpus_run, "_prepare_write_quietly", release.wait)  # the import, held until released
    safety = threading.Timer(SAFETY_S, release.set)
    safety.start()
    yield release
    release.set()
    safety.cancel()
    for t in _loaders():
        t.join(10)


def _run(planted, tmp_path, on_batch) -> None:
    model, texts = planted
    cfg = CorpusConfig(model=str(model), out=str(tmp_path / "out"), texts=str(texts), workers=1, progress=False)
    with pytest.raises(KeyboardInterrupt):
        run_corpus(cfg, on_batch=on_batch)


def test_a_ctrl_c_of_the_command_does_not_wait_for_the_pyarrow_import(planted, tmp_path, held_import, monkeypatch):
    monkeypatch.setattr(leaving, "_at_once", True)  # as cli.main sets it for the console script

    def ctrl_c(done: int) -> None:
        raise KeyboardInterrupt

    _run(planted, tmp_path, ctrl_c)
    assert not held_import.is_set()  # returned while the import was still held: not joined
    assert [t.is_alive() for t in _loaders()] == [True]
    assert (tmp_path / "out" / "checkpoint.npz").is_file()  # the folded batch kept for the resume, as before


def test_a_library_callers_ctrl_c_still_joins_the_import(planted, tmp_path, held_import):
    assert not leaving.leaves_at_once()

    def ctrl_c(done: int) -> None:
        held_import.set()  # the import may finish now: the join below waits for it
        raise KeyboardInterrupt

    _run(planted, tmp_path, ctrl_c)
    assert _loaders() == []  # joined before run_corpus raised
