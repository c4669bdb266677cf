"""Baselines `attnviz eval` prints beside the models' numbers, checked against facts that hold by construction."""

import numpy as np
import pytest

from attnviz.training import metrics as M
from attnviz.training.tasks.forecasting import ar_forecast, linear_forecast


def test_ar6_continues_a_clean_sum_of_three_sinusoids_exactly():
    # a sum of k sinusoids obeys a linear recurrence of order 2k, so AR(6) fitted on the context is exact
    t = np.arange(40, dtype=np.float64)
    s = 0.7 * np.sin(0.3 * t + 1) + 0.4 * np.sin(0.55 * t) + 0.9 * np.sin(0.12 * t + 2)
    pred = ar_forecast(s[None, :32], 6, 8)
    np.testing.assert_allclose(pred[0], s[32:], atol=1e-6)
    # one component fewer than the order needs: AR(2) cannot follow three
    assert np.abs(ar_forecast(s[None, :32], 2, 8)[0] - s[32:]).max() > 0.05


def test_linear_forecast_recovers_a_linear_map():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(5, 3))
    x = rng.normal(size=(200, 5))
    y = x @ w + 0.5
    np.testing.assert_allclose(linear_forecast(x, y, x[:7]), y[:7], atol=1e-9)


def test_pointing_baselines_by_hand():
    # 64 px image, 8x8 grid of 8 px cells; object A fills the top-left quarter (16 cells), B a 2x2-cell square
    a, b = (0, 0, 32, 32), (48, 48, 64, 64)
    samples = [{"attn": None, "targets": [(1, a), (2, a), (3, b), (4, b)]}]
    strict = M.pointing_baselines(samples, (64, 64), (8, 8))
    assert strict["either_object"] == pytest.approx(0.5)  # the right object half the time
    assert strict["random_cell"] == pytest.approx((16 / 64 + 16 / 64 + 4 / 64 + 4 / 64) / 4)
    grown = M.pointing_baselines(samples, (64, 64), (8, 8), tolerance=8)  # one more ring of cell centres
    assert grown["random_cell"] == pytest.approx((25 / 64 + 25 / 64 + 9 / 64 + 9 / 64) / 4)
