"""row_stats takes big batches a few rows at a time (cache-sized chunks): the values must not change."""

from __future__ import annotations

import numpy as np
import pytest
from reference import STATS, item_rows

from attnviz.core.stats import row_stats


def _padded_batch(rng, b, h, t):
    lengths = rng.integers(1, t + 1, b)
    lengths[0] = t
    p = np.zeros((b, h, t, t), np.float32)
    for r, n in enumerate(lengths):  # softmax rows over the real keys; padded keys get 0 (and junk in padded rows)
        x = rng.standard_normal((h, n, n)).astype(np.float32) * 3
        p[r, :, :n, :n] = np.exp(x) / np.exp(x).sum(-1, keepdims=True)
        p[r, :, n:, :] = rng.random((h, t - n, t))
    special = rng.random((b, t)) < 0.2
    special[:, 0] = True
    return p, lengths, special


@pytest.mark.parametrize("causal", [False, True])
def test_chunked_row_stats_are_bit_identical_to_one_pass(causal):
    rng = np.random.default_rng(7)
    p, lengths, special = _padded_batch(rng, 13, 3, 9)
    one_values, one_valid = row_stats(p, lengths, special, causal, chunk=1 << 30)
    for chunk in (1, 3 * 81 * 2, 3 * 81 * 5 + 7):  # one row a pass, two rows, five rows (the last pass shorter)
        values, valid = row_stats(p, lengths, special, causal, chunk=chunk)
        for k in one_values:
            assert values[k].shape == one_values[k].shape == (13, 3, 9)
            assert np.array_equal(values[k], one_values[k]), k  # the same bits, not merely close
            assert np.array_equal(valid[k], one_valid[k]), k


def test_chunked_row_stats_equal_the_loop_reference_per_item():
    """Independent check: each item's unpadded rows recomputed one by one (tests/corpus/reference.py)."""
    rng = np.random.default_rng(3)
    p, lengths, special = _padded_batch(rng, 6, 2, 7)
    values, valid = row_stats(p, lengths, special, causal=False, chunk=2 * 49)  # one item a pass
    for r, n in enumerate(lengths):
        for hh in range(2):
            want = item_rows(p[r, hh, :n, :n], list(special[r, :n]), causal=False)
            for s in STATS:
                got = values[s][r, hh][valid[s][r]]
                assert np.allclose(got, want[s], rtol=1e-5, atol=1e-6), (s, r, hh)
