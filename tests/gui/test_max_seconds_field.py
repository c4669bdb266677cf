"""The input panel's max seconds field: what ``--max-seconds S`` sets on the command line, for speech models only.
A wav2vec2 (the tests' tiny random-init CTC export, tests/optimum_env.py) opened on a 31 s recording is refused by
the window in one message that names the field, not the flag (it named ``--max-seconds``, which the window had no
place for), and frames the field; set, the run keeps the first S seconds, and the maps have the frames of the cut
clip, counted here by hand from the model's own conv stack (config.json)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
sf = pytest.importorskip("soundfile")

from gui_helpers import open_and_wait  # noqa: E402

pytestmark = pytest.mark.slow  # the wav2vec2 export (cached per machine under ~/.cache/attnviz-tests)

RATE = 16000
TEXT_MODEL = "models/sequence-classification.onnx"


def long_recording(path, seconds: int):
    """``seconds`` of a 16-bit recording at 16 kHz: a tone rising and falling each second over faint noise."""
    t = np.arange(seconds * RATE) / RATE
    tone = 0.4 * np.sin(2 * np.pi * (300 + 400 * np.abs(np.sin(np.pi * t))) * t)
    noise = 0.02 * np.random.default_rng(7).standard_normal(len(t))
    sf.write(path, (tone + noise).astype(np.float32), RATE, subtype="PCM_16")
    return path


def frames_by_hand(config: dict, samples: int) -> int:
    """The encoder's frames for ``samples``: each conv layer of config.json maps n to (n - kernel) // stride + 1."""
    n = samples
    for kernel, stride in zip(config["conv_kernel"], config["conv_stride"]):
        n = (n - kernel) // stride + 1
    return n


def test_a_long_recording_is_refused_naming_the_field_and_runs_cut_with_it(
    qtbot, real_window, optimum_export, tmp_path
):
    from attnviz import AttnvizError
    from attnviz.runtime import audio as au
    from attnviz.runtime.audio_specs import audio_spec

    export = optimum_export("wav2vec2")
    folder = export / "onnx"
    sound = long_recording(tmp_path / "lecture.wav", 31)
    w = real_window
    panel = w.inputs
    assert not panel.form.isRowVisible(panel.max_seconds)  # no model: no sound to cut
    # refused without the field: one message naming it (the window's words), the field shown and framed
    with qtbot.waitSignal(w.error_shown, timeout=120000) as shown:
        w.open_path(folder, audio=str(sound))
    text = shown.args[0]
    assert text.startswith("lecture.wav: 31.00 s long (")
    assert text.endswith(": set max seconds to 30 to keep the first 30 s, or to 31 to take it all")
    assert "--" not in text and w.session.result is None
    assert panel.form.isRowVisible(panel.max_seconds) and panel.max_seconds.isEnabled()
    assert panel.form.labelForField(panel.max_seconds).text() == "max seconds"  # the words the message uses
    assert w.marked_widget is panel.max_seconds and "d62728" in panel.max_seconds.styleSheet()
    # the command line's refusal of the same clip still names its flag (the window's words stayed in the window)
    spec = audio_spec(json.loads((folder / "preprocessor_config.json").read_text()))
    with pytest.raises(AttnvizError) as cli:
        au.load_audio(sound, spec)
    assert str(cli.value).endswith("give --max-seconds 30 to keep the first 30 s, or --max-seconds 31 to take it all")

    # runs with it: the first 2.5 s, and every map has the frames of 40,000 samples
    panel.max_seconds.setValue(2.5)
    assert panel.max_seconds.styleSheet() == ""  # set: the frame goes
    with qtbot.waitSignal(w.result_shown, timeout=120000):
        panel.run_button.click()
    r = w.session.result
    config = json.loads((export / "hf" / "config.json").read_text())
    n = frames_by_hand(config, int(2.5 * RATE))
    assert n == (40000 - 400) // 320 + 1 == 124  # wav2vec2's 25 ms receptive field, one frame each 20 ms
    assert len(r.maps) == config["num_hidden_layers"]
    assert {m.shape[-2:] for m in r.maps} == {(n, n)}
    assert w.last_request.max_seconds == 2.5
    assert "lecture.wav: 31.00 s cut to the first 2.5 s (max seconds 2.5)" in r.info["notes"]  # the field, no flag
    shown = [v for v in w.sidebar.values("Run").values() if "cut to the first" in v]
    assert len(shown) == 1 and "(max seconds 2.5)" in shown[0] and "--" not in shown[0], shown
    # the command line's note of the same cut names its flag
    assert au.load_audio(sound, spec, max_seconds=2.5)[-1] == [
        "lecture.wav: 31.00 s cut to the first 2.5 s (--max-seconds 2.5)"
    ]

    # a text model: the row hidden and nothing sent, though the field keeps its value for the next speech model
    open_and_wait(qtbot, w, TEXT_MODEL, timeout=120000)
    assert not panel.form.isRowVisible(panel.max_seconds) and not panel.max_seconds.isEnabled()
    assert panel.values()["max_seconds"] is None and w.last_request.max_seconds is None
    assert panel.max_seconds.value() == 2.5


def test_open_with_a_screenshot_names_the_flags_it_was_given(optimum_export, tmp_path):
    """``attnviz open --screenshot`` prints the window's refusal as its own command line's: there it names
    ``--max-seconds`` (a flag of that command), and the same command with the value it names runs."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    folder = optimum_export("wav2vec2") / "onnx"
    sound = long_recording(tmp_path / "lecture.wav", 31)
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(root), ATTNVIZ_SETTINGS=str(tmp_path / "s.ini"))

    def run(*args):
        cmd = [sys.executable, "-m", "attnviz", "open", str(folder), "--audio", str(sound), *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)

    p = run("--screenshot", str(tmp_path / "refused.png"))
    assert p.returncode == 2
    line = p.stderr.strip().splitlines()[-1]
    assert line.startswith("attnviz: error: lecture.wav: 31.00 s long (")
    assert line.endswith("give --max-seconds 30 to keep the first 30 s, or --max-seconds 31 to take it all")
    p = run("--max-seconds", "2.5", "--screenshot", str(tmp_path / "cut.png"))
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == f"saved {tmp_path / 'cut.png'}"


def test_open_refuses_max_seconds_for_a_model_that_takes_no_sound(tmp_path):
    """`open TEXT_MODEL --max-seconds 5`: the field is a speech model's only, so the value was dropped without a
    word; the window says it in one message (a screenshot run: one line, exit 2, no picture)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(root), ATTNVIZ_SETTINGS=str(tmp_path / "s.ini"))
    shot = tmp_path / "s.png"
    cmd = [sys.executable, "-m", "attnviz", "open", str(root / "models" / "translation.onnx"), "--max-seconds", "5.0"]
    p = subprocess.run([*cmd, "--screenshot", str(shot)], capture_output=True, text=True, env=env, timeout=300)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0] == "attnviz: error: --max-seconds 5.0: translation.onnx takes no sound to cut; leave it out"
    assert not shot.exists()
