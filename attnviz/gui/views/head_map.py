"""Head map: the selected head (or aggregate) as a heatmap with tokens on both axes."""

from __future__ import annotations

from PySide6.QtWidgets import QVBoxLayout

from attnviz.core.view_names import tab_title
from attnviz.gui.views.base import View
from attnviz.gui.views.heatmap import HeatmapWidget


class HeadMapView(View):
    title = tab_title("heatmap")

    def __init__(self, session, parent=None):
        super().__init__(session, parent)
        self.heatmap = HeatmapWidget()
        lay = QVBoxLayout(self.body)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addWidget(self.heatmap)
        self._last_shape = None

    def draw(self) -> None:
        mv = self.session.current_map()
        if mv is self.heatmap.mv and self.session.sel.log == self.heatmap.log:
            return  # the same map (e.g. another head under "mean over heads"): nothing to redraw
        key = (id(self.session.result), self.session.sel.block, mv.matrix.shape)
        self.heatmap.set_map(mv, log=self.session.sel.log, reset_view=key != self._last_shape)
        self._last_shape = key
