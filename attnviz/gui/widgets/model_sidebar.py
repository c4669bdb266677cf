"""Model sidebar: inputs, outputs, metadata, attention sites, device and timings (Netron's ModelSidebar)."""

from __future__ import annotations

import heapq
import json
import re
from pathlib import PurePath

from PySide6.QtCore import QRect
from PySide6.QtWidgets import QStyledItemDelegate, QStyleOptionViewItem, QTreeWidget, QTreeWidgetItem

from attnviz.app.maps_file import MapsFile
from attnviz.app.rules import model_kind_words
from attnviz.app.run_facts import BEAM_KEYS, beam_lines, beam_summary, run_fact
from attnviz.core import view as vm
from attnviz.core.prediction import prediction
from attnviz.core.text_scores import PAIR_MARK, TextScores
from attnviz.core.token_counts import token_lines
from attnviz.core.words import count

# a model from elsewhere may carry 200,000 metadata entries or a 60 MB value: each section shows this many rows
# (then one "… N more" row) and each cell and tooltip at most TIP_CHARS, so the sidebar builds in milliseconds
MAX_ROWS = 200
TIP_CHARS = 4000
RUN_CHARS = 600  # a Run row's value (a note, the generated words) is shown whole up to this long
BEAM_SEARCH = "beam search"  # the Run section's row of a beam search: beams, the one shown, its score
MAPS_FILE = "Maps file"  # the section of an opened .npz: the file, its model, its steps (app/maps_file.py)
SCORES = "scores"  # the Run section's row of a dual encoder's texts, each with its score (the one shown marked)
PATH_CHARS = 400  # a path is shown whole up to this long (the 120 characters of other values cut its file name)


def _short(v, n: int = 120) -> str:
    if isinstance(v, PurePath):  # a file's path: its end names the file, so any cut is at its start
        s = str(v)
        return s if len(s) <= PATH_CHARS else "…" + s[-(PATH_CHARS - 1) :]
    s = v[: n + 1] if isinstance(v, str) else json.dumps(v, default=str)[: n + 1]  # cut before copying
    s = s.replace("\n", " ")
    return s if len(s) <= n else s[: n - 1] + "…"


# a break opportunity Qt's word wrap takes (it breaks at spaces only, and ends a longer word in "…"), put after the
# separators of a long word: a path /…/hf-minilm_legacy_eager_17-74e3/minilm_legacy_eager_17.onnx wraps at its
# slashes and underscores instead of showing the folder and the file both as "minilm_legacy_eager_17…"
BREAK = "\u200b"
_SEPARATORS = re.compile(r"([/\\_.\-])(?=\S)")
LONG_WORD = 16  # characters: shorter words fit their column as they are (an input's name "decoder_input_ids" wraps)


def _breakable(text: str) -> str:
    return " ".join(_SEPARATORS.sub(r"\1" + BREAK, w) if len(w) > LONG_WORD else w for w in text.split(" "))


def _tip(v) -> str:
    s = v if isinstance(v, str) else str(v) if isinstance(v, PurePath) else json.dumps(v, default=str, indent=1)
    return s if len(s) <= TIP_CHARS else s[:TIP_CHARS] + f"… ({len(s):,} characters)"


def _score_rows(info: dict, shown: int) -> list[tuple[str, object]]:
    """A dual encoder's scores for the Run section: each text's (or image's) score, the one the views show marked,
    or the table of every image against every text, the shown pair's cell in brackets; the rule that made them;
    and which tower's maps are alike in every row (the one image's, or the one text's)."""
    scores = TextScores.from_info(info)
    if scores is None:
        return []
    rows: list[tuple[str, object]] = [(SCORES, scores.lines(shown, table=False)), ("scored by", scores.words)]
    kind = scores.kind
    if kind == "text" and isinstance(info.get("texts"), list) and len(scores.texts) > 1:
        # (not "run once per text": the towers run apart, each image and text once: runtime/dual_towers.py)
        rows.append(("image tower", "one image: its maps are the same for every text"))
    elif kind == "image":
        rows.append(("text tower", "one text: its maps are the same for every image"))
    elif kind == "pair":
        rows.append(
            (
                "rows",
                "every image against every text: row r is image r ÷ texts, text r mod texts; "
                f"{PAIR_MARK} marks the pair shown",
            )
        )
    return rows


class _WrapDelegate(QStyledItemDelegate):
    """Row heights for wrapped text.  QTreeView asks its delegate for a row's height with no width (it does not
    wrap when measuring), so a long value was drawn on one line and cut at the column's edge: this measures the
    text wrapped at its column's width."""

    def __init__(self, view: QTreeWidget):
        super().__init__(view)
        self.view = view

    def sizeHint(self, option, index):
        opt = QStyleOptionViewItem(option)
        width = self.view.header().sectionSize(index.column())
        if index.column() == 0:  # the first column also holds the tree's indentation
            depth, parent = 0, index.parent()
            while parent.isValid():
                depth, parent = depth + 1, parent.parent()
            width -= self.view.indentation() * (depth + int(self.view.rootIsDecorated()))
        opt.rect = QRect(0, 0, max(width, 1), 1 << 20)
        opt.features |= QStyleOptionViewItem.ViewItemFeature.WrapText
        return super().sizeHint(opt, index)


class ModelSidebar(QTreeWidget):
    def __init__(self, session, parent=None):
        super().__init__(parent)
        self.session = session
        self.setHeaderLabels(["property", "value"])
        self.setColumnWidth(0, 150)
        self.setAlternatingRowColors(True)
        # a long value (a padded batch's per-row counts, a VLM's image tokens) wraps onto more lines rather than
        # being cut at the column's edge; its tooltip still holds it all
        self.setWordWrap(True)
        self.setUniformRowHeights(False)
        self.setItemDelegate(_WrapDelegate(self))
        # a row's height is measured when the rows are laid out: again when the value column's width changes
        self.header().sectionResized.connect(lambda *_: self.scheduleDelayedItemsLayout())
        session.model_changed.connect(self.rebuild)
        session.result_changed.connect(self.rebuild)
        # the beam box (text box): the beam search row names the beam shown, the scores row marks the text shown
        session.selection_changed.connect(self._show_beam)
        self.rebuild()

    def _show_beam(self) -> None:
        """The Run section's beam search row, for the beam now shown, and a dual encoder's scores row, the text now
        shown marked (one cell: the rest of the tree stays as the user left it, sections expanded or not)."""
        r, run = self.session.result, self.section("Run")
        said = beam_summary(dict(r.info or {}), self.session.sel.batch) if r is not None else None
        scores = TextScores.from_info(r.info) if r is not None else None
        if run is None:
            return
        for i in range(run.childCount()):
            item = run.child(i)
            if item is not None and item.text(0) == BEAM_SEARCH and said is not None:
                item.setText(1, _breakable(_short(said, RUN_CHARS)))
                item.setToolTip(1, _tip(said))
            if item is not None and item.text(0) == SCORES and scores is not None:  # the text now shown marked
                lines = scores.lines(self.session.sel.batch, table=False)
                item.setText(1, "\n".join(_breakable(_short(x, RUN_CHARS)) for x in lines))
                item.setToolTip(1, _tip("\n".join(lines)))

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.scheduleDelayedItemsLayout()  # the last column stretches: wrapped rows need new heights

    def section(self, title: str) -> QTreeWidgetItem | None:
        for i in range(self.topLevelItemCount()):
            it = self.topLevelItem(i)
            if it is not None and it.text(0) == title:
                return it
        return None

    def values(self, title: str) -> dict[str, str]:
        it = self.section(title)
        if it is None:
            return {}
        children = (it.child(i) for i in range(it.childCount()))
        return {c.text(0).replace(BREAK, ""): c.text(1).replace(BREAK, "") for c in children if c is not None}

    def _add(self, title: str, rows, expanded: bool = True, total: int | None = None, cut: int = 120) -> None:
        """A section of at most :data:`MAX_ROWS` rows; ``total`` (when ``rows`` is already cut) counts them all."""
        rows = list(rows)
        total = len(rows) if total is None else total
        top = QTreeWidgetItem([title, ""])
        self.addTopLevelItem(top)
        for k, v in rows[:MAX_ROWS]:
            lines = v if isinstance(v, list) else [v]  # a list: a value of several lines (one per batch row)
            child = QTreeWidgetItem(
                [_breakable(_short(str(k), 200)), "\n".join(_breakable(_short(x, cut)) for x in lines)]
            )
            child.setToolTip(0, _tip(str(k)))  # a one-word name longer than its column ("image_preprocessing")
            child.setToolTip(1, _tip(v if not isinstance(v, list) else "\n".join(str(x) for x in v)))
            top.addChild(child)
        if total > MAX_ROWS:
            top.addChild(QTreeWidgetItem(["…", f"{total - MAX_ROWS:,} more (attnviz inspect MODEL lists them all)"]))
        top.setExpanded(expanded)

    def rebuild(self) -> None:
        self.clear()
        m = self.session.model
        r = self.session.result
        if m is None and r is None:
            self._add("Model", [("", "no model open")])
            return
        if m is None and r is not None and self.session.maps_path is not None:
            # an `attnviz extract` file: what it holds, where the Model section names the model
            self._add(MAPS_FILE, MapsFile.of(self.session.maps_path, r).rows())
        if m is not None:
            self._add(
                "Model",
                [
                    ("name", m.name),
                    ("file", PurePath(m.path)),
                    ("kind", model_kind_words(m)),
                    ("device", m.provider),
                    # the export lacks part of the model's eager attention: its maps are the export's (one line each)
                    *(("warning", note) for note in m.describe().get("fidelity") or ()),
                ],
            )
            self._add("Inputs", [(io.name, f"{io.dtype} {list(io.shape)}") for io in m.inputs])
            self._add(
                "Outputs",
                [(io.name, f"{io.dtype} {list(io.shape)}") for io in m.outputs],
                expanded=False,
            )
            sites = list(m.sites)
            if sites:
                self._add(
                    "Attention sites",
                    [(s.label, f"{s.heads or '?'} heads · {s.method} · {s.node}") for s in sites],
                    expanded=False,
                )
            else:
                why = m.no_attention_reason or "no attention found"
                self._add("Attention sites", [("none", why)])
            meta = m.metadata
            first = heapq.nsmallest(MAX_ROWS, meta.items())  # sorted, without sorting 200,000 entries
            self._add("Metadata", first, expanded=False, total=len(meta))
        if r is not None:
            info = dict(r.info or {})
            rows = []
            if "provider" in info:
                rows.append(("device used", info["provider"]))
            for k, v in (info.get("timings") or {}).items():
                rows.append((k, f"{v * 1000:.1f} ms" if isinstance(v, (int, float)) else v))
            rows.append(
                (
                    "maps",
                    f"{count(len(r.maps), 'site')}, "
                    + ", ".join(f"{b.name} {b.n_layers}×{b.n_heads}" for b in self.session.blocks),
                )
            )
            # a VLM's or captioner's words and image tokens apart; a padded batch's rows one per line
            rows += [(name, lines if len(lines) > 1 else lines[0]) for name, lines in token_lines(r)]
            beams = beam_lines(info)
            said = beam_summary(info, self.session.sel.batch)
            if said is not None:  # a beam search: how many beams, the one shown and its score; then each one
                rows.append((BEAM_SEARCH, said))
                rows.append(("beams", beams))
            elif r.generated:
                rows.append(("generated", " ".join(r.generated)))
            rows += _score_rows(info, self.session.sel.batch)
            # a maps file (no model, no outputs) shows the one extract kept in it
            pred = prediction(r, m.meta if m is not None else {}) or info.get("prediction")
            if pred:
                rows.append(("prediction", pred))
            timings = dict(m.timings) if m is not None else {}
            for k, v in timings.items():
                name = run_fact(k[:-2] if k.endswith("_s") else k, None)[0]
                rows.append((name, f"{v * 1000:.1f} ms" if isinstance(v, (int, float)) else v))
            for k, v in info.items():
                # already shown above (model section / input panel) or internal
                if k in (
                    "provider",
                    "timings",
                    "model",
                    "model_path",
                    "kind",
                    "text",
                    "text_pair",
                    "texts",  # the scores row names them
                    "text_scores",  # the scores row
                    "row_images",  # (the scores row names each row's image)
                    "image",
                    "generated_ids",
                    "beams",  # the beams row above
                    "rows",
                    "token_grids",  # each batch row's image-token grid (Image regions places them)
                    "image_grids",  # one prompt's several images' grids (the image tokens row says them)
                    "vision_grids",  # their patches' grids in the vision tower (its keys say img1(r,c), ...)
                    "vision_tower",  # a VLM's tower alone: its blocks say "vision" (the maps row above)
                    "fidelity",  # the Model section's warnings
                    "generate",  # the steps: the input panel's generate field (a maps file's: its own section)
                    "prediction",  # the prediction row above
                ) or v in (None, "", [], {}):
                    continue
                if said is not None and k in BEAM_KEYS:  # the beam search row says them
                    continue
                if k.endswith("_s") and isinstance(v, (int, float)):
                    rows.append((run_fact(k[:-2], None)[0], f"{v * 1000:.1f} ms"))
                elif k == "alignment":  # the model's declaration, as the Alignment view says it
                    declared = vm.declared_alignment(r)
                    if declared is not None:
                        (layer, head), conv = declared
                        rows.append(("alignment head", f"decoder layer {layer} head {head}, {conv} rows"))
                elif k == "word_times" and isinstance(v, list):  # drawn on the sound (Audio regions): a count here
                    rows.append(("word times", f"{len(v)} words, from the alignment heads"))
                else:
                    rows.append(run_fact(k, v))  # the engine's key and value in the user's words
            # the run's own words (notes that end in the fix: "…; choose ImageNet or CLIP"), never a file's
            # 60 MB metadata value: whole up to RUN_CHARS, where a value elsewhere is cut at 120
            self._add("Run", rows, cut=RUN_CHARS)
