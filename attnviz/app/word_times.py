"""Reference word times in the window (File ▸ Load word times…): every decoder cross head of the current speech
result scored as ``attnviz align-audio --gold`` scores it (each head warped on its own; the share of word boundaries
within 50 ms, the mean absolute error), for Head stats' columns.  The result is scored as it was run: a generated
transcript is matched to the reference by its words' text, as align-audio matches one."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from attnviz import AttnvizError
from attnviz.core.audio_gold import BoundaryScore


@dataclass(frozen=True)
class WordTimesScores:
    """The scores of one result against one reference; ``heads[(block layer, head)]``, the layer counted within
    the decoder's cross-attention block (Head stats' rows)."""

    name: str
    heads: dict[tuple[int, int], BoundaryScore]
    chosen: BoundaryScore  # the alignment heads warped together
    chosen_from: str
    result: object = field(compare=False, repr=False)  # the result scored: columns only while it is shown


def check_speech_result(result) -> None:
    if result is None or getattr(result, "audio", None) is None:
        raise AttnvizError("reference word times score a speech run: open a Whisper folder and run it on a recording")
    if result.batch_size != 1 or not result.decoder_ids:
        raise AttnvizError("reference word times score one recording at a time: run the model on a single sound file")


def score(model, result, path) -> WordTimesScores:
    """``result``'s cross heads against the reference ``path`` (TSV ``word start end`` or TextGrid), in a worker."""
    from attnviz.runtime import audio_words as aw

    check_speech_result(result)
    gold = aw.read_gold(path)
    config = aw.AlignConfig.for_model(model)
    choice = aw.choose_heads(result.sites, config)
    clip = aw.clip_attention(model, result, len(result.audio.waves[0]))
    tally = aw.HeadTally()
    tally.add(clip, gold, choice.heads, config.median_width)
    ranked = {(s.kind, s.layer, s.head): s.score for s in tally.ranked()}
    layers = sorted(clip.cross)  # the block's layer index is the cross site's place among the decoder's
    heads = {(layers.index(lay), h): sc for (kind, lay, h), sc in ranked.items() if kind == "cross"}
    return WordTimesScores(Path(path).name, heads, ranked[(aw.SET_KIND, -1, -1)], choice.source, result)


def columns(scores: WordTimesScores, layer: int, head: int) -> dict[str, float] | None:
    s = scores.heads.get((layer, head))
    if s is None:
        return None
    return {"within_50ms": s.within[1], "boundary_error_ms": s.mean_abs_error_s * 1000}


def summary(scores: WordTimesScores) -> str:
    c = scores.chosen
    return (
        f"word times {scores.name}: {c.matched_words} of {c.gold_words} reference words matched; alignment heads "
        f"({scores.chosen_from}) {c.within[1]:.0%} of boundaries within 50 ms, mean error "
        f"{c.mean_abs_error_s * 1000:.0f} ms"
    )
