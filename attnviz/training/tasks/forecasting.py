"""``forecasting``: continue a sum of sinusoids, all future values at once.

f(t) = sum_i a_i sin(w_i t + phi_i), 1-3 components, a_i in [0.3, 1], w_i in [0.1, 0.8] rad/step, plus
observation noise (sigma 0.02).  Given a ``context``-step window the model predicts the next ``horizon``
values in one shot.  A causal decoder reads the series (one value per position) and predicts from its last
position.  Metric: MSE against the naive last-value baseline (repeat the last observed value).
"""

from __future__ import annotations

import numpy as np

from attnviz.training.config import preset_configs
from attnviz.training.tasks import Task, predict, split_seed

CONTEXT = 32  # observed values
HORIZON = 8  # values to predict
NOISE = 0.02


def generate(n: int, seed: int, context: int = CONTEXT, horizon: int = HORIZON) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.arange(context + horizon, dtype=np.float64)
    k = rng.integers(1, 4, size=n)
    amp = rng.uniform(0.3, 1.0, size=(n, 3)) * (np.arange(3)[None] < k[:, None])  # unused components = 0
    freq = rng.uniform(0.1, 0.8, size=(n, 3))
    phase = rng.uniform(0, 2 * np.pi, size=(n, 3))
    y = (amp[:, :, None] * np.sin(freq[:, :, None] * t[None, None] + phase[:, :, None])).sum(1)  # (N, T)
    y = y + rng.normal(0, NOISE, size=y.shape)
    y = y.astype(np.float32)
    return y[:, :context], y[:, context:]


AR_ORDER = 6  # per-series autoregression order of the AR baseline


def linear_forecast(x_train: np.ndarray, y_train: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Least-squares linear map (with bias) from the context to the horizon, fitted on training series."""
    a = np.hstack([x_train, np.ones((len(x_train), 1))]).astype(np.float64)
    w, *_ = np.linalg.lstsq(a, y_train.astype(np.float64), rcond=None)
    return np.hstack([x, np.ones((len(x), 1))]) @ w


def ar_forecast(x: np.ndarray, order: int, horizon: int) -> np.ndarray:
    """Per series: AR(``order``) fitted by least squares on its own context, rolled forward.

    No intercept: a sum of k sinusoids obeys an exact linear recurrence of order 2k without one, so AR(6)
    covers the data's 1-3 components (with an intercept the 26-row fit overfits the noise: MSE about 1.7x).
    """
    out = np.zeros((len(x), horizon))
    for i, s in enumerate(np.asarray(x, np.float64)):
        rows = np.stack([s[t - order : t] for t in range(order, len(s))])  # (T-p, p)
        coef, *_ = np.linalg.lstsq(rows, s[order:], rcond=None)
        hist = list(s[-order:])
        for _ in range(horizon):
            hist.append(float(np.dot(coef, hist[-order:])))
        out[i] = hist[order:]
    return out


class Forecasting(Task):
    name = "forecasting"
    summary = f"sums of sinusoids: from {CONTEXT} values predict the next {HORIZON} at once (causal decoder)"
    target = "MSE <= 0.2 x the naive last-value baseline on held-out series"

    def configs(self, preset):
        model = dict(
            arch="decoder",
            input_kind="series",
            head="forecast",
            horizon=HORIZON,
            pool="last",
            max_len=CONTEXT + 16,
            positions="learned",
        )
        train = dict(task=self.name)
        if preset == "demo":
            # 6000 steps over 100k generated series: beats the per-series AR(6) fit (1200 steps over 20k did not)
            train.update(steps=6000, batch_size=64, lr=2e-3, warmup=100, n_train=100000, n_test=2000)
        return preset_configs(preset, model, train)

    def make_split(self, split, mcfg, tcfg):
        n = tcfg.n_train if split == "train" else tcfg.n_test
        x, y = generate(n, split_seed(self.name, split), horizon=mcfg.horizon)
        return {"series": x, "targets": y}

    def evaluate(self, runner, data, mcfg):
        pred = predict(runner, data, mcfg)
        y = data["targets"]
        x = data["series"].astype(np.float64)
        mse = float(((pred - y) ** 2).mean())
        base = float(((x[:, -1:] - y) ** 2).mean())
        # stronger baselines: a linear map fitted on training series, and an AR fit on each series alone
        xt, yt = generate(20000, split_seed(self.name, "train"), horizon=mcfg.horizon)
        linear = float(((linear_forecast(xt, yt, x) - y) ** 2).mean())
        ar = float(((ar_forecast(x, AR_ORDER, mcfg.horizon) - y) ** 2).mean())
        return {
            "mse": mse,
            "baseline_mse": base,
            "ratio_to_baseline": mse / base,
            "baseline_linear_mse": linear,
            f"baseline_ar{AR_ORDER}_mse": ar,
            "beats": {"last_value": mse < base, "linear": mse < linear, f"ar{AR_ORDER}": mse < ar},
            "n": int(len(y)),
        }

    def metadata(self, mcfg):
        x, _ = generate(1, split_seed(self.name, "sample"))
        return {
            "labels": [f"t+{i + 1}" for i in range(mcfg.horizon)],
            # the runtime reads a series from text: numbers separated by spaces
            "sample": {"text": " ".join(f"{float(v):.3f}" for v in x[0])},
        }
