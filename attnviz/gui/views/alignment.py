"""Alignment: source tokens × generated target tokens from cross-attention, step by step."""

from __future__ import annotations

import numpy as np
from PySide6.QtWidgets import QVBoxLayout

from attnviz.gui.selection import MapView, alignment_rows, compute_map
from attnviz.gui.views.base import View, info_label
from attnviz.gui.views.heatmap import HeatmapWidget


class AlignmentView(View):
    title = "Alignment"

    def __init__(self, session, parent=None):
        super().__init__(session, parent)
        self.heatmap = HeatmapWidget(x_title="source", y_title="generated")
        self.step_label = info_label()
        self.step_label.setObjectName("step_label")
        lay = QVBoxLayout(self.body)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addWidget(self.step_label)
        lay.addWidget(self.heatmap, 1)
        self.mv: MapView | None = None

    def cross_block(self) -> int | None:
        s = self.session
        cur = s.block
        if cur is not None and cur.kind == "cross":
            return s.sel.block
        idx = [i for i, b in enumerate(s.blocks) if b.kind == "cross"]
        return idx[-1] if idx else None

    def reason(self) -> str | None:
        why = super().reason()
        if why:
            return why
        if self.cross_block() is None:
            return ("Alignment needs cross-attention (an encoder-decoder model such as the translation demo); "
                    "this model has only self-attention.")
        if not self.session.result.generated:
            return "Alignment shows generated tokens: set “generate” to a number of steps and run."
        return None

    def alignment_map(self) -> MapView:
        s = self.session
        b = self.cross_block()
        sel = s.sel.with_(block=b, step=-1)
        if sel.mode == "rollout":
            sel = sel.with_(mode="mean")
        full = compute_map(s.result, sel, s.blocks)
        rows, words = alignment_rows(s.result, s.blocks[b])
        keep = [i for i, p in enumerate(full.q_pos) if p in set(int(r) for r in rows)]
        pos_to_word = {int(r): w for r, w in zip(rows, words)}
        m = full.matrix[keep]
        q_pos = full.q_pos[keep]
        labels = [pos_to_word.get(int(p), full.q_labels[i]) for i, p in zip(keep, q_pos)]
        return MapView(m, labels, full.k_labels, np.asarray(q_pos), full.k_pos,
                       full.title.replace(s.blocks[b].name, "alignment (cross-attention)"), full.block,
                       [full.q_special[i] for i in keep], full.k_special)

    def draw(self) -> None:
        self.mv = mv = self.alignment_map()
        self.heatmap.set_map(mv, log=self.session.sel.log)
        g = len(self.session.result.generated)
        step = self.session.sel.step if self.session.sel.step >= 0 else g - 1
        row = min(step, mv.matrix.shape[0] - 1)
        self.heatmap.mark_row(row)
        if 0 <= row < mv.matrix.shape[0] and mv.matrix.shape[1]:
            j = int(np.argmax(mv.matrix[row]))
            self.step_label.setText(
                f"step {row + 1}/{g}: “{mv.q_labels[row]}” attends most to “{mv.k_labels[j]}” ({mv.matrix[row, j]:.3f})")
        else:
            self.step_label.setText(" ")
