"""Metrics: BLEU, AER from attention, pointing game."""

import numpy as np
import pytest

from attnviz.training import metrics as M


def test_bleu_identical_is_100_and_disjoint_is_0():
    refs = ["The cat sat on the mat.", "In the beginning was the Word, and the Word was with God."]
    assert M.corpus_bleu(refs, refs)["bleu"] == pytest.approx(100.0)
    assert M.corpus_bleu(["x y z w v", "q r s t u"], refs)["bleu"] == 0.0


def test_bleu_known_value_and_brevity_penalty():
    # hand-computed: 1-4 gram precisions 5/6, 3/5, 2/4, 1/3 ; hyp 6 tokens vs ref 7 -> bp = exp(1 - 7/6)
    r = M.corpus_bleu(["the cat sat on a mat"], ["the cat sat on the red mat"])
    assert r["precisions"][0] == pytest.approx(100 * 5 / 6)
    assert r["bp"] == pytest.approx(np.exp(1 - 7 / 6))
    assert r["bleu"] == pytest.approx(100 * np.exp(1 - 7 / 6) * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25)


def test_13a_tokenization():
    assert M.tokenize_13a("Jesus Christ, the son of David: 3.5 (yes)!") == [
        "Jesus",
        "Christ",
        ",",
        "the",
        "son",
        "of",
        "David",
        ":",
        "3.5",
        "(",
        "yes",
        ")",
        "!",
    ]


def test_aer_of_gold_is_0_and_of_disjoint_is_1():
    gold = [{(0, 0), (1, 2), (2, 1)}, {(0, 1)}]
    assert M.aer(gold, gold) == 0.0
    assert M.aer([{(5, 5)}, {(1, 0)}], gold) == 1.0
    # half right: A = {(0,0),(9,9)}, S = {(0,0),(1,1)} -> 1 - 2*1/4
    assert M.aer([{(0, 0), (9, 9)}], [{(0, 0), (1, 1)}]) == pytest.approx(0.5)


def test_merge_subwords_sums_keys_and_averages_queries():
    a = np.array([[0.1, 0.6, 0.3], [0.3, 0.2, 0.5], [0.9, 0.05, 0.05], [0.2, 0.3, 0.5]])
    # rows: target words 0,0,1 and a BOS row (-1); columns: source words 0,1,1
    w = M.merge_subwords(a, [0, 0, 1, -1], [0, 1, 1])
    np.testing.assert_allclose(w, [[0.2, 0.8], [0.9, 0.1]])
    np.testing.assert_allclose(w.sum(1), 1.0)
    assert M.attention_to_links(a, [0, 0, 1, -1], [0, 1, 1]) == {(1, 0), (0, 1)}
    assert M.attention_to_links(a, [0, 0, 1, -1], [0, 1, 1], skip=[False, True]) == {(1, 0)}


def test_attention_built_from_gold_recovers_it():
    rng = np.random.default_rng(0)
    n_src, n_tgt = 6, 7
    perm = rng.permutation(n_src)
    gold = {(int(perm[j % n_src]), j) for j in range(n_tgt)}
    key_words = [0, 0, 1, 2, 3, 3, 3, 4, 5]  # 9 source subwords
    query_words = [-1, 0, 1, 1, 2, 3, 4, 5, 6, -1]  # BOS ... EOS
    att = rng.random((len(query_words), len(key_words))) * 0.05
    for i, j in enumerate(query_words):
        if j >= 0:
            s = next(s for s, t in gold if t == j)
            att[i, key_words.index(s)] += 1.0
    att /= att.sum(1, keepdims=True)
    stacked = np.stack([np.stack([att, att[:, ::-1]])])  # [L=1, H=2, Tq, Tk]: head 1 is wrong
    table = M.alignment_table(
        [
            {
                "attn": stacked,
                "query_words": query_words,
                "key_words": key_words,
                "n_tgt": n_tgt,
                "n_src": n_src,
                "gold": gold,
            }
        ]
    )
    assert table["heads"][0][0] == 0.0 and table["heads"][0][1] > 0.5
    assert table["best_head"] == {"layer": 0, "head": 0, "aer": 0.0}
    assert "**0.000**" in M.format_aer_table(table)


def test_pointing_game():
    g = np.zeros((8, 8))
    g[2, 5] = 1.0  # cell centre at x = 44, y = 20 on a 64x64 image
    assert M.pointing_hit(g, (40, 16, 48, 24), (64, 64))
    assert not M.pointing_hit(g, (0, 0, 30, 30), (64, 64))
    assert M.pointing_hit(g, (46, 16, 52, 24), (64, 64), tolerance=3)
    att = np.zeros((2, 2, 3, 64))
    att[:, :, 1, 2 * 8 + 5] = 1.0  # every head points at the right cell for query row 1
    att[0, 1, 1] = 0
    att[0, 1, 1, 0] = 1.0  # except layer 0 head 1
    t = M.pointing_table([{"attn": att, "targets": [(1, (40, 16, 48, 24))]}], (64, 64), (8, 8))
    assert t["heads"] == [[1.0, 0.0], [1.0, 1.0]] and t["layers"][1] == 1.0 and t["n_words"] == 1


def test_exact_match():
    assert M.exact_match(["a b  c", "x"], ["a b c", "y"]) == 0.5
