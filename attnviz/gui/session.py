"""The document the views share: the open model, the current result and the selection.

Views take a :class:`Session`, connect to its signals and redraw themselves from it; nothing
in a view re-runs the model, so switching views or heads only re-slices arrays in memory.

Signals
-------
model_changed()       a model was opened (``model`` may be None for a loaded .npz)
result_changed()      a new :class:`~attnviz.core.AttentionResult` arrived (always followed by selection_changed)
selection_changed()   block / layer / head / aggregation / filters / step changed
comparison_changed()  a comparison with a second model was set or dropped (``comparison``)
ablation_changed()    heads were switched off or on, or their output change arrived (``ablation``, ``ablation_outcome``)
run_note_changed()    what became of the latest run while no result is shown (``run_note``: running, failed, ...)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from attnviz.app.ablation import AblationState
from attnviz.app.rules import on_mode
from attnviz.core.attention import AttentionResult, Block
from attnviz.core.view import ViewError, default_selection, follow_block, map_inputs
from attnviz.gui.selection import MapView, Selection, clamp, head_map

if TYPE_CHECKING:
    from attnviz.app.ablation import AblationOutcome
    from attnviz.app.compare import HeldComparison
    from attnviz.runtime.protocol import AttnModel


class Session(QObject):
    model_changed = Signal()
    result_changed = Signal()
    selection_changed = Signal()
    comparison_changed = Signal()
    ablation_changed = Signal()
    run_note_changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.model: AttnModel | None = None
        # the `attnviz extract` maps file shown (None: a model's run): its sidebar section and a figure's recipe
        self.maps_path: Path | None = None
        self.result: AttentionResult | None = None
        self.blocks: list[Block] = []
        self.sel = Selection()
        self._map_cache: tuple[tuple[int, Selection], MapView] | None = None
        self._fresh = True  # the next result is a newly opened model's: it opens on the view model's default
        # the model the views last opened on its declared alignment head (gui/views/declared.py): once per model
        self.declared_opened_for: object | None = None
        # File ▸ Compare with…: model B's result on this result's input and the per-head rows (None: no comparison)
        self.comparison: HeldComparison | None = None
        # right-click ▸ Switch head off: the heads off, and what that did to the output (None: not measured yet)
        self.ablation = AblationState()
        self.ablation_outcome: AblationOutcome | None = None
        # what the views say in place of a result while none is shown: the latest run is running, failed, ...
        # ("" = nothing ran yet; a failed run's views once said "Open a model" under an open model)
        self.run_note = ""

    @property
    def fresh(self) -> bool:
        """The next result is a newly opened model's first (it opens on the view model's defaults)."""
        return self._fresh

    # -- state changes -------------------------------------------------------
    def set_model(self, model: AttnModel | None, maps_path: Path | None = None) -> None:
        """``maps_path``: no model, the maps of this file (``attnviz extract``'s .npz) shown instead."""
        self.model = model
        self.maps_path = maps_path if model is None else None
        self._fresh = True
        if self.ablation.off or self.ablation_outcome is not None:  # heads of another model: all back on
            self.set_ablation(AblationState())
        self.model_changed.emit()

    def set_run_note(self, text: str) -> None:
        self.run_note = text
        self.run_note_changed.emit()

    def set_ablation(self, state: AblationState, outcome: AblationOutcome | None = None) -> None:
        """The heads switched off, and their measured output change once it arrives (an outcome for another
        set of heads is not held)."""
        if outcome is not None and outcome.off != state.off:
            outcome = None
        self.ablation, self.ablation_outcome = state, outcome
        self.ablation_changed.emit()

    def set_comparison(self, comparison: HeldComparison | None) -> None:
        """Hold a comparison measured against the current result (a stale one is refused), or drop it."""
        if comparison is not None and comparison.result_a is not self.result:
            comparison = None
        if comparison is not self.comparison:
            self.comparison = comparison
            self.comparison_changed.emit()

    def set_result(self, result: AttentionResult | None) -> None:
        # the blocks first: a result whose blocks cannot be built leaves the session as it was, not half-set
        batch = min(self.sel.batch, result.batch_size - 1) if result is not None else 0
        blocks = result.blocks(batch) if result is not None else []
        # a comparison measured on another input is dropped (the window recomputes it for this one); its signal
        # goes out last, once result, blocks and selection agree: a view redrawing on it read the new result
        # through the old blocks (IndexError, found by the random-action run)
        dropped = self.comparison is not None and self.comparison.result_a is not result
        self.result = result
        if dropped:
            self.comparison = None
        self.blocks = blocks
        self._map_cache = None
        sel = self.sel.with_(step=-1, batch=batch)
        if result is not None and self._fresh and self.blocks:
            # a newly opened model opens where `attnviz figure` without selection flags draws (one default, in
            # the view model, the image base included); the user's filters (log, hidden tokens, kept mass) stay
            d = default_selection(result, self.blocks)
            sel = sel.with_(
                block=d.block,
                layer=d.layer,
                head=d.head,
                mode=d.mode,
                layer_lo=d.layer_lo,
                layer_hi=d.layer_hi,
                rows=d.rows,
                heads=d.heads,
                query=None,
                image_base=d.image_base,  # a captioner's words over the image in colour (view.default_image_base)
            )
            self._fresh = False
        # a new input for the same model keeps the user's focus when the result has the same shape; all steps
        self.sel = clamp(sel, self.blocks)
        self.result_changed.emit()
        self.selection_changed.emit()  # always after result_changed: the views draw the new result on this one
        if dropped:
            self.comparison_changed.emit()

    def select(self, **changes) -> None:
        batch = changes.get("batch")
        if batch is not None and self.result is not None and batch != self.sel.batch:
            # a padded batch: each row has its own token axes (padding marked special), so its own blocks
            batch = min(max(int(batch), 0), max(self.result.batch_size, 1) - 1)
            changes["batch"] = batch
            self.blocks = self.result.blocks(batch)
            self._map_cache = None
        base = self.sel
        if "mode" in changes and self.blocks:  # rollout chosen over one layer starts at layer 0 (app.rules.on_mode)
            blk = self.blocks[min(max(int(changes.get("block", base.block)), 0), len(self.blocks) - 1)]
            rest = {k: v for k, v in changes.items() if k != "mode"}
            base = on_mode(base, changes["mode"], blk.n_layers, **rest)
        new = clamp(base.with_(**changes), self.blocks)
        if "block" in changes and "image_from" not in changes and self.result is not None:
            # a block picked (the sidebar, a tab, --block) is Image regions' attention too, in this one selection:
            # the tower's block draws the tower, the decoder's the words (the chooser selects the block alike)
            new = follow_block(self.result, self.blocks, new)
        if new != self.sel:
            self.sel = new
            self.selection_changed.emit()

    # -- derived -------------------------------------------------------------
    @property
    def block(self) -> Block | None:
        return self.blocks[self.sel.block] if self.blocks else None

    def current_map(self, sel: Selection | None = None) -> MapView:
        """The selected map (cached for the last selection; raises ValueError when undefined)."""
        if self.result is None:
            raise ViewError("nothing is open yet; open a model or a saved .npz result", param="model")
        sel = self.sel if sel is None else sel
        key = (id(self.result), map_inputs(sel))
        if self._map_cache is not None and self._map_cache[0] == key:
            return self._map_cache[1]
        mv = head_map(self.result, sel, self.blocks)  # a tower's frames: one frame's map (the Head map's)
        self._map_cache = (key, mv)
        return mv

    def block_index(self, stack: str, kind: str) -> int | None:
        """The first block of ``stack`` (the sites' name, or the name the views show: "vision") and ``kind``."""
        for i, b in enumerate(self.blocks):
            if stack in (b.stack, b.shown_stack) and b.kind == kind:
                return i
        return None
