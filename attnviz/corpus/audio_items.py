"""Speech corpora (``attnviz corpus MODEL --audio-dir DIR [--gold-dir REFS]``): one item, and one batch, per recording.

A worker runs the Whisper folder on its clip as ``attnviz align-audio`` does (teacher-forced on the reference's
words when ``--gold-dir`` gives them, else generating), reduces every map as a text corpus's are (encoder self
over the encoder's frames, decoder self over the decoder's rows, decoder cross from those rows to the frames),
and with a reference counts every cross head's word boundaries (:class:`attnviz.runtime.audio_words.HeadTally`,
one clip) into rows that add up: within 20 / 50 / 100 ms, the errors' sum, boundaries, matched and reference
words.  The driver folds them file after file, so the totals are ``align-audio --audio-dir``'s own sums, in the
same order, whatever the workers.  Bad recordings are refused in one line before anything runs, as a text
corpus refuses an item it cannot tokenise.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnviz import AttnvizError
from attnviz.corpus.items import Item, sha256_file
from attnviz.corpus.plan import BatchSpec

# one row per cross head (and first the chosen set, warped together): what BoundaryCounts holds, as floats that
# add exactly (counts far below 2**53)
COUNT_COLUMNS = ("within_20ms", "within_50ms", "within_100ms", "error_sum", "boundaries", "matched_words", "gold_words")
WORDS = "words"  # the results' sub-folder of per-recording word times (NAME.words.tsv, as align-audio writes)


@dataclass
class AudioSpec(BatchSpec):
    """One recording: its file, its reference (or None: the model generates) and the run's settings."""

    audio: str = ""
    reference: str | None = None
    tier: str | None = None
    generate: int | None = None  # without a reference: tokens generated at most (None: align-audio's default)


def read_audio_dir(folder: str, gold_dir: str | None, max_items: int | None, tier: str | None) -> list[Item]:
    """The recordings of ``folder`` by name, each with its reference in ``gold_dir``; every file is read and
    every reference parsed here, so a bad one stops the run in one line before a worker starts."""
    from attnviz.corpus.align_audio import recordings, reference_for

    path = Path(folder)
    if not path.is_dir():
        raise AttnvizError(f"--audio-dir {folder}: not a folder; give the folder of recordings")
    if gold_dir is not None and not Path(gold_dir).is_dir():
        raise AttnvizError(f"--gold-dir {gold_dir}: not a folder; give the folder of reference word times")
    sounds = recordings(path)[:max_items]
    refs = [reference_for(f, gold_dir) if gold_dir else None for f in sounds]
    return [
        Item(i, audio=str(f), reference=str(r) if r else None, text=_words(r, tier))
        for i, (f, r) in enumerate(zip(sounds, refs))
    ]


def _words(reference: Path | None, tier: str | None) -> str | None:
    """The reference's words (what the decoder is teacher-forced on, and the examples' text)."""
    from attnviz.runtime import audio_words as aw

    return " ".join(g.text for g in aw.read_gold(reference, tier)) if reference is not None else None


def check_recordings(items: list[Item], spec) -> None:
    """Refuse, naming the file, a recording the run could not use: unreadable, empty, silent, longer than the
    model's window (``load_audio``'s own checks)."""
    from attnviz.runtime.audio import load_audio

    for it in items:
        try:
            load_audio(str(it.audio), spec)
        except AttnvizError as e:
            raise AttnvizError(f"--audio-dir corpus item {it.index}: {e} (or move it out of the folder)") from None


def plan_audio(items: list[Item], tier: str | None, generate: int | None) -> list[AudioSpec]:
    """One batch a recording.  Its paths are absolute (not resolved: a link stays a link), so that a worker in
    another working directory (a Ray actor on another node of a cluster that shares the files) reads the same."""
    return [
        AudioSpec(
            n,
            [it.index],
            audio=os.path.abspath(str(it.audio)),
            reference=os.path.abspath(it.reference) if it.reference else None,
            tier=tier,
            generate=generate,
        )
        for n, it in enumerate(items)
    ]


def sha256_audio(items: list[Item]) -> str:
    """Identity of the recordings and references analysed: names and bytes."""
    h = hashlib.sha256()
    for it in items:
        for p in (it.audio, it.reference):
            h.update(json.dumps([Path(p).name, sha256_file(p)] if p else None).encode())
    return h.hexdigest()


def sites_of(model) -> list:
    """A speech model's sites with their head counts (its probe leaves them unknown): the sites of one short run,
    a second of a tone, one token generated."""
    from attnviz.runtime.audio import FeatureSpec

    rate = FeatureSpec.from_dict(model.meta["audio"]).sampling_rate
    tone = (0.1 * np.sin(2 * np.pi * 440 * np.arange(rate) / rate)).astype(np.float32)
    return list(model.analyze(audio=tone, generate=1).sites)


def chosen_heads(model, sites):
    """The heads warped together (the folder's alignment_heads, else the decoder's second half) and the config;
    ``sites`` as a run (or the probe) reports them, their head counts known."""
    from attnviz.runtime import audio_words as aw

    config = aw.AlignConfig.for_model(model)
    return aw.choose_heads(sites, config), config


def count_rows(tally, groups) -> np.ndarray:
    """One clip's :class:`HeadTally` as [1 + cross heads, COUNT_COLUMNS] (the chosen set first, then the cross
    heads in the corpus's head order)."""
    from attnviz.runtime import audio_words as aw

    keys = [(aw.SET_KIND, -1, -1)] + [
        ("cross", g.layer, h) for g in groups if g.kind == "cross" for h in range(g.heads)
    ]
    out = np.zeros((len(keys), len(COUNT_COLUMNS)))
    for r, key in enumerate(keys):
        c = tally.counts[key]
        out[r] = [*c.within, c.error_sum, c.boundaries, c.matched_words, tally.gold_words]
    return out


def scores(counts: np.ndarray):
    """Summed count rows as BoundaryScores (the same division ``align-audio`` does)."""
    from attnviz.core import audio_gold as ag

    out = []
    for row in counts:
        c = ag.BoundaryCounts([int(w) for w in row[:3]], float(row[3]), int(row[4]), int(row[5]))
        out.append(c.score(int(row[6])))
    return out


@dataclass
class Ran:
    """One recording run by a worker: its maps, each stack's query axis (lengths, special keys), the boundary
    counts (None without a reference) and the words file's bytes; :meth:`BatchReducer._audio` reduces the maps."""

    maps: list[np.ndarray]
    encoder: tuple[np.ndarray, np.ndarray]
    decoder: tuple[np.ndarray, np.ndarray]
    counts: np.ndarray | None
    words: bytes


def run_recording(model, groups, spec: AudioSpec) -> Ran:
    """The worker's part before the reduction: run as align-audio does, count the boundaries, write the words."""
    from attnviz.corpus.align_audio import words_tsv
    from attnviz.runtime import audio_words as aw
    from attnviz.runtime.audio import FeatureSpec, load_audio

    gold = aw.read_gold(spec.reference, spec.tier) if spec.reference else None
    wave, _ = load_audio(spec.audio, FeatureSpec.from_dict(model.meta["audio"]))
    r = aw.run_speech(model, wave, " ".join(g.text for g in gold) if gold else None, spec.generate)
    clip = aw.clip_attention(model, r, len(wave))
    choice, config = chosen_heads(model, r.sites)
    words = clip.words(choice.heads, config.median_width)
    if not words:
        raise AttnvizError(
            f"{Path(spec.audio).name}: the model heard no words (it generated only special tokens); give the "
            "words spoken (--gold-dir with its reference)"
        )
    maps = [m.array() for m in r.maps]
    enc = next(maps[g.site] for g in groups if g.stack == "encoder").shape[-1]
    rows = next(maps[g.site] for g in groups if g.stack == "decoder").shape[-2]
    counts = None
    if gold is not None:
        tally = aw.HeadTally()
        tally.add(clip, gold, choice.heads, config.median_width)
        counts = count_rows(tally, groups)
    return Ran(
        maps,
        (np.array([enc]), np.zeros((1, enc), bool)),  # every frame is attended to (Whisper hears its padding)
        (np.array([rows]), np.array([[clip.is_special(i) for i in clip.ids[:rows]]])),  # the forced prompt: special
        counts,
        words_tsv(words, clip.probabilities(words)),
    )


def head_columns(counts: np.ndarray, groups) -> dict[tuple[int, int], dict]:
    """heads.parquet's alignment columns of each cross head, (layer, head) -> column -> value."""
    from attnviz.corpus.align_audio import MEASURES

    cross = [(g.layer, h) for g in groups if g.kind == "cross" for h in range(g.heads)]
    out = {}
    for key, s in zip(cross, scores(counts)[1:]):
        out[key] = dict(zip([m for m, _ in MEASURES], [*s.within, s.mean_abs_error_s, s.boundaries]))
    return out


def summary(counts: np.ndarray | None, choice, files: int) -> dict:
    """run.json's ``audio_gold``: the heads warped together and their score, and the best cross head."""
    out: dict = {"alignment_heads": [list(h) for h in choice.heads], "heads_from": choice.source}
    if counts is None:
        return out
    chosen = scores(counts)[0]
    return out | {
        "files": files,
        "reference_words": chosen.gold_words,
        "matched_words": chosen.matched_words,
        "alignment_heads_score": {
            "within_20ms": chosen.within[0],
            "within_50ms": chosen.within[1],
            "within_100ms": chosen.within[2],
            "mean_abs_error_s": chosen.mean_abs_error_s,
            "boundaries": chosen.boundaries,
        },
    }
