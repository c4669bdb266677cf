"""A speech clip's frames among the encoder's: the maps' frame axes end with the clip, not with the model's window.

Whisper pads every clip to its window (30 s; the demo ``models/spoken-digits``'s 4 s: 200 frames of 20 ms), so a
2.3-s clip's head map, alignment and thumbnails were 200 frames wide, 84 of them silence the user never recorded,
while Audio regions drew the clip alone.  Every map view cuts a frame axis to the frames that hold the clip (the
same count as Audio regions, :func:`clip_frame_count`) unless the selection's ``padding`` asks for the whole window
(``figure --padding``, the window's "show padding" box).  The cut drops positions at the axis's end only, so a
frame keeps its position (what ``--query``, ``--span`` and the hover count) and nothing is renormalised: the weight
the rows give the padding is the title's to say, not hidden in the others.

Numpy only: no Qt, no matplotlib.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from attnviz.core.attention import AttentionResult, AudioTrack, Block
from attnviz.core.view.selection import Selection, blk_len


def clip_frame_count(track: AudioTrack, batch: int, n_frames: int) -> int:
    """Encoder frames that hold the clip of batch row ``batch`` (the rest of the ``n_frames`` is padding):
    ``ceil(duration / frame)``, at least 1."""
    return max(1, min(n_frames, math.ceil(track.duration(batch) / track.frame_seconds - 1e-9)))


@dataclass(frozen=True)
class ClipCut:
    """How many of a block's query rows and key columns a map keeps (None: the axis whole) and the title's note."""

    rows: int | None
    keys: int | None
    note: str


# (block stack, kind) -> which of its axes are the encoder's frames: (queries, keys).  The decoder's cross-attention
# reads the frames as its keys; the encoder's self-attention is frames by frames; the decoder's own tokens are none.
FRAME_AXES: dict[tuple[str, str], tuple[bool, bool]] = {
    ("decoder", "cross"): (False, True),
    ("encoder", "self"): (True, True),
}


def clip_cut(result: AttentionResult, blk: Block, sel: Selection) -> ClipCut | None:
    """The cut of ``blk``'s frame axes to the clip, or None: not a speech model, no frame axis, the whole window
    asked for (``sel.padding``), or no padding after the clip (wav2vec2's frames end with the clip)."""
    track = result.audio
    axes = FRAME_AXES.get((blk.stack, blk.kind))
    if track is None or axes is None or sel.padding:
        return None
    on_q, on_k = axes
    total = blk_len(blk, 1) if on_k else blk_len(blk, 0)
    batch = min(max(blk.batch, 0), len(track.waves) - 1)
    n = clip_frame_count(track, batch, total)
    if n >= total:
        return None
    return ClipCut(
        n if on_q and blk_len(blk, 0) == total else None,
        n if on_k else None,
        # short enough for the window's one-line title beside a layer and an aggregate (it cuts a longer one)
        f"the clip: frames 0–{n - 1} of {total} (padding cut)",
    )


def pads_clip(result: AttentionResult | None, blocks: list[Block]) -> bool:
    """Whether any of ``blocks`` has frames after the clip that the maps cut (the window's "show padding" box is
    shown for such a result alone: a text model, or wav2vec2's frames ending with the clip, have none)."""
    return result is not None and any(clip_cut(result, b, Selection()) is not None for b in blocks)


def clip_note(result: AttentionResult | None, blocks: list[Block], sel: Selection) -> str | None:
    """The cut's note where some of ``blocks`` are cut to the clip under ``sel`` (the Overview's line: its
    thumbnails of every block at once), else None."""
    cuts = (clip_cut(result, b, sel) for b in blocks) if result is not None else iter(())
    return next((c.note for c in cuts if c is not None), None)
