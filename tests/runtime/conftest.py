"""Fixtures shared by the runtime tests."""

import pytest


@pytest.fixture(params=["isolated", "in-process"])
def placement(request, monkeypatch):
    """Each test twice: sessions in the crash-isolation child (the default), then in this process
    (``ATTNVIZ_INPROCESS=1``): on-demand maps kept on the device take a different path in each (runtime/kept.py)."""
    if request.param == "in-process":
        monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
    return request.param
