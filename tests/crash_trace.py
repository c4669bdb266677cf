"""A native crash of the test process names where it happened (a pytest plugin; tests/conftest.py loads it).

pytest's faulthandler plugin prints every thread's Python stack on SIGSEGV, but two things silenced it in session
12, when the fresh-clone suite died with rc 139 twice and printed nothing:

- ``ray.init`` installs Ray's own SIGSEGV handler and ``ray.shutdown`` resets it to the default, so after
  tests/corpus's Ray tests any crash killed the process without a word; and ``faulthandler.enable`` does nothing
  while faulthandler believes it is on.  So before each test the handler is switched off and on again, onto
  pytest's own copy of stderr (fd 2 is the capture file during a test);
- pytest switches faulthandler off when the session ends, so a crash at interpreter exit went unreported: it is
  switched on again last thing.
"""

from __future__ import annotations

import faulthandler
import sys

import pytest
from _pytest.faulthandler import fault_handler_stderr_fd_key


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    fd = item.config.stash.get(fault_handler_stderr_fd_key, None)
    if fd is not None:
        faulthandler.disable()
        faulthandler.enable(file=fd)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    faulthandler.disable()
    faulthandler.enable(file=sys.__stderr__)
