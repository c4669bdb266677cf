"""Self-described alignment heads in the Alignment view, and Head stats ranked by AER against a gold set."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gui_helpers import open_and_wait

pytest.importorskip("onnxruntime")


ALIGNER_RECIPE = dict(steps=400, lr=1e-2, align_weight=1.0, align_heads=[[0, 1]], align_convention="input")


def _train_aligner(out: Path) -> None:
    import torch

    from attnviz.training.export import export
    from attnviz.training.loop import Trainer
    from attnviz.training.tasks import get_task

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    task = get_task("toy-reverse")
    mcfg, tcfg = task.configs("tiny")
    for k, v in ALIGNER_RECIPE.items():
        setattr(tcfg, k, v)
    trainer = Trainer(task, mcfg, tcfg)
    for _ in trainer.events():
        pass
    export(trainer.model, task, mcfg, tcfg, out / "reverse.onnx")
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def aligned_model(tmp_path_factory):
    """toy-reverse with decoder layer 0 head 1 trained as aligner, rows = input token (~15 s): trained and exported
    once per machine (tests/build_cache.py, keyed on the recipe and on the sources of the package's trainer, tasks
    and exporter, as tests/training/test_align_command.py's), a copy per session.  The tests read the alignment
    back against the reversal's own gold links, whichever run trained it."""
    pytest.importorskip("torch")
    import build_cache

    d = build_cache.trained_copy(
        "align-reverse-input", ALIGNER_RECIPE, _train_aligner, tmp_path_factory.mktemp("aligned")
    )
    # a gold test set: X.gold with X.src / X.tgt beside it
    rng = np.random.default_rng(3)
    src, tgt, gold = [], [], []
    for _ in range(30):
        k = int(rng.integers(3, 9))
        s = [str(v) for v in rng.integers(0, 10, size=k)]
        src.append(" ".join(s))
        tgt.append(" ".join(s[::-1]))
        gold.append(" ".join(f"{k - 1 - j}-{j}" for j in range(k)))
    for ext, lines in ((".src", src), (".tgt", tgt), (".gold", gold)):
        (d / ("test" + ext)).write_text("\n".join(lines) + "\n")
    return d


def test_alignment_view_opens_on_the_declared_head_with_its_rows(qtbot, real_window, aligned_model):
    w = real_window
    open_and_wait(qtbot, w, aligned_model / "reverse.onnx", text="3 1 4 1 5 9", generate=8)
    w.select_view("alignment")
    al = w.alignment
    sel = w.session.sel
    assert (sel.mode, sel.layer, sel.head) == ("head", 0, 1)
    assert w.session.block.kind == "cross"
    assert "alignment head is decoder layer 0 head 1 (shown)" in al.step_label.text()
    assert "reading its input token" in al.step_label.text()
    r = w.session.result
    cross = w.session.block
    # input convention: word k's row is the position that reads it, one after the row that produced it
    head = cross.head(0, 1)
    n = al.mv.matrix.shape[0]
    assert n == len(r.generated) - 1  # the last generated word (EOS) is never read back
    np.testing.assert_allclose(al.mv.matrix, head[r.prompt_len : r.prompt_len + n], rtol=1e-6)
    assert al.mv.q_labels == [g for g in r.generated[:n]]
    # the aligner works: each generated digit looks at its mirror position in the source
    src = r.tokens.labels
    assert [src[int(np.argmax(row))] for row in al.mv.matrix] == al.mv.q_labels
    # the info line counts steps as the step control does, also at the last step, which has no row
    g = len(r.generated)
    for step in (g - 1, 1, -1):
        if step >= 0:
            w.controls.step.setValue(step)
        else:
            w.controls.step.setValue(w.controls.step.maximum())
        shown = g if step < 0 else step + 1
        assert w.controls.step_label.text() == f"step {shown}/{g}"
        assert al.step_label.text().startswith(f"step {shown}/{g}: ")
        assert ("has no row of its own" in al.step_label.text()) == (shown == g)


def test_head_stats_ranked_by_aer_against_a_gold_set(qtbot, real_window, aligned_model, tmp_path, capsys):
    from attnviz.cli import main
    from attnviz.core import align

    w = real_window
    open_and_wait(qtbot, w, aligned_model / "reverse.onnx", text="3 1 4 1 5 9", generate=8)
    w.load_gold(aligned_model / "test.gold")
    st = w.stats
    qtbot.waitUntil(lambda: "aer" in st.columns and st.table.rowCount() > 0, timeout=30000)
    assert w.tabs.currentWidget() is st and w.session.block.kind == "cross"
    aer = st.column_values("aer")
    assert aer == sorted(aer)  # ranked: the best aligner first
    layer, head = int(st.table.item(0, 0).value), int(st.table.item(0, 1).value)
    assert (layer, head) == (0, 1)
    assert "ranked by AER against test" in st.info.text()
    # the same number from the command line tool on the same files
    out = tmp_path / "a.txt"
    assert (
        main(
            [
                "align",
                str(aligned_model / "reverse.onnx"),
                "--src",
                str(aligned_model / "test.src"),
                "--tgt",
                str(aligned_model / "test.tgt"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    capsys.readouterr()
    written = align.read_pharaoh(out)
    truth = align.read_pharaoh(aligned_model / "test.gold")
    assert aer[0] == pytest.approx(align.aer([x[0] for x in written], [t[0] for t in truth]), abs=1e-9)


def test_a_teacher_forced_target_is_drawn_row_by_row_not_refused(qtbot, real_window):
    """The translation demo on a source and its target (generate 0): one row per target token read, as
    `attnviz figure --view alignment` draws it (the view said "set generate" and drew nothing)."""
    from pathlib import Path

    from attnviz.runtime import open_model

    model = Path(__file__).resolve().parents[2] / "models" / "translation.onnx"
    src, tgt = "ἐν ἀρχῇ ἦν ὁ λόγος", "in the beginning was the word"
    w = real_window
    open_and_wait(qtbot, w, model, text=src, text_pair=tgt, generate=0)
    w.select_view("alignment")
    al = w.alignment
    assert al.message == "" and w.session.result.generated == []
    sel = w.session.sel
    assert (sel.mode, sel.layer, sel.head) == ("head", 2, 0)  # the declared alignment head
    # one row per target word (the start token is none), as `attnviz align` reads them
    assert al.mv.q_labels == tgt.split() and al.mv.y_title == "target"
    # the numbers: decoder cross-attention layer 2 head 0 of a separate run; the declared "input" convention
    # puts each word on the row that reads it (decoder rows 1..n), "predict" on the row before (0..n-1)
    ref = open_model(model).analyze(text=src, text_pair=tgt)
    site = next(i for i, s in enumerate(ref.sites) if (s.stack, s.kind, s.layer) == ("decoder", "cross", 2))
    full = ref.dense()[site][0, 0]
    assert full.shape[0] == len(tgt.split()) + 1
    np.testing.assert_allclose(al.mv.matrix, full[1:], rtol=1e-6)
    assert al.step_label.text().startswith("teacher-forced target: each row is the decoder position reading")
    assert "alignment head is decoder layer 2 head 0 (shown)" in al.step_label.text()
    assert w.sidebar.values("Run")["alignment head"] == "decoder layer 2 head 0, input rows"  # as the run recorded it
    assert al.rows_box.currentData() == "input"  # the control shows the declared convention
    al.rows_box.setCurrentIndex(al.rows_box.findData("predict"))  # the user switches it
    assert w.session.sel.rows == "predict"
    al.draw()  # what the view draws for the selection now (a redraw may still be queued)
    assert w.figure_selection(al)[1].rows == "predict"  # File > Export view draws the same rows
    assert al.mv.q_labels == tgt.split()
    np.testing.assert_allclose(al.mv.matrix, full[:-1], rtol=1e-6)
    assert "position predicting its target token (predict rows)" in al.step_label.text()
