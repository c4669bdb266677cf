"""Token links' choice of links (screen and figure alike), narrowed by block maxima and a sort of the candidates (a
long map's head switch sorted every row of the map in full: 0.2 s at 2,048 tokens, 1.6 s at 4,096) against the rule written out
here row by row with Python's own stable sort: per row the 12 largest weights (equal weights: the leftmost first,
NaN never), those of at least 5 % of the reference, row by row and each row's columns in order, with their shade.
The cut's reference and shade: the map's top weight for both ("map"), or the row's own largest number and its
sum ("row", the default: a row of zeros or NaN has no largest, so no links)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnviz import AttnvizError
from attnviz.core.view.links import LINK_MIN, LINKS_PER_ROW, links_key, strongest_links


def _row_reference(row):
    numbers = [x for x in row if not math.isnan(x)]
    ref = max(numbers) if numbers else math.nan
    return ref if 0 < ref < math.inf else math.nan


def _by_hand(mats, vmax=None, cut="map"):
    top = float(vmax) if vmax else max((float(m.max()) for m in mats if m.size), default=1.0) or 1.0
    out = []
    for c, m in enumerate(mats):
        for i, row in enumerate(m.tolist()):
            ref = top if cut == "map" else _row_reference(row)
            shade = top if cut == "map" else math.fsum(x for x in row if not math.isnan(x))
            # largest first; equal weights keep their column order; NaN after every number
            ranked = sorted(
                range(len(row)), key=lambda j: (math.isnan(row[j]), -row[j] if not math.isnan(row[j]) else 0)
            )
            for j in sorted(ranked[:LINKS_PER_ROW]):
                if row[j] / ref >= LINK_MIN:
                    out.append((c, i, j, min(row[j] / shade, 1.0)))
    return out, top


def _same(got, want):
    """The same links (matrix, row, column) and shades: exactly against the map's top, to the last bits against a
    row's sum (numpy adds a row pairwise, fsum exactly)."""
    assert [lk[:3] for lk in got] == [lk[:3] for lk in want]
    np.testing.assert_allclose([lk[3] for lk in got], [lk[3] for lk in want], rtol=1e-12)
    return True


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
    # links.py narrows each row by the maxima of blocks of every (n // 16)-th column, then looks only in the blocks
    # that can hold a link: widths around 16 × 12 keys (a short row has too few blocks), a tail of n % 16 keys (a
    # block of its own), a whole block NaN, equal weights across blocks, negative weights and -0.0 (the sort key),
    # float16, and maps not laid out row by row
    wide = {n: _softmax(rng.standard_normal((24, n)) * 3) for n in (191, 192, 193, 213, 257)}
    blocky = _softmax(rng.standard_normal((30, 260)) * 2)
    blocky[:, 3::16] = np.nan  # (260 // 16 = 16 blocks: block 3 is columns 3, 19, 35, ...)
    blocky[4, :] = rng.integers(0, 3, 260) / 8  # ties between the blocks
    signed = (rng.standard_normal((20, 230)) * 0.1).astype(np.float32)
    signed[2, :] = -np.abs(signed[2]) - 0.01  # a row of negative weights: no reference, no links against itself
    signed[3, :100] = -0.0
    return {
        "causal": causal,
        "peaked": peaked,
        "flat": flat,
        "ties": ties,
        "nans": nans,
        "narrow": narrow,
        **{f"wide{n}": m for n, m in wide.items()},
        "blocky": blocky,
        "signed": signed,
        "negative": -np.abs(signed) - 0.01,  # its top is negative: against it (map) each row's 12 largest are taken
        "half": _softmax(rng.standard_normal((16, 300)) * 3).astype(np.float16),
        "columns": np.asfortranarray(peaked),
        "strided": _softmax(rng.standard_normal((20, 410)) * 3)[:, 3:400],
    }


@pytest.mark.parametrize("cut", ["map", "row"])
@pytest.mark.parametrize("name", list(_maps()))
def test_links_are_the_rows_strongest(name, cut):
    m = _maps()[name]
    got, top = strongest_links([m], cut=cut)
    want, want_top = _by_hand([m], cut=cut)
    assert top == want_top or (math.isnan(top) and math.isnan(want_top))
    assert got == want if cut == "map" else _same(got, want)


@pytest.mark.parametrize("cut", ["map", "row"])
def test_several_heads_and_a_given_top(cut):
    maps = _maps()
    mats = [maps["peaked"], maps["ties"][:, :30] * 0.1, _softmax(np.random.default_rng(3).standard_normal((64, 200)))]
    for vmax in (None, 0.02, 0.5):
        got, want = strongest_links(mats[::2], vmax, cut), _by_hand(mats[::2], vmax, cut)
        assert got[1] == want[1] and _same(got[0], want[0])
    got, want = strongest_links([mats[1]], 0.03, cut), _by_hand([mats[1]], 0.03, cut)
    assert got[1] == want[1] and _same(got[0], want[0])
    nans = maps["nans"]  # its own top is NaN (no links at all): against a given top its NaN rows are judged
    got = strongest_links([nans], 1.0, cut)
    assert _same(got[0], _by_hand([nans], 1.0, cut)[0]) and {i for _, i, _, _ in got[0]} >= {3, 6}


def _causal(t, seed):
    """A random-init causal language model's map: row i spreads over keys 0..i, near 1/(i+1) each."""
    x = np.random.default_rng(seed).standard_normal((t, t)) * 0.3
    x[np.triu_indices(t, 1)] = -np.inf
    return _softmax(x)


def test_on_a_long_causal_map_every_row_has_links_against_its_own_strongest():
    m = _causal(1024, 7)
    rows_map = {i for _, i, _, _ in strongest_links([m], cut="map")[0]}
    got, _ = strongest_links([m], cut="row")
    # against the map's top (row 0's 1.0) a row of more than ~20 keys holds few weights over 5 %: past a few
    # dozen rows, no links at all
    assert max(rows_map) < 64
    # against each row's own strongest: every row its min(i + 1, 12) strongest, each shaded by its share of the row
    per_row = np.bincount([i for _, i, _, _ in got], minlength=1024)
    np.testing.assert_array_equal(per_row, np.minimum(np.arange(1024) + 1, LINKS_PER_ROW))
    for i in (0, 100, 1023):
        row = m[i, : i + 1].astype(np.float64)
        want = sorted(np.argsort(-row, kind="stable")[:LINKS_PER_ROW].tolist())
        mine = [(j, w) for _, r, j, w in got if r == i]
        assert [j for j, _ in mine] == want
        np.testing.assert_allclose([w for _, w in mine], row[want] / m[i].astype(np.float64).sum(), rtol=1e-6)
    assert max(w for _, r, _, w in got if r == 1023) < 3 / 1024  # a flat row's strongest: faint, as it is
    assert _same(got, _by_hand([m], cut="row")[0])


def test_a_row_of_zeros_has_no_links_and_an_unknown_cut_is_one_line():
    m = _causal(40, 1)
    m[5] = 0.0  # a padded query row
    got, _ = strongest_links([m], cut="row")
    assert 5 not in {i for _, i, _, _ in got} and {4, 6} <= {i for _, i, _, _ in got}
    with pytest.raises(AttnvizError, match="unknown link cut 'rows'; use one of row, map"):
        strongest_links([m], cut="rows")
    assert "its query token's strongest link" in links_key(0.5, "row") and "full at 0.5" in links_key(0.5, "map")
