"""A beam search's Run section speaks of beams: how many, the one the beam box shows and its score (it said
"batch 4" beside "beam steps 11", the engine's keys), and every score as `extract` and a figure title print it."""

from __future__ import annotations

import numpy as np

SCORES = [-0.0, -0.00031, -0.5554]  # a negative zero, one that rounds to "-0.000" at three places, an ordinary one


def _beam_result():
    from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis

    words = [["a", "b"], ["a", "c"], ["d", "e"]]
    info = {
        "provider": "synthetic",
        "beams": [{"ids": [1, 2], "generated": w, "score": s} for w, s in zip(words, SCORES)],
        "batch": 3,  # what runtime/beam_result.py records: the hypotheses are the result's batch rows
        "beam_steps": 7,
    }
    m = np.full((3, 2, 3, 3), 1 / 3, np.float32)
    return AttentionResult(
        [DenseMap(m)],
        [SiteInfo("encoder", "self", 0, 2, "/l0/Softmax", "softmax")],
        tokens=TokenAxis(["x", "y", "z"], [False] * 3),
        info=info,
    )


def test_the_run_section_names_the_beams_the_one_shown_and_its_score(qtbot, window):
    window._show_result(_beam_result())
    run = window.sidebar.values("Run")
    # by hand: 3 beams, 7 steps; beam 0's score is a negative zero, said as the 0 it is
    assert run["beam search"] == "3 beams, best first, over 7 steps; beam 0 shown (score 0.000)"
    assert "batch" not in run and "beam steps" not in run, list(run)
    assert run["beams"].split("\n") == [
        "beam 0 (score 0.000): a b",
        "beam 1 (score -0.00031): a c",  # not "-0.000": it is below beam 0's and says by how much
        "beam 2 (score -0.555): d e",
    ]
    expanded = [window.sidebar.topLevelItem(i).isExpanded() for i in range(window.sidebar.topLevelItemCount())]
    window.controls.batch.setValue(1)  # the beam box
    assert window.session.sel.batch == 1
    run = window.sidebar.values("Run")
    assert run["beam search"] == "3 beams, best first, over 7 steps; beam 1 shown (score -0.00031)"
    # one cell changed: the sections stay as they were
    assert expanded == [window.sidebar.topLevelItem(i).isExpanded() for i in range(window.sidebar.topLevelItemCount())]


def test_a_padded_batch_is_not_called_beams(qtbot, window):
    from attnviz.app.run_facts import beam_lines, beam_summary

    assert beam_summary({"batch": 3}, 0) is None and beam_lines({"batch": 3}) == []
    assert beam_summary({"beams": [{"score": -1.0}]}, 0) is None  # one hypothesis: a greedy run's
