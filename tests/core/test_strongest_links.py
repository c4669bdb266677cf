"""Token links' choice of links (screen and figure alike), computed per row by a partition (a long map's head
switch sorted every row of the map in full: 0.2 s at 2,048 tokens, 1.6 s at 4,096) against the rule written out
here row by row with Python's own stable sort: per row the 12 largest weights (equal weights: the leftmost first,
NaN never), those of at least 5 % of the top weight, relative to it, row by row and each row's columns in order."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnviz.core.view.links import LINK_MIN, LINKS_PER_ROW, strongest_links


def _by_hand(mats, vmax=None):
    top = float(vmax) if vmax else max((float(m.max()) for m in mats if m.size), default=1.0) or 1.0
    out = []
    for c, m in enumerate(mats):
        for i, row in enumerate(m.tolist()):
            # largest first; equal weights keep their column order; NaN after every number
            ranked = sorted(
                range(len(row)), key=lambda j: (math.isnan(row[j]), -row[j] if not math.isnan(row[j]) else 0)
            )
            for j in sorted(ranked[:LINKS_PER_ROW]):
                w = row[j] / top
                if w >= LINK_MIN:
                    out.append((c, i, j, min(w, 1.0)))
    return out, top


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


def _maps():
    rng = np.random.default_rng(26)
    causal = np.tril(np.ones((300, 300), np.float32))
    causal /= causal.sum(1, keepdims=True)  # early rows: a few weights of 1/i, later rows all below 5 % of 1
    peaked = _softmax(rng.standard_normal((64, 200)) * 4)
    flat = np.full((20, 40), 1 / 40, np.float32)  # every weight the top: ties in every row, leftmost 12 win
    ties = rng.integers(0, 4, (50, 30)).astype(np.float32) / 4  # many equal weights at each row's 12th place
    nans = peaked.copy()
    nans[3, :7] = np.nan
    nans[5, :] = np.nan
    nans[6, 190:] = np.nan  # NaN beside the row's numbers: the top 12 numbers, never a NaN
    narrow = _softmax(rng.standard_normal((9, 5)))  # fewer keys than links a row
    return {"causal": causal, "peaked": peaked, "flat": flat, "ties": ties, "nans": nans, "narrow": narrow}


@pytest.mark.parametrize("name", list(_maps()))
def test_links_are_the_rows_strongest(name):
    m = _maps()[name]
    got, top = strongest_links([m])
    want, want_top = _by_hand([m])
    assert top == want_top or (math.isnan(top) and math.isnan(want_top))
    assert got == want


def test_several_heads_and_a_given_top():
    maps = _maps()
    mats = [maps["peaked"], maps["ties"][:, :30] * 0.1, _softmax(np.random.default_rng(3).standard_normal((64, 200)))]
    for vmax in (None, 0.02, 0.5):
        assert strongest_links(mats[::2], vmax) == _by_hand(mats[::2], vmax)
    assert strongest_links([mats[1]], 0.03) == _by_hand([mats[1]], 0.03)
    nans = maps["nans"]  # its own top is NaN (no links at all): against a given top its NaN rows are judged
    got = strongest_links([nans], 1.0)
    assert got == _by_hand([nans], 1.0) and {i for _, i, _, _ in got[0]} >= {3, 6}
