"""Session restore: the last model, its input, the view and the selection come back when the app reopens.

Saved as one JSON value in the app's settings when the window closes; ``attnviz`` without a model argument
reopens it (when the model file still exists) instead of the bundled demo. Screenshot runs never restore, so
they stay reproducible.  What comes back is checked field by field (a session saved by another attnviz version,
or a settings file edited by hand, must not put values into the window that its views cannot draw), and it is
taken out of the settings while it opens: a remembered file that no longer opens (replaced by something else)
gives its one message once, and the next start opens the demo.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from attnviz import AttnvizError
from attnviz.core.align import CONVENTIONS
from attnviz.core.untrusted import parse_json
from attnviz.core.view import IMAGE_BASES, IMAGE_FROM, LINK_CUTS, MODES, SCALES, VMAX_MIN, Selection
from attnviz.runtime.request import MAX_BEAMS

KEY = "session/last"
# the inputs saved, the kind of value each takes back, and which of those the input panel can hold
INPUTS: dict[str, tuple[type, ...]] = {
    "text": (str,),
    "text_pair": (str,),
    "image": (str,),
    "generate": (int,),
    "max_tokens": (int,),
    "beams": (int,),
}
INPUT_VALUES: dict[str, Callable[[Any], bool]] = {
    "generate": lambda v: v >= 0,
    "max_tokens": lambda v: v >= 0,
    "beams": lambda v: 1 <= v <= MAX_BEAMS,
}
# each selection field takes its default's kind, except these; and the values the views can draw, per field
SELECTION_KINDS: dict[str, tuple[type, ...]] = {
    **{f.name: (type(getattr(Selection(), f.name)),) for f in fields(Selection)},
    "query": (int, type(None)),
    "keep": (int, float),
    "heads": (list, tuple),  # a tuple is saved as a JSON list
    "vmax": (int, float, type(None)),
}
SELECTION_VALUES: dict[str, Callable[[Any], bool]] = {
    "mode": lambda v: v in MODES,
    "rows": lambda v: v in CONVENTIONS,
    "image_base": lambda v: v in IMAGE_BASES,
    "image_from": lambda v: v in IMAGE_FROM,
    "link_cut": lambda v: v in LINK_CUTS,
    "scale": lambda v: v in SCALES,
    "image_scale": lambda v: v in SCALES,
    "keep": lambda v: 0 < v <= 1,
    "step": lambda v: v >= -1,
    "batch": lambda v: v >= 0,
    "picture": lambda v: v >= 0,
    "query": lambda v: v is None or v >= 0,
    "vmax": lambda v: v is None or (math.isfinite(v) and v >= VMAX_MIN),  # as check_vmax takes it
    "heads": lambda v: all(isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in v),
}


def save(win) -> None:
    m = win.session.model
    path = m.path if m is not None else None
    if path is None or not Path(path).exists():
        return
    state = {
        "model": str(Path(path).resolve()),
        "inputs": {k: v for k, v in win.inputs.values().items() if k in INPUTS and v not in (None, "", 0)},
        "view": win.tabs.tabText(win.tabs.currentIndex()),
        "selection": asdict(win.session.sel),
    }
    win.settings.setValue(KEY, json.dumps(state))
    win.settings.sync()


def load(settings) -> dict | None:
    """The saved session when its model (a file, or an export folder) still exists, else None."""
    raw = settings.value(KEY)
    try:
        state = parse_json(raw, "saved session") if isinstance(raw, (str, bytes)) and raw else None
    except AttnvizError:
        return None
    if not isinstance(state, dict) or not isinstance(state.get("model"), str):
        return None
    model = Path(state["model"])
    if not (model.is_file() or model.is_dir()):  # a folder too: a speech model (Whisper's export) is one
        return None
    return state


def _fits(value, kinds: tuple[type, ...]) -> bool:
    return isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)  # True is an int


def valid(saved, kinds: dict[str, tuple[type, ...]], values: dict[str, Callable[[Any], bool]]) -> dict:
    """The entries of a saved dict of the kind and values the window can take; the others are left out."""
    if not isinstance(saved, dict):
        return {}
    return {k: v for k, v in saved.items() if k in kinds and _fits(v, kinds[k]) and values.get(k, _anything)(v)}


def _anything(_value) -> bool:
    return True


def restore(win, state: dict) -> None:
    """Open the saved model with its input; once the first result is drawn, re-apply view and selection."""
    win.settings.remove(KEY)  # saved again when the window closes on an open model
    win.settings.sync()
    view = state.get("view")
    if isinstance(view, str) and view in win.views:
        win.pin_view(view)  # (a title): the tab left, not the one the model's kind opens on
    sel = valid(state.get("selection"), SELECTION_KINDS, SELECTION_VALUES)
    if "heads" in sel:
        sel["heads"] = tuple(sel["heads"])  # the selection is hashable (it keys caches)

    def apply():
        win.result_shown.disconnect(apply)
        if sel:
            win.session.select(**sel)

    win.result_shown.connect(apply)
    inputs = valid(state.get("inputs"), INPUTS, INPUT_VALUES)
    if inputs.get("max_tokens"):
        win.inputs.set_values(max_tokens=inputs["max_tokens"])
    win.open_model(Path(state["model"]), **{k: v for k, v in inputs.items() if k != "max_tokens"})
