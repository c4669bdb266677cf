"""Fixtures shared by the runtime tests."""

import pytest


@pytest.fixture(params=["isolated", "in-process"])
def placement(request, monkeypatch):
    """Each test twice: sessions in the crash-isolation child (the default), then in this process
    (``ATTNVIZ_INPROCESS=1``): on-demand maps kept on the device take a different path in each (runtime/kept.py)."""
    if request.param == "in-process":
        monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
    return request.param


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache folder of this test's own (runtime/optcache.py: ATTNVIZ_CACHE_DIR), sessions in this process as in a
    corpus worker; the folder."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("ATTNVIZ_CACHE_DIR", str(folder))
    monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
    return folder


@pytest.fixture
def kept_requests(monkeypatch) -> list:
    """Each request a kept map makes of a site's session (head model or pooling twin), as the session it went to."""
    from attnviz.runtime import model as rm

    made: list = []
    run_kept = rm.LazySession.run_kept

    def counted(self, names, feeds, values, hints):
        made.append(self)
        return run_kept(self, names, feeds, values, hints)

    monkeypatch.setattr(rm.LazySession, "run_kept", counted)
    return made
