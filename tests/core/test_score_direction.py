"""Each corpus score's interesting end (core/score_direction.py), checked against the statistics themselves on
hand-made maps: a focused row has the lower entropy, a monotone cross map the lower distance."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz import AttnvizError
from attnviz.core.cross_stats import cross_row_stats
from attnviz.core.score_direction import DIRECTIONS, KINDS, direction, examples_end, rank_order
from attnviz.core.stats import ROW_STATS, row_stats
from attnviz.corpus.output import GOLD_COLUMNS


def test_every_score_the_corpus_writes_has_a_direction_on_both_kinds():
    written = (*ROW_STATS, "induction", "role_score", *GOLD_COLUMNS)  # GOLD_COLUMNS: with --gold-column only
    for score in written:
        for kind in KINDS:
            d = direction(score, kind)
            assert d.meaning and d.arrow in "↑↓"
    assert set(DIRECTIONS) == set(written)
    assert not direction("aer").high and direction("aer_recall").high  # a lower error rate is the better head


def _mean(values, valid, name):
    """The mean over the rows that count ([B, T] validity over [B, H, T] values)."""
    return float(np.nanmean(np.where(valid[name][:, None, :], values[name], np.nan)))


def test_low_entropy_is_the_focused_head():
    t = 6
    focused = np.eye(t, dtype=np.float32)[None, None]  # every row on one key
    causal = np.tril(np.ones((t, t), np.float32))
    spread = (causal / causal.sum(-1, keepdims=True))[None, None]  # every row uniform over what it may see
    lengths = np.array([t])
    e_focused = _mean(*row_stats(focused, lengths, causal=True), "entropy")
    e_spread = _mean(*row_stats(spread, lengths, causal=True), "entropy")
    assert e_focused < e_spread
    d = direction("entropy", "self")
    assert not d.high and "focused" in d.meaning
    # so the focused head ranks first
    assert rank_order(np.array([e_spread, e_focused]), "entropy", "self")[0] == 1


def test_low_cross_distance_and_high_diag_are_the_monotone_head():
    tq = tk = 5
    monotone = np.eye(tq, tk, dtype=np.float32)[None, None]  # target word i on source word i
    reversed_ = np.eye(tq, tk, dtype=np.float32)[::-1][None, None].copy()
    ql, kl = np.array([tq]), np.array([tk])
    mono, rev = cross_row_stats(monotone, ql, kl), cross_row_stats(reversed_, ql, kl)
    assert _mean(*mono, "distance") < _mean(*rev, "distance")
    assert _mean(*mono, "diag") > _mean(*rev, "diag")
    assert not direction("distance", "cross").high and direction("diag", "cross").high
    assert direction("distance", "self").high  # on self-attention a high distance is the long-range head
    ranked = rank_order(np.array([_mean(*rev, "distance"), _mean(*mono, "distance")]), "distance", "cross")
    assert ranked[0] == 1


def test_rank_order_by_hand_with_ties_and_nan():
    v = np.array([0.2, np.nan, 0.9, 0.2])
    assert rank_order(v, "entropy").tolist() == [0, 3, 2, 1]  # low first, ties stable, NaN last
    assert rank_order(v, "prev").tolist() == [2, 0, 3, 1]  # high first, NaN last


def test_which_end_a_run_listed():
    assert examples_end({}, "entropy", "self") == "highest"  # every run written so far
    assert examples_end({"example_ranking": "direction"}, "entropy", "self") == "lowest"
    assert examples_end({"example_ranking": "direction"}, "distance", "cross") == "lowest"
    assert examples_end({"example_ranking": "direction"}, "distance", "self") == "highest"


def test_unknown_score_or_kind_is_one_message():
    with pytest.raises(AttnvizError, match="score 'sharpness' has no direction; known scores: role_score, entropy"):
        direction("sharpness")
    with pytest.raises(AttnvizError, match="attention kind 'mixed' is not one of self, cross"):
        direction("entropy", "mixed")


def test_over_a_vision_towers_frames_the_position_scores_speak_of_patches():
    """A VLM's vision file alone (corpus/tower.py): each frame's keys start with its top-left patch, no [CLS]/BOS;
    the ends stay the same, only what they mean is said of patches (cross-attention and other scores unchanged)."""
    first = direction("first", "self", vision_tower=True)
    assert first.high == direction("first").high and "each frame's first patch" in first.meaning
    assert (
        "previous token" in direction("prev").meaning and "patch before" in direction("prev", vision_tower=True).meaning
    )
    assert direction("entropy", vision_tower=True) == direction("entropy")
    assert direction("diag", "cross", vision_tower=True) == direction("diag", "cross")
