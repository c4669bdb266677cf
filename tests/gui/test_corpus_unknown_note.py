"""The Corpus view says first, on its status line, what `attnviz corpus` said at the end of the run: how many items
were mostly the tokenizer's unknown token (run.json's ``items_mostly_unknown`` / ``unknown_token``)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyarrow")

from test_corpus_directions import _results

from attnviz import AttnvizError


def test_the_status_line_says_the_items_mostly_unknown_first(qtbot, tmp_path):
    from attnviz.gui.views.corpus import CorpusView

    v = CorpusView(_results(tmp_path, {"items_mostly_unknown": 2, "unknown_token": "[UNK]"}))
    qtbot.addWidget(v)
    assert v.status.currentMessage().startswith(
        "2 of 3 items are mostly the unknown token '[UNK]' (words the tokenizer does not know): is the corpus in "
        "the model's language and script? · 2 heads from "
    )
    assert v.info.text().endswith("· 2 of them mostly [UNK]") and v.info.toolTip() == v.note  # kept in the summary line


def test_the_status_line_says_the_sink_note(qtbot, tmp_path):
    from attnviz.core.stats import sink_note
    from attnviz.gui.views.corpus import CorpusView

    note = sink_note(["decoder self L0", "decoder self L1"])
    v = CorpusView(_results(tmp_path, {"sink_sites": ["decoder self L0", "decoder self L1"], "sink_note": note}))
    qtbot.addWidget(v)
    said = v.status.currentMessage()
    assert said.startswith(note[:250]) and "· 2 heads from " in said  # (the whole note in the summary's tip)
    assert v.info.text().endswith("· rows rescaled over the sinks' heads") and v.info.toolTip() == note


def test_none_mostly_unknown_or_not_counted_says_nothing(qtbot, tmp_path):
    from attnviz.gui.views.corpus import CorpusView

    for extra in ({"items_mostly_unknown": 0, "unknown_token": "[UNK]"}, {}):
        v = CorpusView(_results(tmp_path, extra))
        qtbot.addWidget(v)
        assert v.status.currentMessage().startswith("2 heads from ") and v.note is None
        assert "mostly" not in v.info.text()


def test_a_count_that_is_not_a_number_is_refused_in_one_line(tmp_path):
    with pytest.raises(AttnvizError, match="'items_mostly_unknown' is str '2', not a number"):
        _results(tmp_path, {"items_mostly_unknown": "2", "unknown_token": "[UNK]"})
