"""The view a freshly opened result shows first, per kind of model: one table the window (its first tab) and
``attnviz figure`` without ``--view`` (the figure it draws) both read.

The kind is read from the result alone (its sound, towers, image grid, blocks), not from the model file: a maps
file (``open MAPS.npz``, ``figure --maps``) opens on the same view as the run that wrote it.

Numpy only: no Qt, no matplotlib.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from attnviz.core.attention import AttentionResult, Block


@dataclass(frozen=True)
class OpeningView:
    """Where a kind of model opens: ``window`` the tab (a ``--view`` key), ``figure`` what ``attnviz figure``
    draws without ``--view``.  They differ only where a view has no figure of its own worth drawing by default:
    the window's Overview of every head is where browsing starts; on paper one map is the figure (the head map)."""

    window: str
    figure: str
    why: str


_BROWSE = "every head at a glance on screen; one map on paper"

# kind -> where it opens.  Speech opens on Audio regions: a Whisper decoder row spreads ~0.07 a frame over its
# word's segment (its Overview has a scale of its own for that: core/view/overview_scale.py), and its head map is
# 200 source columns wide; Audio regions draw the word's curve over the sound, on the curve's own scale, in seconds.
OPENING_VIEWS: dict[str, OpeningView] = {
    "speech": OpeningView("audio", "audio", "the word's attention over the sound, in seconds, on its own scale"),
    "dual encoder": OpeningView("overview", "heatmap", _BROWSE),  # CLIP, SigLIP: two towers
    "vision-language": OpeningView("overview", "heatmap", _BROWSE),  # image tokens among the words
    "captioning": OpeningView("overview", "heatmap", _BROWSE),
    "image": OpeningView("overview", "heatmap", _BROWSE),  # a vision encoder (ViT)
    "text": OpeningView("overview", "heatmap", _BROWSE),
}


# (kind, test) in order, the first that holds names the result's kind ("text" holds for any result)
KIND_TESTS: tuple[tuple[str, Callable[[AttentionResult, list[Block]], bool]], ...] = (
    ("speech", lambda r, _b: r.audio is not None),
    ("dual encoder", lambda _r, blocks: any(b.tower is not None for b in blocks)),
    ("vision-language", lambda r, _b: r.vision_tower),  # the whole model, or its vision tower run alone
    ("captioning", lambda r, blocks: r.patch_grid is not None and any(b.kind == "cross" for b in blocks)),
    ("image", lambda r, _b: r.patch_grid is not None),
    ("text", lambda _r, _b: True),
)


def result_kind(result: AttentionResult, blocks: list[Block] | None = None) -> str:
    """The kind of model that made ``result``, a key of :data:`OPENING_VIEWS`."""
    blocks = result.blocks() if blocks is None else blocks
    return next(kind for kind, test in KIND_TESTS if test(result, blocks))


def opening_view(result: AttentionResult, blocks: list[Block] | None = None) -> OpeningView:
    """Where ``result`` opens: the window's first tab and the figure drawn without ``--view``."""
    return OPENING_VIEWS[result_kind(result, blocks)]
