"""A dual encoder in the window with several images and several texts: the texts box takes one text a line (a ';'
inside a text stays in it), the image box several images; every image against every text is a row, the Run section
holds every pair's score (the one shown marked), the row box ("pair") switches both towers' maps and the
picture, and File ▸ Export view of a row writes the recipe that `attnviz figure --recipe` draws byte for byte."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gui_helpers import open_and_wait

pytest.importorskip("torch")
pytest.importorskip("transformers")

import dual_cache  # (the export, once per machine)
import hf_models

from attnviz.cli import main
from attnviz.figures.recipe import recipe_path_for

TEXTS = ["a cat; on a mat", "a dog ran"]  # the first holds a ';': one text, not two


@pytest.fixture
def opened(qtbot, real_window, tmp_path):
    from PIL import Image

    path = dual_cache.export_dual("clip", "model", tmp_path)
    hf_models.word_tokenizer(99, bert_style=False).save_pretrained(str(tmp_path))
    images = []
    for k in range(2):
        images.append(tmp_path / f"photo{k}.png")
        px = np.random.default_rng(20 + k).integers(0, 256, (32, 32, 3), dtype=np.uint8)
        Image.fromarray(px).save(images[-1])
    w = real_window
    open_and_wait(qtbot, w, path, image="; ".join(map(str, images)), text="\n".join(TEXTS))
    return w, path, images


def _lines_drawn(w, key: str) -> int:
    """How many lines the Run value ``key`` takes wrapped at its column's width (the font's own measure), at the
    window's default size."""
    from PySide6.QtCore import QRect, Qt
    from PySide6.QtGui import QFontMetrics

    w.resize(1400, 900)  # the window's own default size (main_window.py)
    tree = w.sidebar
    run = tree.section("Run")
    item = next(run.child(i) for i in range(run.childCount()) if run.child(i).text(0) == key)
    style = tree.style()
    width = tree.header().sectionSize(1) - 2 * (style.pixelMetric(style.PixelMetric.PM_FocusFrameHMargin) + 1)
    fm = QFontMetrics(tree.font())
    box = fm.boundingRect(QRect(0, 0, width, 1 << 20), Qt.TextFlag.TextWordWrap, item.text(1))
    return round(box.height() / fm.lineSpacing())


def test_every_image_against_every_text(opened):
    from attnviz.core import view as vm
    from attnviz.core.text_scores import TextScores
    from attnviz.runtime import open_model

    w, path, images = opened
    assert w.inputs.request().texts == tuple(TEXTS)  # one text a line: the ';' is the first text's own
    assert w.inputs.texts.isVisibleTo(w) and not w.inputs.text.isVisibleTo(w)
    r = w.session.result
    assert r.batch_size == 4
    # the table is the engine's on the same input (tests/runtime/test_dual_images.py checks it against transformers)
    want = TextScores.from_info(
        open_model(path, provider="cpu").analyze(image=[str(p) for p in images], text=TEXTS).info
    )
    assert want is not None and want.kind == "pair"
    run = w.sidebar.values("Run")
    lines = run["scores"].splitlines()  # a pair a line (the column is too narrow for the table), the first shown
    assert lines == want.lines(0, table=False)
    # a short line a pair under its columns' header, the shown one's short mark on it ("image 0 × text 0  0.139
    # ◀ shown" wrapped in the narrow column, the mark alone on a second line)
    assert lines[:2] == ["image × text  score", f"0 × 0  {want.scores[0]:.3f} ◀"]
    assert "◀ marks the pair shown" in run["rows"]
    assert _lines_drawn(w, "scores") == len(lines)  # at the window's size, no line wraps in the Run column
    assert f"image 1: {images[1].name}" in lines and f"text 0: {TEXTS[0]}" in lines
    assert "each image's summing to 1" in run["scored by"]
    ctl = w.controls
    assert ctl.labels["batch row"].text() == "pair" and "image × text" in ctl.batch.toolTip()
    image_block = w.session.blocks[0]
    first = image_block.head(0, 0)
    ctl.batch.setValue(3)  # image 1 × text 1: the other image's maps and picture, the other text's words
    assert w.session.sel.batch == 3
    assert not np.array_equal(w.session.blocks[0].head(0, 0), first)
    seen = vm.pictured(w.session.result, 0, w.session.sel.batch).image
    assert np.array_equal(np.asarray(seen), np.asarray(r.images[1]))
    axis = w.session.blocks[-1].key_axis
    assert [t for t, p in zip(axis.labels, axis.pad or [False] * len(axis)) if not p] == TEXTS[1].split()
    lines = w.sidebar.values("Run")["scores"].splitlines()
    assert lines[4] == f"1 × 1  {r.info['text_scores']['scores'][3]:.3f} ◀" and "◀" not in lines[1]


def test_export_view_of_a_pair_regenerates(qtbot, opened, tmp_path):
    w, _, images = opened
    w.select_view("head")
    w.session.select(batch=2)  # image 1 × text 0
    out = tmp_path / "pair.png"
    w.export_view(out)
    qtbot.waitUntil(lambda: w.last_export == out and out.exists(), timeout=60000)
    recipe = recipe_path_for(out)
    assert w.last_recipe == recipe and recipe.is_file(), w.statusBar().currentMessage()
    r = json.loads(recipe.read_text())
    assert r["inputs"]["texts"] == TEXTS and [e["abs_path"] for e in r["inputs"]["images"]] == [
        str(p.resolve()) for p in images
    ]
    assert r["options"]["batch_index"] == 2
    again = tmp_path / "again.png"
    assert main(["figure", "--recipe", str(recipe), "--out", str(again)]) == 0
    assert again.read_bytes() == out.read_bytes()


def test_run_section_counts_each_texts_tokens_once(opened, tmp_path):
    """Every image against every text: the text tower's tokens are counted once a text (the tokenizer's count of
    each), not once a pair (which listed each text's count twice and named the rows "pair 0..3")."""
    from transformers import AutoTokenizer

    w, _, _ = opened
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    want = [f"text {j}: {len(tok(t)['input_ids'])} in the text tower" for j, t in enumerate(TEXTS)]
    assert len(set(want)) == 2  # the texts count differently, so each is listed
    assert w.sidebar.values("Run")["text tokens"].splitlines() == want
    assert "pair" not in w.sidebar.values("Run")["image tokens"]


def test_the_pair_box_names_its_image_and_text(qtbot, opened):
    """The pair box said a bare row number ("3"): it names the row's image and text as the Run section's score
    lines do (``3  image 1 × text 1``, from the scores' own per-row images and texts), and a typed number still
    picks the row."""
    from PySide6.QtCore import Qt

    from attnviz.core.text_scores import TextScores

    w, _, _ = opened
    scores = TextScores.from_info(w.session.result.info)
    assert scores is not None
    box = w.controls.batch
    for row in range(len(scores.scores)):
        box.setValue(row)
        i, j = scores.image_names.index(scores.images[row]), scores.text_names.index(scores.texts[row])
        assert box.text() == f"{row}  image {i} × text {j}" and w.session.sel.batch == row
        assert box.lineEdit().text() == box.text()
    box.lineEdit().selectAll()
    qtbot.keyClicks(box.lineEdit(), "2")
    qtbot.keyClick(box.lineEdit(), Qt.Key_Return)
    assert w.session.sel.batch == 2 and box.text() == "2  image 1 × text 0"
