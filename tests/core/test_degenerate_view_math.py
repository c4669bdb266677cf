"""The view model on degenerate maps (issue 9 finding 6): empty axes refused in one line, tiny maps computed."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
from attnviz.core.stats import head_stats
from attnviz.core.view import Selection, ViewError, compute_map, thumbnails


def _result(a: np.ndarray) -> AttentionResult:
    site = SiteInfo("encoder", "self", 0, a.shape[1], "n", "softmax")
    return AttentionResult(maps=[DenseMap(a.astype(np.float32))], sites=[site], tokens=TokenAxis(["t"] * a.shape[2]))


@pytest.mark.parametrize("shape", [(1, 0, 2, 2), (1, 2, 0, 0), (1, 2, 2, 0)])
def test_empty_axis_is_one_view_error(shape):
    r = _result(np.zeros(shape))
    for fn in (compute_map, thumbnails):
        with pytest.raises(ViewError, match="empty map") as e:
            fn(r, Selection())
        assert "\n" not in str(e.value)


def test_empty_map_has_no_statistics():
    with pytest.raises(ValueError, match="no statistics"):
        head_stats(np.zeros((0, 3)))


def test_one_token_and_masked_rows_by_hand():
    # 1x1: all mass on the only key, which is position 0 and the diagonal; entropy 0 bits
    s = head_stats(np.ones((1, 1)))
    assert s["entropy"] == 0.0 and s["first"] == 1.0 and s["diag"] == 1.0 and s["max"] == 1.0
    # a fully masked (all-zero) row counts as zero mass, not NaN: rows [0.5 0.5] and [0 0]
    s = head_stats(np.array([[0.5, 0.5], [0.0, 0.0]]))
    assert s["entropy"] == pytest.approx(0.5)  # (1 bit + 0) / 2
    assert s["first"] == pytest.approx(0.25) and np.isfinite(list(s.values())).all()
    # keep-mass 0, log scale, all-zero map: a finite matrix and a usable colour range
    mv = compute_map(_result(np.zeros((1, 1, 3, 3))), Selection(keep=0.0, log=True))
    assert mv.matrix.shape == (3, 3) and np.isfinite(mv.matrix).all()
