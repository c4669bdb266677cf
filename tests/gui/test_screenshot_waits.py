"""`--screenshot` of Head stats waits for the statistics its worker computes: the shot was taken 0.4 s after the
result, over an empty table that said "computing head statistics…"."""

from __future__ import annotations

from gui_helpers import open_and_wait


def test_the_shot_waits_for_head_stats(qtbot, window, files, tmp_path, monkeypatch):
    from attnviz.gui import screenshot

    shots = []
    monkeypatch.setattr(screenshot, "_quit", lambda: None)  # the test's application goes on
    monkeypatch.setattr(screenshot, "export_widget", lambda w, p: shots.append(window.stats.table.rowCount()))
    open_and_wait(qtbot, window, files["slow.onnx"])
    taker = screenshot.ScreenshotTaker(window, tmp_path / "x.png")
    window.select_view("stats")
    assert window.stats.table.rowCount() == 0  # the statistics are being computed: the table is empty
    taker._take()  # as the timer after the result would
    assert shots == []  # not yet
    qtbot.waitUntil(lambda: bool(shots), timeout=20000)
    assert shots == [window.stats.table.rowCount()] and shots[0] > 0  # taken over the filled table
    assert taker.error is None
