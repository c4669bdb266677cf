"""Values of a JSON file a user may edit by hand (a figure recipe), checked against the Python types they stand for.

JSON has no types beyond its own, so a hand-edited ``"layer": "2"`` or ``"log": "no"`` reached the code that uses
it as a string: ``int("x")`` surfaced as an internal error, and the non-empty string ``"no"`` turned the log scale
*on*.  Each field is checked against its annotation (``int | None``, ``list[int] | None``, ...) before it is used,
and a mismatch is one line naming the key, the value and what it should be.  Standard library only.
"""

from __future__ import annotations

import json
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

from attnviz import AttnvizError

_NAMES = {bool: "true or false", int: "a whole number", float: "a number", str: "a string", type(None): "null"}
_PLURALS = {bool: "true/false values", int: "whole numbers", float: "numbers", str: "strings"}


def fits(value: Any, tp: Any) -> bool:
    """Whether a JSON value is one of the type ``tp`` stands for.  A bool is no number (JSON's ``true`` is not 1), a
    number is finite (``NaN`` and ``Infinity`` parse, and pass every ``<``/``>`` range check), an int is a float.
    A type this check does not know is left to the code that uses the value."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return any(fits(value, a) for a in args)
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if tp is str:
        return isinstance(value, str)
    if origin in (list, tuple):
        return isinstance(value, list) and all(fits(v, args[0]) for v in value) if args else isinstance(value, list)
    return True


def describe(tp: Any) -> str:
    """``tp`` in words: ``int | None`` -> 'a whole number or null'."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(a) for a in args)
    if origin in (list, tuple):
        return f"a list of {_PLURALS.get(args[0], 'values')}" if args else "a list"
    return _NAMES.get(tp, getattr(tp, "__name__", str(tp)))


def shown(value: Any, width: int = 40) -> str:
    """A value as the file spells it, cut to ``width`` characters."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=True)
    return text if len(text) <= width else text[:width] + "…"


def check_types(values: Mapping[str, Any], hints: Mapping[str, Any], where: str, fix: str) -> None:
    """Each key of ``values`` that ``hints`` types holds a value of that type; otherwise one
    :class:`~attnviz.AttnvizError` ``WHERE.KEY is VALUE; give TYPE (FIX)``.  Keys ``hints`` does not name pass."""
    for key, value in values.items():
        tp = hints.get(key)
        if tp is not None and not fits(value, tp):
            raise AttnvizError(f"{where}.{key} is {shown(value)}; give {describe(tp)} ({fix})")


def hints_of(cls: type) -> dict[str, Any]:
    """A dataclass's field types, resolved from their annotations (strings under ``from __future__ import
    annotations``)."""
    return typing.get_type_hints(cls)
