"""Word timestamps from a speech decoder's cross-attention: Whisper's alignment heads and dynamic time warping.

:func:`token_times` is transformers' ``WhisperForConditionalGeneration._extract_token_timestamps`` in numpy: the
chosen heads' cross-attention over the audio frames, cropped to the frames the clip fills (``num_frames // 2``
encoder positions), the forced prompt's rows dropped, each frame's column standardised over the tokens,
median-filtered along time (reflect padding, width ``median_filter_width``), averaged over the heads, and
DTW'd on its negation; a token's time is the frame where the path first reaches its row.  :func:`word_times`
groups the text tokens into words as transformers' ASR pipeline does (``_combine_tokens_into_words``: a new word
at a leading space, a special token or a punctuation mark; opening punctuation joins the next word, closing
punctuation the previous one) and gives each word the start of its first token and the end of its last, a
token ``i`` spanning ``(times[i - 1], times[i])``.

Qt-free and numpy-only: the CLI (``attnviz align-audio``) and the Audio regions view draw the same words.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

TIME_PRECISION = 0.02  # seconds per encoder position (two 10 ms hops after the conv stride)
MEDIAN_FILTER_WIDTH = 7  # WhisperConfig.median_filter_width's default
# transformers' defaults (WhisperTokenizer._combine_tokens_into_words), as OpenAI's whisper has them
PREPEND_PUNCTUATIONS = "\"'“¡¿([{-"
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"
PUNCTUATION = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"  # a piece that is only one of these starts a word of its own
REPLACEMENT = "\ufffd"  # what a decoder shows for a token that ends inside a UTF-8 character


@dataclass(frozen=True)
class TimedWord:
    """One word of the transcript and where the alignment puts it in the clip."""

    text: str  # as decoded, without the leading space
    start: float  # seconds
    end: float
    tokens: tuple[int, ...]  # its token ids
    positions: tuple[int, ...]  # their positions in the decoder sequence (the forced prompt included)


def median_filter(x: np.ndarray, width: int) -> np.ndarray:
    """The median of each ``width`` window along the last axis, edges reflected (transformers' ``_median_filter``:
    unchanged when the axis is no longer than half the width)."""
    if width <= 0 or width % 2 != 1:
        raise ValueError("the median filter's width must be an odd number")
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    windows = np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1)
    return np.sort(windows, axis=-1)[..., pad]


def dtw(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest monotonic path through ``matrix`` [tokens, frames] from its first cell to its last: (token
    index, frame index) per step.  transformers' ``_dynamic_time_warping`` exactly (float32 costs, its tie
    order: diagonal, then up, then left), its cells filled an anti-diagonal at a time (each depends on the two
    diagonals before it) so a 30 s clip costs 1,500 numpy steps, not 1,500 x tokens Python ones."""
    n, m = matrix.shape
    matrix = np.asarray(matrix, np.float64)
    cost = np.full((n + 1, m + 1), np.inf, np.float32)
    trace = np.full((n + 1, m + 1), -1, np.int8)
    cost[0, 0] = 0
    for d in range(2, n + m + 1):
        i = np.arange(max(1, d - m), min(n, d - 1) + 1)
        j = d - i
        c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
        diag = (c0 < c1) & (c0 < c2)
        up = ~diag & (c1 < c0) & (c1 < c2)
        t = np.where(diag, 0, np.where(up, 1, 2))
        c = np.where(diag, c0, np.where(up, c1, c2))
        with np.errstate(invalid="ignore"):  # a NaN column (two equal rows: 0/0 in the standardising) as torch's
            cost[i, j] = matrix[i - 1, j - 1] + c  # float64 sum, stored float32: as transformers' loop rounds it
        trace[i, j] = t
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j = n, m
    rows, cols = [], []
    while i > 0 or j > 0:
        rows.append(i - 1)
        cols.append(j - 1)
        t = trace[i, j]
        if t == 0:
            i, j = i - 1, j - 1
        elif t == 1:
            i -= 1
        else:
            j -= 1
    return np.array(rows[::-1], np.int64), np.array(cols[::-1], np.int64)


def token_times(
    weights: np.ndarray,
    n_prompt: int,
    n_frames: int | None = None,
    median_width: int = MEDIAN_FILTER_WIDTH,
    time_precision: float = TIME_PRECISION,
) -> np.ndarray:
    """Seconds per decoder position, ``rows + 1`` of them (transformers' ``token_timestamps`` of one clip).

    ``weights`` is ``[heads, rows, frames]``: the chosen heads' cross-attention of the decoder positions fed (the
    forced prompt's ``n_prompt`` first) over the encoder's frames; ``n_frames`` is the clip's feature frames (the
    feature extractor's attention mask summed; None: every frame).  The prompt's positions get 0; the position
    after the last row repeats the last time (the token it would predict has no row of its own)."""
    w = np.asarray(weights, np.float32)
    if w.ndim != 3:
        raise ValueError(f"weights of shape {w.shape}: give [heads, rows, frames]")
    rows = w.shape[1]
    times = np.zeros(rows + 1, np.float32)
    if n_frames is not None:
        w = w[..., : n_frames // 2]
    w = w[:, n_prompt:, :]
    if w.shape[1] == 0:
        return times
    mean = w.mean(axis=-2, keepdims=True)
    std = w.std(axis=-2, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):  # one token: 0/0, as torch gives NaN there too
        w = (w - mean) / std
    matrix = median_filter(w, median_width).mean(axis=0)
    text_idx, time_idx = dtw(-matrix.astype(np.float64))
    jumps = np.pad(np.diff(text_idx), (1, 0), constant_values=1).astype(bool)
    jump_times = (time_idx[jumps] * time_precision).astype(np.float32)
    times[n_prompt : n_prompt + len(jump_times)] = jump_times
    times[n_prompt + len(jump_times) :] = jump_times[-1]
    return times


# -- tokens -> words ---------------------------------------------------------------------------------------------
def unicode_pieces(ids: Sequence[int], decode: Callable[[list[int]], str]) -> list[tuple[str, list[int]]]:
    """The tokens grouped where their text is whole characters (a byte-level token may end mid-character), each
    group's text as the sequence decoded so far adds it (so a tokenizer that puts the spaces between tokens when
    it decodes, rather than in them, still says where words start).  Indices into ``ids``."""
    full = decode(list(ids))
    out: list[tuple[str, list[int]]] = []
    done, current = "", []  # the text of the groups so far; the tokens of the open group
    for k in range(len(ids)):
        current.append(k)
        text = decode(list(ids[: k + 1]))
        piece = text[len(done) :] if text.startswith(done) else decode([ids[i] for i in current])
        at = piece.find(REPLACEMENT)
        genuine = at < 0 or (len(done) + at < len(full) and full[len(done) + at] == REPLACEMENT)
        if genuine or k == len(ids) - 1:
            out.append((piece, current))
            done, current = done + piece, []
    return out


def split_words(
    ids: Sequence[int],
    decode: Callable[[list[int]], str],
    is_special: Callable[[int], bool] = lambda i: False,
    prepend: str = PREPEND_PUNCTUATIONS,
    append: str = APPEND_PUNCTUATIONS,
) -> list[tuple[str, list[int]]]:
    """Words as (text with its leading space, indices into ``ids``): transformers' ``_split_tokens_on_spaces``
    then ``_merge_punctuations``."""
    words: list[list] = []
    for piece, idx in unicode_pieces(ids, decode):
        special = is_special(int(ids[idx[0]]))
        if special or piece.startswith(" ") or piece.strip() in PUNCTUATION or not words:
            words.append([piece, list(idx)])
        else:
            words[-1][0] += piece
            words[-1][1].extend(idx)
    # opening marks join the word after them (walking back), closing marks the word before (walking on)
    i, j = len(words) - 2, len(words) - 1
    while i >= 0:
        if words[i][0].startswith(" ") and words[i][0].strip() in prepend:
            words[j] = [words[i][0] + words[j][0], words[i][1] + words[j][1]]
            words[i] = ["", []]
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(words):
        if not words[i][0].endswith(" ") and words[j][0] in append:
            words[i] = [words[i][0] + words[j][0], words[i][1] + words[j][1]]
            words[j] = ["", []]
        else:
            i = j
        j += 1
    return [(w, idx) for w, idx in words if w and idx]


def word_times(
    times: np.ndarray,
    ids: Sequence[int],
    decode: Callable[[list[int]], str],
    n_prompt: int,
    is_special: Callable[[int], bool] = lambda i: False,
) -> list[TimedWord]:
    """The words of the text tokens ``ids[n_prompt:]`` (special tokens such as end-of-text left out) with their
    times from :func:`token_times` ``times`` (indexed by decoder position): a token at position ``p`` spans
    ``times[p - 1]`` to ``times[p]``, rounded to 10 ms as transformers' pipeline rounds them."""
    positions = [p for p in range(n_prompt, min(len(ids), len(times))) if not is_special(int(ids[p]))]
    text_ids = [int(ids[p]) for p in positions]
    out = []
    for text, idx in split_words(text_ids, decode, is_special):
        first, last = positions[idx[0]], positions[idx[-1]]
        start = round(float(times[first - 1]), 2) if first > 0 else 0.0
        out.append(
            TimedWord(
                text.strip(),
                start,
                round(float(times[last]), 2),
                tuple(text_ids[i] for i in idx),
                tuple(positions[i] for i in idx),
            )
        )
    return out


def align_words(
    weights: np.ndarray,
    ids: Sequence[int],
    decode: Callable[[list[int]], str],
    n_prompt: int,
    n_frames: int | None = None,
    is_special: Callable[[int], bool] = lambda i: False,
    median_width: int = MEDIAN_FILTER_WIDTH,
    time_precision: float = TIME_PRECISION,
) -> list[TimedWord]:
    """:func:`token_times` then :func:`word_times`: the words of one clip from its chosen heads' cross-attention
    ``[heads, rows, frames]`` (the view's entry point: the words it draws are the words ``align-audio`` writes)."""
    times = token_times(weights, n_prompt, n_frames, median_width, time_precision)
    return word_times(times, ids, decode, n_prompt, is_special)
