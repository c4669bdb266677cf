"""The key of a compared overview's divergence frames (File ▸ Compare with… ▸ Export view): what a frame's colour
says and on which scale, drawn under the grid from the view model's :class:`~attnviz.core.view.FramesKey` (the
window's key under its Overview draws the same words, colours and numbers).

The colours are drawn as an RGB strip, not a colour-mapped image: the key is no map of attention, and nothing
reading the figure's maps should take it for one."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from matplotlib.colors import LinearSegmentedColormap

from attnviz.core import view as vm
from attnviz.figures.layout import LINE, PT, wrap_label

BAR_IN = 0.09  # the colour strip's height
GAP_IN = 0.14  # between the grid and the key's words
MAX_BAR_IN = 2.4  # the strip's longest (a wide overview's key stays a key, not a second colour bar)


@dataclass(frozen=True)
class KeyLayout:
    words: str  # the key's title and note, wrapped to the width
    height: float  # inches, from the key's bottom to its words' top, with the gap above


def key_layout(key: vm.FramesKey, width_in: float, fs: float) -> KeyLayout:
    words = wrap_label(f"{key.title} ({key.note})", width_in, fs - 1)
    lines = words.count("\n") + 1
    height = GAP_IN + lines * (fs - 1) * LINE * PT + 0.04 + BAR_IN + fs * 1.4 * PT
    return KeyLayout(words, height)


def draw_key(fig, key: vm.FramesKey, layout: KeyLayout, x_in: float, y_in: float, w_in: float, fs: float):
    """The key with its bottom-left corner at ``(x_in, y_in)`` inches, ``w_in`` wide at most: the words, then the
    strip of frame colours from JS 0 to the key's top with its numbers under it.  Returns the strip's axes."""
    width, height = fig.get_size_inches()
    bar_w = min(w_in, MAX_BAR_IN)
    ticks_in = fs * 1.4 * PT
    ax = fig.add_axes((x_in / width, (y_in + ticks_in) / height, bar_w / width, BAR_IN / height))
    strip = LinearSegmentedColormap.from_list("frames", key.colours)(np.linspace(0.0, 1.0, 256))[None, :, :3]
    top = key.top if key.top > 0 else 1.0
    ax.imshow(strip, aspect="auto", extent=(0.0, top, 0.0, 1.0), interpolation="bilinear")
    ticks = key.ticks()
    ax.set_xticks([t for t, _ in ticks], labels=[text for _, text in ticks])
    ax.tick_params(axis="x", labelsize=fs - 1, length=2, width=0.5, pad=1.5)
    ax.set_yticks([])
    for sp in ax.spines.values():
        sp.set_linewidth(0.5)
    words_y = y_in + ticks_in + BAR_IN + 0.04
    fig.text(x_in / width, words_y / height, layout.words, ha="left", va="bottom", fontsize=fs - 1)
    return ax
