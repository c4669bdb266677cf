"""How many times this process kept or forgot where ``auto`` landed for a model (runtime/light_model.py: the record
runtime/device.before_session reads).  A caller that keeps before_session's answer for a command (a corpus worker:
corpus/engines._device) asks again once it changed, so it answers as a fresh ask would.  A leaf module: light_model
writes the record, device reads it through light_model."""

from __future__ import annotations

_changed = 0


def changed() -> None:
    """This process kept or forgot where ``auto`` landed for a model (before_session may answer otherwise now)."""
    global _changed
    _changed += 1


def count() -> int:
    """How many times :func:`changed` was called in this process."""
    return _changed
