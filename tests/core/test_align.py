"""attnviz.core.align against hand-computed cases."""

import numpy as np
import pytest

from attnviz.core import align


def test_aer_precision_recall_by_hand():
    # S = {0-0, 1-2}, P = S + {2-1}; A = {0-0, 2-1, 2-2}
    # |A∩S| = 1, |A∩P| = 2, |A| = 3, |S| = 2 -> AER = 1 - 3/5, precision 2/3, recall 1/2
    c = align.AERCounter()
    c.add({(0, 0), (2, 1), (2, 2)}, {(0, 0), (1, 2)}, {(2, 1)})
    assert c.aer == pytest.approx(0.4)
    assert c.precision == pytest.approx(2 / 3)
    assert c.recall == pytest.approx(0.5)
    # corpus counts are summed, not averaged per sentence: add a perfect 1-link sentence
    c.add({(0, 0)}, {(0, 0)})
    assert c.aer == pytest.approx(1 - (2 + 3) / (4 + 3))


def test_alignment_table_per_head_and_layer_by_hand():
    # 2 source words (subwords [0, 0, 1]) and 2 target words (rows: BOS, w0, w0, w1 in the input convention)
    good = np.array([[1, 0, 0], [0.1, 0.1, 0.8], [0.2, 0.2, 0.6], [0.5, 0.4, 0.1]])
    bad = np.array([[1, 0, 0], [0.8, 0.1, 0.1], [0.6, 0.2, 0.2], [0.1, 0.1, 0.8]])  # head 1: the other word
    attn = np.stack([good, bad])[None]  # (L=1, H=2, Tq=4, Tk=3)
    qw = align.row_words([0, 0, 1], "input")
    assert qw.tolist() == [-1, 0, 0, 1]
    sample = align.AlignmentSample(attn, qw, [0, 0, 1], n_src=2, n_tgt=2, sure={(1, 0), (0, 1)})
    t = align.alignment_table([sample])
    # head 0: word 0 rows average (0.2, 0.8) -> source 1; word 1 row (0.9, 0.1) -> source 0: both right
    assert t["heads"][0][0] == 0.0
    # head 1: word 0 rows average (0.85, 0.15) -> source 0, word 1 (0.2, 0.8) -> source 1: both wrong -> AER 1
    assert t["heads"][0][1] == 1.0
    assert t["precision"]["heads"][0] == [1.0, 0.0] and t["recall"]["heads"][0] == [1.0, 0.0]
    assert t["best_head"] == {"layer": 0, "head": 0, "aer": 0.0}
    assert align.ranked_heads(t)[0][:2] == (0, 0)


def test_row_words_conventions():
    # target subwords belong to words 0 0 1 2; decoder rows = BOS + 4 subwords (+ nothing predicts past EOS)
    w = [0, 0, 1, 2]
    assert align.row_words(w, "predict").tolist() == [0, 0, 1, 2, -1]
    assert align.row_words(w, "input").tolist() == [-1, 0, 0, 1, 2]
    with pytest.raises(ValueError):
        align.row_words(w, "sideways")


def test_merge_subwords_sums_keys_averages_queries():
    a = np.array([[0.2, 0.3, 0.5], [0.4, 0.4, 0.2]])
    w = align.merge_subwords(a, [0, 0], [0, 1, 1])
    np.testing.assert_allclose(w, [[0.3, 0.7]])


def test_pharaoh_round_trip_and_errors(tmp_path):
    sure, possible = align.parse_pharaoh("0-0 2?1 1-2")
    assert sure == {(0, 0), (1, 2)} and possible == {(2, 1)}
    line = align.format_pharaoh({(1, 2), (0, 0), (3, 1)})
    assert line == "0-0 3-1 1-2"  # sorted by target word
    assert align.parse_pharaoh(line)[0] == {(0, 0), (3, 1), (1, 2)}
    for bad in ("0-x", "1:2", "0-1-2", "-1-2"):
        with pytest.raises(align.PharaohError, match="not a Pharaoh link"):
            align.parse_pharaoh(bad)
    p = tmp_path / "g.txt"
    p.write_text("0-0\n\n1-1 0?1\n")
    assert align.read_pharaoh(p) == [({(0, 0)}, set()), (set(), set()), ({(1, 1)}, {(0, 1)})]
    with pytest.raises(align.PharaohError, match="points past"):
        align.check_gold(({(3, 0)}, set()), n_src=3, n_tgt=1)


def test_diagonal_links():
    assert align.diagonal_links(4, 2) == {(1, 0), (3, 1)}
    assert align.diagonal_links(4, 2, skip=[False, True]) == {(1, 0)}


def test_many_maps_at_once_equal_one_map_at_a_time():
    """best_source_words + many_link_counts (the corpus path: every head of a pair in one merge) give each map
    the links and counts attention_to_links + link_counts give it alone, ties and edge cases included."""
    rng = np.random.default_rng(0)
    for case in range(60):
        n_src, n_tgt = int(rng.integers(1, 6)), int(rng.integers(1, 6))
        # every source word has a piece, some have more; a special piece (-1) at each end
        pieces = np.sort(np.concatenate([np.arange(n_src), rng.integers(0, n_src, int(rng.integers(0, n_src + 1)))]))
        kw = np.concatenate([[-1], pieces, [-1]])
        tw = np.sort(rng.integers(0, n_tgt, int(rng.integers(1, 2 * n_tgt + 1))))
        qw = align.row_words(tw, "predict" if case % 2 else "input")
        m = rng.random((7, len(qw), len(kw)))
        m[0] = 1.0  # a uniform map: every word ties with its equal-sized neighbours (argmax takes the first)
        m[1] = np.round(m[1], 1)  # coarse values: ties between words of different sizes
        skip = rng.random(n_tgt) < 0.3
        sure = {(int(rng.integers(n_src)), j) for j in range(n_tgt) if rng.random() < 0.7}
        possible = {(int(rng.integers(n_src)), j) for j in range(n_tgt) if rng.random() < 0.4} - sure
        best = align.best_source_words(m, qw, kw, n_tgt, n_src, skip)
        got = align.many_link_counts(best, sure, possible, n_src)
        for h in range(len(m)):
            links = align.attention_to_links(m[h], qw, kw, n_tgt, n_src, skip=skip)
            assert {(int(i), j) for j, i in enumerate(best[h]) if i >= 0} == links, (case, h)
            assert tuple(got[h]) == align.link_counts(links, sure, possible), (case, h)
            np.testing.assert_array_equal(
                align.merge_subwords(m[h], qw, kw, n_tgt, n_src), align.merge_subwords(m, qw, kw, n_tgt, n_src)[h]
            )
