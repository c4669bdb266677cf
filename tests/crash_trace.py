"""A native crash of the test process names where it happened (a pytest plugin; tests/conftest.py loads it).

pytest's faulthandler plugin prints every thread's Python stack on SIGSEGV, but two things silenced it in session
12, when the fresh-clone suite died with rc 139 twice and printed nothing:

- ``ray.init`` installs Ray's own SIGSEGV handler and ``ray.shutdown`` resets it to the default, so after
  tests/corpus's Ray tests any crash killed the process without a word; and ``faulthandler.enable`` does nothing
  while faulthandler believes it is on.  So before each test the handler is switched off and on again, onto
  a copy of the real stderr;
- pytest switches faulthandler off when the session ends, so a crash at interpreter exit went unreported: it is
  switched on again last thing.
"""

from __future__ import annotations

import faulthandler
import os
import sys

import pytest

_STDERR: list[int] = []  # a copy of the real stderr, taken before any test: fd 2 is the capture file during a test


def pytest_configure(config: pytest.Config) -> None:
    _STDERR.append(os.dup(sys.stderr.fileno()))  # (kept open to the end: the exit-time dump writes to it too)


def _rearm() -> None:
    if _STDERR:
        faulthandler.disable()
        faulthandler.enable(file=_STDERR[0])


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _rearm()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    _rearm()
