"""Image regions, several heads side by side: one query's overlay in each head, on one colour scale.

``attnviz figure --view image --head 0,3,5`` draws each head's picture beside the others under one colour bar (the
"which head looks where" figure); the window's tab shows one head at a time on the same scale.  One bar needs one
scale: fixed 0–1 or shared by the block's heads, never a map's own stretch.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnviz.core.attention import AttentionResult, Block
from attnviz.core.view.overlay import OverlayPanel, OverlayView, overlay_view
from attnviz.core.view.selection import Selection, ViewError


@dataclass
class HeadsOverlay:
    """The pictures an image figure draws, left to right: each head's overlay (and a tiled image's global image
    beside each), one caption a picture, one title, one colour scale (``overlays[0].scale``)."""

    overlays: list[OverlayView]
    pictures: list[tuple[OverlayView, OverlayPanel | None]]  # (the overlay, its global panel or None: its tiles)
    captions: list[str]  # one a picture; empty: none drawn (one head of a single picture)
    title: str


def image_heads(sel: Selection) -> list[int]:
    """The heads drawn side by side: the selection's ``heads`` when it names several in head mode, else none (one
    map: a head or an aggregate)."""
    heads = sorted(set(sel.heads))
    return heads if sel.mode == "head" and len(heads) > 1 else []


def heads_overlay(
    result: AttentionResult,
    sel: Selection,
    size: tuple[int, int] | None = None,
    blocks: list[Block] | None = None,
) -> HeadsOverlay:
    """``sel``'s overlay, or one per head of :func:`image_heads` on the selection's one colour scale (refused in one
    line on the stretched scale: each picture would have a scale of its own and the one bar would state none);
    ``sel.vmax``: the one scale's top set by hand, whatever the selection's scale."""
    heads = image_heads(sel)
    if not heads:
        ov = overlay_view(result, sel, size, blocks)
        return HeadsOverlay([ov], _pictures(ov), list(ov.captions), ov.title)
    if sel.image_scale in ("map", "row") and not sel.vmax:  # (a top given by hand is one scale for every picture)
        raise ViewError(
            f"heads {', '.join(map(str, heads))} are drawn under one colour bar, and the stretched scale ('map') gives "
            "each its own; give --scale shared (the block's heads) or --scale fixed (0-1)",
            param="scale",
        )
    overlays = [overlay_view(result, sel.with_(head=h, heads=()), size, blocks) for h in heads]
    pictures = [p for ov in overlays for p in _pictures(ov)]
    # a tiled image's panels keep their captions on a line of their own under the head's (side by side, one line
    # ran into the next picture's)
    captions = [f"head {h}" + (f"\n{c}" if c else "") for h, ov in zip(heads, overlays) for c in (ov.captions or ("",))]
    one = f"head {heads[0]} · "
    title = overlays[0].title.replace(one, f"heads {', '.join(map(str, heads))} · ", 1)
    return HeadsOverlay(overlays, pictures, captions, title)


def _pictures(ov: OverlayView) -> list[tuple[OverlayView, OverlayPanel | None]]:
    return [(ov, None)] + ([(ov, ov.global_panel)] if ov.global_panel is not None else [])
