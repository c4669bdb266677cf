"""Right-click a head ▸ Switch layer off (all its heads): one layer's every head switched off together, in the
real window, as ``attnviz ablate --heads "encoder self L:*"`` does on the command line (cmpaudit26: a researcher's
"switch layer 3 off" took twelve right-clicks on all-MiniLM-L6-v2).

References: the engine of ``attnviz ablate`` (``runtime.ablation.Ablation``) run here outside the window on the
same input with that layer's heads listed one by one; the model's own output when the layer is switched back on."""

from __future__ import annotations

from pathlib import Path

from gui_helpers import open_and_wait
from PySide6.QtCore import Qt

from attnviz.gui.ablation import LAYER_OFF_TEXT, LAYER_ON_TEXT, OFF_TEXT

MODELS = Path(__file__).resolve().parents[2] / "models"
DEMO = MODELS / "sequence-classification.onnx"
TEXT = "3 1 4 1 5 9 2 6"


def _menu(qtbot, w, cell):
    qtbot.mouseClick(w.overview.glw.viewport(), Qt.MouseButton.RightButton, pos=w.overview.widget_pos_of(*cell))
    qtbot.waitUntil(lambda: w.ablation.menu is not None and w.ablation.menu.isVisible(), timeout=5000)
    return {a.text(): a for a in w.ablation.menu.actions()}


def test_switch_layer_off_switches_every_head_of_it_together(qtbot, real_window):
    from attnviz.runtime import open_model
    from attnviz.runtime.ablation import Ablation

    w = real_window
    with qtbot.captureExceptions() as exceptions:
        open_and_wait(qtbot, w, DEMO, text=TEXT)
        blk = w.session.blocks[0]
        layer = blk.n_layers - 1
        n = blk.heads_in(layer)
        site = blk.sites[layer]
        _menu(qtbot, w, (0, layer, 0))[LAYER_OFF_TEXT].trigger()
        qtbot.waitUntil(
            lambda: w.session.ablation_outcome is not None and len(w.session.ablation_outcome.off) == n, timeout=60000
        )
        out = w.session.ablation_outcome
        assert set(w.overview.crosses) == {(0, layer, h) for h in range(n)}
        ref = Ablation(open_model(DEMO, provider="cpu"), [site], "zero", w.last_request).change({site: list(range(n))})
        assert abs(out.change.max_dlogit - ref.max_dlogit) <= 1e-6 and out.change.max_dlogit > 0
        assert abs(out.change.kl_bits - ref.kl_bits) <= 1e-6
        # the menu now offers the layer back; one head of it back on first leaves the layer's other heads off
        acts = _menu(qtbot, w, (0, layer, 1))
        assert LAYER_ON_TEXT in acts and OFF_TEXT not in acts
        acts[LAYER_ON_TEXT].trigger()
        qtbot.waitUntil(
            lambda: w.session.ablation_outcome is not None and not w.session.ablation_outcome.off, timeout=60000
        )
        assert w.session.ablation_outcome.change.max_dlogit == 0.0  # every gate open: the model's own output
        assert not w.overview.crosses
    assert not exceptions
