"""Characters of a figure's text that no font it may draw with holds: one note naming them, not matplotlib's warning.

A token in Chinese, Japanese, Korean or an emoji prints as an empty box where no installed font has its glyph
(DejaVu Sans, matplotlib's own font, has no CJK; render.py tries the CJK fonts it knows after it).  matplotlib says
so once per glyph as a ``UserWarning`` naming its own source line, dozens of lines for a long text; the figure
command says it once instead, with the characters and the fix (install a font that has them).
"""

from __future__ import annotations

import functools
import unicodedata

from matplotlib import font_manager
from matplotlib.figure import Figure
from matplotlib.ft2font import FT2Font
from matplotlib.text import Text

SHOWN = 8  # the characters named in the note; the rest counted


@functools.cache
def _font(path: str) -> FT2Font:
    return FT2Font(path)


def _fonts(families: tuple[str, ...]) -> list[FT2Font]:
    """The font files matplotlib draws ``families`` with (an installed family each; DejaVu Sans always is)."""
    paths = dict.fromkeys(font_manager.findfont(f, fallback_to_default=False) for f in _installed(families))
    return [_font(p) for p in paths]


def _installed(families: tuple[str, ...]) -> list[str]:
    have = {f.name for f in font_manager.fontManager.ttflist}
    return [f for f in families if f in have]


def missing_glyphs(fig: Figure, families: tuple[str, ...]) -> list[str]:
    """The characters of ``fig``'s visible text, in order of first use, that none of ``families`` has a glyph for
    (drawn as boxes)."""
    fonts = _fonts(families)
    seen: dict[str, None] = {}
    for t in fig.findobj(Text):
        if isinstance(t, Text) and t.get_visible():
            seen.update(dict.fromkeys(t.get_text()))
    drawn = [c for c in seen if not c.isspace() and unicodedata.category(c) != "Cc"]  # (a control character: no glyph)
    return [c for c in drawn if not any(f.get_char_index(ord(c)) for f in fonts)]


def glyph_note(fig: Figure, families: tuple[str, ...]) -> str | None:
    """One line naming the characters that print as boxes and how to draw them, or None when every one has a glyph."""
    missing = missing_glyphs(fig, families)
    if not missing:
        return None
    shown = " ".join(missing[:SHOWN]) + (f" and {len(missing) - SHOWN} more" if len(missing) > SHOWN else "")
    many = len(missing) > 1
    return (
        f"{len(missing)} character{'s' if many else ''} of the figure's text ({shown}) "
        f"{'are in no installed font and print as empty boxes' if many else 'is in no installed font and prints as an empty box'}; "
        "install a font that has them (Chinese, Japanese, Korean: Noto Sans CJK, Debian/Ubuntu package "
        "fonts-noto-cjk) and draw the figure again"
    )
