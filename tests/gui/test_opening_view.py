"""A model opens on the view its kind reads best on (core.view.opening), in the window and in ``attnviz figure``:
the speech demo on Audio regions (its cross-attention thumbnails on Overview were dim on the fixed 0–1 scale), with
no flags the same figure byte for byte; ``open --view`` and a restored session keep the tab they name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("onnxruntime")

from gui_helpers import demo, open_and_wait

from attnviz.cli import main
from attnviz.core.view import OPENING_VIEWS
from attnviz.core.view_names import tab_title

SPEECH = Path(__file__).resolve().parents[2] / "models" / "spoken-digits"


def speech_demo() -> Path:
    if not (SPEECH / "encoder_model.onnx").is_file():
        pytest.skip("models/spoken-digits is not in this checkout")
    return SPEECH


def shown_tab(w) -> str:
    return w.tabs.tabText(w.tabs.currentIndex())


def kind_by_hand(model) -> str:
    """The kind read from the opened model, not from its result: a speech model takes sound (an input whose role
    is audio); the demos' other models take words."""
    return "speech" if "audio" in set(model.roles.values()) else "text"


def test_the_speech_demo_opens_on_audio_regions_and_figure_draws_it_without_flags(qtbot, real_window, tmp_path):
    path = speech_demo()
    w = real_window
    assert shown_tab(w) == "Overview"  # a new window's first tab
    open_and_wait(qtbot, w, path, timeout=60000)
    kind = kind_by_hand(w.session.model)
    assert kind == "speech"
    assert shown_tab(w) == tab_title(OPENING_VIEWS[kind].window) == "Audio regions"
    # it draws a word's attention over the clip, not why it cannot
    assert w.audio_regions.reason() is None and w.audio_regions.shown_query() is not None
    ours = tmp_path / "window.png"
    w.export_view(ours)  # File ▸ Export view of the tab the model opened on
    qtbot.waitUntil(lambda: w.last_export == ours, timeout=60000)
    theirs = tmp_path / "figure.png"
    assert main(["figure", str(path), "--out", str(theirs)]) == 0  # no --view, no selection flags
    assert theirs.read_bytes() == ours.read_bytes()
    recipe = json.loads((tmp_path / "figure.png.recipe.json").read_text())
    assert recipe["view"]["view"] == OPENING_VIEWS[kind].figure == "audio"


def test_a_text_demo_opens_where_it_did(qtbot, real_window, tmp_path):
    """The other kinds are as they were: the window's Overview, and figure's head map (its recipe says so)."""
    path = demo("translation")
    w = real_window
    w.select_view("alignment")  # a tab left open from before: a newly opened model shows its kind's
    open_and_wait(qtbot, w, path, timeout=60000)
    kind = kind_by_hand(w.session.model)
    assert kind == "text" and shown_tab(w) == tab_title(OPENING_VIEWS[kind].window) == "Overview"
    assert main(["figure", str(path), "--out", str(tmp_path / "f.png")]) == 0
    assert json.loads((tmp_path / "f.png.recipe.json").read_text())["view"]["view"] == "heatmap"


def test_a_tab_asked_for_wins_once_and_the_next_model_opens_on_its_own(qtbot, real_window):
    """``open --view heatmap`` (pin_view) keeps the Head map over the speech model's Audio regions; a new input for
    the same model keeps the tab the user is on; a model opened next shows its kind's view."""
    w = real_window
    w.pin_view("heatmap")
    open_and_wait(qtbot, w, speech_demo(), timeout=60000)
    assert shown_tab(w) == "Head map"
    w.select_view("links")
    with qtbot.waitSignal(w.result_shown, timeout=60000):
        w.run_analysis()  # the same model again: not a newly opened one
    assert shown_tab(w) == "Token links"
    open_and_wait(qtbot, w, demo("translation"), timeout=60000)
    assert shown_tab(w) == "Overview"
    open_and_wait(qtbot, w, speech_demo(), timeout=60000)
    assert shown_tab(w) == "Audio regions"


def test_a_restored_session_keeps_its_tab_over_the_kinds(qtbot, real_window, settings):
    from attnviz.gui import restore

    w = real_window
    open_and_wait(qtbot, w, speech_demo(), timeout=60000)
    w.select_view("alignment")
    restore.save(w)
    state = restore.load(settings)
    assert state["view"] == "Alignment"
    w.select_view("overview")  # (the window is reused as the reopened app: its tab is not the saved one)
    with qtbot.waitSignal(w.result_shown, timeout=60000):
        restore.restore(w, state)
    assert shown_tab(w) == "Alignment"
