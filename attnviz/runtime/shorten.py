"""How the user shortens what a run is fed, for the memory refusal to name (:func:`attnviz.runtime.memory_kept.
check_run`): a raw-sample speech encoder's samples are cut with ``--max-seconds S``, so a clip too long for the cap
is refused naming the S that fits, as the position limit names ``--max-tokens N``.  The analysis sets it around its
run (:func:`shortening`); the check, deep in the session, reads it, so no run signature carries it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class Shorten:
    """``feed``'s last axis holds ``per`` positions per unit of the setting ``param`` (16000 samples a second of
    ``max_seconds``), which the user gives to ``step`` of that unit (a tenth of a second)."""

    feed: str
    per: float
    param: str  # AttnvizError.param: named as the command line's flag, or the window's field (core/setting_words)
    what: str  # "the clip": what the setting cuts, for the message
    step: float = 0.1

    def positions(self, value: float) -> int:
        """The positions the setting at ``value`` keeps (as the audio reader rounds ``--max-seconds``)."""
        return int(round(value * self.per))

    def said(self, value: float) -> str:
        from attnviz.core.setting_words import by

        return f"cut {self.what} {by(self.param, value)}"


_SHORTEN: ContextVar[Shorten | None] = ContextVar("attnviz_shorten", default=None)


def current() -> Shorten | None:
    return _SHORTEN.get()


@contextlib.contextmanager
def shortening(how: Shorten | None) -> Iterator[None]:
    token = _SHORTEN.set(how)
    try:
        yield
    finally:
        _SHORTEN.reset(token)
