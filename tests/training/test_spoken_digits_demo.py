"""The bundled speech demo (models/spoken-digits): a trained tiny Whisper folder that opens with its own clip,
transcribes the digits the synthesizer spoke, and times each word inside the segment the synthesizer put it in
(the hand-known truth: data_speech's segment times).  A random-init Whisper does neither (its words collapse), so
these fail on an untrained folder."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
sf = pytest.importorskip("soundfile")

from attnviz.runtime import ModelSet, open_model  # noqa: E402
from attnviz.runtime import audio_words as aw  # noqa: E402
from attnviz.training import data_speech as ds  # noqa: E402
from attnviz.training.speech_digits import split_seed  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "models" / "spoken-digits"
pytestmark = pytest.mark.skipif(not (DEMO / "encoder_model.onnx").is_file(), reason="models/spoken-digits absent")


def sample_clip():
    """The synthesizer's sample clip, drawn here from its seed as the task describes it (first clip of >= 4 digits)."""
    rng = np.random.default_rng(split_seed("sample"))
    while True:
        clip = ds.make_clip(rng)
        if len(clip.segments) >= 4:
            return clip


@pytest.fixture(scope="module")
def model():
    return open_model(DEMO, provider="cpu")


def overlaps(w, s):
    return w.start < s.end and w.end > s.start


def test_the_demo_is_a_small_speech_folder_with_its_sample(model):
    from attnviz.runtime.sample import sample_for_path

    assert isinstance(model, ModelSet) and model.audio and model.roles["input_features"] == "audio"
    assert sum(f.stat().st_size for f in DEMO.iterdir()) < 2_000_000
    found = sample_for_path(DEMO).values
    assert Path(found["audio"]) == DEMO / "sample.wav" and found["generate"] == ds.MAX_DIGITS + 2
    assert model.meta["sample"]["audio"] == "sample.wav"
    heads = aw.AlignConfig.for_model(model).heads
    assert heads is not None and len(heads) >= 1
    assert "spoken-digits" in (ROOT / "models" / "README.md").read_text()


def test_the_sample_is_the_synthesizers_clip_and_is_transcribed(model):
    clip = sample_clip()
    wave, rate = sf.read(DEMO / "sample.wav", dtype="float32")
    assert rate == ds.RATE and np.abs(wave - clip.wave).max() <= 1 / 32768 + 1e-7  # PCM16 of the same samples
    r = model.analyze(audio=str(DEMO / "sample.wav"), generate=ds.MAX_DIGITS + 2)
    assert model.tokenizers[1].decode([t for t in r.info["generated_ids"] if t < 10]).split() == clip.transcript.split()
    # the run carries its word times (the Audio regions view draws them): each on its own digit's segment
    times = r.info["word_times"]
    assert [w for w, _, _ in times] == clip.transcript.split()
    for (_, start, end), s in zip(times, clip.segments):
        assert end > start and start < s.end and end > s.start, (start, end, s)


def test_word_times_sit_on_the_synthesized_segments_of_held_out_clips(model):
    """Teacher-forced on the true digits, the alignment heads' words (what align-audio writes) overlap their own
    segment every time, their midpoints lie inside it nearly always, and no word is zero-length."""
    heads = aw.AlignConfig.for_model(model).heads
    clips = ds.make_clips(25, split_seed("test"))
    words = overlap = centre = 0
    for clip in clips:
        timed = aw.run_clip(model, clip.wave, clip.transcript, None).words(heads)
        assert [w.text for w in timed] == clip.transcript.split()
        for w, s in zip(timed, clip.segments):
            words += 1
            assert w.end > w.start, (clip.transcript, w)
            overlap += overlaps(w, s)
            centre += s.start <= (w.start + w.end) / 2 <= s.end
    assert overlap == words and centre >= 0.9 * words, (overlap, centre, words)


def test_align_audio_on_the_sample_writes_those_words(tmp_path, capsys):
    from attnviz.cli import main

    out = tmp_path / "words.json"
    assert main(["align-audio", str(DEMO), "--audio", str(DEMO / "sample.wav"), "--out", str(out)]) == 0
    got = json.loads(out.read_text())["words"]
    clip = sample_clip()
    assert [w["word"] for w in got] == clip.transcript.split()
    for w, s in zip(got, clip.segments):
        assert w["end"] > w["start"] and w["start"] < s.end and w["end"] > s.start


def test_the_demo_is_listed_and_translation_stays_the_default():
    from attnviz.gui.app import demo_model, demo_models

    names = [p.name for p in demo_models(ROOT / "models")]
    assert "spoken-digits" in names and names[0] == "translation.onnx"
    assert demo_model(ROOT / "models").name == "translation.onnx"


def test_open_screenshot_of_the_demo(tmp_path):
    shot = tmp_path / "speech.png"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(ROOT))
    p = subprocess.run(
        [sys.executable, "-m", "attnviz", "open", str(DEMO), "--screenshot", str(shot), "--view", "audio"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert p.returncode == 0, p.stderr
    assert shot.stat().st_size > 10_000
