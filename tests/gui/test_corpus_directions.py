"""The Corpus view says which end of each score is interesting (core/score_direction.py) and which end the
examples list: column and score-list tooltips, the examples' value header and the line above them."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyarrow")

from PySide6.QtCore import Qt

from attnviz.core.stats import ROW_STATS


def _results(tmp_path, run_extra: dict):
    """A tiny results folder written the way `attnviz corpus` writes it: one self and one cross head."""
    from attnviz.corpus.output import read, write

    heads, examples = [], []
    for kind in ("self", "cross"):
        stats = {s: 0.5 for s in ROW_STATS} | {"induction": 0.0}
        heads.append(
            dict(stack="decoder", kind=kind, layer=0, head=0, items=3, tokens=12, **stats, role="mixed", role_score=0.1)
        )
        for score in ROW_STATS:
            for rank, value in enumerate((3.0, 2.0, 1.0)):
                examples.append(
                    dict(
                        stack="decoder",
                        kind=kind,
                        layer=0,
                        head=0,
                        score=score,
                        rank=rank,
                        item=rank,
                        value=value,
                        row=1,
                        col=2,
                        text=f"item {rank}",
                        pair=None,
                        image=None,
                        generated=None,
                        generate=None,
                    )
                )
    out = tmp_path / f"res{len(run_extra)}"
    out.mkdir()
    write(out, heads, examples, {"model": "m.onnx", "model_kind": "encoder-decoder", "items": 3, **run_extra})
    assert json.loads((out / "run.json").read_text()).get("example_ranking") == run_extra.get("example_ranking")
    return read(out)


def _header_tip(v, name):
    t = v.table
    return next(
        t.horizontalHeaderItem(c).toolTip() for c in range(t.columnCount()) if t.horizontalHeaderItem(c).text() == name
    )


def test_tooltips_give_each_score_its_interesting_end_per_kind(qtbot, tmp_path):
    from attnviz.gui.views.corpus import CorpusView

    v = CorpusView(_results(tmp_path, {}))
    qtbot.addWidget(v)
    assert "↓ self: low = focused on few keys" in _header_tip(v, "entropy")
    tip = _header_tip(v, "distance")
    assert "↑ self: high = looks far" in tip and "↓ cross: low = close to the monotone source diagonal" in tip
    i = v.score.findText("entropy")
    assert "low = focused" in v.score.itemData(i, Qt.ItemDataRole.ToolTipRole)


def test_examples_say_which_end_they_list(qtbot, tmp_path):
    from attnviz.gui.views.corpus import CorpusView

    # a run like every run so far: the highest values of every score
    v = CorpusView(_results(tmp_path, {}))
    qtbot.addWidget(v)
    v.score.setCurrentText("distance")
    cross = next(h for h in v.heads if h["kind"] == "cross")
    self_ = next(h for h in v.heads if h["kind"] == "self")
    v.show_head(cross)
    assert [e["value"] for e in v.shown_examples] == [3.0, 2.0, 1.0]
    assert "the highest values, not the interesting end (low = close to the monotone" in v.examples_label.text()
    assert v.examples.horizontalHeaderItem(1).text() == "distance ↑"
    v.show_head(self_)  # on self-attention a high distance is the interesting end
    assert "the highest values (high = looks far" in v.examples_label.text()
    # a run that ranked by direction: the lowest distances of the cross head, said so
    w = CorpusView(_results(tmp_path, {"example_ranking": "direction"}))
    qtbot.addWidget(w)
    w.score.setCurrentText("distance")
    w.show_head(next(h for h in w.heads if h["kind"] == "cross"))
    assert "the lowest values (low = close to the monotone" in w.examples_label.text()
    assert w.examples.horizontalHeaderItem(1).text() == "distance ↓"
