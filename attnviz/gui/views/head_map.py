"""Head map: the selected head (or aggregate) as a heatmap with tokens on both axes; while a second model is
compared (File ▸ Compare with…), model A's map, model B's, or A − B on a diverging scale."""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from attnviz.app.compare import SHOWN
from attnviz.core import view as vm
from attnviz.core.view_names import tab_title
from attnviz.gui.views.base import View
from attnviz.gui.views.heatmap import HeatmapWidget


class HeadMapView(View):
    title = tab_title("heatmap")

    def __init__(self, session, parent=None):
        super().__init__(session, parent)
        self.heatmap = HeatmapWidget()
        self.show_box = QComboBox()
        for key, text in SHOWN.items():
            self.show_box.addItem(text, key)
        self.show_box.setToolTip("model A (the open model), model B (compared with it), or A − B")
        self.show_row = QWidget()
        row = QHBoxLayout(self.show_row)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(QLabel("show:"))
        row.addWidget(self.show_box)
        row.addStretch(1)
        self.show_row.hide()  # only while a comparison is held
        lay = QVBoxLayout(self.body)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addWidget(self.show_row)
        lay.addWidget(self.heatmap)
        self._last_shape = None
        self.show_box.currentIndexChanged.connect(lambda _i: self.refresh() if self.isVisible() else None)
        session.comparison_changed.connect(self._on_comparison)

    def _on_comparison(self) -> None:
        self.show_row.setVisible(self.session.comparison is not None)
        self._on_selection()

    def shown(self) -> str:
        """What is drawn: "A", "B" or "diff" (always "A" without a comparison)."""
        return self.show_box.currentData() if self.session.comparison is not None else "A"

    def draw(self) -> None:
        s, c, shown = self.session, self.session.comparison, self.shown()
        if c is not None and shown == "B":
            mv = vm.compute_other_map(s.result, c.result_b, s.sel, s.blocks)
        elif c is not None and shown == "diff":
            mv = vm.compute_diff_map(s.result, c.result_b, s.sel, s.blocks)
        else:
            mv = s.current_map()
        if mv is self.heatmap.mv and s.sel.log == self.heatmap.log:
            return  # the same map (e.g. another head under "mean over heads"): nothing to redraw
        key = (id(s.result), s.sel.block, mv.matrix.shape)
        self.heatmap.set_map(mv, log=s.sel.log, reset_view=key != self._last_shape)
        self._last_shape = key
