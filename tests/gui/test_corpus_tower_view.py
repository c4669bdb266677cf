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
