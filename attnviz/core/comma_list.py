"""A comma list typed on the command line (``--head 0,3,5``, ``--heads 'encoder self 2:5,decoder cross 0:1'``).

An empty item is a slip, not a separator to skip: ``--head 0,,1`` (a number left out between the commas) drew
heads 0 and 1 without a word, and ``--head 1,`` head 1 alone.  Every comma list flag splits here, so each refuses
it in the same words.
"""

from __future__ import annotations

from attnviz.core.quoted import quoted


class EmptyItem(ValueError):
    """A comma list with an empty item; its message says where."""


def comma_items(text: str) -> list[str]:
    """The items of ``text`` split at its commas, each stripped of spaces; :class:`EmptyItem` where one is empty
    (two commas together, a comma first or last, nothing at all)."""
    items = [t.strip() for t in str(text).split(",")]
    if all(items):
        return items
    if not any(items):
        where = "the list is empty"
    elif not items[-1]:
        where = "it ends in a comma"
    elif not items[0]:
        where = "it starts with a comma"
    else:
        where = "it has an empty item between two commas"
    raise EmptyItem(f"{quoted(str(text))}: {where}")
