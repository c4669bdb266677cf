"""The Head stats table's rows and what their columns mean for the shown block (the GUI draws them as they are).

What a block's key positions are (:func:`stats_context`: tokens, another sentence, patches, a tower's frames, a
clip's frames) decides which columns mean something there (:func:`attnviz.core.stats.stat_columns`).  Where
position columns mean nothing, a context may have its own statistic in their place
(:data:`attnviz.core.stats.CONTEXT_STATS`): a speech decoder's cross-attention over the clip's frames gets
"monotonic" instead of diagonal / previous-token / distance (text position i against frame i is no alignment).
"""

from __future__ import annotations

import numpy as np

from attnviz.core.attention import SPEECH_PROMPT_KEY, AttentionResult, Block
from attnviz.core.audio_view import audio_words
from attnviz.core.frames import FramesMap
from attnviz.core.stats import CONTEXT_STATS, block_head_stats, key_frame_seconds, stats_in_seconds
from attnviz.core.view.clip import ClipCut, clip_cut
from attnviz.core.view.patches import block_grid
from attnviz.core.view.selection import Selection, check_not_empty
from attnviz.core.view.steps import step_rows


def stats_context(result: AttentionResult, blk: Block | None) -> str:
    """text | cross | cross-image | patches | frames | audio | cross-audio: what ``blk``'s key positions are."""
    # a clip's frames, with their times, first: a grid is inferred from the key count alone, and 10 frames
    # (3 x 3 patches and a [CLS]) or 100 (10 x 10) would otherwise read as an image's patches
    if blk is not None and key_frame_seconds(blk) is not None:
        return "cross-audio" if blk.kind == "cross" else "audio"  # (audio: the distance in seconds)
    image = blk is not None and block_grid(result, blk) is not None
    # an attention-pooling head (SigLIP's) is read as cross-attention: its queries are learned probes, not positions
    # on the patch axis, so probe 0 against patch 0 (diagonal), patch -1 (previous) or a distance means nothing
    if blk is not None and blk.kind in ("cross", "pooling"):
        return "cross-image" if image else "cross"
    if blk is not None and isinstance(blk.result.maps[blk.sites[0]], FramesMap):
        return "frames"  # a tower's frames: "first" and "prev" are each frame's (core.stats.frames_head_stats)
    return "patches" if image else "text"


def stats_caption(result: AttentionResult, blk: Block, padding: bool = False) -> str:
    """What the table's rows are of (:func:`rows_caption`), and where a speech clip's frames are cut
    (:func:`stats_clip`), the cut: "decoder cross-attention, over the clip: frames 0–115 of 200 (padding cut), each
    row rescaled over them"."""
    caption = rows_caption(result, blk)
    cut = stats_clip(result, blk, padding)
    return caption if cut is None else f"{caption}, over {cut.note}, each row rescaled over them"


def rows_caption(result: AttentionResult, blk: Block) -> str:
    """What the table's rows are of, for its caption: the block's name, and where the result's rows are a dual
    encoder's scored pairs (CLIP, SigLIP: :func:`~attnviz.core.rows.scored_rows`), which row's input the block
    read.  Each tower reads one half of the row's pair, so the caption names that half and the row it is shown
    for: "encoder self-attention (image) of image 1 photo1.png, as in every pair holding it (pair 2: image 1 ×
    text 0)"; without it the table did not say which of the rows its numbers were."""
    from attnviz.core.rows import row_noun, scored_rows
    from attnviz.core.text_scores import TextScores

    scores = TextScores.from_info(result.info) if scored_rows(result) else None
    r = blk.batch
    if scores is None or not 0 <= r < len(scores.scores):
        return blk.name
    noun, row = row_noun(result), f"{row_noun(result)} {r}: {scores.row_short(r)}"
    if blk.tower == "image":
        if scores.images is None:  # one image against the texts: every row's image tower is the same
            return f"{blk.name} of the image, the same for every {noun} ({row})"
        i = scores.image_names.index(scores.images[r])
        same = "" if noun == "image" else f", as in every {noun} holding it"
        return f"{blk.name} of image {i} {scores.images[r]}{same} ({row})"
    if blk.tower == "text":
        j = scores.text_names.index(scores.texts[r])
        if noun == "image":  # one text against the images: every row's text tower is the same
            return f"{blk.name} of the text, the same for every {noun} ({row})"
        same = "" if noun == "text" else f", as in every {noun} holding it"
        return f"{blk.name} of text {j} “{scores.texts[r]}”{same} ({row})"
    return f"{blk.name} of {row}"


def stats_clip(result: AttentionResult, blk: Block, padding: bool = False) -> ClipCut | None:
    """The cut of ``blk``'s frame axes to a speech clip's frames that the statistics follow, as the maps do
    (core.view.clip: the Head map, Alignment, the strip, Overview), or None: not a speech model's frames, or
    ``padding`` (the "show padding after the clip" box, ``--padding``: the whole window)."""
    return clip_cut(result, blk, Selection(padding=padding))


def compute_stats(result: AttentionResult, blk: Block, step: int, padding: bool = False) -> list[dict]:
    """One row per (layer, head) of ``blk`` at generation ``step`` (worker-safe: numpy only), with the statistics
    of :func:`stats_context`'s context (:data:`~attnviz.core.stats.CONTEXT_STATS`).  A speech clip's frames
    (:func:`stats_clip`): of the clip alone, each row rescaled over its frames, unless ``padding``: the whole
    window, 84 frames of silence the user never recorded included (the demo's 2.3 s in a 4-s window)."""
    check_not_empty(blk)  # 0 heads would give an empty table with no word why
    n = step_rows(result, blk, step)
    cut = stats_clip(result, blk, padding)
    clip = (None, None) if cut is None else (cut.rows, cut.keys)
    # a speech encoder's frames: the distance in seconds (the "audio" context's column), not ~500 frames
    seconds = key_frame_seconds(blk) if blk.kind == "self" else None
    extra = CONTEXT_STATS.get(stats_context(result, blk), {})
    words = word_rows(result, blk) if extra else None
    out = []
    for layer in range(blk.n_layers):
        for h in range(blk.heads_in(layer)):  # a head at a time (a tower's frames: frame by frame, never laid out)
            row: dict[str, float] = {"layer": layer, "head": h}
            row.update(block_head_stats(blk, layer, h, n, clip))
            if extra:
                m = blk.head(layer, h)
                m = m[:n] if n is not None else m
                m = m[: clip[0], : clip[1]]  # the clip's frames, as above (a None slices the axis whole)
                m = m[words[words < len(m)]] if words is not None else m
                row.update({k: f(m) for k, f in extra.items()})
            out.append(row if seconds is None else stats_in_seconds(row, seconds))
    return out


def word_rows(result: AttentionResult, blk: Block) -> np.ndarray | None:
    """The decoder rows a speech decoder's own statistics ("monotonic") count, in order: the rows that chose the
    transcript's words, each the row before its word's own position, where Audio regions names that word
    (core/audio_view.audio_words).  None: every row (no forced prompt known: another decoder, or a result saved
    before the run kept it).

    Why the row that chose a word and not the row that reads it: that row's attention is where the word is heard.
    Whisper's word timestamps say so: OpenAI's ``find_alignment`` warps the rows ``[len(sot_sequence):-1]``, from
    the <|notimestamps|> row (which chose the first word) to the row that chose <|endoftext|>; transformers'
    ``_extract_token_timestamps`` warps the rows from the prompt's length on, but a token at position p spans
    ``times[p - 1]`` to ``times[p]`` (its ASR pipeline, core/audio_align.word_times), the time the DTW path spends on
    row p - 1.  The forced prompt's other rows (<|startoftranscript|>, language, task: they chose the prompt's next
    tokens) attend before any word is spoken, and the end of text chosen is no word: both are left out."""
    if not forced_prompt(result):
        return None
    return np.array([r for _, r in audio_words(result, blk)], np.int64)


def forced_prompt(result: AttentionResult) -> int:
    """How many decoder positions a speech decoder's forced prompt takes (``info[SPEECH_PROMPT_KEY]``, written where
    the run builds it: runtime/builders, runtime/analyze); 0 for any other result, or one saved before it was kept
    (its rows all count, as they did)."""
    n = result.info.get(SPEECH_PROMPT_KEY)
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0
