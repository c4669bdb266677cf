"""A model opens on the view its kind reads best on (core.view.opening): the speech demo on Audio regions (its
cross-attention thumbnails on Overview were dim on the fixed 0–1 scale; with no flags `figure` draws the same:
test_screen_equals_figure_defaults.py), the text demos where they did; ``open --view`` and a restored session keep
the tab they name."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("onnxruntime")

from gui_helpers import demo, kind_by_hand, open_and_wait, shown_tab, speech_demo

from attnviz.cli import main
from attnviz.core.view import OPENING_VIEWS
from attnviz.core.view_names import tab_title


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
