"""A view whose widgets cannot be made (its ``build()`` raises) shows one message where it stands, keeps nothing
half-made (no attribute, no widget of the failed build) and is built again when next shown: before session 20 it
was left marked built with half its widgets, and the next read of one of the others raised in a slot."""

from __future__ import annotations

import numpy as np
from gui_helpers import open_and_wait
from PySide6.QtWidgets import QLabel, QVBoxLayout
from strict import strict

from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
from attnviz.gui.session import Session
from attnviz.gui.views import head_map
from attnviz.gui.views.base import View


class Flaky(View):
    """Makes one label, then fails while ``fail`` is set; once built, draws the result's map count."""

    title = "flaky"

    def __init__(self, session, fail: bool):
        super().__init__(session)
        self.fail = fail
        self.tries = 0

    def build(self) -> None:
        self.tries += 1
        self.first = QLabel("made before the failure")
        lay = QVBoxLayout(self.body)
        lay.addWidget(self.first)
        if self.fail:
            raise RuntimeError("no OpenGL context")
        self.count = QLabel()
        lay.addWidget(self.count)

    def draw(self) -> None:
        self.count.setText(f"{len(self.session.result.maps)} maps")


def _result() -> AttentionResult:
    m = np.full((1, 2, 3, 3), 1 / 3, np.float32)
    return AttentionResult(
        [DenseMap(m)], [SiteInfo("encoder", "self", 0, 2, "s", "softmax")], tokens=TokenAxis(["a", "b", "c"])
    )


def _labels(view: View) -> list[str]:
    return [w.text() for w in view.findChildren(QLabel) if w is not view.placeholder]


def test_a_failed_build_shows_one_message_keeps_nothing_and_is_built_again_when_shown(qtbot):
    session = Session()
    view = Flaky(session, fail=True)
    qtbot.addWidget(view)
    view.show()
    qtbot.waitExposed(view)
    with strict():  # no exception reaches a slot's caller, no Qt warning
        session.set_result(_result())  # the view is on screen: it builds, and the build fails
        assert view.message.startswith("This view could not be made") and "no OpenGL context" in view.message
        assert not view.built and "first" not in view.__dict__ and "count" not in view.__dict__
        assert _labels(view) == [] and view.body.layout() is None  # the half-made body went with its label
        tries = view.tries
        session.select(mode="head", head=1)  # shown, a new selection tries again: fails once more, same state
        assert view.tries == tries + 1
        assert not view.built and _labels(view) == [] and "no OpenGL context" in view.message
        view.fail = False
        view.hide()
        view.show()  # shown again: built, drawn
        assert view.built and view.message == ""
        assert view.count.text() == "1 maps" and view.count.isVisible()
        assert _labels(view) == ["made before the failure", "1 maps"]  # one of each: nothing left from before


def test_asking_for_a_widget_of_a_view_that_fails_raises_the_builds_error_and_leaves_it_unbuilt(qtbot):
    session = Session()
    view = Flaky(session, fail=True)
    qtbot.addWidget(view)
    try:
        view.count  # noqa: B018  (the read builds the view)
    except RuntimeError as e:
        assert str(e) == "no OpenGL context"
    else:
        raise AssertionError("the failed build's error did not reach the caller")
    assert not view.built and "first" not in view.__dict__ and _labels(view) == []
    view.fail = False
    assert view.count.text() == "" and view.built  # asked again: built this time


def test_the_head_map_whose_plot_cannot_be_made_says_so_and_draws_once_it_can(window, files, qtbot, monkeypatch):
    open_and_wait(qtbot, window, files["text.onnx"])
    real = head_map.HeatmapWidget

    def broken(*a, **k):
        raise RuntimeError("could not create the plot's OpenGL surface")

    monkeypatch.setattr(head_map, "HeatmapWidget", broken)
    view = window.head_map
    with strict():
        window.select_view("heatmap")
        assert "could not create the plot's OpenGL surface" in view.message and not view.built
        assert view.isVisible() and view.placeholder.isVisible()  # the message in the window, where the map goes
        window.session.select(mode="head", layer=1, head=2)  # the other views still follow the selection
        monkeypatch.setattr(head_map, "HeatmapWidget", real)
        window.select_view("overview")
        window.select_view("heatmap")
        assert view.built and view.message == "" and view.heatmap.isVisible()
        raw = window.session.result.maps[1].head(0, 2)
        np.testing.assert_array_equal(view.heatmap.image.image, raw)
