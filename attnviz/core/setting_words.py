"""How a refusal names the setting that fixes it: the command line's flag ("give --max-seconds 30") or, in the
window, the input panel's field ("set max seconds to 30").

A refusal is worded where its problem is found, deep in the runtime (a clip too long for the model, a run over the
memory cap); a message naming a flag sent the window's user looking for a flag the window has no place for.  The
window runs its requests under :func:`worded` with its fields' words (:data:`attnviz.app.fields.WINDOW`), so the
same refusal names what the user there can change; outside it (the CLI, a script) the flags are named.  A context
variable, as :mod:`attnviz.runtime.shorten` carries the cut: no run signature has to carry who asked.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class Wording:
    """The phrases that name a setting (by :class:`~attnviz.AttnvizError` ``param``) with a value to give it."""

    names: Mapping[str, str]  # param -> what the user knows it as ("--max-seconds", "max seconds")
    give: str  # the fix: "give {name} {value}"
    again: str  # a second value of the same setting after "or": "{name} {value}" ("or to 31" in the window)
    by: str  # how something is done: "with {name} {value}"


# the command line's: the words every refusal had before the window named its fields
FLAGS = Wording(
    names={"max_seconds": "--max-seconds"},
    give="give {name} {value}",
    again="{name} {value}",
    by="with {name} {value}",
)

_WORDING: ContextVar[Wording] = ContextVar("attnviz_setting_words", default=FLAGS)


def _say(template: str, param: str, value: float) -> str:
    w = _WORDING.get()
    return template.format(name=w.names.get(param) or FLAGS.names[param], value=f"{value:g}")


def give(param: str, value: float) -> str:
    """``give --max-seconds 30`` (the window: ``set max seconds to 30``)."""
    return _say(_WORDING.get().give, param, value)


def again(param: str, value: float) -> str:
    """The same setting's other value, after "or": ``--max-seconds 31`` (the window: ``to 31``)."""
    return _say(_WORDING.get().again, param, value)


def by(param: str, value: float) -> str:
    """``with --max-seconds 12.3`` (the window: ``by setting max seconds to 12.3``)."""
    return _say(_WORDING.get().by, param, value)


@contextlib.contextmanager
def worded(wording: Wording) -> Iterator[None]:
    """Refusals raised inside name their settings with ``wording``."""
    token = _WORDING.set(wording)
    try:
        yield
    finally:
        _WORDING.reset(token)
