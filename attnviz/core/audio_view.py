"""The Audio regions view model: a speech model's attention laid over the sound it heard, along time.

The waveform and the log-mel spectrogram of the clip, and one query's attention over the encoder's frames (20 ms
each for Whisper) as a curve and a heat band on the same time axis.  The query is a word of the transcript (the
decoder's cross-attention: where in the sound that word looked) or a frame clicked on the sound (the encoder's
self-attention: where that instant looks).  Which it is follows the :class:`~attnviz.core.view.Selection`: its
block is the cross-attention block (query = the decoder row of a word) or the encoder's self-attention block
(query = a frame), so the window's export hands the same selection to the figure and both draw
:func:`audio_view`'s numbers.

Numpy only: no Qt, no matplotlib.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from attnviz.core import view as vm
from attnviz.core.attention import AttentionResult, AudioTrack, Block
from attnviz.core.setting_words import Wording, fix

ENVELOPE_BINS = 2000  # the waveform is drawn as min/max per bin: the same few thousand numbers on screen and paper
SPEC_FLOOR = 0.15  # the loudest spectrogram cell's grey (0 = black): dark enough to read, not so dark the heat hides
CURVE_COLOUR = vm.HEAD_COLOURS[0]
QUERY_COLOUR = vm.HEAD_COLOURS[1]  # the clicked frame's mark on the sound
SPAN_COLOUR = vm.HEAD_COLOURS[2]  # word spans (start-end) on the waveform


def no_audio(wording: Wording | None = None) -> str:
    """Why Audio regions draw nothing, naming how to give a sound in the words of who asks (the window: its menu)."""
    return (
        "Audio regions need a speech model run on a sound (a Whisper or wav2vec2 folder with an audio file: "
        f"{fix('no_audio', wording)}); this result has no audio"
    )


@dataclass(frozen=True)
class WordSpan:
    """A word's start and end in the clip, seconds (word timestamps: drawn on the waveform)."""

    word: str
    start: float
    end: float


@dataclass
class AudioView:
    """One query's attention over the clip's frames, and the sound under it, in seconds."""

    block_index: int  # the block the curve comes from (cross-attention for a word, encoder self for a frame)
    query_kind: str  # "word" | "frame"
    query: int  # the decoder row of the word, or the frame index
    query_label: str
    times: np.ndarray  # [n] start of each encoder frame shown (i × frame_seconds)
    curve: np.ndarray  # [n] the query's attention weight on each frame shown
    vmax: float  # the top of the curve's axis and the heat band's colour scale: the curve's largest weight
    frame_seconds: float
    duration: float  # the clip's length, seconds (the frames shown cover it; the padding after it is not drawn)
    env_times: np.ndarray  # [m] start of each waveform bin
    env_lo: np.ndarray  # [m] the smallest sample of each bin
    env_hi: np.ndarray  # [m] the largest sample of each bin
    spec: np.ndarray  # [mels, mel frames shown] grey level (1 white = quiet, SPEC_FLOOR = the loudest)
    spec_seconds: float  # the spectrogram's width: mel frames shown × hop / rate
    title: str
    words: list[tuple[str, int]]  # the word strip: (label, decoder row of the cross-attention block)
    # the query's weight on the silent padding after the clip (not drawn); None where the keys end with the clip
    # (a raw-sample encoder on one clip: no padding to weigh, and "0.00" read as a measured nothing)
    padding_mass: float | None
    spans: tuple[WordSpan, ...] = field(default_factory=tuple)

    @property
    def heat(self) -> np.ndarray:
        """``[n]`` in [0, 1]: the curve divided by its top, the heat band's colours."""
        return np.clip(self.curve / self.vmax, 0.0, 1.0)

    @property
    def query_span(self) -> tuple[float, float] | None:
        """The clicked frame's start and end (marked on the sound), or None for a word query."""
        if self.query_kind != "frame":
            return None
        return self.query * self.frame_seconds, (self.query + 1) * self.frame_seconds

    @property
    def peak_time(self) -> float:
        return float(self.times[int(np.argmax(self.curve))]) if len(self.curve) else 0.0


def frames_shown(track: AudioTrack, batch: int, n_keys: int) -> int:
    """Encoder frames that hold the clip (the rest of the window is padding): ``ceil(duration / frame)``, the
    count every map view cuts its frame axes to (:func:`attnviz.core.view.clip_frame_count`)."""
    return vm.clip_frame_count(track, batch, n_keys)


def loudest_frame(track: AudioTrack, batch: int, blk: Block, n: int) -> int:
    """The frame an encoder alone on the sound (wav2vec2, HuBERT) opens on where no frame is chosen: the loudest of
    the ``n`` frames of the clip, where the sound is (frame 0 is often the silence before it).  A property of the
    sound, not of the head shown, so the query stays put while the user steps through heads and layers.  Loudness as
    the Head map's series draws it above the frames (the block's key values, the RMS of each frame's receptive
    field), else the RMS of the samples under each frame; the first of equals."""
    vals = blk.key_axis.values
    if vals is not None and len(vals) >= n:
        level = np.asarray(vals[:n], np.float64)
    else:  # no levels kept (an older maps file): the samples under frame i, [i, i + 1) x frame_seconds
        x = np.asarray(track.waves[batch], np.float64)
        cs = np.concatenate([[0.0], np.cumsum(x * x)])
        edges = np.minimum(np.round(np.arange(n + 1) * track.frame_seconds * track.rate).astype(int), len(x))
        level = (cs[edges[1:]] - cs[edges[:-1]]) / np.maximum(edges[1:] - edges[:-1], 1)
    return int(np.argmax(level)) if n else 0


def frame_at(seconds: float, frame_seconds: float, n: int) -> int | None:
    """The frame a click at ``seconds`` falls in (frame i covers [i, i + 1) × ``frame_seconds``); None outside
    the ``n`` frames shown."""
    if not (math.isfinite(seconds) and 0.0 <= seconds < n * frame_seconds):
        return None
    return min(int(seconds / frame_seconds + 1e-9), n - 1)


def audio_blocks(result: AttentionResult, blocks: list[Block]) -> tuple[int | None, int | None] | None:
    """``(cross block, encoder self block)`` whose keys are the clip's frames, or None when the result has no
    sound or neither.  An encoder alone on the sound (wav2vec2, HuBERT, WavLM) has no cross block: its frames
    are both the queries and the keys."""
    if result.audio is None:
        return None
    cross = next((i for i, b in enumerate(blocks) if b.kind == "cross"), None)
    n = vm.blk_len(blocks[cross], 1) if cross is not None else None
    enc = next(
        (
            i
            for i, b in enumerate(blocks)
            if b.stack == "encoder" and b.kind == "self" and (n is None or vm.blk_len(b, 1) == n)
        ),
        None,
    )
    return None if cross is None and enc is None else (cross, enc)


def audio_source(result: AttentionResult, blocks: list[Block], sel: vm.Selection) -> tuple[int, str] | None:
    """``(block, query kind)`` the view draws for ``sel``: the encoder's self-attention when it is the selected
    block and a query frame is chosen (a click on the sound), else the cross-attention (a word as the query: what
    the view opens on); None without sound."""
    found = audio_blocks(result, blocks)
    if found is None:
        return None
    cross, enc = found
    if cross is None or (enc is not None and sel.block == enc and sel.query is not None):
        assert enc is not None  # audio_blocks found one of the two
        return enc, "frame"
    return cross, "word"


def _cross_of(result: AttentionResult, blocks: list[Block]) -> int | None:
    found = audio_blocks(result, blocks)
    assert found is not None  # the caller found the sound's blocks
    return found[0]


def audio_words(result: AttentionResult, blk: Block) -> list[tuple[str, int]]:
    """The word strip: ``(label, decoder row)`` for the transcript's words, given (teacher-forced) or generated,
    without the special prompt tokens (``<|en|>``, ``<|notimestamps|>``, EOS) unless nothing else is there."""
    special = list(blk.query_axis.special or [])
    given = vm.caption_rows(result, blk)
    rows = [(r, w, bool(special[r + 1]) if r + 1 < len(special) else False) for r, w in given]
    if vm.n_steps(result, blk.batch):
        rows += [(r, w, vm.word_special(result, blk, r, w)) for r, w in vm.generation_rows(result, blk)]
    elif not given:  # no prompt known: every decoder row with its own token
        rows = [(r, w, bool(special[r]) if r < len(special) else False) for r, w in vm.generation_rows(result, blk)]
    words = [(vm.clean_label(w), r) for r, w, sp in rows if not sp]
    return words or [(vm.clean_label(w), r) for r, w, _ in rows]


def envelope(wave: np.ndarray, rate: int, bins: int = ENVELOPE_BINS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(bin start times, min, max)`` of a clip in at most ``bins`` bins."""
    n = len(wave)
    bins = max(1, min(bins, n))
    starts = (np.arange(bins) * n) // bins
    w = np.asarray(wave, np.float32)
    return starts / float(rate), np.minimum.reduceat(w, starts), np.maximum.reduceat(w, starts)


def spectrogram(track: AudioTrack, batch: int, n_frames: int) -> tuple[np.ndarray, float]:
    """The log-mel features of the frames shown as grey levels (white quiet, dark loud), and their width in s."""
    # mel frames under the encoder frames shown (2 per frame for Whisper; a 5 ms frame is half a 10 ms mel frame)
    per = track.frame_seconds * track.rate / track.hop
    feats = np.asarray(track.features[batch], np.float32)[:, : max(1, math.ceil(n_frames * per - 1e-9))]
    lo, hi = float(feats.min()), float(feats.max())
    level = (feats - lo) / (hi - lo) if hi > lo else np.zeros_like(feats)
    return 1.0 - (1.0 - SPEC_FLOOR) * level, feats.shape[1] * track.hop / track.rate


def word_spans(result: AttentionResult) -> tuple[WordSpan, ...]:
    """Word timestamps to draw on the waveform: ``result.info["word_times"]`` (``[[word, start, end], ...]``).

    The hook for DTW word timestamps (issue 23 item 3): whatever computes them (``attnviz align-audio``, the
    run) puts them there and both the screen and the figure draw them; a malformed entry is skipped."""
    raw = (result.info or {}).get("word_times")
    out = []
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, (list, tuple)) and len(item) == 3 and all(isinstance(v, (int, float)) for v in item[1:]):
            start, end = float(item[1]), float(item[2])
            if math.isfinite(start) and math.isfinite(end) and end >= start:
                out.append(WordSpan(str(item[0]), start, end))
    return tuple(out)


def audio_view(result: AttentionResult, sel: vm.Selection, blocks: list[Block] | None = None) -> AudioView:
    """What Audio regions draws for ``sel`` (head or aggregate, layers, batch row, query)."""
    blocks = vm.result_blocks(result, sel, blocks)
    src = audio_source(result, blocks, sel)
    track = result.audio
    if src is None or track is None:
        raise vm.ViewError(no_audio(), param="audio")
    bi, kind = src
    blk = blocks[bi]
    s = vm.clamp(
        sel.with_(
            block=bi,
            step=-1,
            hide_special=False,
            keep=1.0,
            mode="mean" if blk.kind == "cross" and sel.mode == "rollout" else sel.mode,
            padding=True,  # the whole window: the view cuts the clip's frames itself and weighs the padding's mass
        ),
        blocks,
    )
    mv = vm.compute_map(result, s, blocks, keep_pads=True)  # frames and rows by position
    batch = min(max(sel.batch, 0), len(track.waves) - 1)
    n = frames_shown(track, batch, mv.matrix.shape[1])
    spec, spec_seconds = spectrogram(track, batch, n)
    cross = bi if kind == "word" else _cross_of(result, blocks)
    words = audio_words(result, blocks[cross]) if cross is not None else []  # an encoder alone: no words
    if kind == "frame":
        # a frame chosen (a click, --query, a restored session), else the loudest: window and figure open on it
        chosen = loudest_frame(track, batch, blk, n) if sel.query is None else int(sel.query)
        query = min(max(chosen, 0), n - 1)  # a frame of the clip (the padding after it is not drawn)
        label = f"frame {query} ({query * track.frame_seconds:.2f} s)"
    else:
        rows = [r for _, r in words]
        if sel.query is not None and sel.query in rows:
            query = int(sel.query)
        else:  # the generated word of the step shown, else the first word
            query = rows[vm.step_query(result, blk, words, sel.step)] if rows else 0
        label = dict((r, w) for w, r in words).get(query) or vm.clean_label(blk.query_axis.labels[query])
    # a word the transcript holds twice: its place among the words, as its button reads it ("the (3)")
    place = vm.query_place(words, query) if kind == "word" else ""
    row = np.asarray(mv.matrix[min(query, mv.matrix.shape[0] - 1)], np.float64)
    curve = row[:n].astype(np.float32)
    times, lo, hi = envelope(track.waves[batch], track.rate)
    what = mv.title.split(" · ", 1)[1] if " · " in mv.title else mv.title
    return AudioView(
        block_index=bi,
        query_kind=kind,
        query=int(query),
        query_label=label,
        times=np.arange(n) * track.frame_seconds,
        curve=curve,
        vmax=max(float(curve.max()) if n else 0.0, 1e-6),
        frame_seconds=track.frame_seconds,
        duration=track.duration(batch),
        env_times=times,
        env_lo=lo,
        env_hi=hi,
        spec=spec,
        spec_seconds=spec_seconds,
        title=" · ".join([blk.name, what, f"query “{label}”{place}"]),
        words=words,
        padding_mass=float(row[n:].sum()) if len(row) > n else None,
        spans=word_spans(result),
    )
