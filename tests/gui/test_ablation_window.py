"""Right-click a head ▸ Switch head off, in the real window (offscreen): the Overview's context menu and Head
stats' context menu switch heads off on the ONNX graph, the panel shows what the output did, the Overview crosses
the heads, and Switch all heads back on restores the model's output exactly.

References: the engine of ``attnviz ablate`` (``runtime.ablation.Ablation``) run here outside the window on the
same input, the window's own result before any toggle (maps unchanged, the same object), the user's file's bytes.
No exception may reach ``sys.excepthook`` (``qtbot.captureExceptions``)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
from gui_helpers import open_and_wait
from PySide6.QtCore import Qt
from PySide6.QtGui import QContextMenuEvent
from PySide6.QtWidgets import QApplication

from attnviz.gui.ablation import ALL_ON_TEXT, OFF_TEXT, ON_TEXT

MODELS = Path(__file__).resolve().parents[2] / "models"
DEMO = MODELS / "sequence-classification.onnx"
TEXT = "3 1 4 1 5 9 2 6"


def _action(menu, text):
    return next(a for a in menu.actions() if a.text() == text)


def _right_click_overview(qtbot, w, cell):
    qtbot.mouseClick(w.overview.glw.viewport(), Qt.MouseButton.RightButton, pos=w.overview.widget_pos_of(*cell))
    qtbot.waitUntil(lambda: w.ablation.menu is not None and w.ablation.menu.isVisible(), timeout=5000)
    return w.ablation.menu


def _right_click_stats_row(qtbot, w, layer, head):
    t = w.stats.table
    r = next(r for r in range(t.rowCount()) if (t.item(r, 0).value, t.item(r, 1).value) == (layer, head))
    pos = t.visualItemRect(t.item(r, 1)).center()
    ev = QContextMenuEvent(QContextMenuEvent.Reason.Mouse, pos, t.viewport().mapToGlobal(pos))
    QApplication.sendEvent(t.viewport(), ev)
    qtbot.waitUntil(lambda: w.ablation.menu is not None and w.ablation.menu.isVisible(), timeout=5000)
    return w.ablation.menu


def _measured(qtbot, w, n_off):
    qtbot.waitUntil(
        lambda: w.session.ablation_outcome is not None and len(w.session.ablation_outcome.off) == n_off,
        timeout=60000,
    )
    return w.session.ablation_outcome


def test_context_menus_switch_heads_off_and_back_on(qtbot, real_window):
    from attnviz.runtime import open_model
    from attnviz.runtime.ablation import Ablation

    sha = hashlib.sha256(DEMO.read_bytes()).hexdigest()
    w = real_window
    with qtbot.captureExceptions() as exceptions:
        open_and_wait(qtbot, w, DEMO, text=TEXT)
        shown = w.session.result
        maps = [m.array().copy() for m in shown.maps]
        assert not w.ablation.panel.isVisible()

        # Overview: right-click layer 1 head 2 ▸ Switch head off
        menu = _right_click_overview(qtbot, w, (0, 1, 2))
        assert _action(menu, ALL_ON_TEXT).isEnabled() is False  # nothing is off yet
        _action(menu, OFF_TEXT).trigger()
        one = _measured(qtbot, w, 1)
        assert set(w.overview.crosses) == {(0, 1, 2)}
        # the CLI's engine, outside the window, on the same input: the same numbers
        ref = Ablation(open_model(DEMO, provider="cpu"), [1], "zero", w.last_request).change({1: [2]})
        assert abs(one.change.max_dlogit - ref.max_dlogit) <= 1e-6 and one.change.max_dlogit > 0
        assert abs(one.change.kl_bits - ref.kl_bits) <= 1e-6
        text = w.ablation.panel.text.text()
        assert w.ablation.panel.isVisible() and "Off: encoder self 1:2" in text
        assert f"max |Δlogits| {one.change.max_dlogit:.4g}" in text and "prediction unchanged" in text

        # Head stats: right-click the row of layer 0 head 3 ▸ Switch head off: two heads off together
        w.select_view("stats")
        qtbot.waitUntil(lambda: w.stats.table.rowCount() > 0, timeout=30000)
        assert w.stats.off_rows() == [(1, 2)]
        _action(_right_click_stats_row(qtbot, w, 0, 3), OFF_TEXT).trigger()
        two = _measured(qtbot, w, 2)
        ref2 = Ablation(open_model(DEMO, provider="cpu"), [0, 1], "zero", w.last_request).change({0: [3], 1: [2]})
        assert abs(two.change.max_dlogit - ref2.max_dlogit) <= 1e-6
        assert sorted(w.stats.off_rows()) == [(0, 3), (1, 2)]
        # the menu of a head that is off offers to switch it back on
        menu = _right_click_stats_row(qtbot, w, 1, 2)
        assert _action(menu, ON_TEXT).isEnabled() and _action(menu, ALL_ON_TEXT).isEnabled()
        menu.close()

        # Overview again ▸ Switch all heads back on: the model's own output, exactly; the maps never changed
        w.select_view("overview")
        _action(_right_click_overview(qtbot, w, (0, 0, 0)), ALL_ON_TEXT).trigger()
        back = _measured(qtbot, w, 0)
        assert back.change.max_dlogit == 0.0 and back.change.kl_bits == 0.0
        assert np.array_equal(back.ablated_output, one.ablator.ab.base)
        assert not w.overview.crosses and w.stats.off_rows() == []
        assert "All heads on" in w.ablation.panel.text.text()
        assert w.session.result is shown
        assert all(np.array_equal(m.array(), m0) for m, m0 in zip(w.session.result.maps, maps))
    assert not exceptions, exceptions
    assert hashlib.sha256(DEMO.read_bytes()).hexdigest() == sha


def test_maps_loaded_from_a_file_cannot_switch_heads_off_in_one_message(qtbot, real_window, tmp_path):
    w = real_window
    with qtbot.captureExceptions() as exceptions:
        open_and_wait(qtbot, w, DEMO, text=TEXT)
        npz = tmp_path / "maps.npz"
        w.export_maps(npz)
        qtbot.waitUntil(lambda: w.last_export == npz, timeout=30000)
        with qtbot.waitSignal(w.result_shown, timeout=30000):
            w.open_path(npz)
        _action(_right_click_overview(qtbot, w, (0, 0, 1)), OFF_TEXT).trigger()
        assert "open a model and run an input first" in (w.last_error or "")
        assert not w.session.ablation.off and not w.overview.crosses
    assert not exceptions, exceptions


def test_heads_stay_off_for_a_new_input_and_are_measured_on_it(qtbot, real_window):
    from gui_helpers import run_and_wait

    from attnviz.runtime import open_model
    from attnviz.runtime.ablation import Ablation

    w = real_window
    with qtbot.captureExceptions() as exceptions:
        open_and_wait(qtbot, w, DEMO, text=TEXT)
        _action(_right_click_overview(qtbot, w, (0, 0, 1)), OFF_TEXT).trigger()
        first = _measured(qtbot, w, 1)
        run_and_wait(qtbot, w, text="2 7 1 8 2 8")
        qtbot.waitUntil(
            lambda: w.session.ablation_outcome is not None and w.session.ablation_outcome is not first, timeout=60000
        )
        again = w.session.ablation_outcome
        assert again.off == first.off and set(w.overview.crosses) == {(0, 0, 1)}
        assert again.ablator is not first.ablator and again.ablator.request is w.last_request
        ref = Ablation(open_model(DEMO, provider="cpu"), [0], "zero", w.last_request).change({0: [1]})
        assert (
            abs(again.change.max_dlogit - ref.max_dlogit) <= 1e-6 and again.change.max_dlogit != first.change.max_dlogit
        )
    assert not exceptions, exceptions
