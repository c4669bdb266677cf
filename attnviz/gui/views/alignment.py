"""Alignment: source tokens × generated target tokens from cross-attention, step by step."""

from __future__ import annotations

import numpy as np
from PySide6.QtWidgets import QVBoxLayout

from attnviz.core import align
from attnviz.core import metadata as md
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

    def declared(self) -> tuple[list[tuple[int, int]], str] | None:
        """The model's alignment heads and row convention (``attnviz.alignment``), if it names them."""
        model = self.session.model
        return md.alignment_heads(getattr(model, "meta", None) or {}) if model is not None else None

    def on_result(self) -> None:
        # open on the model's declared alignment head, once per opened model (later the user's choice stands)
        model, declared, b = self.session.model, self.declared(), self.cross_block()
        if declared is None or b is None or getattr(self, "_opened_for", None) is model:
            return
        self._opened_for = model
        layer, head = declared[0][0]
        if layer < self.session.blocks[b].n_layers and head < self.session.blocks[b].heads_in(layer):
            self.session.select(block=b, layer=layer, head=head, mode="head")

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
        declared = self.declared()
        if declared is not None and s.result.generated:  # the model's own row convention (attnviz.alignment)
            pairs = align.convention_rows(rows, declared[1], full.matrix.shape[0])
            rows, words = np.asarray([r for _, r in pairs], dtype=int), [words[k] for k, _ in pairs]
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
            declared = self.declared()
            note = ""
            if declared is not None:
                (dl, dh), conv = declared[0][0], declared[1]
                rows_are = "its input token (Shift-Att)" if conv == "input" else "the word it predicts"
                here = "shown" if (self.session.sel.mode, self.session.sel.layer, self.session.sel.head) == ("head", dl, dh) else "not shown"
                note = (f" · this model's alignment head is decoder layer {dl} head {dh} ({here}); "
                        f"each row is the decoder position reading {rows_are}")
            self.step_label.setText(
                f"step {row + 1}/{g}: “{mv.q_labels[row]}” attends most to “{mv.k_labels[j]}” ({mv.matrix[row, j]:.3f})"
                + note)
        else:
            self.step_label.setText(" ")
