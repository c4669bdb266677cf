"""Resource caps for untrusted inputs, each raised by one environment variable named in its message.

A 5 kB model can declare a 10⁹-token input, a 3 kB PNG can decode to 200 Mpx, a recipe can ask for a
27 in × 2400 dpi PNG: every such size is estimated *before* the work and refused above its limit with one
line saying how to raise it (``ATTNVIZ_MAX_<NAME>=N``), so the CLI, the GUI and the tests share one rule.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass

from attnviz import AttnvizError
from attnviz.core.numbers import spelled
from attnviz.core.setting_words import Wording, fix
from attnviz.core.setting_words import current as current_wording


@dataclass(frozen=True)
class Limit:
    default: int
    unit: str
    hint: str  # what the user can change instead of raising the limit
    fix: str | None = None  # ... where that names a setting: its key in core/setting_words.FIXES (hint: the CLI's)

    def env(self, name: str) -> str:
        return f"ATTNVIZ_MAX_{name.upper()}"


# name -> limit (registry: one place to read and document them)
LIMITS = {
    "tokens": Limit(16_384, "tokens", "shorten the text"),
    "pixels": Limit(40_000_000, "pixels", "shrink the image"),
    "figure_pixels": Limit(100_000_000, "pixels", "lower --dpi or --width-in", fix="smaller_figure"),
    "generate": Limit(1_024, "steps", "ask for fewer --generate steps", fix="fewer_steps"),
    "output_mb": Limit(8_192, "MB", "use a shorter input or fewer layers"),
    # real exports stay far below (GPT-2 ~3,000 nodes, 32-layer decoders ~30,000): graph work is per node in Python
    "nodes": Limit(100_000, "nodes", "simplify or split the graph"),
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
            f"{fix(lim.fix) if lim.fix else lim.hint}, or raise the limit with {lim.env(name)}={math.ceil(value)}"
        )


# -- memory: one cap for every run (onnxruntime sessions, torch models), in GB like the --max-memory flag -------
MEMORY_ENV = "ATTNVIZ_MAX_MEMORY"
MEMORY_SHARE = 0.5  # of physical RAM by default: a run over half the machine swaps or dies beside a desktop
GB = 1e9


def physical_memory() -> int | None:
    """Bytes of RAM in this machine (None where the OS will not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # Windows has no sysconf
        try:
            import psutil  # optional: present with most installs, not required

            return int(psutil.virtual_memory().total)
        except Exception:
            return None


def set_memory_cap(gb: float | None) -> None:
    """``--max-memory GB``: every later run in this process and its children (they inherit the environment)."""
    if gb is None:
        return
    if not (math.isfinite(gb) and gb > 0):
        raise AttnvizError(f"--max-memory {spelled(gb)}: give a size in GB above 0 (e.g. --max-memory 16)")
    os.environ[MEMORY_ENV] = repr(float(gb))


def memory_cap() -> tuple[int, str]:
    """(bytes, where the number came from) for the memory a single run may need."""
    return _cap(os.environ.get(MEMORY_ENV), current_wording())


@functools.lru_cache(maxsize=8)
def _cap(raw: str | None, wording: Wording) -> tuple[int, str]:
    """:func:`memory_cap` of the environment's ``raw`` setting, its sentence in ``wording`` (the front end asking:
    the window's words are not the command line's): kept, as the machine's memory does not change (every run's
    memory check asks, ~5 µs a time, most of it the sentence; a bad setting raises each time: not kept)."""
    if raw:
        try:
            gb = float(raw)
        except ValueError:
            gb = math.nan
        if not (math.isfinite(gb) and gb > 0):
            raise AttnvizError(f"{MEMORY_ENV}={raw!r}: give a size in GB above 0 (e.g. 16)")
        return int(gb * GB), fix("cap_given", wording, gb=f"{gb:g}")
    ram = physical_memory()
    if ram is None:
        return int(8 * GB), "the default of 8 GB"
    return int(ram * MEMORY_SHARE), f"half of this machine's {ram / GB:.1f} GB"


def size_text(n: float) -> str:
    if n >= 1e18:  # an absurd model's need: its digits would fill the line
        return f"{n:.1e} bytes"
    if n >= 1e15:
        return f"{n / 1e15:,.1f} PB"
    if n >= 1e12:
        return f"{n / 1e12:,.1f} TB"
    return f"{n / GB:.1f} GB" if n >= 0.1 * GB else f"{n / 1e6:.1f} MB"


class MemoryRefused(AttnvizError):
    """A run's estimate is over the memory cap; ``need`` and ``cap`` in bytes."""

    def __init__(self, message: str, need: int, cap: int):
        super().__init__(message)
        self.need, self.cap = need, cap


BEYOND_BYTES = 1e15  # a petabyte: more than any one machine's memory (the largest hold tens of TB)
BEYOND_RAM = 1000  # and, on a machine of more than a TB, a thousand times its own


def beyond_any_machine(need: float) -> bool:
    """Whether ``need`` bytes is past any machine (over a petabyte, and over a thousand times this one's RAM): then
    no cap is worth raising, and a refusal names what lowers the need instead of a ``--max-memory`` of 27 digits.
    Not the RAM alone: a 64 TB need on a 16 GB laptop still names the cap a larger machine could be given."""
    ram = physical_memory() or 0
    return need > max(BEYOND_BYTES, BEYOND_RAM * ram)


def check_memory(
    need: float, what: str, detail: str = "", hint: str = "use a smaller input", lower: str | None = None
) -> None:
    """The one memory refusal: ``what`` needs about ``need`` bytes (an estimate made before allocating);
    over the cap it is one line naming the estimate, the cap and the flag that raises it; past any machine
    (:func:`beyond_any_machine`), the estimate and what lowers it (``lower``, else ``hint``), no cap to raise."""
    cap, source = memory_cap()
    if need > cap and beyond_any_machine(need):
        raise MemoryRefused(
            f"{what} needs about {size_text(need)}{detail}, more memory than any machine has; {lower or hint}",
            int(min(need, 2**63 - 1)),
            cap,
        )
    if need > cap:
        more = math.ceil(need / GB * 1.1)
        raise MemoryRefused(
            f"{what} needs about {size_text(need)}{detail}, over the memory cap of {size_text(cap)} ({source}); "
            f"{hint}, or {fix('raise_cap_or_env', gb=more, env=MEMORY_ENV)} if this machine has it",
            int(min(need, 2**63 - 1)),
            cap,
        )


def env_count(name: str, what: str) -> int | None:
    """A whole number, 1 or more, set in the environment variable ``name`` (``what`` it counts, for the message);
    None where unset or blank.  Benches' knobs (ATTNVIZ_THREADS, ATTNVIZ_CORPUS_CHUNK, ...) read through it, so a
    bad value is one line naming the variable."""
    v = os.environ.get(name, "").strip()
    if not v:
        return None
    if not (v.isascii() and v.isdigit()) or int(v) < 1:
        raise AttnvizError(f"{name}={v!r}: give {what} as a whole number, 1 or more, or unset it")
    return int(v)
