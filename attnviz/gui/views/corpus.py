"""Corpus view: the results of ``attnviz corpus`` — head table, layer × head grid, and each head's top examples.

A window of its own (File ▸ Open corpus results…): it shows what a corpus run wrote and never runs a model;
clicking an example opens that item in the main window's usual views with the head focused.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QSplitter,
    QStatusBar,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from attnviz import AttnvizError
from attnviz.app.corpus_entry import example_open
from attnviz.app.corpus_patches import example_image, frames_of, is_tower_example, label_name
from attnviz.core.attention import VISION_TOWER_KEY, shown_stack
from attnviz.core.cross_stats import CROSS_STAT_HELP
from attnviz.core.score_direction import DIRECTIONS, GOLD_SCORES, direction, examples_end
from attnviz.core.stats import ROW_STAT_HELP, ROW_STATS, SAME_WITHOUT_SINK, row_stat_help
from attnviz.gui.views.corpus_patch import PatchPreview

# role -> colour (Okabe–Ito, colour-blind safe); "mixed" stays uncoloured
ROLE_COLORS = {
    "positional": "#E69F00",
    "sink": "#56B4E9",
    "special": "#CC79A7",
    "broad": "#009E73",
    "induction": "#D55E00",
    "monotone": "#F0E442",  # cross-attention on the monotone source diagonal (an alignment head)
    "mixed": "#FFFFFF",
}
TABLE_COLUMNS = (
    "stack",
    "layer",
    "head",
    "role",
    "role_score",
    "entropy",
    "broad",
    "distance",
    "prev",
    "next",
    "diag",
    "first",
    "sink_share",
    "special",
    "special_other",
    "max",
    "induction",
)


_RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter  # once: enum arithmetic costs µs a cell


# an example's text is a whole corpus item (a long-context document can be 500,000 characters): a cell shows
# the start, its tooltip a longer start; laying out the whole text froze the window for minutes
CELL_CHARS = 300
TIP_CHARS = 4000


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


class ValueItem(QTableWidgetItem):
    """A cell that sorts by its number (NaN last), not by its text."""

    def __init__(self, value, text: str | None = None):
        shown = text if text is not None else _fmt(value)
        super().__init__(_cut(shown, CELL_CHARS))
        self.value = value
        if isinstance(value, str):
            if len(shown) > CELL_CHARS:
                self.setToolTip(_cut(shown, TIP_CHARS))
        else:
            self.setTextAlignment(_RIGHT)

    def __lt__(self, other):
        a, b = self.value, getattr(other, "value", None)
        if isinstance(a, str) or isinstance(b, str):
            return str(a) < str(b)
        a = math.inf if a is None or (isinstance(a, float) and math.isnan(a)) else a
        b = math.inf if b is None or (isinstance(b, float) and math.isnan(b)) else b
        return a < b


def _fmt(v) -> str:
    if isinstance(v, float):
        return "–" if math.isnan(v) else f"{v:.3f}"
    return str(v)


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def _row_label(stack: str, kind: str, layer: int) -> str:
    """Grid row title: "enc L0", "dec L0" (self) and "dec× L0" (cross: decoder queries over the source)."""
    return f"{stack[:3]}{'×' if kind == 'cross' else ''} L{layer}"


def _text_on(color: QColor) -> QColor:
    return QColor("black") if color.lightnessF() > 0.5 else QColor("white")


class CorpusView(QWidget):
    """Signals: ``example_requested(example dict, model path)`` when an example row is clicked."""

    title = "Corpus"
    example_requested = Signal(dict, str)

    def __init__(self, results, parent=None):
        super().__init__(parent, Qt.WindowType.Window)
        self.results = results
        self.heads = results.heads
        self.setWindowTitle(f"attnviz — corpus {results.folder.name}")
        self.resize(1300, 800)
        r = results.run
        self.info = QLabel(
            f"{Path(r.get('model', '?')).name} ({r.get('model_kind', '?')}) · {r.get('items', 0)} items, {r.get('tokens', 0)} tokens · "
            f"engine {r.get('engine', '?')} × {r.get('workers', '?')} · {r.get('items_per_s') or 0:.1f} items/s"
        )
        g = r.get("gold") or {}
        if g.get("pairs"):
            b = g["best_head"]
            self.info.setText(
                self.info.text() + f" · gold alignments ({g['convention']} convention, {g['sure_links']} sure links): "
                f"best cross head L{b['layer']} H{b['head']}, AER {b['aer']:.3f}"
            )
        self.info.setText(_cut(self.info.text(), 600))  # run.json's strings are a stranger's too
        self.info.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        # the line wraps: on one line a gold run's summary (its best head and AER) set the window's minimum width,
        # 1,289 px, so `attnviz open RESULTS --size 1000x650` drew a window wider than asked (and than a small screen)
        self.info.setWordWrap(True)
        # with gold alignments (attnviz corpus --gold-column) the heads also carry AER, precision and recall
        # (next to the role: "which heads align?" is what a researcher opens such results for)
        # (the results reader gives every corpus these columns, NaN without gold: show them only where a head scored)
        gold = [c for c in GOLD_SCORES if any(_finite(h.get(c)) for h in self.heads)]
        at = TABLE_COLUMNS.index("role_score") + 1
        self.columns = (*TABLE_COLUMNS[:at], *gold, *TABLE_COLUMNS[at:])
        self.score = QComboBox()
        self.score.addItems(["role_score", *ROW_STATS, "induction", *gold])
        self.score.setCurrentText("role_score")
        self.score.setToolTip("the score that colours the grid and picks the examples (↑ high / ↓ low is interesting)")
        self.score.currentTextChanged.connect(self._on_score)

        self.table = self._make_table(self.columns)
        self.table.setSortingEnabled(True)
        self.table.itemSelectionChanged.connect(self._on_table_pick)
        self.grid = QTableWidget()
        self.grid.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.grid.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.grid.cellClicked.connect(self._on_grid_click)
        self.grid.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.grid.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.examples = self._make_table(("rank", "value", "row", "col", "item", "text"))
        self.examples.horizontalHeader().setSectionResizeMode(5, QHeaderView.ResizeMode.Stretch)
        self.examples.cellClicked.connect(self._on_example_click)
        # a VLM tower's corpus (corpus/tower.py): an example's row and key are patches, named as the view's axis
        # names them, and shown on the example's image beside the list (app/corpus_patches.py)
        self.patches = any(is_tower_example(e) for e in results.examples)
        # a VLM's vision tower: its heads are "vision self" as every view names them (results written before the
        # run said so, by their examples' patches; their files still say "encoder")
        self.vision_tower = r.get(VISION_TOWER_KEY) is True or self.patches
        self.preview: PatchPreview | None = None
        if self.patches:
            self.preview = PatchPreview()
            self.examples.currentCellChanged.connect(lambda r, _c, _pr, _pc: self._show_patches(r))
            for c, what in ((2, "query"), (3, "key")):
                header = self.examples.horizontalHeaderItem(c)
                if header is not None:
                    header.setToolTip(f"the {what} patch, named as the view's axis names it (its position in the tip)")
        self.examples_label = QLabel(
            "Click a head for its top examples; click an example to open it with that head focused."
        )
        self.examples_label.setWordWrap(True)

        top = QHBoxLayout()
        top.addWidget(self.info, 1)
        top.addWidget(QLabel("score:"))
        top.addWidget(self.score)
        right = QWidget()
        rv = QVBoxLayout(right)
        rv.setContentsMargins(0, 0, 0, 0)
        self.grid_label = QLabel("")
        rv.addWidget(self.grid_label)
        rv.addWidget(self.grid, 3)
        rv.addWidget(self.examples_label)
        if self.preview is None:
            rv.addWidget(self.examples, 2)
        else:
            below = QHBoxLayout()
            below.addWidget(self.examples, 1)
            below.addWidget(self.preview)
            rv.addLayout(below, 2)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.table)
        split.addWidget(right)
        split.setSizes([700, 600])
        lay = QVBoxLayout(self)
        lay.addLayout(top)
        lay.addWidget(split, 1)
        # its own status line (the window is separate from the main window, whose status is about models)
        self.status = QStatusBar()
        self.status.setSizeGripEnabled(False)
        lay.addWidget(self.status)

        # encoder (or vision) self, then decoder self, then decoder cross (a set has no order of its own)
        self.stacks = sorted(
            {(h["stack"], h["kind"]) for h in self.heads},
            key=lambda sk: (sk[0] not in ("encoder", "vision"), sk[1] != "self", sk),
        )
        self.current: dict | None = None
        self._show_directions()
        self._fill_table()
        self._fill_grid()
        # a corpus mostly of the unknown token first, as `attnviz corpus` said it at the end (corpus/stream.py)
        from attnviz.corpus.stream import MostlyUnknown  # (as open_corpus_results reads the folder: when opened)

        unknown = MostlyUnknown.from_run(r)
        self.note = None if unknown is None else unknown.report(int(r.get("items") or 0))[1]
        if self.note and unknown is not None:  # kept in the summary line too (the status line is overwritten)
            self.info.setText(_cut(f"{self.info.text()} · {unknown.items:,} of them mostly {unknown.token}", 700))
        # attention sinks: the row statistics rescaled each row to 1 over the keys (core/stats.py sink_note)
        sinks = r.get("sink_note") if isinstance(r.get("sink_note"), str) else None
        if sinks:
            self.info.setText(_cut(f"{self.info.text()} · rows rescaled over the sinks' heads", 700))
        said = [n for n in (self.note, sinks) if n]
        if said:
            self.info.setToolTip("\n\n".join(_cut(n, 600) for n in said))
        self.status.showMessage(
            "".join(f"{_cut(n, 300)} · " for n in said)
            + f"{len(self.heads)} heads from {results.folder} · sort the table by any score; "
            "click a head for its top examples"
        )

    # -- building ------------------------------------------------------------------------
    @staticmethod
    def _make_table(columns) -> QTableWidget:
        t = QTableWidget(0, len(columns))
        t.setHorizontalHeaderLabels(list(columns))
        for i, c in enumerate(columns):
            header = t.horizontalHeaderItem(i)
            if c in ROW_STAT_HELP and header is not None:
                header.setToolTip(ROW_STAT_HELP[c])
        t.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        t.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        t.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        t.verticalHeader().setVisible(False)
        t.verticalHeader().setDefaultSectionSize(22)
        return t

    def direction_tip(self, score: str) -> str:
        """What a score measures and which end is interesting, for each attention kind in these results."""
        kinds = [k for k in ("self", "cross") if any(h["kind"] == k for h in self.heads)] or ["self"]
        lines = [row_stat_help(score, self.vision_tower) or score]
        if "cross" in kinds and score in CROSS_STAT_HELP:
            lines.append(CROSS_STAT_HELP[score])
        for k in kinds:
            d = direction(score, k, self.vision_tower)
            lines.append(f"{d.arrow} {k}: {d.describe()}" if len(kinds) > 1 else f"{d.arrow} {d.describe()}")
        return "\n".join(lines)

    def _show_directions(self) -> None:
        """Each score's interesting end (core/score_direction.py) in the column tooltips and the score list."""
        for c, col in enumerate(self.columns):
            header = self.table.horizontalHeaderItem(c)
            if col in DIRECTIONS and header is not None:
                header.setToolTip(self.direction_tip(col))
        for i in range(self.score.count()):
            name = self.score.itemText(i)
            if name in DIRECTIONS:
                self.score.setItemData(i, self.direction_tip(name), Qt.ItemDataRole.ToolTipRole)

    def _fill_table(self) -> None:
        t = self.table
        t.setSortingEnabled(False)
        t.setRowCount(len(self.heads))
        for r, h in enumerate(self.heads):
            for c, col in enumerate(self.columns):
                item = ValueItem(h.get(col) if col != "stack" else f"{self.stack_of(h)} {h['kind']}")
                item.setData(Qt.ItemDataRole.UserRole, r)  # index into self.heads, stable under sorting
                if col == "role":
                    color = QColor(ROLE_COLORS.get(h["role"], "#FFFFFF"))
                    item.setBackground(QBrush(color))
                    item.setForeground(QBrush(_text_on(color)))
                t.setItem(r, c, item)
        t.setSortingEnabled(True)
        t.resizeColumnsToContents()

    def _fill_grid(self) -> None:
        """One block of rows per (stack, kind): rows are layers, columns heads, colour = the chosen score."""
        from attnviz.gui import style

        score = self.score.currentText()
        vals = np.array([h.get(score, math.nan) if h.get(score) is not None else math.nan for h in self.heads], float)
        finite = vals[np.isfinite(vals)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        lut = style.lut()
        n_heads = max(h["head"] for h in self.heads) + 1
        rows = [
            (s, k, layer)
            for s, k in self.stacks
            for layer in sorted({h["layer"] for h in self.heads if (h["stack"], h["kind"]) == (s, k)})
        ]
        self._grid_rows = rows
        self.grid.clear()
        self.grid.setRowCount(len(rows))
        self.grid.setColumnCount(n_heads)
        self.grid.setHorizontalHeaderLabels([f"H{h}" for h in range(n_heads)])
        self.grid.setVerticalHeaderLabels(
            [_row_label(shown_stack(s, self.vision_tower), k, layer) for s, k, layer in rows]
        )
        self._cell_values = {}
        for i, h in enumerate(self.heads):
            r = rows.index((h["stack"], h["kind"], h["layer"]))
            v = vals[i]
            item = QTableWidgetItem(_fmt(float(v)) + ("" if score != "role_score" else f"\n{h['role']}"))
            item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
            item.setData(Qt.ItemDataRole.UserRole, i)
            if np.isfinite(v):
                x = 0.0 if hi <= lo else (v - lo) / (hi - lo)
                rgb = lut[int(round(x * (len(lut) - 1)))][:3]
                color = QColor(int(rgb[0]), int(rgb[1]), int(rgb[2]))
                if score == "role_score":  # the role's colour, lighter for weaker scores
                    color = QColor(ROLE_COLORS.get(h["role"], "#FFFFFF")).lighter(
                        100 + int(60 * (1 - min(1.0, max(0.0, v))))
                    )
                item.setBackground(QBrush(color))
                item.setForeground(QBrush(_text_on(color)))
            self._cell_values[(r, h["head"])] = float(v)
            self.grid.setItem(r, h["head"], item)
        self.grid_label.setText(
            f"layer × head coloured by {score}" + (f" ({lo:.3g} – {hi:.3g})" if finite.size else " (no values)")
        )

    # -- interaction -----------------------------------------------------------------------
    def _on_score(self, _score: str) -> None:
        self._fill_grid()
        if self.current is not None:
            self.show_head(self.current)

    def _on_table_pick(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        if rows:
            self.show_head(self.heads[self.table.item(rows[0].row(), 0).data(Qt.ItemDataRole.UserRole)])

    def _on_grid_click(self, r: int, c: int) -> None:
        item = self.grid.item(r, c)
        if item is not None:
            self.show_head(self.heads[item.data(Qt.ItemDataRole.UserRole)])

    def examples_for(self, head: dict, score: str) -> list[dict]:
        if score == "role_score":  # the examples of the statistic behind the head's role
            score = {
                "positional": max(("prev", "next", "diag"), key=lambda s: head.get(s, 0)),
                "sink": "first",
                "special": "special_other",
                "broad": "broad",
                "monotone": "diag",
            }.get(head["role"], "max")
        key = (head["stack"], head["kind"], head["layer"], head["head"], score)
        ex = [e for e in self.results.examples if (e["stack"], e["kind"], e["layer"], e["head"], e["score"]) == key]
        if not ex and score in SAME_WITHOUT_SINK:  # a site without a sink: the run wrote its twin's, the same items
            return self.examples_for(head, SAME_WITHOUT_SINK[score])
        return sorted(ex, key=lambda e: e["rank"])

    def show_head(self, head: dict) -> None:
        self.current = head
        score = self.score.currentText()
        ex = self.examples_for(head, score)
        self.shown_examples = ex
        t = self.examples
        t.setRowCount(len(ex))
        for r, e in enumerate(ex):
            label = e["text"] if e.get("text") is not None else Path(e.get("image") or "").name
            if e.get("pair"):
                label += "  ‖  " + e["pair"]
            elif e.get("generated"):
                label += "  ‖ generated: " + e["generated"]
            for c, v in enumerate((e["rank"] + 1, e["value"], e["row"], e["col"], e["item"], label)):
                # a whole pair scored (AER): no row or key did, -1 in the file
                t.setItem(r, c, ValueItem(v, "–") if c in (2, 3) and v < 0 else ValueItem(v))
            if is_tower_example(e):  # the patches by their axis labels (sorted by position), their names in the tip
                for c, (name, pos) in enumerate(((e["row_patch"], e["row"]), (e["col_patch"], e["col"])), 2):
                    item = ValueItem(pos, name)
                    item.setToolTip(f"{label_name(name, frames_of(e))} (position {pos} of the image's patches)")
                    t.setItem(r, c, item)
        stat = ex[0]["score"] if ex else score
        what = f"top items by {stat} — {self.listed_end(stat, head['kind'])} — click one to open it"
        if stat != score and SAME_WITHOUT_SINK.get(score) == stat:
            what += f" ({score} is {stat} here: no attention sink at this site, its rows sum to 1)"
        if stat in GOLD_SCORES:  # a corpus count: the head's value, and for AER the pairs it aligns worst
            what = f"{stat} {_fmt(head.get(stat, math.nan))} over the corpus" + (
                f"; {self.listed_end(stat, head['kind'])} — click one to open it in the Alignment view"
                if ex
                else " (no per-item examples; pick aer or another score)"
            )
        self.examples_label.setText(
            f"{self.stack_of(head)} {head['kind']} layer {head['layer']} head {head['head']} · role {head['role']} "
            f"({_fmt(head['role_score'])}) · {what}"
        )
        listed = examples_end(self.results.run, stat, head["kind"]) if stat in DIRECTIONS else "highest"
        value = self.examples.horizontalHeaderItem(1)
        if value is not None:
            value.setText(f"{stat} {'↑' if listed == 'highest' else '↓'}")
            scored = f"the pair's {stat}" if stat in GOLD_SCORES else f"the item's {stat} (its best row)"
            value.setToolTip(f"{scored}; the list holds the {listed} values")
        t.resizeColumnsToContents()
        if self.preview is not None:
            self._show_patches(t.currentRow())
        where = f"{self.stack_of(head)} {head['kind']} layer {head['layer']} head {head['head']}"
        self.status.showMessage(
            f"{stat} {_fmt(head.get(stat, math.nan))} over the corpus for {where}"
            if stat in GOLD_SCORES
            else f"{len(ex)} top items by {stat} for {where}"
        )

    def stack_of(self, head: dict) -> str:
        """A head's stack as the views name it ("vision" for a VLM's vision tower, core.attention.shown_stack)."""
        return shown_stack(str(head["stack"]), self.vision_tower)

    def listed_end(self, stat: str, kind: str) -> str:
        """Which end of ``stat`` the examples list, said against the end that is interesting."""
        if stat not in DIRECTIONS:
            return "the highest values"
        d = direction(stat, kind, self.vision_tower)
        listed = examples_end(self.results.run, stat, kind)
        if d.examples is not None and listed == d.examples[0]:  # the other end on purpose (AER: the failures)
            return f"the {listed} values: {d.examples[1]}"
        if listed == d.end:
            return f"the {listed} values ({d.describe()})"
        # runs so far keep the highest values of every score (see core/score_direction.py)
        return f"the {listed} values, not the interesting end ({d.describe()})"

    def _show_patches(self, r: int) -> None:
        """A tower example's query and key patches on its image (the first example's until one is picked)."""
        shown = getattr(self, "shown_examples", [])
        if self.preview is None or not shown:
            return
        ex = shown[r if 0 <= r < len(shown) else 0]
        if is_tower_example(ex):
            model = str(self.results.run.get("model", ""))
            self.preview.show_example(example_image(ex, model), Path(str(ex.get("image") or "")).name)

    def _on_example_click(self, r: int, _c: int) -> None:
        if 0 <= r < len(getattr(self, "shown_examples", [])):
            ex = self.shown_examples[r]
            self.status.showMessage(f"Opening item {ex['item']} in the main window, head focused…")
            self.example_requested.emit(dict(ex), str(self.results.run.get("model", "")))


def open_example(window, example: dict, model_path: str, tokenizer: str | None = None) -> None:
    """Open the example's item in the main window and focus its head once the result is drawn."""
    try:
        todo = example_open(example, model_path, tokenizer)
    except AttnvizError as e:
        window.show_error(str(e))
        return
    if todo.tokenizer is not None and window.tokenizer is None:
        window.tokenizer = todo.tokenizer

    def focus():
        window.result_shown.disconnect(focus)
        s = window.session
        b = s.block_index(todo.stack, todo.kind)
        window.alignment.keep_selection()  # the example's head, not the model's declared one
        s.select(block=b if b is not None else 0, layer=todo.layer, head=todo.head, mode="head")
        # an AER example is a pair the head aligns badly: shown where alignments are read, else the head's map
        view = window.alignment if example.get("score") in GOLD_SCORES else window.head_map
        window.tabs.setCurrentWidget(view)

    window.result_shown.connect(focus)
    window.open_model(todo.model, **todo.values)


def open_corpus_results(window, folder) -> CorpusView | None:
    """Show a corpus results folder in a Corpus view beside ``window``; one message on bad input."""
    from attnviz.corpus.output import read

    try:
        results = read(folder)
        view = CorpusView(results, parent=window)
    except AttnvizError as e:
        window.show_error(str(e))
        return None
    view.example_requested.connect(lambda ex, model: open_example(window, ex, model, results.run.get("tokenizer")))
    window.corpus_view = view  # the latest one, for tests and scripting
    view.show()
    shown = getattr(window, "corpus_shown", None)
    if shown is not None:
        shown.emit(view)
    return view


def open_corpus_dialog(window) -> None:
    folder = QFileDialog.getExistingDirectory(window, "Open corpus results (the --out folder of attnviz corpus)")
    if folder:
        open_corpus_results(window, folder)
