"""Right-click a head ▸ Switch head off / on: the window's head ablation, wired to the Qt-free
:mod:`attnviz.app.ablation`.  The gated run happens in a worker (the session in the isolation child); the
"Heads switched off" panel shows what the output did, the Overview crosses the heads that are off."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QGroupBox, QLabel, QMenu, QPushButton, QVBoxLayout

from attnviz import AttnvizError
from attnviz.app.ablation import (
    AblationOutcome,
    AblationState,
    Ablator,
    HeadRef,
    ablate,
    check_ablatable,
    head_at,
    layer_heads,
)
from attnviz.gui.workers import error_text

if TYPE_CHECKING:
    from attnviz.runtime.request import AnalyzeRequest

OFF_TEXT, ON_TEXT, ALL_ON_TEXT = "Switch head off", "Switch head on", "Switch all heads back on"
# a layer's every head at once (`attnviz ablate --heads "encoder self 3:*"`): twelve right-clicks before
LAYER_OFF_TEXT, LAYER_ON_TEXT = "Switch layer off (all its heads)", "Switch layer back on"


class AblationPanel(QGroupBox):
    """The output panel: which heads are off and what changed (Δlogit, KL, the prediction, the generation)."""

    def __init__(self, parent=None):
        super().__init__("Heads switched off", parent)
        self.text = QLabel("")
        self.text.setObjectName("ablation_text")
        self.text.setWordWrap(True)
        self.all_on = QPushButton(ALL_ON_TEXT)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 6, 6, 6)
        lay.addWidget(self.text)
        lay.addWidget(self.all_on)
        self.hide()

    def show_state(self, state: AblationState, outcome: AblationOutcome | None, running: bool) -> None:
        if not state.off and outcome is None and not running:
            self.hide()
            return
        if outcome is not None:
            lines = outcome.lines()
        else:
            lines = [f"Off: {state.summary()}", "running the input with them off…" if running else ""]
        self.text.setText("\n".join(x for x in lines if x))
        self.all_on.setEnabled(bool(state.off))
        self.show()


class AblationController:
    """The context menu of a head, the toggle jobs, and the panel."""

    def __init__(self, window: Any):  # the MainWindow (not imported: main_window imports this module)
        self.w = window
        self.panel = AblationPanel()
        self.panel.all_on.clicked.connect(self.all_on)
        self.menu: QMenu | None = None  # the last context menu (kept: popup() does not block, a test triggers it)
        self.ablator: Ablator | None = None
        self.running = False
        window.session.ablation_changed.connect(self._show)
        window.session.model_changed.connect(self._forget)

    # -- the menu ---------------------------------------------------------------------------
    def menu_for(self, block: int, layer: int, head: int, at: QPoint) -> QMenu | None:
        """The context menu of the head at ``(block, layer, head)`` (an Overview cell, a Head stats row)."""
        s = self.w.session
        if not s.blocks or block >= len(s.blocks):
            return None
        ref = head_at(s.blocks, block, layer, head)
        menu = QMenu(self.w)
        off = s.ablation.is_off(ref)
        menu.addSection(ref.label)
        toggle = menu.addAction(ON_TEXT if off else OFF_TEXT)
        toggle.setToolTip("run the input again with this head's attention weights × 0 (the file is not changed)")
        toggle.triggered.connect(lambda _=False, ref=ref: self.toggle(ref))
        layer_refs = layer_heads(s.blocks, block, layer)
        whole = menu.addAction(LAYER_ON_TEXT if layer_refs <= s.ablation.off else LAYER_OFF_TEXT)
        whole.setToolTip("every head of this layer together: their attention weights × 0 (the file is not changed)")
        whole.triggered.connect(lambda _=False, refs=layer_refs: self.toggle_layer(refs))
        back = menu.addAction(ALL_ON_TEXT)
        back.setEnabled(bool(s.ablation.off))
        back.triggered.connect(lambda _=False: self.all_on())
        if self.menu is not None:
            self.menu.deleteLater()
        self.menu = menu
        menu.popup(at)
        return menu

    # -- toggles -----------------------------------------------------------------------------
    def toggle(self, ref: HeadRef) -> None:
        """Switch ``ref`` off (or back on) and run the current input with the heads now off."""
        self._switch(lambda state: state.toggled(ref))

    def toggle_layer(self, refs: frozenset[HeadRef]) -> None:
        """Switch every head in ``refs`` (one layer's) off together, or back on when all of them are off."""
        self._switch(lambda state: state.layer_toggled(refs))

    def _switch(self, change) -> None:
        s = self.w.session
        try:
            check_ablatable(s.model, self.w.last_request)
        except AttnvizError as e:
            self.w.show_error(str(e))
            return
        previous = (s.ablation, s.ablation_outcome)
        s.set_ablation(change(s.ablation))
        self._start(self.w.last_request, previous)

    def all_on(self) -> None:
        s = self.w.session
        if not s.ablation.off:
            return
        previous = (s.ablation, s.ablation_outcome)
        s.set_ablation(AblationState())
        self._start(self.w.last_request, previous)

    def on_result(self, request: AnalyzeRequest | None) -> None:
        """A new input ran: heads that are off stay off, measured on it (or are all switched back on when it
        cannot be)."""
        s = self.w.session
        if not s.ablation.off:
            if s.ablation_outcome is not None:
                s.set_ablation(AblationState())  # the all-on line was about the old input
            return
        try:
            check_ablatable(s.model, request)
        except AttnvizError as e:
            s.set_ablation(AblationState())
            self.w.statusBar().showMessage(f"All heads back on: {e}")
            return
        s.set_ablation(s.ablation)  # the old outcome was about the old input
        self._start(request, (AblationState(), None))

    def _start(self, request: AnalyzeRequest | None, previous: tuple[AblationState, AblationOutcome | None]) -> None:
        """Run ``request`` with the session's heads off; ``previous``: the state to go back to if it fails."""
        w, s = self.w, self.w.session
        job = w.workers.start(ablate, s.model, request, s.ablation.off, self.ablator, kind="ablate")
        w._latest["ablate"] = job.request_id
        w._context[job.request_id] = previous
        self.running = True
        self._show()
        w.statusBar().showMessage(f"Heads off: {s.ablation.summary()}; running the input…")

    def returned(self, rid: int, outcome: AblationOutcome) -> None:
        w, s = self.w, self.w.session
        if rid != w._latest["ablate"]:
            return
        self.running = False
        self.ablator = outcome.ablator
        s.set_ablation(s.ablation, outcome)
        w.statusBar().showMessage(" · ".join(outcome.lines()))

    def errored(self, rid: int, exc: BaseException) -> None:
        w, s = self.w, self.w.session
        if rid != w._latest["ablate"]:
            return
        self.running = False
        state, outcome = w._context.get(rid, (AblationState(), None))
        s.set_ablation(state, outcome)  # the toggle did not happen: the heads as they were
        w.show_error(error_text(exc), param=getattr(exc, "param", None))

    def _forget(self) -> None:
        self.ablator = None
        self.running = False
        self.w._latest["ablate"] = -1

    def _show(self) -> None:
        s = self.w.session
        self.panel.show_state(s.ablation, s.ablation_outcome, self.running)
