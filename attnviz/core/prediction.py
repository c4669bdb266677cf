"""What the model said, in one line: the window's Model sidebar ("prediction" row) and ``attnviz extract``'s
summary print the same words (gen30: extract printed none for a classifier the window named a class for)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnviz.core.attention import AttentionResult

FORECAST_SHOWN = 8  # a forecaster's first values shown ("forecast 0.1 0.2 … ")


def prediction(result: AttentionResult, meta: dict) -> str | None:
    """What the model said, from its ordinary outputs and metadata.

    Classifiers (``attnviz.task`` ending in "classification" with ``attnviz.labels``): the top class and its
    softmax probability, ``"B (p = 0.63)"`` (batch row 0); forecasters: the first predicted values.  None for
    anything else.
    """
    import numpy as np

    task = str(meta.get("task") or "")
    outputs = [np.asarray(v) for v in (result.outputs or {}).values()]
    outputs = [a for a in outputs if a.size and np.issubdtype(a.dtype, np.floating)]
    if not outputs:
        return None
    if task.endswith("classification"):
        labels = meta.get("labels")
        if not isinstance(labels, list) or not labels:
            return None
        for a in outputs:
            if a.ndim == 2 and a.shape[-1] == len(labels):
                z = a[0].astype(np.float64)
                p = np.exp(z - z.max())
                p /= p.sum()
                i = int(np.argmax(p))
                return f"{labels[i]} (p = {p[i]:.2f})"
        return None
    if task == "forecasting":
        v = np.ravel(outputs[0][0])
        shown = " ".join(f"{x:.3g}" for x in v[:FORECAST_SHOWN])
        return f"forecast {shown}" + (" …" if v.size > FORECAST_SHOWN else "")
    return None
