"""File ▸ Export width: the window's figures at a paper's column width, as ``figure --width`` (figaudit26).

Read from the written files: a PDF's page width (its MediaBox, in points) and a PNG's pixels."""

from __future__ import annotations

import re

import pytest
from gui_helpers import open_and_wait
from PIL import Image

from attnviz.figures import WIDTH_PRESETS

pytest.importorskip("matplotlib")


def page_width_pt(data: bytes) -> float:
    x0, _, x1, _ = (float(v) for v in re.search(rb"/MediaBox \[\s*([\d.]+) ([\d.]+) ([\d.]+) ([\d.]+)", data).groups())
    return x1 - x0


def choose(window, value: str) -> None:
    (action,) = [a for a in window.export_width_menu.actions() if a.data() == value]
    action.trigger()


def export(qtbot, window, out):
    window.export_view(out)
    qtbot.waitUntil(lambda: window.last_export == out and out.exists(), timeout=30000)
    return out


def test_export_width_draws_the_column_figure_and_is_remembered(qtbot, window, files, tmp_path, settings):
    open_and_wait(qtbot, window, files["mt.onnx"], generate=3)
    window.select_view("head")
    content = page_width_pt(export(qtbot, window, tmp_path / "content.pdf").read_bytes())
    for name, inches in WIDTH_PRESETS.items():
        choose(window, name)
        data = export(qtbot, window, tmp_path / f"{name}.pdf").read_bytes()
        assert page_width_pt(data) == pytest.approx(inches * 72, abs=0.01)
        png = export(qtbot, window, tmp_path / f"{name}.png")
        assert Image.open(png).size[0] == round(inches * 300)  # the default 300 dpi, as figure --dpi
    assert settings.value("export/width") == "double"  # the next window starts on it
    choose(window, "")
    assert page_width_pt(export(qtbot, window, tmp_path / "again.pdf").read_bytes()) == content
    assert all(content != pytest.approx(inches * 72, abs=0.5) for inches in WIDTH_PRESETS.values())
