"""Head statistics: a sortable table, one row per (layer, head) of the current block."""

from __future__ import annotations

from typing import cast

from PySide6.QtCore import QEvent, QItemSelectionModel, QPoint, Qt, Signal
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem, QVBoxLayout

from attnviz.app.ablation import head_at
from attnviz.app.compare import COMPARE_COLUMNS
from attnviz.core import view as vm
from attnviz.core.head_stats import compute_stats, stats_caption, stats_context
from attnviz.core.stats import ROW_SUM_SHOWN_BELOW, STAT_COLUMNS, stat_columns, with_sink_columns
from attnviz.core.view_names import tab_title
from attnviz.core.words import count
from attnviz.gui.views.base import View, info_label
from attnviz.gui.workers import WorkerPool, error_text

# columns added when gold alignments are loaded (cross-attention blocks only)
ALIGN_COLUMNS = {
    "aer": ("AER", "alignment error rate of this head's argmax word links against the loaded gold (lower = aligns)"),
    "precision": ("precision", "share of this head's links that are in the gold"),
    "recall": ("recall", "share of the gold sure links this head finds"),
}


# columns added when reference word times are loaded for a speech result (its decoder cross block only)
WORD_TIME_COLUMNS = {
    "within_50ms": (
        "within 50 ms",
        "share of the word boundaries this head alone places within 50 ms of the loaded reference (higher = aligns)",
    ),
    "boundary_error_ms": ("mean error ms", "mean absolute error of this head's word boundaries, in milliseconds"),
}


ROW_KEYS = {Qt.Key.Key_Up: -1, Qt.Key.Key_Down: 1}  # the focused table's keys (←/→ keep stepping heads)


def alignment_columns(table: dict, layer: int, head: int) -> dict[str, float] | None:
    """AER / precision / recall of one head from an :func:`attnviz.core.align.alignment_table`."""
    if layer >= len(table["heads"]) or head >= len(table["heads"][layer]):
        return None
    return {
        "aer": table["heads"][layer][head],
        "precision": table["precision"]["heads"][layer][head],
        "recall": table["recall"]["heads"][layer][head],
    }


class NumItem(QTableWidgetItem):
    """Sorts by value, not by text."""

    def __init__(self, value: float, text: str):
        super().__init__(text)
        self.value = value
        self.setData(Qt.ItemDataRole.UserRole, value)
        self.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)

    def __lt__(self, other):
        return self.value < getattr(other, "value", 0)


class StatsView(View):
    """Signals: ``picked(layer, head)`` when a row is clicked; ``context_requested(layer, head, global
    position)`` when one is right-clicked (its menu switches the head off)."""

    title = tab_title("stats")
    scale_note = "Head stats is a table of numbers: no colour scale"
    picked = Signal(int, int)
    browsed = Signal(int, int)  # ↑/↓ in the focused table moved to this row's (layer, head)
    context_requested = Signal(int, int, QPoint)

    def __init__(self, session, parent=None):
        super().__init__(session, parent)
        self.columns = ["layer", "head"] + list(STAT_COLUMNS)
        self.rows: list[dict] = []
        self.gold: dict | None = None  # alignment_table of a loaded gold test set
        self.word_times = None  # app.word_times.WordTimesScores of the shown speech result
        self._key = None
        self._pending = None
        # the window waits for these workers when it closes: made with the view, built or not
        self.workers = WorkerPool(max_threads=1, parent=self)
        self.workers.returned.connect(self._on_stats)
        self.workers.errored.connect(self._on_stats_error)
        session.comparison_changed.connect(self._on_comparison)
        session.ablation_changed.connect(self.mark_off)

    def build(self) -> None:
        self.table = QTableWidget(0, len(self.columns))
        self.table.setHorizontalHeaderLabels(["layer", "head"] + [STAT_COLUMNS[c][0] for c in STAT_COLUMNS])
        for i, c in enumerate(STAT_COLUMNS):
            header = self.table.horizontalHeaderItem(i + 2)
            if header is not None:
                header.setToolTip(STAT_COLUMNS[c][1])
        self.table.setSortingEnabled(True)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setDefaultSectionSize(22)
        self.table.sortByColumn(0, Qt.SortOrder.AscendingOrder)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.table.cellClicked.connect(self._on_click)
        # ↑/↓ move through the rows, as in any table: the window's ↑/↓ (layers) shortcuts took them from it
        self.table.installEventFilter(self)
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.table.customContextMenuRequested.connect(self._on_context)
        self.info = info_label()
        lay = QVBoxLayout(self.body)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addWidget(self.info)
        lay.addWidget(self.table, 1)

    def _on_comparison(self) -> None:
        """A comparison with model B was set or dropped: refill with or without its columns."""
        self._key = None
        if self.isVisible():
            self.refresh()
        else:
            self._dirty = True

    def set_gold(self, table: dict | None) -> None:
        """Show AER / precision / recall per head from a gold test set (None removes the columns)."""
        self.gold = table
        self._key = None  # refill with or without the columns
        if self.isVisible():
            self.refresh()

    def set_word_times(self, scores) -> None:
        """Show each cross head's boundaries within 50 ms and mean error against reference word times."""
        self.word_times = scores
        self._key = None
        if self.isVisible():
            self.refresh()

    def _word_time_rows(self, rows: list[dict]) -> bool:
        """Add the word-time columns to ``rows``: the scored result's decoder cross block only."""
        from attnviz.app.word_times import columns

        s, wt = self.session, self.word_times
        if wt is None or s.block is None or s.block.kind != "cross" or wt.result is not s.result:
            return False
        for row in rows:
            row.update(columns(wt, row["layer"], row["head"]) or {})
        return all("within_50ms" in row for row in rows)

    def _align_rows(self, rows: list[dict]) -> bool:
        """Add the gold columns to ``rows`` when they apply to the current block."""
        if self.gold is None or self.session.block is None or self.session.block.kind != "cross":
            return False
        for row in rows:
            row.update(alignment_columns(self.gold, row["layer"], row["head"]) or {})
        return all("aer" in row for row in rows)

    def _compare_rows(self, rows: list[dict]) -> bool:
        """Add the held comparison's measures (compare_results' rows) to ``rows``: every head of the block must
        have been compared, else the columns stay off (a site only A has)."""
        c, blk = self.session.comparison, self.session.block
        if c is None or blk is None or blk.result is not c.result_a:
            return False
        measured = c.block_rows(blk)
        if not all((row["layer"], row["head"]) in measured for row in rows):
            return False
        for row in rows:
            m = measured[(row["layer"], row["head"])]
            row.update({k: m[k] for k in COMPARE_COLUMNS})
        return True

    def context(self) -> str:
        """text | cross | cross-image | patches | frames | audio | cross-audio: what the current block's key
        positions are (core.head_stats.stats_context)."""
        return stats_context(self.session.result, self.session.block)

    @property
    def busy(self) -> bool:
        """Its statistics are still being computed (the table is empty meanwhile): a screenshot waits for them."""
        return self._pending is not None

    def _table_key(self) -> tuple:
        """What the rows are of: the result, block, step and batch row (each beam of a beam search its own maps), and
        whether a speech clip's padding counts (the "show padding after the clip" box, as the maps)."""
        s = self.session
        return (id(s.result), s.sel.block, s.sel.step, s.sel.batch, s.sel.padding)

    def draw(self) -> None:
        """Fill the table; the statistics are computed in a worker (0.5 s for 72 heads at 512 tokens)."""
        s = self.session
        key = self._table_key()
        if key != self._key:
            self._key = key
            self.table.setRowCount(0)
            self.info.setText(f"{stats_caption(s.result, s.block, s.sel.padding)}: computing head statistics…")
            self.workers.cancel()
            w = self.workers.start(compute_stats, s.result, s.block, s.sel.step, s.sel.padding, kind="stats")
            self._pending = (w.request_id, key)
            return
        self.select_current()

    def _on_stats(self, kind: str, rid: int, rows) -> None:
        if self._pending is None or rid != self._pending[0] or self._pending[1] != self._key:
            return  # superseded by a newer result, block or step
        self._pending = None
        self.rows = rows
        aligned = self._align_rows(rows)
        timed = self._word_time_rows(rows)
        compared = self._compare_rows(rows)
        shown = stat_columns(self.context())  # what each column means for this block, or not shown at all
        # heads whose rows sum to less than 1 (attention sinks): how much each row kept, before the statistics
        # rescale it to 1 (a head that gives its sink most of its mass looks like any other head otherwise), and
        # the first key's share of the whole row (a corpus run's sink_share)
        sunk = [row["row_sum"] for row in rows if row.get("row_sum", 1.0) < ROW_SUM_SHOWN_BELOW]
        if sunk:
            shown = with_sink_columns(shown)
        stats = (
            (list(ALIGN_COLUMNS) if aligned else [])
            + (list(WORD_TIME_COLUMNS) if timed else [])
            + (list(COMPARE_COLUMNS) if compared else [])
            + list(shown)
        )
        names = {**ALIGN_COLUMNS, **WORD_TIME_COLUMNS, **COMPARE_COLUMNS, **shown}
        self.columns = ["layer", "head"] + stats
        t = self.table
        t.setSortingEnabled(False)
        t.setColumnCount(len(self.columns))
        t.setHorizontalHeaderLabels(["layer", "head"] + [names[c][0].replace(" ", "\n") for c in stats])
        for i, name in enumerate(stats):
            header = t.horizontalHeaderItem(i + 2)
            if header is not None:
                header.setToolTip(names[name][1])
        t.setRowCount(len(rows))
        for r, row in enumerate(rows):
            t.setItem(r, 0, NumItem(row["layer"], str(row["layer"])))
            t.setItem(r, 1, NumItem(row["head"], str(row["head"])))
            for c, name in enumerate(stats):
                # a quantized copy's divergences are tiny: significant digits, not three decimals that read 0.000
                text = f"{row[name]:.3g}" if name in COMPARE_COLUMNS else f"{row[name]:.3f}"
                text = "—" if row[name] != row[name] else text  # NaN: not defined here (a one-row map's "monotonic")
                t.setItem(r, c + 2, NumItem(row[name], text))
        t.setSortingEnabled(True)
        self._fit_columns()
        # a dual encoder's: which row's input; a speech clip's: its frames alone unless the padding is shown
        caption = stats_caption(self.session.result, self.session.block, self.session.sel.padding)
        text = (
            f"{caption}: {count(len(rows), 'head')}. Click a column to sort, a row to focus that head, "
            "right-click it to switch it off."
        )
        if aligned and self.gold is not None:
            t.sortByColumn(2, Qt.SortOrder.AscendingOrder)  # "which heads align?": best AER first
            g = self.gold
            text = (
                f"{caption}: {count(len(rows), 'head')} ranked by AER against {g['name']} "
                f"({g['n_sentences']} pairs, {g['n_gold_links']} gold links, rows = {g['convention']} convention"
                f"{'; punctuation, which this gold never links, gets no link' if g.get('skip_punctuation') else ''}). "
                "Click a column to sort, a row to focus that head."
            )
        elif self.gold is not None:
            text += f" AER columns: choose a cross-attention block (gold {self.gold['name']} is loaded)."
        if timed and self.word_times is not None:
            from attnviz.app.word_times import summary

            t.sortByColumn(self.columns.index("within_50ms"), Qt.SortOrder.DescendingOrder)  # best aligner first
            text = (
                f"{caption}: {count(len(rows), 'head')} ranked by word boundaries within 50 ms; "
                f"{summary(self.word_times)}. Click a column to sort, a row to focus that head."
            )
        elif self.word_times is not None:
            text += (
                f" Word-time columns: choose the decoder's cross-attention of the run {self.word_times.name} scored."
            )
        if sunk:
            text += (
                f" Rows sum to less than 1 in {count(len(sunk), 'head')} (head means down to {min(sunk):.2f}: an attention "
                "sink took the rest); the statistics are of each row rescaled to 1, 'row sum' is how much it kept, "
                "'sink share' the first key's share of the whole row (a corpus run's sink_share)."
            )
        c = self.session.comparison
        if compared and c is not None and not (aligned or timed):
            # "which heads changed?": the most changed first, as the command prints them (in layer order the
            # researcher read 12 rows of small numbers to find the largest), as AER and word times rank theirs
            t.sortByColumn(self.columns.index("js_divergence"), Qt.SortOrder.DescendingOrder)
            text += f" Ranked by JS divergence from B = {c.name_b} (bits; most changed first)."
        elif compared and c is not None:
            text += f" Compared with B = {c.name_b} (JS in bits)."
        elif c is not None:
            text += f" No comparison columns: {c.name_b} has no matching {self.session.block.name}."
        self.info.setText(text)
        self.mark_off()
        self.select_current()

    def mark_off(self) -> None:
        """Strike out the layer and head of each row whose head is switched off (right-click ▸ Switch head off)."""
        if not self.built:  # nothing drawn yet: the rows are struck out when they are filled
            return
        s, t = self.session, self.table
        if s.block is None or t.columnCount() < 2:
            return
        if self._pending is not None or self._key != self._table_key():
            return  # the rows are another block's or result's (a hidden tab refills, then marks, when shown)
        for r in range(t.rowCount()):
            layer, head = t.item(r, 0), t.item(r, 1)
            if not (isinstance(layer, NumItem) and isinstance(head, NumItem)):
                continue
            off = s.ablation.is_off(head_at(s.blocks, s.sel.block, int(layer.value), int(head.value)))
            for item in (layer, head):
                font = item.font()
                font.setStrikeOut(off)
                item.setFont(font)
                item.setToolTip("switched off (right-click to switch it back on)" if off else "")
            head.setText(f"{int(head.value)} (off)" if off else str(int(head.value)))

    def off_rows(self) -> list[tuple[int, int]]:
        """``(layer, head)`` of the rows shown struck out."""
        return [
            (int(self.cell(r, 0).value), int(self.cell(r, 1).value))
            for r in range(self.table.rowCount())
            if self.cell(r, 1).font().strikeOut()
        ]

    def _on_context(self, pos) -> None:
        r = self.table.rowAt(pos.y())
        if r < 0:
            return
        at = self.table.viewport().mapToGlobal(pos)
        self.context_requested.emit(int(self.cell(r, 0).value), int(self.cell(r, 1).value), at)

    def _fit_columns(self) -> None:
        """Every title readable: columns share the width when their (two-line) titles and numbers fit, else
        each is as wide as its contents and the table scrolls sideways (stretching cut "mean dist." to "ean dis")."""
        t, hh = self.table, self.table.horizontalHeader()
        need = sum(max(hh.sectionSizeHint(i), t.sizeHintForColumn(i)) for i in range(t.columnCount()))
        fits = need <= t.viewport().width()
        hh.setSectionResizeMode(QHeaderView.ResizeMode.Stretch if fits else QHeaderView.ResizeMode.ResizeToContents)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if self.built and self.table.columnCount():
            self._fit_columns()

    def _on_stats_error(self, kind: str, rid: int, exc) -> None:
        if self._pending is not None and rid == self._pending[0]:
            self._pending = None
            self.info.setText(f"head statistics failed: {error_text(exc)}")

    def select_current(self) -> None:
        """Select the rows of what the other views draw: the focused head, or every head of an aggregate's layer
        range (the Overview frames the same heads; one row, head 0, under "mean over heads" read as one head)."""
        sel = self.session.sel
        blk = self.session.block
        t = self.table
        want = set(vm.focus_heads(blk, sel)) if blk is not None else set()
        rows = [r for r in range(t.rowCount()) if (int(self.cell(r, 0).value), int(self.cell(r, 1).value)) in want]
        t.blockSignals(True)
        t.clearSelection()
        model, flags = t.selectionModel(), QItemSelectionModel.SelectionFlag
        for r in rows:
            model.select(t.model().index(r, 0), flags.Select | flags.Rows)
        t.blockSignals(False)
        if rows:
            t.doItemsLayout()  # the rows just filled laid out now: before, the scroll bar has no range, the scroll is lost
            t.scrollToItem(self.cell(rows[-1], 0))  # the last, then the first: all of a layer's rows when they fit
            t.scrollToItem(self.cell(rows[0], 0))

    def column_values(self, name: str) -> list[float]:
        c = self.columns.index(name)
        return [self.cell(r, c).value for r in range(self.table.rowCount())]

    def cell(self, r: int, c: int) -> NumItem:
        """The item at row ``r``, column ``c``: every cell of the filled table is a :class:`NumItem`."""
        return cast(NumItem, self.table.item(r, c))

    def eventFilter(self, watched, event) -> bool:
        if watched is self.table and event.type() in (QEvent.Type.ShortcutOverride, QEvent.Type.KeyPress):
            d = ROW_KEYS.get(event.key()) if event.modifiers() == Qt.KeyboardModifier.NoModifier else None
            if d is not None:
                if event.type() == QEvent.Type.ShortcutOverride:
                    event.accept()  # the key comes here as a key press, not to the window's shortcut
                    return True
                self.step_row(d)
                return True
        return super().eventFilter(watched, event)

    def step_row(self, d: int) -> None:
        """The row ``d`` below (above) the current one, in the table's sort order: made current and selected, and
        its head ``browsed`` (the window selects it and stays on the table, so the next key moves on)."""
        t = self.table
        if t.rowCount() == 0:
            return
        now = t.currentRow()
        if now < 0:  # no current row yet: start from the selected head's
            picked = t.selectionModel().selectedRows()
            now = picked[0].row() if picked else (-1 if d > 0 else t.rowCount())
        r = min(max(now + d, 0), t.rowCount() - 1)
        t.setCurrentCell(r, max(t.currentColumn(), 0))
        self.browsed.emit(int(self.cell(r, 0).value), int(self.cell(r, 1).value))

    def _on_click(self, r: int, c: int) -> None:
        self.picked.emit(int(self.cell(r, 0).value), int(self.cell(r, 1).value))
