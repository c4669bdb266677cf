"""Resource caps for untrusted inputs, each raised by one environment variable named in its message.

A 5 kB model can declare a 10⁹-token input, a 3 kB PNG can decode to 200 Mpx, a recipe can ask for a
27 in × 2400 dpi PNG: every such size is estimated *before* the work and refused above its limit with one
line saying how to raise it (``ATTNVIZ_MAX_<NAME>=N``), so the CLI, the GUI and the tests share one rule.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from attnviz import AttnvizError


@dataclass(frozen=True)
class Limit:
    default: int
    unit: str
    hint: str  # what the user can change instead of raising the limit

    def env(self, name: str) -> str:
        return f"ATTNVIZ_MAX_{name.upper()}"


# name -> limit (registry: one place to read and document them)
LIMITS = {
    "tokens": Limit(16_384, "tokens", "shorten the text"),
    "pixels": Limit(40_000_000, "pixels", "shrink the image"),
    "figure_pixels": Limit(100_000_000, "pixels", "lower --dpi or --width-in"),
    "generate": Limit(1_024, "steps", "ask for fewer --generate steps"),
    "output_mb": Limit(8_192, "MB", "use a shorter input or fewer layers"),
    # sizes an exported model's attnviz metadata asks 'attnviz eval' to build (training/budget.py)
    "examples": Limit(1_000_000, "examples", "re-export the model with smaller n_train/n_test"),
    "eval_mb": Limit(4_096, "MB", "re-export the model with smaller sizes in its config"),
}


def limit(name: str) -> int:
    lim = LIMITS[name]
    raw = os.environ.get(lim.env(name))
    if not raw:
        return lim.default
    try:
        value = int(float(raw))
    except ValueError:
        raise AttnvizError(f"{lim.env(name)}={raw!r}: give a whole number") from None
    if value <= 0:
        raise AttnvizError(f"{lim.env(name)}={raw!r}: give a positive number")
    return value


def check(name: str, value: float, what: str) -> None:
    """Raise one clear line when ``value`` is over the ``name`` limit."""
    cap = limit(name)
    if value > cap:
        lim = LIMITS[name]
        shown = f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"
        raise AttnvizError(
            f"{what}: {shown} {lim.unit} is over the limit of {cap:,} {lim.unit}; "
            f"{lim.hint}, or raise the limit with {lim.env(name)}={math.ceil(value)}"
        )
