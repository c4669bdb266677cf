"""Researcher habits: settings never leak from tests, the export dialog remembers folder and format,
`open --tokenizer` exists (the runtime's hint names it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gui_helpers import open_and_wait

from attnviz.cli import main


def test_suite_settings_are_a_temp_file_not_the_users():
    from attnviz.gui.app import make_settings

    path = Path(make_settings().fileName())
    assert path == Path(os.environ["ATTNVIZ_SETTINGS"])
    assert not path.is_relative_to(Path.home() / ".config")


def test_default_window_settings_follow_the_override(qtbot, tmp_path, monkeypatch):
    from attnviz.gui.main_window import MainWindow

    ini = tmp_path / "mine.ini"
    monkeypatch.setenv("ATTNVIZ_SETTINGS", str(ini))
    w = MainWindow(opener=lambda *a, **k: None)
    qtbot.addWidget(w)
    w.add_recent(tmp_path / "x.onnx")
    assert ini.exists() and "x.onnx" in ini.read_text()


def test_export_dialog_remembers_folder_and_format(qtbot, window, files, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QFileDialog

    open_and_wait(qtbot, window, files["text.onnx"])
    window.select_view("head")
    calls = []
    target = tmp_path / "figs"
    target.mkdir()

    def fake_dialog(parent, caption, start, filters, selected=""):
        calls.append((start, filters, selected))
        return str(target / "first.svg"), "SVG vector (*.svg)"

    monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(fake_dialog))
    window.export_view_dialog()
    qtbot.waitUntil(lambda: (target / "first.svg").exists(), timeout=20000)
    assert calls[0][0] == "attnviz-head-map.png" and calls[0][2] == "PNG image (*.png)"  # nothing remembered yet
    window.export_view_dialog()  # the next dialog starts in figs/ with SVG selected
    start, filters, selected = calls[1]
    assert Path(start) == target.resolve() / "attnviz-head-map.svg"
    assert selected == "SVG vector (*.svg)" and filters.split(";;")[0] == selected
    # remembered in the settings, so a new window (the app reopened) starts there too
    from attnviz.gui.export import maps_dialog_start, view_dialog_start

    assert Path(maps_dialog_start(window.settings)) == target.resolve() / "attention.npz"
    for p in target.iterdir():
        p.unlink()
    target.rmdir()  # a folder that has gone: back to the default start
    assert view_dialog_start(window.settings, "x")[0] == "x.svg"


def test_open_tokenizer_flag_is_checked(capsys, tmp_path):
    assert main(["open", "--tokenizer", str(tmp_path / "nope.json"), "--screenshot", str(tmp_path / "s.png")]) == 2
    err = capsys.readouterr().err
    assert "--tokenizer" in err and "no such file" in err


def test_too_long_text_offers_truncation_and_reruns(qtbot, window, files, monkeypatch):
    import attnviz.gui.main_window as mw
    from attnviz.runtime.limits import InputTooLong, PositionLimit

    open_and_wait(qtbot, window, files["text.onnx"])
    real = mw.analyze
    seen = []

    def limited(model, req, progress=None, cancelled=None):  # a model whose positions stop at 4
        seen.append(req.max_tokens)
        if not req.max_tokens:
            raise InputTooLong(9, PositionLimit(4, "position table pos.weight"))
        return real(model, req, progress, cancelled)

    monkeypatch.setattr(mw, "analyze", limited)
    window.inputs.set_values(text="one two three four five six seven", generate=0)
    with qtbot.waitSignal(window.error_shown, timeout=20000) as sig:
        window.run_analysis()
    # the fix in the window's words (the field, beside the Truncate button), as the CLI names its flag
    assert (
        sig.args[0]
        == "9 tokens; this model's positions stop at 4 (position table pos.weight); set max tokens to 4 to truncate"
    )
    assert "--max-tokens" not in sig.args[0]  # no flag the window lacks
    button = next(b for b in window.error_box.buttons() if b.text() == "Truncate to 4 tokens")
    with qtbot.waitSignal(window.result_shown, timeout=20000):
        button.click()
    assert seen == [None, 4] and window.inputs.max_tokens.value() == 4
    assert window.inputs.values()["max_tokens"] == 4


def test_image_preset_and_size_reach_the_runtime(qtbot, window, files):
    import attnviz.gui.main_window as mw
    from attnviz.core import preprocess

    open_and_wait(qtbot, window, files["vit.onnx"], image=str(files["image"]))
    panel = window.inputs
    assert panel.preprocess.isEnabled() and panel.preprocess.currentData() is None  # model default
    assert "image_mean" not in panel.values() and panel.request().image_mean is None
    panel.preprocess.setCurrentIndex(panel.preprocess.findData("clip"))
    panel.image_size.setValue(48)
    v = panel.values()
    assert (v["image_mean"], v["image_std"]) == preprocess.stats("clip") and v["image_size"] == (48, 48)

    class Probe:  # records what the window's worker function hands the runtime
        path = files["vit.onnx"]

        def analyze_request(self, req, progress=None, cancelled=None):
            self.got = dict(image_mean=req.image_mean, image_std=req.image_std, image_size=req.image_size)
            raise RuntimeError("probe")

    probe = Probe()
    with pytest.raises(RuntimeError):
        mw.analyze(probe, panel.request())
    assert probe.got == {"image_mean": v["image_mean"], "image_std": v["image_std"], "image_size": (48, 48)}


def test_session_restore_reopens_model_input_view_and_selection(qtbot, window, files, settings):
    from fakes import make_opener
    from gui_helpers import FAKE_MODELS

    from attnviz.gui import restore
    from attnviz.gui.main_window import MainWindow

    open_and_wait(qtbot, window, files["text.onnx"], text="the cat sat on the mat")
    window.select_view("head")
    window.session.select(layer=3, head=5)
    window.close()  # closing saves the session
    state = restore.load(settings)
    assert state["model"] == str(files["text.onnx"].resolve()) and state["view"] == "Head map"

    again = MainWindow(opener=make_opener(FAKE_MODELS), settings=settings)  # the app reopened
    qtbot.addWidget(again)
    again.show()
    with qtbot.waitSignal(again.result_shown, timeout=30000):
        restore.restore(again, restore.load(settings))
    qtbot.waitUntil(lambda: again.session.sel.layer == 3, timeout=5000)
    assert again.session.model.path == files["text.onnx"]
    assert again.inputs.text.text() == "the cat sat on the mat"
    assert again.tabs.tabText(again.tabs.currentIndex()) == "Head map"
    assert (again.session.sel.layer, again.session.sel.head) == (3, 5)
    again.close()
    files["text.onnx"].unlink()  # the model is gone: nothing to restore, the demo opens instead
    assert restore.load(settings) is None


def _reopened(qtbot, settings):
    from fakes import make_opener
    from gui_helpers import FAKE_MODELS

    from attnviz.gui.main_window import MainWindow

    w = MainWindow(opener=make_opener(FAKE_MODELS), settings=settings)
    qtbot.addWidget(w)
    w.show()
    return w


def test_a_saved_session_with_values_the_views_cannot_draw_restores_the_rest(qtbot, files, settings):
    """A session saved by another attnviz version (or edited by hand) put its values straight into the window:
    mode "nope", a list for a head, a null step each raised in every view's redraw (exceptions in the event loop,
    on every start)."""
    import json

    from attnviz.core.view import default_selection
    from attnviz.gui import restore

    saved = {
        "model": str(files["text.onnx"]),
        "inputs": {"text": "the cat sat", "generate": "many", "max_tokens": -3},
        "view": ["Head map"],
        "selection": {
            "layer": 3,
            "head": [1],
            "mode": "nope",
            "step": None,
            "keep": -5,
            "log": "yes",
            "block": 0,
            "image_from": "pixels",
        },
    }
    settings.setValue(restore.KEY, json.dumps(saved))
    w = _reopened(qtbot, settings)
    with qtbot.waitSignal(w.result_shown, timeout=30000):
        restore.restore(w, restore.load(settings))
    qtbot.waitUntil(lambda: w.session.sel.layer == 3, timeout=5000)  # what the views can draw is applied
    sel, default = w.session.sel, default_selection(w.session.result)  # where a freshly opened model opens
    assert (sel.head, sel.mode, sel.step, sel.keep, sel.log, sel.image_from) == (
        default.head,
        default.mode,
        default.step,
        default.keep,
        default.log,
        default.image_from,
    )
    assert w.inputs.text.text() == "the cat sat"
    w.close()


def test_a_remembered_model_that_no_longer_opens_is_forgotten_after_its_one_message(qtbot, files, settings):
    """Replaced by a file that fails to open, the remembered model gave its error on every start and the demo
    never opened again: the session is taken out while it opens and saved again only on an open model."""
    import json

    from attnviz.gui import restore

    settings.setValue(restore.KEY, json.dumps({"model": str(files["garbage"]), "inputs": {}, "selection": {}}))
    w = _reopened(qtbot, settings)
    with qtbot.waitSignal(w.error_shown, timeout=30000):
        restore.restore(w, restore.load(settings))
    assert "not a valid ONNX file" in w.last_error
    w.close()
    assert restore.load(settings) is None  # the next `attnviz` opens the demo
