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
