"""Session restore: the last model, its input, the view and the selection come back when the app reopens.

Saved as one JSON value in the app's settings when the window closes; ``attnviz`` without a model argument
reopens it (when the model file still exists) instead of the bundled demo. Screenshot runs never restore, so
they stay reproducible.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path

KEY = "session/last"
INPUT_KEYS = ("text", "text_pair", "image", "generate", "max_tokens")


def save(win) -> None:
    m = win.session.model
    path = getattr(m, "path", None) if m is not None else None
    if path is None or not Path(path).exists():
        return
    state = {
        "model": str(Path(path).resolve()),
        "inputs": {k: v for k, v in win.inputs.values().items() if k in INPUT_KEYS and v not in (None, "", 0)},
        "view": win.tabs.tabText(win.tabs.currentIndex()),
        "selection": asdict(win.session.sel),
    }
    win.settings.setValue(KEY, json.dumps(state))
    win.settings.sync()


def load(settings) -> dict | None:
    """The saved session when its model file still exists, else None."""
    raw = settings.value(KEY)
    try:
        state = json.loads(raw) if raw else None
    except (TypeError, ValueError):
        return None
    if not isinstance(state, dict) or not state.get("model") or not Path(state["model"]).is_file():
        return None
    return state


def restore(win, state: dict) -> None:
    """Open the saved model with its input; once the first result is drawn, re-apply view and selection."""
    if state.get("view") in win.views:
        win.tabs.setCurrentWidget(win.views[state["view"]])
    names = {f.name for f in fields(win.session.sel)}
    sel = {k: v for k, v in (state.get("selection") or {}).items() if k in names}

    def apply():
        win.result_shown.disconnect(apply)
        if sel:
            win.session.select(**sel)

    win.result_shown.connect(apply)
    inputs = dict(state.get("inputs") or {})
    if inputs.get("max_tokens"):
        win.inputs.set_values(max_tokens=inputs["max_tokens"])
    win.open_model(Path(state["model"]), **{k: v for k, v in inputs.items() if k != "max_tokens"})
