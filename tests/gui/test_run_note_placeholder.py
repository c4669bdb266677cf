"""With a model open and no result shown, the views say what became of the run (running, stopped and why,
cancelled) instead of "Open a model (File ▸ Open …)": a model whose first run failed was open in the sidebar
while every tab asked for one."""

from __future__ import annotations

import pytest

OPEN_A_MODEL = "Open a model (File ▸ Open, or drop an .onnx file here) and run an input."


def _messages(window) -> dict[str, str]:
    out = {}
    for title, view in window.views.items():
        window.tabs.setCurrentWidget(view)
        out[title] = view.message
    return out


def test_a_failed_first_run_is_named_in_every_view(qtbot, window, files):
    assert set(_messages(window).values()) == {OPEN_A_MODEL}  # nothing open: asked for
    with qtbot.waitSignal(window.error_shown, timeout=20000) as sig:
        window.open_path(files["broken.onnx"])  # opens, then its run fails
    assert window.session.model is not None and window.session.result is None
    said = _messages(window)
    assert set(said.values()) == {f"The run stopped: {sig.args[0]}"}, said
    assert "onnxruntime failed" in sig.args[0]


def test_running_then_cancelled_are_said(qtbot, window, files):
    window.open_path(files["slow.onnx"], run=False)
    qtbot.waitUntil(lambda: window.session.model is not None, timeout=20000)
    name = window.session.model.name
    window.tabs.setCurrentWidget(window.head_map)
    assert window.head_map.message == f"{name} is open: run an input (Run, or Enter in the text box)."
    window.inputs.set_values(text="one two three")
    window.run_analysis()
    assert window.head_map.message == f"Running {name}…"
    window.cancel()
    assert window.head_map.message == "The run was cancelled: press Run to run the input again."
    with qtbot.waitSignal(window.result_shown, timeout=20000):
        window.run_analysis()
    assert window.head_map.message == ""  # the map itself


def test_too_long_input_says_how_to_fit(qtbot, window, files, monkeypatch):
    import attnviz.gui.main_window as mw
    from attnviz.runtime.limits import InputTooLong, PositionLimit

    def limited(model, req, progress=None, cancelled=None):
        raise InputTooLong(9, PositionLimit(4, "position table pos.weight"))

    monkeypatch.setattr(mw, "analyze", limited)
    with qtbot.waitSignal(window.error_shown, timeout=20000):
        window.open_path(files["text.onnx"])  # its first run is refused: no result shown
    assert window.session.result is None
    window.tabs.setCurrentWidget(window.overview)
    assert window.overview.message == (
        "The run stopped: 9 tokens, and this model's positions stop at 4. Truncate from the message, "
        "or set max tokens to 4 and press Run."
    )


@pytest.mark.slow  # the Whisper export (cached per machine under ~/.cache/attnviz-tests)
def test_a_speech_model_without_sound_asks_for_one_in_the_views(qtbot, real_window, optimum_export):
    from attnviz.app import rules

    w = real_window
    w.open_path(optimum_export("whisper") / "onnx")
    qtbot.waitUntil(lambda: w.session.model is not None, timeout=120000)
    want = rules.waiting_for_audio(w.session.model, {})
    assert want is not None and "choose a sound file" in want
    w.select_view("audio")
    assert w.audio_regions.message == f"{want}."


@pytest.mark.slow  # the Whisper export (cached per machine under ~/.cache/attnviz-tests)
def test_open_screenshot_of_a_speech_model_without_sound_says_so_at_once(optimum_export, tmp_path):
    """`attnviz open WHISPER --screenshot X` with no --audio: one line naming the fix and exit code 2 as soon as the
    model is open, and no PNG (it waited 120 s for a run that never started, then said "no result within 120 s"; a
    refused screenshot saves nothing: tests/gui/test_screenshot_refused.py)."""
    import time

    from cli_run import run_cli

    shot = tmp_path / "x.png"
    t0 = time.monotonic()
    code, err = run_cli(
        "open", optimum_export("whisper") / "onnx", "--screenshot", shot, env={"QT_QPA_PLATFORM": "offscreen"}
    )
    took = time.monotonic() - t0
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err[-2000:]
    assert lines[0].startswith("attnviz: error: ") and "is a speech model: choose a sound file" in lines[0]
    assert lines[0].endswith("; or give one with --audio FILE")
    assert took < 100  # not the 120 s wait for a result
    assert not shot.exists()
