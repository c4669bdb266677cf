"""Head map: the selected head (or aggregate) as a heatmap with tokens on both axes; while a second model is
compared (File ▸ Compare with…), model A's map, model B's, or A − B on a diverging scale.  A tower's frames
(Idefics3 / SmolVLM: the tiles, then the global image) are drawn one frame at a time, picked in the frame box
(the view model's :func:`~attnviz.core.view.head_map`): never the whole block-diagonal map."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QLineEdit, QVBoxLayout, QWidget

from attnviz.app.compare import SHOWN
from attnviz.app.fields import WINDOW
from attnviz.core import view as vm
from attnviz.core.view_names import tab_title
from attnviz.gui.views.base import View
from attnviz.gui.views.heatmap import HeatmapWidget


class HeadMapView(View):
    title = tab_title("heatmap")

    def __init__(self, session, parent=None):
        super().__init__(session, parent)
        self._last_shape = None
        self._found_text: str | None = None  # what the find box last went to (Enter again: its next row)
        session.comparison_changed.connect(self._on_comparison)

    def build(self) -> None:
        self.heatmap = HeatmapWidget()
        self.show_box = QComboBox()
        for key, text in SHOWN.items():
            self.show_box.addItem(text, key)
        self.show_box.setToolTip("model A (the open model), model B (compared with it), or A − B")
        self.show_row = _labelled_row("show:", self.show_box)  # shown only while a comparison is held
        # a tower's frames: which tile's (or the global image's) patch-to-patch map is drawn
        self.frame_box = QComboBox()
        self.frame_box.setToolTip(
            "the vision tower runs each tile and the global image by itself: a patch attends only to its own "
            "frame's patches, so each frame's map is drawn alone (File ▸ Export view draws the same)"
        )
        self.frame_box.currentIndexChanged.connect(self._on_frame)
        self.frame_row = _labelled_row("frame:", self.frame_box)  # shown only for a tower's frames
        self.find_box = find_box(self.go_to_token)
        # a map almost wholly in the scale's bottom colour (a long causal map on 0–1) says so and which scale shows it
        self.dark_label = QLabel()
        self.dark_label.setWordWrap(True)
        self.dark_label.setStyleSheet("color: #8a5a00;")
        self.dark_label.setVisible(False)
        lay = QVBoxLayout(self.body)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addWidget(_labelled_row("find:", self.find_box, shown=True))
        lay.addWidget(self.show_row)
        lay.addWidget(self.frame_row)
        lay.addWidget(self.dark_label)
        lay.addWidget(self.heatmap)
        self.show_box.currentIndexChanged.connect(lambda _i: self.refresh() if self.isVisible() else None)
        self.show_row.setVisible(self.session.comparison is not None)

    def go_to_token(self, typed: str) -> vm.Found | None:
        """Go to the row ``typed`` names (a token's text or a position; again: its next occurrence)."""
        hm = self.heatmap
        if hm.mv is None:
            return None
        start = hm.hover[0] + 1 if typed == self._found_text else 0
        found = vm.find_token(hm.mv.q_labels, hm.mv.q_pos, typed, start)
        self._found_text = typed
        if found is None:
            hm.set_hover(-1, -1)
            hm.hover_label.setText(f"no {hm.mv.y_title} row holds “{typed.strip()}”" if typed.strip() else " ")
            return None
        hm.go_to(found.row)
        if found.count > 1:
            hm.hover_label.setText(f"{found.nth} of {found.count} · {hm.hover_label.text()}")
        return found

    def _on_comparison(self) -> None:
        if self.built:  # else build() shows the row as the comparison then stands
            self.show_row.setVisible(self.session.comparison is not None)
        self._on_selection()

    def _on_frame(self, i: int) -> None:
        if i >= 0 and self.frame_row.isVisible():
            self.session.select(frame=i)

    def _show_frames(self, names: list[str] | None) -> None:
        """The frame box: one entry per frame of the selected row's tower block, shown only for such a block."""
        self.frame_box.blockSignals(True)  # showing the selection is not a new choice
        if [self.frame_box.itemText(i) for i in range(self.frame_box.count())] != (names or []):
            self.frame_box.clear()
            self.frame_box.addItems(names or [])
        if names:
            self.frame_box.setCurrentIndex(min(max(self.session.sel.frame, 0), len(names) - 1))
        self.frame_row.setVisible(bool(names))
        self.frame_box.blockSignals(False)

    def shown(self) -> str:
        """What is drawn: "A", "B" or "diff" (always "A" without a comparison)."""
        if self.session.comparison is None:
            return "A"
        if not self.built:  # never shown: the show box would stand on its first entry
            return next(iter(SHOWN))
        return self.show_box.currentData()

    def draw(self) -> None:
        s, c, shown = self.session, self.session.comparison, self.shown()
        self._show_frames(vm.tower_frames(s.result, s.sel, s.blocks))  # A's frames: B's map and A − B are of it
        result, sel, blocks = s.result, s.sel, s.blocks
        # each head's map as this one is made (a "shared" top over the positions in view); None: a scale of its own
        head_of: Callable[[vm.Selection], vm.MapView] | None = partial(vm.head_map, result, blocks=blocks)
        if c is not None and shown == "B":
            mv = vm.compute_other_map(result, c.result_b, sel, blocks)
            head_of = partial(vm.compute_other_map, result, c.result_b, blocks_a=blocks)
        elif c is not None and shown == "diff":
            mv, head_of = vm.compute_diff_map(result, c.result_b, sel, blocks), None  # (±max |A − B|: its own)
        else:
            mv = s.current_map()
        if mv is self.heatmap.mv and s.sel.log == self.heatmap.log:
            return  # the same map (e.g. another head under "mean over heads"): nothing to redraw
        # zoomed in, the scale's top is the positions in view's, as the export's `figure --span --key-span` draws
        self.heatmap.span_top = None if head_of is None else partial(vm.span_top, mv, sel, head_of=head_of)
        key = (id(s.result), s.sel.block, mv.matrix.shape)
        self.heatmap.set_map(mv, log=s.sel.log, reset_view=key != self._last_shape)
        self._last_shape = key
        dark = vm.dark_note(mv, s.sel.log, WINDOW)
        self.dark_label.setText(dark or "")
        self.dark_label.setVisible(dark is not None)


def find_box(go) -> QLineEdit:
    """The find box above a long map: Enter calls ``go(typed)`` (Head map and Token links alike)."""
    box = QLineEdit()
    box.setPlaceholderText("a token or a position (Enter: go there; again: the next)")
    box.setToolTip(
        "find a row: a token's text (no case, no word markers) or its position as the hover read-out counts it "
        "(300 or #300); Enter again goes to the token's next occurrence"
    )
    box.setClearButtonEnabled(True)
    box.setMaximumWidth(360)
    box.returnPressed.connect(lambda: go(box.text()))
    return box


def _labelled_row(label: str, box: QWidget, shown: bool = False) -> QWidget:
    """A row above the map: ``label`` then ``box``, left-aligned; hidden unless ``shown`` (the view shows it
    when it applies)."""
    row = QWidget()
    lay = QHBoxLayout(row)
    lay.setContentsMargins(0, 0, 0, 0)
    lay.addWidget(QLabel(label))
    lay.addWidget(box)
    lay.addStretch(1)
    if not shown:
        row.hide()  # (not setVisible(True) when shown: a widget without a parent yet would open as a window)
    return row
