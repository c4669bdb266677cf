"""Drive the main window as a user would, on synthetic models (fast; no onnxruntime needed)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from gui_helpers import open_and_wait
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QApplication, QMessageBox

from attnviz.core.io import load_npz


def visible_message_boxes():
    return [w for w in QApplication.topLevelWidgets() if isinstance(w, QMessageBox) and w.isVisible()]


def hover(qtbot, heatmap, row, col):
    qtbot.mouseMove(heatmap.plot.viewport(), heatmap.widget_pos_of(row, col))
    qtbot.waitUntil(lambda: heatmap.hover == (row, col), timeout=2000)


def test_open_text_model_shows_overview_and_sidebar(qtbot, window, files):
    open_and_wait(qtbot, window, files["text.onnx"])
    ov = window.overview
    assert window.tabs.currentWidget() is ov
    assert len(ov.thumbs) == 6 * 12  # every layer x head
    assert ov.info.text().startswith("72 heads")
    # one shared scale: every thumbnail has the same levels
    levels = {tuple(np.round(img.levels, 6)) for img in ov.thumbs.values()}
    assert len(levels) == 1
    assert window.sidebar.values("Model")["kind"] == "encoder"
    assert window.sidebar.values("Run")["device used"] == "CPUExecutionProvider"
    assert window.sidebar.values("Run")["prediction"] == "positive (p = 0.79)"  # labels from the metadata
    assert "attention maps" in window.statusBar().currentMessage()
    assert window.inputs.text.text() == "the cat sat on the mat"  # the model's sample input
    assert window.recent_files()[0].endswith("text.onnx")
    assert window.windowTitle() == "attnviz — text"


def test_type_text_and_hover_head_map(qtbot, window, files):
    open_and_wait(qtbot, window, files["text.onnx"])
    window.select_view("head")
    window.inputs.text.clear()
    qtbot.keyClicks(window.inputs.text, "dogs chase cats")  # typed, then Enter runs it
    with qtbot.waitSignal(window.result_shown, timeout=10000):
        qtbot.keyClick(window.inputs.text, Qt.Key_Return)
    hm = window.head_map.heatmap
    assert hm.y_axis.labels == ["[CLS]", "dogs", "chase", "cats", "[SEP]"]
    assert hm.x_axis.labels == hm.y_axis.labels
    hover(qtbot, hm, 1, 3)
    blk = window.session.blocks[0]
    want = blk.layer(blk.n_layers - 1).mean(0)[1, 3]  # it opens on the mean over the last layer's heads
    assert hm.hover_label.text() == f"query “dogs” (1) → key “cats” (3): {want:.4f}"
    assert hm.row_box.isVisible() and hm.col_box.isVisible()
    assert hm.row_box.rect().y() == 1 and hm.col_box.rect().x() == 3


def test_keyboard_and_click_focus(qtbot, window, files):
    open_and_wait(qtbot, window, files["text.onnx"])
    window.session.select(mode="head", layer=0, head=0)
    window.tabs.setFocus()
    qtbot.keyClick(window.tabs, Qt.Key_Right)
    qtbot.keyClick(window.tabs, Qt.Key_Right)
    qtbot.keyClick(window.tabs, Qt.Key_Down)
    sel = window.session.sel
    assert (sel.layer, sel.head) == (1, 2)
    assert window.controls.layer.value() == 1 and window.controls.head.value() == 2
    assert window.overview.focus_box.rect().center() == window.overview.cells[(0, 1, 2)].center()
    qtbot.keyClick(window.tabs, Qt.Key_Left)
    qtbot.keyClick(window.tabs, Qt.Key_Left)
    qtbot.keyClick(window.tabs, Qt.Key_Left)  # wraps into the previous layer's last head
    assert (window.session.sel.layer, window.session.sel.head) == (0, 11)
    # click a thumbnail
    qtbot.mouseClick(window.overview.glw.viewport(), Qt.LeftButton, pos=window.overview.widget_pos_of(0, 4, 7))
    assert (window.session.sel.layer, window.session.sel.head) == (4, 7)
    assert "layer 4 · head 7" in window.overview.info.text()


def test_aggregations_and_filters(qtbot, window, files):
    open_and_wait(qtbot, window, files["text.onnx"])
    window.select_view("head")
    hm = window.head_map.heatmap
    blk = window.session.blocks[0]
    c = window.controls
    c.mode.setCurrentIndex(c.mode.findData("mean"))
    c.layer_lo.setValue(2)
    c.layer_hi.setValue(3)
    assert "layers 2–3 · mean over heads" in hm.full_title
    want = np.concatenate([blk.layer(2), blk.layer(3)]).mean(0)
    np.testing.assert_allclose(hm.mv.matrix, want, rtol=1e-5)
    c.mode.setCurrentIndex(c.mode.findData("max"))
    np.testing.assert_allclose(hm.mv.matrix, np.concatenate([blk.layer(2), blk.layer(3)]).max(0), rtol=1e-6)
    c.mode.setCurrentIndex(c.mode.findData("rollout"))
    assert "rollout layers 2–3" in hm.mv.title
    np.testing.assert_allclose(hm.mv.matrix.sum(-1), 1.0, rtol=1e-4)
    c.mode.setCurrentIndex(c.mode.findData("head"))
    c.keep.setValue(50)
    assert "top 50% mass" in hm.mv.title
    assert (hm.mv.matrix == 0).any()
    c.keep.setValue(100)
    c.hide_special.setChecked(True)
    assert "[CLS]" not in hm.y_axis.labels and "[SEP]" not in hm.x_axis.labels
    np.testing.assert_allclose(hm.mv.matrix.sum(-1), 1.0, rtol=1e-5)
    c.log.setChecked(True)
    # the figure's words: the special tokens were removed from this map
    assert hm.colorbar.axis.labelText == "attention (special tokens removed, rows renormalised) (log scale, fixed 0–1)"
    assert hm.shown.max() <= 0.0  # log10 of weights


def test_token_links_overlay_and_hover(qtbot, window, files):
    open_and_wait(qtbot, window, files["text.onnx"])
    window.session.select(mode="head", layer=0, head=0)
    window.select_view("links")
    v = window.links
    cv = v.canvas
    n = len(cv.q_labels)
    assert n == 8 and len(v.head_boxes) == 12
    one = len(cv.links)
    v.head_boxes[3].setChecked(True)
    assert sorted(v.checked) == [0, 3]
    assert len(cv.layers) == 2 and cv.layers[1][0] != cv.layers[0][0]  # own colours
    assert len(cv.links) > one
    qtbot.mouseMove(cv, cv.token_pos("query", 2).toPoint())
    qtbot.waitUntil(lambda: cv.focus == ("query", 2), timeout=2000)
    vis = cv.visible_links()
    assert vis and all(lk[1] == 2 for lk in vis)
    assert v.info.text().startswith("query “cat”")


def test_token_links_of_a_short_input_fill_the_panel(qtbot, window, files):
    """Eight tokens in a tall panel spread down it (they used to sit in its top third), and hovering still finds
    each token where it is drawn."""
    open_and_wait(qtbot, window, files["text.onnx"])
    window.select_view("links")
    cv = window.links.canvas
    window.resize(1400, 900)
    qtbot.waitUntil(lambda: cv.height() > 500, timeout=3000)
    n = len(cv.q_labels)
    assert n == 8
    last = cv.token_pos("query", n - 1).y()
    assert last > 0.6 * cv.height() or cv._row_h() == 44  # filled, up to the largest pitch
    for side in ("query", "key"):
        for i in range(n):
            assert cv.token_at(QPointF(cv._x_left() - 8 if side == "query" else cv._x_right() + 8, cv._y(i))) == (
                side,
                i,
            )


def test_token_links_long_input_top_k(qtbot, window, files):
    open_and_wait(qtbot, window, files["long.onnx"], text=" ".join(f"w{i}" for i in range(120)))
    window.select_view("links")
    cv = window.links.canvas
    assert cv.top_k == 12  # the view model's LINKS_PER_ROW, as in the figure
    assert len(cv.links) <= 12 * 122
    per_row = {}
    for _, i, _, _ in cv.links:
        per_row[i] = per_row.get(i, 0) + 1
    assert max(per_row.values()) <= 12
    assert "at most 12 links per query" in window.links.info.toolTip()


def test_stats_table_sort_and_focus(qtbot, window, files):
    open_and_wait(qtbot, window, files["text.onnx"])
    window.select_view("stats")
    t = window.stats.table
    qtbot.waitUntil(lambda: t.rowCount() == 72, timeout=10000)  # computed in a worker
    t.sortItems(window.stats.columns.index("entropy"), Qt.AscendingOrder)
    ent = window.stats.column_values("entropy")
    assert ent == sorted(ent)
    layer, head = int(t.item(0, 0).value), int(t.item(0, 1).value)
    r = t.visualItemRect(t.item(0, 2)).center()
    qtbot.mouseClick(t.viewport(), Qt.LeftButton, pos=r)
    assert window.tabs.currentWidget() is window.head_map
    assert (window.session.sel.layer, window.session.sel.head) == (layer, head)


def test_translation_generate_alignment_and_steps(qtbot, window, files):
    open_and_wait(qtbot, window, files["mt.onnx"], generate=5)
    r = window.session.result
    assert len(r.generated) == 5
    # the overview has encoder, decoder self and cross blocks
    assert len(window.overview.thumbs) == 3 * 2 * 4
    window.select_view("alignment")
    al = window.alignment
    assert al.mv.q_labels == r.generated
    assert al.mv.k_labels == window.session.blocks[0].query_axis.labels
    assert al.heatmap.mark_box.isVisible() and al.heatmap.mark_box.rect().y() == 4
    window.controls.step.setValue(1)  # scrub to step 2
    assert window.session.sel.step == 1
    assert al.step_label.text().startswith(f"step 2/5: “{r.generated[1]}”")
    assert al.heatmap.mark_box.rect().y() == 1
    window.select_view("head")
    window.controls.block.setCurrentIndex(1)  # decoder self-attention, truncated to the step
    assert window.head_map.heatmap.mv.matrix.shape == (2, 2)


def test_alignment_needs_cross_attention(qtbot, window, files):
    open_and_wait(qtbot, window, files["text.onnx"])
    window.select_view("alignment")
    assert "needs cross-attention" in window.alignment.message
    window.select_view("image")
    assert "need an image input" in window.image_regions.message


def test_vision_image_regions(qtbot, window, files):
    open_and_wait(qtbot, window, files["vit.onnx"], image=str(files["image"]))
    window.session.select(mode="head", layer=0, head=0)
    window.select_view("image")
    v = window.image_regions
    assert [q for q, _ in v.queries] == ["[CLS]", "all patches (mean)"]
    assert v.patch_map.shape == (4, 4)
    assert v.image_item.image.shape[:2] == (32, 32) and v.overlay_item.image.shape == (448, 448, 4)
    assert v.overlay_item.mapRectToParent(v.overlay_item.boundingRect()).width() == 32  # drawn over the image
    want = window.session.blocks[0].head(0, 0)[0, 1:].reshape(4, 4)
    np.testing.assert_allclose(v.patch_map, want)
    window.controls.mode.setCurrentIndex(window.controls.mode.findData("rollout"))
    assert "query “[CLS]”" in v.info.text()
    assert not v.strip_scroll.isVisible()


def test_captioning_words_and_strip(qtbot, window, files):
    open_and_wait(qtbot, window, files["cap.onnx"], image=str(files["image"]), generate=4)
    window.select_view("image")
    v = window.image_regions
    words = window.session.result.generated
    assert [q for q, _ in v.queries] == words
    assert len(v.strip) == 4 and [b.text() for b in v.strip] == words
    qtbot.mouseClick(v.query_bar.buttons[1], Qt.LeftButton)
    assert v.query == 1 and v.query_bar.buttons[1].isChecked()
    assert v.info.text().startswith(f"query “{words[1]}” · decoder cross-attention")
    qtbot.mouseClick(v.strip[2], Qt.LeftButton)
    assert v.query == 2


@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf"])
def test_export_view(qtbot, window, files, tmp_path, suffix):
    open_and_wait(qtbot, window, files["text.onnx"])
    window.select_view("head")
    out = tmp_path / f"head{suffix}"
    window.export_view(out)
    qtbot.waitUntil(lambda: window.last_export == out and out.exists(), timeout=20000)
    head = out.read_bytes()[:5]
    assert {".png": b"\x89PNG\r", ".svg": b"<?xml", ".pdf": b"%PDF-"}[suffix] == head
    assert not list(tmp_path.glob(".attnviz-*"))  # no temp files left behind
    if suffix == ".png":  # Qt-rendered: the file gets normal permissions, not mkstemp's 0600
        mask = os.umask(0)
        os.umask(mask)
        assert out.stat().st_mode & 0o777 == 0o666 & ~mask


def test_export_npz_and_reopen(qtbot, window, files, tmp_path):
    open_and_wait(qtbot, window, files["mt.onnx"], generate=3)
    out = tmp_path / "maps.npz"
    window.export_maps(out)
    qtbot.waitUntil(lambda: window.last_export == out, timeout=20000)
    r = load_npz(out)
    assert len(r.maps) == 6 and r.generated == window.session.result.generated
    with qtbot.waitSignal(window.result_shown):
        window.open_path(out)
    assert window.session.model is None and len(window.session.blocks) == 3


def test_bad_inputs_each_give_one_message(qtbot, window, files):
    cases = [
        (lambda: window.open_path(files["txt"]), "cannot open notes.txt"),
        (lambda: window.open_path(files["garbage"]), "not a valid ONNX file"),
        (lambda: window.open_path(files["cnn.onnx"]), "no attention to show"),
        (lambda: window.open_path(files["broken.onnx"]), "onnxruntime failed"),
    ]
    for action, text in cases:
        with qtbot.waitSignal(window.error_shown, timeout=10000):
            action()
        assert text in window.last_error
        assert text in window.statusBar().currentMessage()
        assert len(visible_message_boxes()) == 1
        assert visible_message_boxes()[0].text() == window.last_error
    # an unreadable image on a vision model
    open_and_wait(qtbot, window, files["vit.onnx"], image=str(files["image"]))
    with qtbot.waitSignal(window.error_shown, timeout=10000):
        window.open_path(files["corrupt"])
    assert "not an image" in window.last_error
    assert len(visible_message_boxes()) == 1
    # still usable: the previous result is shown and a good model opens
    assert window.session.result is not None
    open_and_wait(qtbot, window, files["text.onnx"])
    assert len(window.overview.thumbs) == 72


def test_image_on_text_model_and_nothing_open(qtbot, window, files):
    with qtbot.waitSignal(window.error_shown):
        window.inputs.run_button.click()
    assert "no model open" in window.last_error
    open_and_wait(qtbot, window, files["text.onnx"])
    with qtbot.waitSignal(window.error_shown):
        window.open_path(files["image"])
    assert "takes text, not images" in window.last_error


def test_newer_request_supersedes_older(qtbot, window, files):
    open_and_wait(qtbot, window, files["slow.onnx"])
    shown = []
    window.result_shown.connect(lambda: shown.append(window.session.result.tokens.labels[1]))
    window.inputs.set_values(text="first")
    window.inputs.run_button.click()
    window.inputs.set_values(text="second")
    window.inputs.run_button.click()
    qtbot.waitUntil(lambda: bool(shown), timeout=10000)
    assert window.workers.wait(10000)  # the first run also finishes (or stops); it must be dropped
    QApplication.processEvents()  # (its result, had it been sent, is delivered here)
    assert shown == ["second"]
    assert window.head_map.session.result.tokens.labels[1] == "second"


def test_cancel_keeps_window_responsive(qtbot, window, files):
    open_and_wait(qtbot, window, files["slow.onnx"])
    before = window.session.result
    window.inputs.set_values(text="never shown")
    window.inputs.run_button.click()
    assert window.inputs.cancel_button.isEnabled()
    qtbot.mouseClick(window.inputs.cancel_button, Qt.LeftButton)
    assert window.statusBar().currentMessage() == "Cancelled."
    QApplication.processEvents()  # the GUI thread is free while the worker still runs
    assert window.workers.wait(10000)  # the cancelled run ends; what it sends is not shown
    QApplication.processEvents()
    assert window.session.result is before


def test_drop_files_and_recent_menu(qtbot, window, files):
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(files["cap.onnx"])), QUrl.fromLocalFile(str(files["image"]))])
    ev = QDropEvent(QPointF(50, 50), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    with qtbot.waitSignal(window.result_shown, timeout=10000):
        window.dropEvent(ev)
    assert window.session.model.name == "cap"
    assert window.session.result.image is not None
    actions = window.recent_menu.actions()
    assert actions and actions[0].text().endswith("cap.onnx")
    open_and_wait(qtbot, window, files["text.onnx"])
    assert [a.text().rsplit("/", 1)[-1] for a in window.recent_menu.actions()][:2] == ["text.onnx", "cap.onnx"]
    with qtbot.waitSignal(window.result_shown, timeout=10000):
        window.recent_menu.actions()[1].trigger()
    assert window.session.model.name == "cap"


def test_export_uses_figure_renderer_when_exact(qtbot, window, files, tmp_path):
    pytest.importorskip("matplotlib")
    from attnviz.core.view import Selection

    open_and_wait(qtbot, window, files["mt.onnx"], generate=3)
    for view, want in (("overview", "overview"), ("head", "heatmap"), ("links", "links"), ("alignment", "alignment")):
        window.select_view(view)
        name, sel = window.figure_selection(window.current_view())
        assert isinstance(sel, Selection) and name == want
        out = tmp_path / f"{view}.svg"
        window.export_view(out)
        qtbot.waitUntil(lambda: window.last_export == out, timeout=30000)
        data = out.read_bytes()
        assert b"<svg" in data[:400] and b"<rdf:RDF" in data[:2000] and b"Qt SVG" not in data  # matplotlib's SVG
    window.select_view("stats")
    assert window.figure_selection(window.current_view()) is None  # the table is exported as shown
    # log scale, an aggregate over a layer range and keep-mass go to the renderer too, and it draws
    # exactly the numbers on screen
    from attnviz.core.view import compute_map

    window.select_view("head")
    window.controls.log.setChecked(True)
    window.controls.mode.setCurrentIndex(window.controls.mode.findData("max"))
    window.controls.keep.setValue(80)
    _, sel = window.figure_selection(window.current_view())
    assert sel.log and sel.mode == "max" and sel.keep == pytest.approx(0.8)
    np.testing.assert_allclose(
        compute_map(window.session.result, sel).matrix, window.session.current_map().matrix, atol=1e-6
    )
    out = tmp_path / "log.pdf"
    window.export_view(out)
    qtbot.waitUntil(lambda: window.last_export == out, timeout=30000)
    assert out.read_bytes()[:5] == b"%PDF-"


def test_choose_tokenizer_reopens_model(qtbot, window, files, tmp_path):
    open_and_wait(qtbot, window, files["text.onnx"])
    with qtbot.waitSignal(window.error_shown):
        window.set_tokenizer(files["txt"])
    assert "tokenizer.json" in window.last_error
    tok = tmp_path / "tokenizer.json"
    tok.write_text("{}")
    with qtbot.waitSignal(window.result_shown, timeout=10000):
        window.set_tokenizer(tok)
    assert window.session.model.tokenizer == str(tok)


def test_demo_model_preference(tmp_path):
    from attnviz.gui.app import demo_model

    assert demo_model(tmp_path / "missing") is None
    for n in ("sequence-classification.onnx", "captioning.onnx"):
        (tmp_path / n).write_bytes(b"x")
    assert demo_model(tmp_path).name == "captioning.onnx"
    (tmp_path / "translation.onnx").write_bytes(b"x")
    assert demo_model(tmp_path).name == "translation.onnx"


def test_the_demo_list_takes_the_speech_folder_after_the_files(tmp_path):
    """File ▸ Open demo's list: the .onnx demos in preference order, then a folder holding encoder_model.onnx (the
    speech demo); another folder or file is no demo, and a speech folder alone is the default."""
    from attnviz.gui.app import demo_model, demo_models

    (tmp_path / "spoken-digits").mkdir()
    (tmp_path / "spoken-digits" / "encoder_model.onnx").write_bytes(b"x")
    assert demo_model(tmp_path).name == "spoken-digits"
    (tmp_path / "resources").mkdir()
    (tmp_path / "README.md").write_text("x")
    for n in ("forecasting.onnx", "translation.onnx"):
        (tmp_path / n).write_bytes(b"x")
    assert [p.name for p in demo_models(tmp_path)] == ["translation.onnx", "forecasting.onnx", "spoken-digits"]
    assert demo_model(tmp_path).name == "translation.onnx"


def test_overview_log_scale_and_view_shortcuts(qtbot, window, files):
    open_and_wait(qtbot, window, files["text.onnx"])
    ov = window.overview
    # the default scale is fixed 0–1 (weights are probabilities) and the colour bar says so
    assert ov.colorbar.axis.labelText == "attention weight (fixed 0–1)" and ov.levels == (0.0, 1.0)
    window.controls.scale.setCurrentIndex(window.controls.scale.findData("shared"))
    top = max(float(m.max()) for m in ov.thumbnail_maps().values())
    assert ov.levels == pytest.approx((0.0, top)) and top < 1.0  # the largest weight of any head
    assert ov.colorbar.axis.labelText == "attention weight (shared by every head)"  # every block's, in the overview
    window.controls.log.setChecked(True)
    # three decades below the top weight, as the figure's LogNorm
    assert ov.colorbar.axis.labelText == "attention weight (log scale, shared by every head)"
    assert ov.levels[1] - ov.levels[0] == pytest.approx(3.0) and ov.levels[1] <= 0.0
    img = ov.thumbs[(0, 0, 0)].image
    assert img.max() <= ov.levels[1] + 1e-6 and img.min() >= ov.levels[0] - 1e-6
    qtbot.keyClick(window, Qt.Key_3, Qt.ControlModifier)  # View ▸ Token links
    assert window.tabs.currentWidget() is window.links


def test_switching_views_and_heads_reruns_nothing(qtbot, window, files):
    open_and_wait(qtbot, window, files["mt.onnx"], generate=4)
    model = window.session.model
    calls = model.calls
    for view in ("overview", "head", "links", "alignment", "image", "stats", "head"):
        window.select_view(view)
        QApplication.processEvents()
        window.step_head(1)
        window.step_layer(1)
    window.controls.mode.setCurrentIndex(window.controls.mode.findData("mean"))
    window.controls.step.setValue(1)
    window.controls.block.setCurrentIndex(2)
    assert model.calls == calls  # only the session's arrays were re-sliced


def test_file_open_demo_lists_the_bundled_demos(window):
    """File ▸ Open demo: one entry per bundled demo (the checkout's models/), the speech folder among them."""
    from attnviz.gui.app import demo_models

    file_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&File")
    demo = next(a.menu() for a in file_menu.actions() if a.menu() is not None and a.text() == "Open &demo")
    names = [a.text() for a in demo.actions()]
    want = [p.stem if p.suffix == ".onnx" else p.name for p in demo_models()]
    assert names == want and demo.isEnabled() == bool(want)
    if (Path(__file__).resolve().parents[2] / "models" / "spoken-digits").is_dir():
        assert "spoken-digits" in names and names[0] == "translation"
