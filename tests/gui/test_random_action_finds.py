"""Defects the seeded random-action run (test_random_actions.py) found, each as the short sequence that shows it,
under the same strict hooks (an exception or a Qt warning fails the test)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")

from strict import strict

REPO = Path(__file__).resolve().parents[2]


def test_pdf_of_the_head_stats_table_prints_no_qt_warning(real_window, qtbot, tmp_path):
    """Seed 24, action 2529: File ▸ Export view to .pdf on Head stats printed "QPdfEngine: unable to create a
    gradient between colors of different spec" once per header section (Fusion's header gradients); the PDF
    now paints the headers flat, and the table's look on screen is restored afterwards."""
    win = real_window
    with qtbot.waitSignal(win.result_shown, timeout=60000):
        win.open_path(REPO / "models" / "sequence-classification.onnx")
    win.tabs.setCurrentWidget(win.stats)
    target = win.stats.export_target()
    sheet = target.styleSheet()
    with strict():
        win.export_view(tmp_path / "stats.pdf")
        qtbot.waitUntil(lambda: not win.workers.live(), timeout=60000)
    pdf = (tmp_path / "stats.pdf").read_bytes()
    assert pdf.startswith(b"%PDF") and len(pdf) > 1000
    assert target.styleSheet() == sheet


@pytest.mark.parametrize("value", ["1e308", "-1e39", "inf"])
def test_a_series_value_past_float32_is_one_message(real_window, qtbot, value):
    """Typing 1e308 into the forecaster's series: numpy warned "overflow encountered in cast" on stderr and every
    map came out NaN; the value is refused in one line naming it, before the model runs."""
    win = real_window
    with qtbot.waitSignal(win.result_shown, timeout=60000):
        win.open_path(REPO / "models" / "forecasting.onnx")
    shown = win.session.result
    with strict():
        with qtbot.waitSignal(win.error_shown, timeout=60000) as sig:
            win.inputs.set_values(text=f"0.5 {value} 0.2")
            win.inputs.run_button.click()
        qtbot.waitUntil(lambda: not win.workers.live(), timeout=60000)
    assert "float32" in sig.args[0] and "\n" not in sig.args[0], sig.args[0]
    assert win.session.result is shown


@pytest.mark.parametrize("demo", ["translation.onnx", "captioning.onnx"])
def test_reading_rows_with_one_generated_word_is_a_message_not_a_division(real_window, qtbot, demo):
    """The ZeroDivisionError of issue 24 item 8: one generated word, Alignment's reading rows (Shift-Att) keep
    none (word k is read by the row after the one that chose it), and the empty map reached the image item
    (pyqtgraph's setRect divides by the image's width).  The view now says what to do instead."""
    win = real_window
    with qtbot.waitSignal(win.result_shown, timeout=60000):
        win.open_path(REPO / "models" / demo)
    with strict():
        with qtbot.waitSignal(win.result_shown, timeout=60000):
            win.inputs.set_values(generate=1)
            win.inputs.run_button.click()
        assert len(win.session.result.generated) == 1
        win.tabs.setCurrentWidget(win.alignment)
        win.alignment.rows_box.setCurrentIndex(win.alignment.rows_box.findData("input"))
        qtbot.waitUntil(lambda: "Shift-Att" in win.alignment.message, timeout=5000)
        win.tabs.setCurrentWidget(win.head_map)  # the tab switch the random run made
        win.tabs.setCurrentWidget(win.alignment)


def test_reading_rows_with_one_generated_word_in_a_figure_is_one_line(tmp_path, capsys):
    """The same selection from the command line was an internal error (exit 1); now one line, exit 2."""
    from attnviz.cli import main

    out = tmp_path / "a.png"
    rc = main(
        ["figure", str(REPO / "models" / "translation.onnx"), "--view", "alignment", "--rows", "input"]
        + ["--generate", "1", "--out", str(out)]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith("attnviz: error: reading rows (Shift-Att)") and not out.exists()


def test_switching_a_head_off_with_head_stats_showing_another_models_rows(real_window, qtbot):
    """Seed 24, action 403: Head stats still held the translation model's rows (3 layers; the tab was hidden,
    so not refilled) when a head of the forecaster (fewer layers) was switched off; marking the struck rows
    looked up layer 2 in the forecaster's block (IndexError).  Stale rows are left alone until the tab refills."""
    from PySide6.QtCore import QPoint

    win = real_window
    with qtbot.waitSignal(win.result_shown, timeout=60000):
        win.open_path(REPO / "models" / "translation.onnx")
    win.tabs.setCurrentWidget(win.stats)
    qtbot.waitUntil(lambda: win.stats.table.rowCount() > 0 and win.stats._pending is None, timeout=60000)
    stale_layers = {int(win.stats.table.item(r, 0).value) for r in range(win.stats.table.rowCount())}
    win.tabs.setCurrentWidget(win.head_map)
    with qtbot.waitSignal(win.result_shown, timeout=60000):
        win.open_path(REPO / "models" / "forecasting.onnx")
    assert max(stale_layers) >= win.session.block.n_layers  # the stale rows name a layer the forecaster lacks
    with strict():
        menu = win.ablation.menu_for(win.session.sel.block, 0, 0, QPoint(0, 0))
        menu.close()
        with qtbot.waitSignal(win.session.ablation_changed, timeout=10000):
            menu.actions()[1].trigger()  # Switch head off
        qtbot.waitUntil(lambda: not win.workers.live(), timeout=60000)
        win.tabs.setCurrentWidget(win.stats)  # refilled for the forecaster, its head 0:0 struck out
        qtbot.waitUntil(lambda: win.stats._pending is None and win.stats.off_rows() == [(0, 0)], timeout=60000)


def test_opening_maps_while_comparing_drops_the_comparison_after_the_new_blocks(real_window, qtbot, tmp_path):
    """Seed 6, action 1536: a comparison was held (translation vs itself) and a smaller model's exported maps
    were opened; dropping the comparison redrew Head map with the new result through the old blocks (the
    shared colour scale reads every map of the block: IndexError in the view model).  The comparison now goes once result, blocks and selection agree."""
    win = real_window
    with qtbot.waitSignal(win.result_shown, timeout=60000):
        win.open_path(REPO / "models" / "sequence-classification.onnx")
    small = tmp_path / "small.npz"
    win.export_maps(small)
    qtbot.waitUntil(lambda: small.is_file() and not win.workers.live(), timeout=60000)
    with qtbot.waitSignal(win.result_shown, timeout=60000):
        win.open_path(REPO / "models" / "translation.onnx")
    win.compare.compare_with(REPO / "models" / "translation.onnx")
    qtbot.waitUntil(lambda: win.session.comparison is not None, timeout=60000)
    win.tabs.setCurrentWidget(win.head_map)
    win.controls.scale.setCurrentIndex(win.controls.scale.findData("shared"))  # reads every map of the block
    with strict():
        with qtbot.waitSignal(win.result_shown, timeout=60000):
            win.open_path(small)
        assert win.session.comparison is None and len(win.session.blocks) == 1
        assert win.head_map.message == ""  # drawn
