"""The Corpus view of a VLM tower's corpus (``attnviz corpus vision_encoder.onnx --images DIR``): an example's
row and key are shown by their patch labels (examples.parquet's row_patch / col_patch, the view's axis labels) where
a text corpus shows its positions, named in words in their tips, and the picked example's image is drawn beside the
list with its query and key patches outlined where app/corpus_patches.py places them."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")
pytest.importorskip("torch")
pytest.importorskip("transformers")

import vlm_build as vb
from PySide6.QtGui import QColor

from attnviz.app.corpus_patches import example_image, label_name
from attnviz.cli import main
from attnviz.corpus.output import read


@pytest.fixture(scope="module")
def results(idefics3_repo, tmp_path_factory):
    d = tmp_path_factory.mktemp("view_imgs")
    vb.random_image(d / "wide.png", 40, 100, 0)
    vb.random_image(d / "square.png", 70, 64, 1)
    out = tmp_path_factory.mktemp("view_out") / "o"
    tower = idefics3_repo / "onnx" / "vision_encoder.onnx"
    args = ["corpus", str(tower), "--images", str(d), "--out", str(out), "--workers", "1", "--provider", "cpu"]
    assert main([*args, "--no-progress"]) == 0
    return read(out)


def test_examples_show_their_patches_and_the_picked_one_on_its_image(qtbot, results):
    from attnviz.gui.views.corpus import CorpusView
    from attnviz.gui.views.corpus_patch import KEY_COLOR, QUERY_COLOR, SIDE

    v = CorpusView(results)
    qtbot.addWidget(v)
    v.show()
    assert v.preview is not None
    v.score.setCurrentText("max")
    v.show_head(v.heads[5])
    ex = v.shown_examples
    t = v.examples
    assert len(ex) == t.rowCount() > 1
    for r, e in enumerate(ex):
        assert (t.item(r, 2).text(), t.item(r, 3).text()) == (e["row_patch"], e["col_patch"])
        assert (t.item(r, 2).value, t.item(r, 3).value) == (e["row"], e["col"])  # sorted by position
        assert t.item(r, 2).toolTip().startswith(label_name(e["row_patch"]))
    pick = next(r for r, e in enumerate(ex) if e["row"] != e["col"])
    t.setCurrentCell(pick, 0)
    want = example_image(ex[pick], results.run["model"])
    got = v.preview.shown
    assert got is not None and (got.query, got.key) == (want.query, want.key) and got.shown is not None
    caption = v.preview.caption.text()
    assert (
        f"query {want.query.label}: {want.query.name}" in caption
        and f"key {want.key.label}: {want.key.name}" in caption
    )
    pix = v.preview.picture.pixmap()
    h, w = want.shown.shape[:2]
    scale = SIDE / max(h, w)
    assert (pix.width(), pix.height()) == (round(w * scale), round(h * scale))
    image = pix.toImage()
    for region, color in ((want.query, QUERY_COLOR), (want.key, KEY_COLOR)):
        top, left, bottom, right = (x * scale for x in region.box)
        # the outline's left edge, half-way down the box (the other box may cross its corners)
        assert image.pixelColor(int(left), int((top + bottom) / 2)) == QColor(color), region


def test_an_example_of_a_gone_model_is_named_not_drawn(qtbot, results, tmp_path):
    from attnviz.corpus.output import CorpusResults
    from attnviz.gui.views.corpus import CorpusView

    moved = CorpusResults(results.folder, results.heads, results.examples, {**results.run, "model": str(tmp_path)})
    v = CorpusView(moved)
    qtbot.addWidget(v)
    v.show_head(v.heads[0])
    e = v.shown_examples[0]
    assert v.preview is not None and v.preview.picture.pixmap().isNull()
    caption = v.preview.caption.text()
    assert label_name(e["row_patch"]) in caption and "is gone; its patches are named, not drawn" in caption


def _col(table, name: str) -> int:
    return [table.horizontalHeaderItem(i).text() for i in range(table.columnCount())].index(name)


def test_heads_read_vision_self_and_first_is_each_frames_first_patch(qtbot, results):
    """The tower's heads as every view names them ("vision self", "vis L0" in the grid), and the scores' help
    about frames of patches: "first" is each frame's first patch (the tower has no [CLS] or BOS)."""
    from attnviz.core.score_direction import direction
    from attnviz.core.stats import ROW_STAT_HELP
    from attnviz.gui.views.corpus import CorpusView

    v = CorpusView(results)
    qtbot.addWidget(v)
    stack = _col(v.table, "stack")
    assert {v.table.item(r, stack).text() for r in range(v.table.rowCount())} == {"vision self"}
    rows = [v.grid.verticalHeaderItem(r).text() for r in range(v.grid.rowCount())]
    assert rows == ["vis L0", "vis L1"]
    v.score.setCurrentText("first")
    v.show_head(v.heads[0])
    assert v.examples_label.text().startswith("vision self layer 0 head 0 · ")
    assert "a sink on each frame's first patch" in v.examples_label.text()
    assert v.status.currentMessage().endswith("for vision self layer 0 head 0")
    token = (ROW_STAT_HELP["first"], direction("first").meaning)  # a text corpus's: key 0, a [CLS]/BOS sink
    for tip in (v.table.horizontalHeaderItem(_col(v.table, "first")).toolTip(), v.direction_tip("first")):
        assert "each frame's first patch" in tip and not any(t in tip for t in token), tip
    assert "patch before in raster order" in v.direction_tip("prev")


def test_results_written_before_say_vision_too(qtbot, results):
    """Results whose files say "encoder" and whose run.json does not say "vision_tower" (written before): their
    examples' patches show a tower's corpus, named the same; an unsplit image's patches, whose frames they do not
    say, are "patch (r, c)" and never a global image's."""
    from attnviz.corpus.output import CorpusResults
    from attnviz.gui.views.corpus import CorpusView

    old = [{**h, "stack": "encoder"} for h in results.heads]
    run = {k: x for k, x in results.run.items() if k != "vision_tower"}
    examples = [{**e, "stack": "encoder", "frames": None} for e in results.examples]
    v = CorpusView(CorpusResults(results.folder, old, examples, run))
    qtbot.addWidget(v)
    stack = _col(v.table, "stack")
    assert {v.table.item(r, stack).text() for r in range(v.table.rowCount())} == {"vision self"}
    v.show_head(v.heads[0])
    assert v.shown_examples and v.examples_label.text().startswith("vision self layer 0 head 0 · ")
    for r, e in enumerate(v.shown_examples):
        if not e["row_patch"].startswith("tile "):
            assert v.examples.item(r, 2).toolTip().startswith("patch (")


def test_an_example_opens_with_its_vision_head_focused(qtbot, results, tmp_path):
    from PySide6.QtCore import QSettings

    from attnviz.gui.main_window import MainWindow
    from attnviz.gui.views.corpus import open_example

    win = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat))
    qtbot.addWidget(win)
    win.show()
    e = next(x for x in results.examples if x["layer"] == 1 and x["head"] == 2)
    with qtbot.waitSignal(win.result_shown, timeout=60000):
        open_example(win, e, results.run["model"])
    qtbot.waitUntil(lambda: win.tabs.currentWidget() is win.head_map, timeout=5000)
    s = win.session
    assert s.block.name == "vision self-attention" and (s.sel.layer, s.sel.head) == (1, 2)
    assert s.block_index("vision", "self") == s.block_index("encoder", "self") == 0
    win.workers.cancel()
    assert win.workers.wait(10000)
