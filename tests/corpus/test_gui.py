"""File ▸ Open corpus results: head table (sortable, roles coloured), layer × head grid, examples that open
in the usual views with their head focused."""

import math

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from attnviz.corpus import CorpusConfig, run_corpus


@pytest.fixture
def results(planted, tmp_path):
    model, texts = planted
    run_corpus(
        CorpusConfig(
            model=str(model),
            texts=str(texts),
            out=str(tmp_path / "res"),
            batch_size=8,
            workers=1,
            provider="cpu",
            progress=False,
        )
    )
    return tmp_path / "res"


@pytest.fixture
def win(qtbot, tmp_path):
    from PySide6.QtCore import QSettings

    from attnviz.gui.main_window import MainWindow

    w = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    yield w
    w.workers.cancel()
    assert w.workers.wait(10000)
    if w.error_box is not None:
        w.error_box.close()


def _open_first_example(qtbot, win, v):
    """Click the corpus view's first example and wait until the main window has run and shown it."""
    with qtbot.waitSignal(win.result_shown, timeout=60000):
        qtbot.mouseClick(
            v.examples.viewport(), Qt.LeftButton, pos=v.examples.visualItemRect(v.examples.item(0, 5)).center()
        )


def _col(table, name):
    return [table.horizontalHeaderItem(i).text() for i in range(table.columnCount())].index(name)


def test_corpus_view_table_grid_and_example_focus(qtbot, win, results):
    from attnviz.gui.views.corpus import ROLE_COLORS, open_corpus_results

    assert any(a.text() == "Open &corpus results…" for a in win.menuBar().actions()[0].menu().actions())
    v = open_corpus_results(win, results)
    qtbot.waitExposed(v)
    assert v.preview is None  # a text corpus's examples are tokens: no image beside them (a tower's: corpus_patch)
    t = v.table
    # no gold alignments in this run: no AER columns or scores (its heads carry them as NaN)
    assert all(math.isnan(h["aer"]) for h in v.heads)
    names = [t.horizontalHeaderItem(i).text() for i in range(t.columnCount())]
    assert not {"aer", "aer_precision", "aer_recall"} & set(names)
    assert "aer" not in [v.score.itemText(i) for i in range(v.score.count())]
    assert t.rowCount() == 8
    assert v.status.currentMessage().startswith("8 heads from ")  # its own status, not the main window's
    role_c = _col(t, "role")
    for r in range(t.rowCount()):
        item = t.item(r, role_c)
        assert item.background().color() == QColor(ROLE_COLORS[item.text()])
    # sorting by a score orders the rows by that number
    prev_c = _col(t, "prev")
    t.sortItems(prev_c, Qt.DescendingOrder)
    vals = [t.item(r, prev_c).value for r in range(t.rowCount())]
    assert vals == sorted(vals, reverse=True) and t.item(0, role_c).text() == "positional"
    # the grid: 2 layers × 4 heads, coloured by the chosen score
    assert (v.grid.rowCount(), v.grid.columnCount()) == (2, 4)
    v.score.setCurrentText("first")
    sink = next(h for h in v.heads if h["role"] == "sink" and h["layer"] == 0)
    broad = next(h for h in v.heads if h["role"] == "broad" and h["layer"] == 0)
    c_sink = v.grid.item(0, sink["head"]).background().color()
    c_broad = v.grid.item(0, broad["head"]).background().color()
    assert c_sink != c_broad and v.grid.item(0, sink["head"]).text().startswith("1.000")
    # a head's examples for the chosen score, then one click opens the item with that head focused
    qtbot.mouseClick(v.grid.viewport(), Qt.LeftButton, pos=v.grid.visualItemRect(v.grid.item(0, sink["head"])).center())
    assert v.current == sink and v.examples.rowCount() == 5
    assert all(e["score"] == "first" for e in v.shown_examples)
    assert v.status.currentMessage().startswith("5 top items by first for ")
    ex = v.shown_examples[0]
    _open_first_example(qtbot, win, v)
    qtbot.waitUntil(lambda: win.tabs.currentWidget() is win.head_map, timeout=5000)
    s = win.session
    assert (s.sel.layer, s.sel.head) == (0, sink["head"])
    assert s.result.tokens.labels[1:-1] == ex["text"].split()


def test_open_corpus_results_bad_folder_one_message(qtbot, win, tmp_path):
    from attnviz.gui.views.corpus import open_corpus_results

    with qtbot.waitSignal(win.error_shown, timeout=5000) as sig:
        assert open_corpus_results(win, tmp_path) is None
    assert "not a corpus results folder" in sig.args[0]


def test_encoder_decoder_corpus_cross_rows_and_example_opens_the_pair(qtbot, win, tmp_path):
    """The translation demo over source/target pairs: the grid has encoder self, decoder self and decoder cross
    rows; a cross head's example opens the pair teacher-forced (no generation) with that cross head focused."""
    import json
    from pathlib import Path

    from attnviz.gui.views.corpus import open_corpus_results
    from attnviz.training import data_translation as dt

    model = Path(__file__).resolve().parents[2] / "models" / "translation.onnx"
    pairs = [p for p in dt.split_pairs(dt.load_bible()).test if len(p.src) <= 12][:6]
    f = tmp_path / "v.jsonl"
    f.write_text("".join(json.dumps({"text": " ".join(p.src), "en": " ".join(p.tgt)}) + "\n" for p in pairs))
    cfg = CorpusConfig(str(model), str(tmp_path / "res"), texts=str(f), pair_column="en", batch_size=4, workers=1)
    cfg.provider, cfg.progress = "cpu", False
    run_corpus(cfg)
    v = open_corpus_results(win, tmp_path / "res")
    qtbot.waitExposed(v)
    labels = [v.grid.verticalHeaderItem(r).text() for r in range(v.grid.rowCount())]
    assert labels == ["enc L0", "enc L1", "enc L2", "dec L0", "dec L1", "dec L2", "dec× L0", "dec× L1", "dec× L2"]
    kinds = {v.table.item(r, _col(v.table, "stack")).text() for r in range(v.table.rowCount())}
    assert kinds == {"encoder self", "decoder self", "decoder cross"}
    v.score.setCurrentText("diag")
    r = labels.index("dec× L2")
    qtbot.mouseClick(v.grid.viewport(), Qt.LeftButton, pos=v.grid.visualItemRect(v.grid.item(r, 0)).center())
    assert (v.current["stack"], v.current["kind"], v.current["layer"], v.current["head"]) == ("decoder", "cross", 2, 0)
    ex = v.shown_examples[0]
    assert ex["pair"] is not None and ex["score"] == "diag"
    _open_first_example(qtbot, win, v)
    qtbot.waitUntil(lambda: win.tabs.currentWidget() is win.head_map, timeout=5000)
    s = win.session
    block = s.blocks[s.sel.block]
    assert (block.stack, block.kind, s.sel.layer, s.sel.head) == ("decoder", "cross", 2, 0)
    assert not s.result.generated  # teacher-forced on the target, as the corpus fed it
    tgt_tok = s.model.tokenizers[1]
    assert s.result.key_tokens.labels == ["[BOS]"] + [
        tgt_tok.label(i) for i in tgt_tok.encode(ex["pair"], add_special=False).ids
    ]
    # the example's row/col point into this very map: the monotone-diagonal key of that decoder row
    nq, nk = len(s.result.key_tokens.labels), len(s.result.tokens.labels)
    assert ex["col"] == int(ex["row"] * (nk - 1) / (nq - 1) + 0.5)


def test_generated_example_opens_generating_the_same_tokens(qtbot, win, bible, tmp_path):
    """Without targets the corpus decoded the model's greedy output; its example opens generating again, and the
    window shows the very tokens the corpus analysed."""
    import json
    from pathlib import Path

    from attnviz.gui.views.corpus import open_corpus_results

    model = Path(__file__).resolve().parents[2] / "models" / "translation.onnx"
    src = tmp_path / "src.jsonl"
    src.write_text(
        "".join(json.dumps({"text": json.loads(x)["text"]}) + "\n" for x in bible.read_text().splitlines()[:3])
    )
    cfg = CorpusConfig(str(model), str(tmp_path / "res"), texts=str(src), batch_size=3, workers=1, generate=8)
    cfg.provider, cfg.progress = "cpu", False
    run_corpus(cfg)
    v = open_corpus_results(win, tmp_path / "res")
    qtbot.waitExposed(v)
    v.show_head(next(h for h in v.heads if h["kind"] == "cross"))
    ex = v.shown_examples[0]
    assert ex["generated"] and "generated: " + ex["generated"] in v.examples.item(0, 5).text()
    _open_first_example(qtbot, win, v)
    assert win.session.result.generated == ex["generated"].split()


def test_gold_corpus_shows_aer_columns_and_colours_cross_heads_by_it(qtbot, win, bible_gold, tmp_path):
    """A corpus run with gold alignments: the table gains aer / aer_precision / aer_recall (NaN, shown "–", on
    self heads), the grid can be coloured by AER (lowest = the best-aligning head), and a head picked by AER
    says that AER has no per-item examples."""
    import math
    from pathlib import Path

    from attnviz.gui.views.corpus import open_corpus_results

    model = Path(__file__).resolve().parents[2] / "models" / "translation.onnx"
    cfg = CorpusConfig(
        str(model), str(tmp_path / "res"), texts=str(bible_gold / "pairs.jsonl"), pair_column="en", batch_size=8
    )
    cfg.gold_column, cfg.workers, cfg.provider, cfg.progress = "gold", 1, "cpu", False
    run_corpus(cfg)
    v = open_corpus_results(win, tmp_path / "res")
    qtbot.waitExposed(v)
    t = v.table
    c = _col(t, "aer")
    assert _col(t, "aer_precision") == c + 1 and _col(t, "aer_recall") == c + 2
    shown = {t.item(r, _col(t, "stack")).text(): [] for r in range(t.rowCount())}
    for r in range(t.rowCount()):
        shown[t.item(r, _col(t, "stack")).text()].append(t.item(r, c).text())
    assert set(shown["encoder self"]) == {"–"} and "–" not in shown["decoder cross"]
    t.sortItems(c, Qt.AscendingOrder)  # lowest AER first; NaN (self heads) last
    best = v.heads[t.item(0, 0).data(Qt.ItemDataRole.UserRole)]
    gold = v.results.run["gold"]["best_head"]
    assert (best["kind"], best["layer"], best["head"]) == ("cross", gold["layer"], gold["head"])
    v.score.setCurrentText("aer")
    labels = [v.grid.verticalHeaderItem(r).text() for r in range(v.grid.rowCount())]
    cell = v.grid.item(labels.index(f"dec× L{gold['layer']}"), gold["head"])
    assert cell.text() == f"{gold['aer']:.3f}"
    assert v.grid.item(labels.index("enc L0"), 0).text() == "–"
    finite = [h["aer"] for h in v.heads if not math.isnan(h["aer"])]
    assert v.grid_label.text().startswith(f"layer × head coloured by aer ({min(finite):.3g} – {max(finite):.3g})")
    qtbot.mouseClick(v.grid.viewport(), Qt.LeftButton, pos=v.grid.visualItemRect(cell).center())
    # AER's examples are the pairs the head aligns worst (the other end on purpose), highest AER first
    assert v.examples.rowCount() == 5 and "the pairs it aligns worst" in v.examples_label.text()
    vals = [e["value"] for e in v.shown_examples]
    assert vals == sorted(vals, reverse=True) and v.examples.horizontalHeaderItem(1).text() == "aer ↑"
    v.score.setCurrentText("aer_recall")
    assert v.examples.rowCount() == 0 and "no per-item examples" in v.examples_label.text()
    v.score.setCurrentText("aer")
    assert (
        v.status.currentMessage()
        == f"aer {gold['aer']:.3f} over the corpus for decoder cross layer {gold['layer']} head {gold['head']}"
    )
    assert f"best cross head L{gold['layer']} H{gold['head']}, AER {gold['aer']:.3f}" in v.info.text()
    assert _col(t, "aer") == _col(t, "role_score") + 1  # beside the role, not past the scroll
    # a click on a badly aligned pair opens it teacher-forced in the Alignment view, on that head
    ex = v.shown_examples[0]
    _open_first_example(qtbot, win, v)
    qtbot.waitUntil(lambda: win.tabs.currentWidget() is win.alignment, timeout=5000)
    s = win.session
    block = s.blocks[s.sel.block]
    assert (block.kind, s.sel.layer, s.sel.head) == ("cross", gold["layer"], gold["head"])
    assert s.result.info["text_pair"] == ex["pair"] and not s.result.generated


def test_a_results_folder_opens_as_corpus_results_from_the_command_line_and_the_window(qtbot, win, results, tmp_path):
    """`attnviz open DIR` (and File ▸ Open / a drop) on an `attnviz corpus --out DIR` folder shows the corpus view;
    it was taken for an export folder: "no .onnx file in this folder"."""
    import os
    import subprocess
    import sys

    import pyarrow.parquet as pq
    from PIL import Image

    from attnviz.app.rules import file_kind

    assert file_kind(results) == "corpus" and file_kind(tmp_path) == "model"
    win.open_path(results)
    v = win.corpus_view
    assert v is not None and v.isVisible() and win.last_error is None
    assert v.table.rowCount() == pq.ParquetFile(results / "heads.parquet").metadata.num_rows
    shot = tmp_path / "corpus.png"
    r = subprocess.run(
        [sys.executable, "-m", "attnviz", "open", str(results), "--screenshot", str(shot), "--size", "900x600"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"saved {shot}"
    with Image.open(shot) as im:  # the corpus view's own window, at the window's width (its height has a minimum)
        assert im.format == "PNG" and im.size[0] == 900


def test_a_long_summary_line_wraps_and_the_view_keeps_the_asked_width(qtbot, win, results):
    """ux29: the summary line above the table did not wrap, so its length set the view's minimum width (a gold
    run's line, with its best head and AER, made `attnviz open RESULTS --size 1000x650` draw 1,289 px).  A model
    with a long file name gives such a line here; the view takes 1000 px and shows the whole line, wrapped."""
    import json

    from attnviz.gui.views.corpus import open_corpus_results

    run = json.loads((results / "run.json").read_text())
    name = "bert-base-multilingual-cased-finetuned-on-the-greek-new-testament-with-gold-alignments-int8.onnx"
    run["model"] = f"/models/{name}"
    (results / "run.json").write_text(json.dumps(run))
    v = open_corpus_results(win, results)
    qtbot.waitExposed(v)
    v.resize(1000, 650)
    qtbot.waitUntil(lambda: v.width() == 1000)
    assert v.minimumSizeHint().width() <= 1000
    info = v.info
    assert info.text().startswith(name) and info.fontMetrics().horizontalAdvance(info.text()) > info.width()
    qtbot.waitUntil(lambda: info.height() >= info.heightForWidth(info.width()))  # every wrapped line shown
    assert info.heightForWidth(info.width()) >= 2 * info.fontMetrics().lineSpacing()
