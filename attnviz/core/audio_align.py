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

Words warp one row more than transformers' token times (:func:`word_rows`): from the forced prompt's last row,
the one that predicts the first text token, as OpenAI's whisper ``find_alignment`` does.  Without it the warp's
first row (which always starts at frame 0) is the one that predicts the *second* token, so the first word always
came out (0, 0) and the second covered both (attnviz before session 28, and transformers' token timestamps).

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
    unchanged when the axis is no longer than half the width).  The windows are sorted by an odd-even
    transposition network of elementwise min / max over shifted views -- no copy of every window -- with NaN
    taken as the largest value, where torch's sort puts it."""
    if width <= 0 or width % 2 != 1:
        raise ValueError("the median filter's width must be an odd number")
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    n = x.shape[-1]
    nan = bool(np.isnan(padded).any())
    vals = [padded[..., k : k + n] for k in range(width)]
    if nan:
        vals = [np.where(np.isnan(v), np.inf, v) for v in vals]
    for p in range(width):
        for k in range(p % 2, width - 1, 2):
            vals[k], vals[k + 1] = np.minimum(vals[k], vals[k + 1]), np.maximum(vals[k], vals[k + 1])
    med = vals[pad]
    return np.where(med == np.inf, np.nan, med).astype(x.dtype) if nan else med.astype(x.dtype, copy=False)


def dtw(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest monotonic path through ``matrix`` [tokens, frames] from its first cell to its last: (token
    index, frame index) per step.  transformers' ``_dynamic_time_warping`` exactly (float32 costs, its tie
    order: diagonal, then up, then left)."""
    return dtw_batch(np.asarray(matrix)[None])[0]


DTW_CHUNK = 16  # matrices warped together: the skewed copies of 16 heads x 100 tokens x 30 s are 27 MB


def dtw_batch(matrices: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`dtw` of every ``[tokens, frames]`` matrix of ``[batch, tokens, frames]``, warped together.

    A cell depends only on the two anti-diagonals before it, so the costs are kept skewed -- ``D[d, i]`` is
    ``cost[i, d - i]`` -- where each anti-diagonal is one contiguous row: 1,600 numpy steps fill a 30 s clip of
    100 tokens for a batch of heads at once (transformers' loop is 150,000 Python steps a head)."""
    out: list[tuple[np.ndarray, np.ndarray]] = []
    for k in range(0, len(matrices), DTW_CHUNK):
        out += _dtw_skewed(np.asarray(matrices[k : k + DTW_CHUNK], np.float64))
    return out


def _dtw_skewed(matrices: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    b, n, m = matrices.shape
    diagonals = n + m + 1
    d_idx, i_idx = np.meshgrid(np.arange(diagonals), np.arange(n + 1), indexing="ij")
    j_idx = d_idx - i_idx
    inside = (i_idx >= 1) & (j_idx >= 1) & (j_idx <= m)
    skewed = np.zeros((b, diagonals, n + 1))
    skewed[:, inside] = matrices[:, i_idx[inside] - 1, j_idx[inside] - 1]
    cost = np.full((b, diagonals, n + 1), np.inf, np.float32)
    trace = np.full((b, diagonals, n + 1), -1, np.int8)
    cost[:, 0, 0] = 0
    for d in range(2, n + m + 1):
        lo, hi = max(1, d - m), min(n, d - 1)
        c0, c1, c2 = cost[:, d - 2, lo - 1 : hi], cost[:, d - 1, lo - 1 : hi], cost[:, d - 1, lo : hi + 1]
        diag = (c0 < c1) & (c0 < c2)
        up = ~diag & (c1 < c0) & (c1 < c2)
        c = np.where(diag, c0, np.where(up, c1, c2))
        with np.errstate(invalid="ignore"):  # a NaN column (two equal rows: 0/0 in the standardising) as torch's
            cost[:, d, lo : hi + 1] = skewed[:, d, lo : hi + 1] + c  # float64 sum stored float32, as transformers
        trace[:, d, lo : hi + 1] = np.where(diag, 0, np.where(up, 1, 2))
    # every path back from the last cell, one step a round; transformers' border: up the first column, left along
    # the first row
    at = np.arange(b)
    i, j = np.full(b, n), np.full(b, m)
    live_steps, row_steps, col_steps = [], [], []
    while True:
        live = (i > 0) | (j > 0)
        if not live.any():
            break
        live_steps.append(live)
        row_steps.append(i - 1)
        col_steps.append(j - 1)
        t = np.where(i == 0, 2, np.where(j == 0, 1, trace[at, i + j, i]))
        i = np.where(live & (t != 2), i - 1, i)
        j = np.where(live & (t != 1), j - 1, j)
    if not live_steps:
        return [(np.zeros(0, np.int64), np.zeros(0, np.int64)) for _ in range(b)]
    live_a, rows_a, cols_a = np.array(live_steps), np.array(row_steps), np.array(col_steps)
    return [
        (rows_a[live_a[:, k], k][::-1].astype(np.int64), cols_a[live_a[:, k], k][::-1].astype(np.int64))
        for k in range(b)
    ]


def _standardised(w: np.ndarray, n_prompt: int, n_frames: int | None, median_width: int) -> np.ndarray:
    """The heads' text rows over the clip's frames, each frame standardised over the tokens and median-filtered
    along time: ``[heads, rows - n_prompt, frames]``."""
    if n_frames is not None:
        w = w[..., : n_frames // 2]
    w = w[:, n_prompt:, :]
    if w.shape[1] == 0:
        return w
    mean = w.mean(axis=-2, keepdims=True)
    std = w.std(axis=-2, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):  # one token: 0/0, as torch gives NaN there too
        w = (w - mean) / std
    return median_filter(w, median_width)


def _times(path: tuple[np.ndarray, np.ndarray], rows: int, n_prompt: int, time_precision: float) -> np.ndarray:
    text_idx, time_idx = path
    times = np.zeros(rows + 1, np.float32)
    jumps = np.pad(np.diff(text_idx), (1, 0), constant_values=1).astype(bool)
    jump_times = (time_idx[jumps] * time_precision).astype(np.float32)
    times[n_prompt : n_prompt + len(jump_times)] = jump_times
    times[n_prompt + len(jump_times) :] = jump_times[-1]
    return times


def _weights(weights: np.ndarray) -> np.ndarray:
    w = np.asarray(weights, np.float32)
    if w.ndim != 3:
        raise ValueError(f"weights of shape {w.shape}: give [heads, rows, frames]")
    return w


def word_rows(n_prompt: int) -> int:
    """Where the words' warp starts: the prompt's last row (it predicts the first text token), not after it."""
    return max(n_prompt - 1, 0)


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
    w = _weights(weights)
    z = _standardised(w, n_prompt, n_frames, median_width)
    if z.shape[1] == 0:
        return np.zeros(w.shape[1] + 1, np.float32)
    return _times(dtw(-z.mean(axis=0).astype(np.float64)), w.shape[1], n_prompt, time_precision)


def token_times_per_head(
    weights: np.ndarray,
    n_prompt: int,
    n_frames: int | None = None,
    median_width: int = MEDIAN_FILTER_WIDTH,
    time_precision: float = TIME_PRECISION,
) -> np.ndarray:
    """:func:`token_times` of each head alone, ``[heads, rows + 1]`` (every head as the only alignment head),
    warped together."""
    w = _weights(weights)
    z = _standardised(w, n_prompt, n_frames, median_width)
    if z.shape[1] == 0:
        return np.zeros((w.shape[0], w.shape[1] + 1), np.float32)
    paths = dtw_batch(-z.astype(np.float64))
    return np.stack([_times(p, w.shape[1], n_prompt, time_precision) for p in paths])


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
    times = token_times(weights, word_rows(n_prompt), n_frames, median_width, time_precision)
    return word_times(times, ids, decode, n_prompt, is_special)
