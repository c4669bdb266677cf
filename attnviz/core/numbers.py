"""Numbers typed on the command line, in ASCII digits only.

Python's ``int()`` and ``float()`` read more than a number as typed: ``int("1_0")`` is 10 (a digit-group separator,
or a typo for ``1-0``), ``int("٣")`` is 3 (Arabic-Indic digits; any Unicode decimal digit), ``float("1_0.5")`` is
10.5.  A flag that took them passed a value the user may not have meant without a word (``--span 1_0-2_0`` drew
positions 10..20).  Every number flag of every command is read here (:func:`strict_numbers` puts these readers in
place of argparse's ``type=int`` / ``type=float`` once, in ``attnviz.cli.build_parser``; the flags that parse a
form of their own, ``--span LO-HI`` or ``--head 0,3``, read each number with :func:`whole`).
"""

from __future__ import annotations

import argparse
import re

from attnviz.core.quoted import quoted

_WHOLE = re.compile(r"[+-]?[0-9]+")
# a decimal as float() spells it in ASCII: 2, -0.5, .5, 1e-3; nan / inf are left to each flag's own range check
# (which names them: "--vmax nan must be > 0"), as they were before
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:nan|inf|infinity)", re.I)
_SPACE = " \t"  # around a value (int() drops them too): harmless, unlike '_' or another script's digits
MAX_DIGITS = 100  # far past any position, layer or count; int() itself stops at 4,300


class NotANumber(ValueError):
    """A value that is not a number in ASCII digits; its message says what was typed and how to write one."""


def whole(text: str) -> int:
    """``text`` as a whole number written in the digits 0-9 (a sign allowed); :class:`NotANumber` otherwise."""
    t = str(text).strip(_SPACE)
    if _WHOLE.fullmatch(t) is None:
        raise NotANumber(f"{quoted(str(text))} is not a whole number in the digits 0-9 (e.g. 12)")
    _short(text, t)
    return int(t)


def decimal(text: str) -> float:
    """``text`` as a number written in ASCII (0-9, '.', an exponent: 0.5, 1e-3); :class:`NotANumber` otherwise."""
    t = str(text).strip(_SPACE)
    if _DECIMAL.fullmatch(t) is None:
        raise NotANumber(f"{quoted(str(text))} is not a number in the digits 0-9 (e.g. 0.5)")
    _short(text, t)
    return float(t)


def _short(text: str, t: str) -> None:
    if len(t) > MAX_DIGITS:  # a number, but no count or position any model has (int() stops at 4,300 digits)
        raise NotANumber(f"{quoted(str(text))} is far too large; give at most {MAX_DIGITS} digits")


def whole_arg(text: str) -> int:
    """:func:`whole` as an argparse type: argparse's one line names the flag ("argument --layer: '1_0' is ...")."""
    try:
        return whole(text)
    except NotANumber as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def decimal_arg(text: str) -> float:
    """:func:`decimal` as an argparse type."""
    try:
        return decimal(text)
    except NotANumber as e:
        raise argparse.ArgumentTypeError(str(e)) from None


class AsTyped(float):
    """A number that keeps the text it was read from, so a refusal shows it as the user wrote it: argparse's float
    of ``--vmax 0.0000001`` is ``1e-07`` in Python's spelling, a number the user never typed."""

    text: str

    def __new__(cls, value: float, text: str) -> AsTyped:
        self = super().__new__(cls, value)
        self.text = text
        return self

    def __getnewargs__(self) -> tuple[float, str]:  # type: ignore[override]  # pickled to a worker process, it keeps its text
        return (float(self), self.text)


def spelled(value: object) -> str:
    """A number as a refusal shows it: as typed where it was (:class:`AsTyped`: ``1e400``, not ``inf``; ``-3``, not
    ``-3.0``), else in its shortest spelling (``0.5``, ``3``)."""
    if isinstance(value, AsTyped):
        return value.text
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def as_typed_arg(text: str) -> AsTyped:
    """:func:`decimal_arg` keeping the text typed (:class:`AsTyped`), for a flag whose refusal shows its value."""
    return AsTyped(decimal_arg(text), str(text).strip(_SPACE))


def as_typed_json(text: str) -> AsTyped:
    """``json.loads``'s ``parse_float``: a JSON number with the text it is written in (``0.0000001``, ``1E-7``)."""
    return AsTyped(float(text), text)


# argparse's own number types -> the readers that take ASCII digits only; a decimal keeps its text, so any flag's
# refusal can show the number as typed (:func:`spelled`)
STRICT = {int: whole_arg, float: as_typed_arg}


def strict_numbers(parser: argparse.ArgumentParser) -> None:
    """Every ``type=int`` / ``type=float`` flag of ``parser`` reads its value with :func:`whole` / :func:`decimal`:
    one rule for every command's number flags, including flags added later (no flag can miss it)."""
    for action in parser._actions:
        if action.type in STRICT:
            action.type = STRICT[action.type]
