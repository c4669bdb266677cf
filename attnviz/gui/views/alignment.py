"""Alignment: source tokens × generated target tokens from cross-attention, step by step."""

from __future__ import annotations

import numpy as np
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QVBoxLayout

from attnviz.core import view as vm
from attnviz.core.view import MapView
from attnviz.core.view.steps import generated_words
from attnviz.core.view_names import tab_title
from attnviz.gui.views import declared as declared_heads
from attnviz.gui.views.base import View, info_label
from attnviz.gui.views.heatmap import HeatmapWidget

ROW_CHOICES = {"predict": "rows: predicting row", "input": "rows: reading row (Shift-Att)"}


class AlignmentView(View):
    title = tab_title("alignment")

    def __init__(self, session, parent=None):
        super().__init__(session, parent)
        self.mv: MapView | None = None

    def build(self) -> None:
        self.heatmap = HeatmapWidget(x_title="source", y_title="generated")
        self.step_label = info_label()
        self.step_label.setObjectName("step_label")
        # the row convention (core/align.py): the selection's `rows`, so File > Export view (figure --rows) agrees
        self.rows_box = QComboBox()
        for conv, text in ROW_CHOICES.items():
            self.rows_box.addItem(text, conv)
        self.rows_box.setToolTip(
            "which decoder row stands for each target word: the row that predicts it, or the row that reads it as "
            "input (Shift-Att); the model's declared convention is chosen when it opens"
        )
        self.rows_box.currentIndexChanged.connect(lambda _i: self.session.select(rows=self.rows_box.currentData()))
        top = QHBoxLayout()
        top.addWidget(self.step_label, 1)
        top.addWidget(self.rows_box)
        lay = QVBoxLayout(self.body)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addLayout(top)
        lay.addWidget(self.heatmap, 1)

    def cross_block(self) -> int | None:
        return vm.cross_block(self.session.blocks, self.session.sel)

    def declared(self) -> tuple[list[tuple[int, int]], str] | None:
        """The model's alignment heads and row convention (``attnviz.alignment``), if it names them."""
        return declared_heads.declared(self.session)

    def keep_selection(self) -> None:
        """The caller chose the head for this model (``attnviz open --head``, a corpus example): do not move to
        the declared alignment head when this model's result arrives."""
        declared_heads.keep_selection(self.session)

    def on_result(self) -> None:
        # open on the model's declared alignment head, once per opened model (later the user's choice stands)
        declared_heads.open_on_declared(self.session, self.cross_block())

    def reason(self) -> str | None:
        why = super().reason()
        if why:
            return why
        if self.cross_block() is None:
            return (
                "Alignment needs cross-attention (an encoder-decoder model such as the translation demo); "
                "this model has only self-attention."
            )
        if not self.session.result.generated and not self.forced_target():
            return (
                "Alignment shows generated or teacher-forced target tokens: set “generate” to a number of steps, "
                "or type the target in “text pair”, and run."
            )
        return None

    def forced_target(self) -> bool:
        """A teacher-forced target (generate 0 with a text pair): decoder rows beyond the start token.  The view
        model draws them, one row per target token read, as ``figure --view alignment`` does."""
        b = self.cross_block()
        return b is not None and len(self.session.blocks[b].query_axis) > 1

    def alignment_map(self) -> MapView:
        """The view model's alignment (the figure draws the same :class:`MapView`)."""
        return vm.alignment_map(self.session.result, self.session.sel, self.session.blocks)

    def declared_note(self, rows: bool = True) -> str:
        """Which head the model declares for alignment and whether it is the one shown; with ``rows``, what its
        declared row convention makes each row (a teacher-forced target's rows always read their token)."""
        declared = self.declared()
        if declared is None:
            return ""
        (dl, dh), conv = declared[0][0], declared[1]
        sel = self.session.sel
        here = "shown" if (sel.mode, sel.layer, sel.head) == ("head", dl, dh) else "not shown"
        note = f" · this model's alignment head is decoder layer {dl} head {dh} ({here})"
        if rows:
            rows_are = "its input token (Shift-Att)" if conv == "input" else "the word it predicts"
            note += f"; each row is the decoder position reading {rows_are}"
        return note

    def draw(self) -> None:
        if self.rows_box.currentData() != self.session.sel.rows:
            self.rows_box.blockSignals(True)  # showing the selection is not a new choice
            self.rows_box.setCurrentIndex(max(0, self.rows_box.findData(self.session.sel.rows)))
            self.rows_box.blockSignals(False)
        self.mv = mv = self.alignment_map()
        self.heatmap.set_map(mv, log=self.session.sel.log)
        words = generated_words(self.session.result, self.session.sel.batch)  # a beam's own (a beam search's rows)
        g = len(words)
        if not g:  # a teacher-forced target: every row at once, no generation step to mark
            self.heatmap.mark_row(None)
            reads = "reading" if self.session.sel.rows == "input" else "predicting"
            self.step_label.setText(
                f"teacher-forced target: each row is the decoder position {reads} its target token "
                f"({self.session.sel.rows} rows)" + self.declared_note(rows=False)
            )
            return
        step = self.session.sel.step if 0 <= self.session.sel.step < g else g - 1  # the slider's step, 0-based
        # with Shift-Att rows (a row per word read back) the last word has no row: mark the last one there is
        row = min(step, mv.matrix.shape[0] - 1)
        self.heatmap.mark_row(row)
        if 0 <= row < mv.matrix.shape[0] and mv.matrix.shape[1]:
            j = int(np.argmax(mv.matrix[row]))
            # the step is the slider's (the controls say the same); the row is the one drawn for it
            last = words[step]
            unread = f" · “{last}” has no row of its own (never read back, or hidden)" if row < step else ""
            self.step_label.setText(
                f"step {step + 1}/{g}: “{mv.q_labels[row]}” attends most to “{mv.k_labels[j]}” ({mv.matrix[row, j]:.3f})"
                + unread
                + self.declared_note()
            )
        else:
            self.step_label.setText(" ")
