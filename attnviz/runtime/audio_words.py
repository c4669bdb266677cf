"""Word timestamps of a speech model (a Whisper folder) on one clip: the run that gives the cross-attention, the
heads that align, and every head scored against reference word times.

The heads are the folder's ``generation_config.json`` ``alignment_heads`` (what the Hub's Whisper checkpoints
carry, what transformers' ``return_token_timestamps`` uses), else the heads the user names, else every head of
the decoder's second half (OpenAI whisper's default for a model without a list).  The arithmetic is
:mod:`attnviz.core.audio_align`'s (numpy; no torch at run time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attnviz import AttnvizError
from attnviz.core import audio_align as aa
from attnviz.core import audio_gold as ag
from attnviz.core.attention import AttentionResult, SiteInfo
from attnviz.core.setting_words import fix
from attnviz.runtime.audio import FeatureSpec

Head = tuple[int, int]  # (decoder layer, head)
DEFAULT_TOKENS = 128  # tokens generated when no transcript is given (capped by the decoder's positions)


def cross_sites(sites: Sequence[SiteInfo]) -> list[int]:
    """Indices of the decoder's cross-attention sites, layer by layer."""
    return [i for i, s in enumerate(sites) if s.stack == "decoder" and s.kind == "cross"]


@dataclass(frozen=True)
class HeadChoice:
    heads: tuple[Head, ...]
    source: str  # where they come from, for the report line


@dataclass(frozen=True)
class AlignConfig:
    """What the folder says about aligning: its alignment heads (None when it names none) and filter width."""

    heads: tuple[Head, ...] | None
    median_width: int = aa.MEDIAN_FILTER_WIDTH

    @classmethod
    def for_model(cls, model) -> AlignConfig:
        """From what the folder's configs said when it opened (``meta["speech_alignment"]``, raw: a malformed list
        is refused here, where it is used, not when the folder opens)."""
        from attnviz.runtime.waveform import on_raw_samples

        if on_raw_samples(model.meta):  # wav2vec2 and kin: no decoder, no words to time
            raise AttnvizError(
                f"{model.path.name} is a speech encoder on raw samples (wav2vec2, HuBERT, WavLM), with no decoder "
                "whose words' cross-attention could be timed; align-audio takes a Whisper folder (open the clip with "
                "--audio FILE to see the encoder's frames)"
            )
        if "audio" not in model.meta or "speech_alignment" not in model.meta:
            raise AttnvizError(
                f"{model.path.name}: not a speech model folder; give the folder holding encoder_model.onnx, "
                "decoder_model.onnx and the Whisper configs"
            )
        said = model.meta["speech_alignment"]
        width = said.get("median_filter_width")
        width = aa.MEDIAN_FILTER_WIDTH if width is None else width
        if isinstance(width, bool) or not isinstance(width, int) or width <= 0 or width % 2 != 1:
            raise AttnvizError(f"config.json: median_filter_width {width!r}; give an odd number of frames (7)")
        raw = said.get("alignment_heads")
        if raw is None:
            return cls(None, width)
        ok = isinstance(raw, list) and all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in p)
            for p in raw
        )
        if not ok or not raw:
            raise AttnvizError(
                f"generation_config.json: alignment_heads is not a list of [layer, head] pairs; {fix('alignment_heads')}"
            )
        return cls(tuple((int(a), int(b)) for a, b in raw), width)


def choose_heads(
    sites: Sequence[SiteInfo], config: AlignConfig, picked: Mapping[int, Sequence[int]] | None = None
) -> HeadChoice:
    """The heads whose attention is warped: ``picked`` (``--heads`` parsed by ``runtime.ablation.parse_heads``:
    site index -> heads), else the folder's alignment_heads, else the decoder's second half.  ``sites`` as a run
    reports them (their head counts known)."""
    sites = list(sites)
    cross = cross_sites(sites)
    if not cross:
        raise AttnvizError("the model has no decoder cross-attention; word times need it")
    layers = [sites[i].layer for i in cross]
    heads = sites[cross[0]].heads
    if picked:
        bad = [sites[i].label for i in picked if i not in cross]
        if bad:
            raise AttnvizError(
                f"--heads names {', '.join(bad)}; word times come from decoder cross-attention heads "
                "('decoder cross LAYER:HEAD')"
            )
        return HeadChoice(tuple((sites[i].layer, h) for i, hs in picked.items() for h in hs), "--heads")
    if config.heads is not None:
        for layer, head in config.heads:
            if layer not in layers or not 0 <= head < heads:
                raise AttnvizError(
                    f"generation_config.json: alignment head [{layer}, {head}] does not exist (the decoder has "
                    f"{len(layers)} cross-attention layers of {heads} heads); {fix('alignment_head')}"
                )
        return HeadChoice(config.heads, "generation_config.json alignment_heads")
    half = layers[len(layers) // 2 :]
    return HeadChoice(
        tuple((lay, h) for lay in half for h in range(heads)),
        "every head of the decoder's second half (the folder names no alignment_heads)",
    )


@dataclass
class ClipAttention:
    """One clip's decoder cross-attention and what its rows and columns are."""

    cross: dict[int, np.ndarray]  # decoder layer -> [heads, rows, frames]
    sites: list[SiteInfo]  # as the run reports them
    ids: list[int]  # decoder positions' tokens: the rows fed, then the last generated token when generating
    n_prompt: int
    n_frames: int  # the clip's feature frames (transformers' attention mask, summed)
    tok: object = field(repr=False)  # the decoder's TextEncoder
    eos: int | None = None
    logits: np.ndarray | None = field(default=None, repr=False)  # [rows, vocab] of a teacher-forced run, else None

    def is_special(self, i: int) -> bool:
        return (self.eos is not None and i >= self.eos) or bool(self.tok.is_special(i))  # type: ignore[attr-defined]

    def weights(self, heads: Sequence[Head]) -> np.ndarray:
        return np.stack([self.cross[lay][h] for lay, h in heads])

    def words(self, heads: Sequence[Head], median_width: int = aa.MEDIAN_FILTER_WIDTH) -> list[aa.TimedWord]:
        """The words with times from ``heads`` warped together."""
        # warped from the prompt's last row (aa.word_rows): the first word is not (0, 0)
        return self.timed(aa.token_times(self.weights(heads), aa.word_rows(self.n_prompt), self.n_frames, median_width))

    def words_per_head(self, median_width: int = aa.MEDIAN_FILTER_WIDTH) -> dict[Head, list[aa.TimedWord]]:
        """The words with times from each cross head alone (all heads warped in one batch)."""
        heads = [(lay, h) for lay in sorted(self.cross) for h in range(len(self.cross[lay]))]
        rows = aa.word_rows(self.n_prompt)
        times = aa.token_times_per_head(self.weights(heads), rows, self.n_frames, median_width)
        return {head: self.timed(t) for head, t in zip(heads, times)}

    def timed(self, times: np.ndarray) -> list[aa.TimedWord]:
        return aa.word_times(times, self.ids, self.tok.decode, self.n_prompt, self.is_special)  # type: ignore[attr-defined]

    def probabilities(self, words: Sequence[aa.TimedWord]) -> list[float | None]:
        """Each word's mean token probability (OpenAI whisper's word probability): the softmax of the row before
        each token, read from a teacher-forced run's logits; None where the run kept none (cached generation)."""
        if self.logits is None:
            return [None] * len(words)
        from attnviz.core.compare import log_softmax

        logp = log_softmax(self.logits)
        return [float(np.mean([np.exp(logp[p - 1, t]) for p, t in zip(w.positions, w.tokens)])) for w in words]


def _check_transcript(model, text: str, n_prompt: int, positions: int | None) -> None:
    """Refuse in one line a transcript longer than the decoder's positions, or one the tokenizer reads as no word
    at all (every word unknown), before the model runs."""
    tok = model.tokenizers[1]
    if tok is None:
        return
    ids = tok.encode(text, add_special=False).ids
    if isinstance(positions, int) and n_prompt + len(ids) > positions:
        raise AttnvizError(
            f"the transcript is {len(ids)} tokens; the decoder holds {positions - n_prompt} after its {n_prompt}-token "
            "prompt: give a shorter transcript (cut the recording and its words together)"
        )
    eos = model.meta.get("special", {}).get("eos")
    if ids and all((eos is not None and i >= eos) or tok.is_special(i) for i in ids):
        raise AttnvizError(
            "the transcript holds no word the model's tokenizer knows (every token is unknown or special); "
            "give the words spoken in its language"
        )


def feature_frames(samples: int, spec: FeatureSpec) -> int:
    """Feature frames a clip of ``samples`` fills: the extractor's attention mask taken every hop, summed."""
    return min(-(-samples // spec.hop_length), spec.frames)


def run_clip(model, wave: np.ndarray, transcript: str | None, generate: int | None) -> ClipAttention:
    """The model on one clip: teacher-forced on ``transcript`` (a leading space, as Whisper's own text starts),
    else generating up to ``generate`` tokens (None: :data:`DEFAULT_TOKENS`, within the decoder's positions)."""
    return clip_attention(model, run_speech(model, wave, transcript, generate), len(wave))


def run_speech(model, wave: np.ndarray, transcript: str | None, generate: int | None) -> AttentionResult:
    """:func:`run_clip`'s run, every map kept (a corpus reduces them all)."""
    prompt = model.meta.get("speech_prompt", {})
    if transcript is not None:
        if not transcript.strip():
            raise AttnvizError("the transcript is empty; give the words spoken (--transcript FILE)")
        text = " " + " ".join(transcript.split())
        _check_transcript(model, text, len(prompt.get("ids", [])) or 1, prompt.get("max_positions"))
        r = model.analyze(audio=wave, text_pair=text)
    else:
        if generate is None:
            room = prompt.get("max_positions")
            generate = DEFAULT_TOKENS
            if isinstance(room, int):
                generate = max(1, min(generate, room - len(prompt.get("ids", [])) + 1))
        r = model.analyze(audio=wave, generate=generate)
    return r


def clip_attention(model, r: AttentionResult, samples: int, batch: int = 0) -> ClipAttention:
    """One batch row of a speech model's result as what word timestamps read: its decoder cross-attention, the
    decoder ids fed (and the last generated), the forced prompt's length, the clip's frames (``samples`` long)."""
    prompt = model.meta.get("speech_prompt", {})
    sites = list(r.sites)
    cross = {sites[i].layer: r.maps[i].array()[batch] for i in cross_sites(sites)}
    ids = list(r.decoder_ids[batch]) if len(r.decoder_ids) > batch else []
    gen = r.info.get("generated_ids") or []
    if gen:
        ids.append(int(gen[-1]))
    spec = FeatureSpec.from_dict(model.meta["audio"])
    tok = model.tokenizers[1]
    if tok is None:
        raise AttnvizError(f"{model.path.name}: no tokenizer.json for the decoder; word times need its words")
    eos = model.meta.get("special", {}).get("eos")
    forced = len(prompt.get("ids", [])) or 1  # the forced prompt (a transcript is fed after it, not part of it)
    logits = r.outputs.get("logits")
    logits = np.asarray(logits[batch]) if logits is not None and np.ndim(logits) == 3 else None
    return ClipAttention(cross, sites, ids, forced, feature_frames(samples, spec), tok, eos, logits)


def attach_word_times(model, r: AttentionResult) -> None:
    """A speech run whose folder names its alignment heads carries its words' times for the Audio regions view
    (``info["word_times"]``: ``[[word, start, end], ...]``, the words ``align-audio`` writes); one clip only.  A
    folder that names none is left as it is (transformers gives no token timestamps without them either), and
    a list that does not fit the model is a note, not a failed run: the maps stand without the words."""
    said = model.meta.get("speech_alignment") or {}
    if said.get("alignment_heads") is None or r.audio is None or r.batch_size != 1 or not r.decoder_ids:
        return
    try:
        config = AlignConfig.for_model(model)
        choice = choose_heads(r.sites, config)
        words = clip_attention(model, r, len(r.audio.waves[0])).words(choice.heads, config.median_width)
    except AttnvizError as e:
        r.info["notes"] = [*r.info.get("notes", []), f"no word times: {e}"]
        return
    r.info["word_times"] = [[w.text, w.start, w.end] for w in words]


@dataclass(frozen=True)
class HeadScore:
    stack: str
    kind: str
    layer: int
    head: int
    score: ag.BoundaryScore

    def row(self) -> dict:
        s = self.score
        return {
            "stack": self.stack,
            "kind": self.kind,
            "layer": self.layer,
            "head": self.head,
            "within_20ms": s.within[0],
            "within_50ms": s.within[1],
            "within_100ms": s.within[2],
            "mean_abs_error_s": s.mean_abs_error_s,
            "boundaries": s.boundaries,
        }


SET_KIND = "alignment heads"  # the row of the chosen set, warped together (layer and head -1)


def errors_of(words: Sequence[aa.TimedWord], gold: Sequence[ag.GoldWord]) -> tuple[list[float], int]:
    pairs = ag.match([w.text for w in words], [g.text for g in gold])
    return ag.boundary_errors([(w.start, w.end) for w in words], gold, pairs), len(pairs)


class HeadTally:
    """Boundary errors of every cross head and of the chosen set, summed over clips (a corpus adds clip after
    clip): each head warped on its own, as if it were the only alignment head."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, int, int], ag.BoundaryCounts] = {}
        self.gold_words = 0

    def add(self, clip: ClipAttention, gold: Sequence[ag.GoldWord], chosen: Sequence[Head], width: int) -> None:
        self.gold_words += len(gold)
        found = {(SET_KIND, -1, -1): clip.words(chosen, width)}
        found |= {("cross", lay, h): words for (lay, h), words in clip.words_per_head(width).items()}
        for key, words in found.items():
            errs, n = errors_of(words, gold)
            self.counts.setdefault(key, ag.BoundaryCounts.empty()).add(errs, n)

    def ranked(self) -> list[HeadScore]:
        """Heads best first: most boundaries within 50 ms, then the smallest mean error."""
        out = [
            HeadScore("decoder", kind, lay, h, c.score(self.gold_words)) for (kind, lay, h), c in self.counts.items()
        ]

        def key(s: HeadScore):
            w50, mae = s.score.within[1], s.score.mean_abs_error_s
            return (-(w50 if w50 == w50 else -1.0), mae if mae == mae else float("inf"), s.layer, s.head)

        return sorted(out, key=key)


def read_gold(path: str | Path, tier: str | None = None) -> list[ag.GoldWord]:
    from attnviz.core.untrusted import read_bytes

    p = Path(path)
    return ag.parse_gold(read_bytes(p, fix("gold_file"), ag.MAX_BYTES), p.name, tier)
