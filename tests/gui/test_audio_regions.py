"""Audio regions in the real window: a tiny random-init Whisper folder (optimum export, tests/optimum_env.py) run on a
synthetic chirp written with soundfile.  The sound goes in through File ▸ Open audio / the input panel's audio field
(the CLI's AnalyzeRequest, the CLI's refusals as one message); the curve on screen is the selected head's
cross-attention row of the result; a click on the spectrogram makes that frame the encoder's query; the word strip
makes a word the query; and the screen draws what File ▸ Export view draws, which is what `attnviz figure` draws
with no selection flags, byte for byte."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("onnxruntime")
sf = pytest.importorskip("soundfile")

from gui_helpers import open_and_wait  # noqa: E402
from PySide6.QtCore import QPointF, Qt  # noqa: E402
from PySide6.QtTest import QTest  # noqa: E402
from screen_figure import figure  # noqa: E402

from attnviz.cli import main  # noqa: E402
from attnviz.core import audio_view as av  # noqa: E402
from attnviz.gui.views.audio_regions import WAVE_BRUSH as WAVE_GREY  # noqa: E402
from attnviz.runtime.request import AnalyzeRequest  # noqa: E402

pytestmark = pytest.mark.slow  # the Whisper export (cached per machine under ~/.cache/attnviz-tests)
RATE = 16000


def chirp(path, seconds=2.2, f0=150.0, f1=3500.0):
    t = np.arange(int(seconds * RATE)) / RATE
    x = 0.5 * np.sin(2 * np.pi * (f0 * t + (f1 - f0) / (2 * seconds) * t**2))
    x[int(0.9 * RATE) : int(1.2 * RATE)] = 0.0  # a pause the spectrogram shows
    sf.write(path, x.astype(np.float32), RATE)
    return path


@pytest.fixture(scope="module")
def whisper(optimum_export):
    return optimum_export("whisper") / "onnx"


@pytest.fixture
def sound(tmp_path):
    return chirp(tmp_path / "chirp.wav")


def cross_site(result, layer: int) -> int:
    return next(i for i, s in enumerate(result.sites) if s.kind == "cross" and s.layer == layer)


def open_speech(qtbot, w, whisper, sound, **values):
    open_and_wait(qtbot, w, whisper, timeout=120000, audio=str(sound), **values)
    w.select_view("audio")
    return w.audio_regions


def test_a_speech_folder_runs_on_a_sound_and_shows_where_each_word_listened(qtbot, real_window, whisper, sound):
    w = real_window
    v = open_speech(qtbot, w, whisper, sound, text_pair="w3 w17 w5", generate=0)
    # the input panel built the request the CLI builds from --audio / --text-pair
    assert w.last_request == AnalyzeRequest(text_pair="w3 w17 w5", audio=str(sound))
    assert w.inputs.audio.isEnabled() and not w.inputs.text.isEnabled()
    assert w.inputs.form.labelForField(w.inputs.text_pair).text() == "transcript"
    r = w.session.result
    assert r.audio is not None and r.info["audio"] == [str(sound)]
    assert [b.text() for b in v.word_bar.buttons] == ["w3", "w17", "w5"]
    assert w.session.block.kind == "cross"  # the tab selected the block it draws
    w.session.select(mode="head", layer=1, head=2)
    n = int(np.ceil(2.2 / 0.02))
    x, y = v.curve_item.getData()
    np.testing.assert_allclose(x, np.arange(n) * 0.02 + 0.01)
    np.testing.assert_array_equal(y, r.maps[cross_site(r, 1)].array()[0, 2, 3, :n])  # "w3": row 3 chose it
    assert v.word_bar.buttons[0].isChecked()
    # a word in the strip becomes the query
    v.word_bar.buttons[2].click()
    assert w.session.sel.query == 5 and v.word_bar.buttons[2].isChecked()
    np.testing.assert_array_equal(v.curve_item.getData()[1], r.maps[cross_site(r, 1)].array()[0, 2, 5, :n])
    # a click on the spectrogram at 1.507 s: frame 75 becomes the encoder's query
    scene = v.spec_plot.vb.mapViewToScene(QPointF(1.507, 40.0))
    QTest.mouseClick(v.glw.viewport(), Qt.MouseButton.LeftButton, pos=v.glw.mapFromScene(scene))
    qtbot.waitUntil(lambda: v.view is not None and v.view.query_kind == "frame")
    assert v.view.query == 75 and w.session.block.stack == "encoder"
    enc = next(i for i, s in enumerate(r.sites) if s.stack == "encoder" and s.layer == 1)
    np.testing.assert_array_equal(v.curve_item.getData()[1], r.maps[enc].array()[0, 2, 75, :n])
    assert [m.getRegion() for _, m in v.marks] == [pytest.approx((1.5, 1.52))] * 2
    assert not any(b.isChecked() for b in v.word_bar.buttons)
    check_screen_is_figure(w, v)


def check_screen_is_figure(w, v):
    """The pyqtgraph items and the exported figure's artists hold the same numbers."""
    fig = figure(w, v)
    ax_wave, ax_spec, ax_band, ax_curve = fig.axes
    line = ax_curve.lines[0]
    x, y = v.curve_item.getData()
    np.testing.assert_array_equal(line.get_xdata(), x)
    np.testing.assert_array_equal(line.get_ydata(), y)
    np.testing.assert_array_equal(np.asarray(ax_spec.images[0].get_array()), v.spec_item.image)
    np.testing.assert_array_equal(np.asarray(ax_band.images[0].get_array()), v.band_item.image)
    rect = v.spec_item.mapRectToParent(v.spec_item.boundingRect())  # where the image lies, in seconds and mels
    assert ax_spec.images[0].get_extent() == pytest.approx([rect.left(), rect.right(), rect.top(), rect.bottom()])
    np.testing.assert_array_equal(v.wave_lo.getData()[1], v.view.env_lo)
    np.testing.assert_array_equal(v.wave_hi.getData()[1], v.view.env_hi)
    assert ax_wave.get_xlim() == pytest.approx(tuple(v.wave_plot.viewRange()[0]))
    assert ax_curve.get_ylim() == pytest.approx(tuple(v.curve_plot.viewRange()[1]))
    spans = [(p.get_x(), p.get_x() + p.get_width()) for p in ax_wave.patches]  # axvspan: a Rectangle in seconds
    marked = [m.getRegion() for p, m in v.marks if p is v.wave_plot]
    np.testing.assert_allclose(np.reshape(spans, (-1, 2)), np.reshape(marked, (-1, 2)), rtol=1e-6)
    title = fig.texts[0].get_text().replace("\n", " · ")
    assert title.endswith(v.view.title)


def test_the_window_exports_what_figure_draws_without_flags(qtbot, real_window, whisper, sound, tmp_path, capsys):
    """Opened with the sound and nothing chosen (the window generates, as `figure` does without --generate), the
    window's export of Audio regions is the PNG `attnviz figure --view audio` writes, byte for byte."""
    w = real_window
    v = open_speech(qtbot, w, whisper, sound)
    assert w.session.result.generated and v.view.query_kind == "word"
    check_screen_is_figure(w, v)
    ours = tmp_path / "window-audio.png"
    w.export_view(ours)
    qtbot.waitUntil(lambda: w.last_export == ours, timeout=60000)
    theirs = tmp_path / "figure-audio.png"
    assert main(["figure", str(whisper), "--audio", str(sound), "--view", "audio", "--out", str(theirs)]) == 0
    assert theirs.read_bytes() == ours.read_bytes()
    capsys.readouterr()


def test_a_bad_sound_is_one_message_at_the_audio_field(qtbot, real_window, whisper, sound, tmp_path):
    w = real_window
    open_speech(qtbot, w, whisper, sound, generate=0)
    silent = tmp_path / "silent.wav"
    sf.write(silent, np.zeros(RATE, np.float32), RATE)
    with qtbot.waitSignal(w.error_shown, timeout=60000) as shown:
        w.open_audio(silent)
    assert shown.args[0] == "silent.wav: is silent (every sample is 0); give a recording with sound in it"
    assert w.marked_widget is w.inputs.audio
    # the same line as the CLI's
    long = tmp_path / "long.wav"
    sf.write(long, np.full(6 * RATE, 0.1, np.float32), RATE)
    with qtbot.waitSignal(w.error_shown, timeout=60000) as shown:
        w.inputs.set_values(audio=str(long))
        w.inputs.run_button.click()
    assert shown.args[0].startswith("long.wav: 6.00 s long; the model hears at most 5 s at a time")


def test_a_speech_folder_opened_without_sound_waits_for_one(qtbot, real_window, whisper, sound):
    w = real_window
    with qtbot.waitSignal(w.workers.finished, timeout=120000):
        w.open_path(whisper)
    qtbot.waitUntil(lambda: w.session.model is not None)
    assert w.session.result is None and w.last_error is None
    assert "choose a sound file (File ▸ Open audio…" in w.statusBar().currentMessage()
    with qtbot.waitSignal(w.result_shown, timeout=120000):
        w.open_audio(sound)  # File ▸ Open audio…
    w.select_view("audio")
    assert w.audio_regions.view is not None and w.audio_regions.view.duration == pytest.approx(2.2)


def test_a_sound_without_a_speech_model_is_one_message(qtbot, window, files, sound):
    w = window
    open_and_wait(qtbot, w, files["text.onnx"])
    with qtbot.waitSignal(w.error_shown) as shown:
        w.open_path(sound)
    assert shown.args[0].endswith(f" does not hear sound; open a speech model (a Whisper folder) for {sound.name}")
    w.select_view("audio")
    assert w.audio_regions.message.startswith("Audio regions need a speech model")
    assert "File ▸ Open audio…)" in w.audio_regions.message and "--" not in w.audio_regions.message  # no flag
    assert av.no_audio().startswith("Audio regions need") and "--audio FILE" in av.no_audio()  # a figure's: the flag


def test_open_command_takes_the_sound(whisper, sound, tmp_path):
    """`attnviz open FOLDER --audio F --view audio`: the window runs the sound and shows Audio regions (its waveform
    grey fills the screenshot); a sound file that is not there is one line, exit code 2, before any window."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from PIL import Image

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(root), ATTNVIZ_SETTINGS=str(tmp_path / "s.ini"))

    def run(*args):
        cmd = [sys.executable, "-m", "attnviz", "open", str(whisper), *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)

    shot = tmp_path / "audio.png"
    p = run("--audio", str(sound), "--text-pair", "w3 w17", "--view", "audio", "--screenshot", str(shot))
    assert p.returncode == 0, p.stderr[-2000:]
    a = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    wave = (np.abs(a - np.array(WAVE_GREY)).max(axis=-1) <= 2).sum()
    assert wave > 20000, wave  # the filled waveform (the other tabs draw no such grey)
    p = run("--audio", str(tmp_path / "nope.wav"), "--screenshot", str(tmp_path / "x.png"))
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [
        f"attnviz: error: --audio {tmp_path / 'nope.wav'}: no such file; give a WAV, FLAC or OGG file"
    ]
    assert not (tmp_path / "x.png").exists()
