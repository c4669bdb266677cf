"""The Head stats' "monotonic" of a Whisper's cross-attention counts the rows that chose the transcript's words
(polish24: the row before each word's position, where Audio regions names the word and where Whisper's word
timestamps put it: the <|notimestamps|> row chose the first word), not the forced prompt's other rows
(<|startoftranscript|>, <|en|>, <|transcribe|>: they attend before any word is spoken; words24 left out the
<|notimestamps|> row too, one row later than the view), on the tiny random-init Whisper of
tests/runtime/test_optimum_whisper.py, generating and teacher-forced (where the result's prompt_len counts the
transcript too).  Against a hand computation over the run's own cross maps (each one equals transformers' there):
the share of those rows whose argmax frame is at or after the previous row's."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from attnviz.core.attention import SPEECH_PROMPT_KEY  # noqa: E402
from attnviz.core.head_stats import compute_stats, stats_context  # noqa: E402
from attnviz.core.stats import stat_columns  # noqa: E402
from attnviz.core.view import Selection, clip_cut  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402

pytestmark = pytest.mark.slow
RATE = 16000
PROMPT = ["<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"]  # the folder's forced ids


def chirp(seconds=2.5, f0=100.0, f1=4000.0):
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.5 * np.sin(2 * np.pi * (f0 * t + (f1 - f0) / (2 * seconds) * t**2))).astype(np.float32)


def _by_hand(rows: np.ndarray) -> float:
    top = [int(np.argmax(r)) for r in rows]
    steps = [b >= a for a, b in zip(top, top[1:])]
    return sum(steps) / len(steps) if steps else float("nan")


@pytest.fixture(scope="module")
def model(optimum_export):
    return open_model(optimum_export("whisper") / "onnx", provider="cpu")


@pytest.mark.parametrize("how", ["generate", "transcript"])
def test_monotonic_counts_the_transcripts_rows_only(model, how):
    clip = chirp()
    r = (
        model.analyze(audio=clip, generate=12)
        if how == "generate"
        else model.analyze(audio=clip, text_pair=" w3 w17 w5 w8 w3 w9 w12 w4")
    )
    cross = next(b for b in r.blocks() if b.kind == "cross")
    assert stats_context(r, cross) == "cross-audio"
    # the forced prompt, kept where the run is made: four rows, whatever else was given (prompt_len counts a
    # transcript given to teacher-force, so it is no measure of the prompt)
    assert r.info[SPEECH_PROMPT_KEY] == 4 and cross.query_axis.labels[:4] == PROMPT
    assert r.prompt_len == (4 if how == "generate" else 4 + 8)
    n_text = len(cross.query_axis) - 4
    assert n_text >= 3, cross.query_axis.labels
    # by hand: the transcript's tokens (generated, or given) sit at positions 4 on; each word's row is the one
    # before it (the row that chose it); Whisper's special tokens (<|endoftext|>, ...) are no word
    words = r.generated if how == "generate" else list(cross.query_axis.labels[4:])
    chose = [4 + k - 1 for k, w in enumerate(words) if not (w.startswith("<|") and w.endswith("|>"))]
    assert chose[0] == 3  # the <|notimestamps|> row chose the first word
    assert chose[-1] == (len(cross.query_axis) - 1 if how == "generate" else len(cross.query_axis) - 2)
    rows = compute_stats(r, cross, -1)
    whole = compute_stats(r, cross, -1, padding=True)
    sites = [i for i, s in enumerate(r.sites) if s.kind == "cross"]
    # the Head stats follow the maps' cut to the clip's frames (core.view.clip): a Whisper frame is two 160-sample
    # hops at 16 kHz, so the 2.5-s chirp fills the first 125 of the window's frames
    frames = -(-len(clip) // 320)
    assert clip_cut(r, cross, Selection()).keys == frames < len(cross.key_axis)
    moved = before = 0
    for row, padded in zip(rows, whole):
        maps = r.maps[sites[row["layer"]]].array()[0, row["head"]]  # [rows, frames]
        assert padded["monotonic"] == pytest.approx(_by_hand(maps[chose]), abs=1e-12), padded
        maps = maps[:, :frames]
        assert row["monotonic"] == pytest.approx(_by_hand(maps[chose]), abs=1e-12), row
        moved += _by_hand(maps[chose]) != _by_hand(maps)  # what counting the prompt's rows too gave
        before += _by_hand(maps[chose]) != _by_hand(maps[4:])  # words24's rows (reading the words, not choosing)
    assert moved, "no head's number depends on the prompt rows: the test could not tell the two apart"
    assert before, "no head's number depends on the row shift: the test could not tell the rules apart"


def test_the_words_rows_are_the_rows_audio_regions_names_the_words_at(model):
    """The two agree: the rows "monotonic" counts are the rows Audio regions' buttons select, word by word."""
    from attnviz.core.audio_view import audio_words

    r = model.analyze(audio=chirp(), generate=12)
    cross = next(b for b in r.blocks() if b.kind == "cross")
    named = [row for _, row in audio_words(r, cross)]
    assert named == [4 + k - 1 for k in range(len(r.generated))]  # generated word k at the row that chose it


def test_the_columns_help_says_which_rows_count():
    help_ = stat_columns("cross-audio")["monotonic"][1]
    assert "<|notimestamps|>" in help_ and "left out" in help_ and "chose the first word" in help_
