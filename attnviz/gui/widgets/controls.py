"""View controls: batch row, block, layer, head, aggregation, layer range, mass threshold, scale, special tokens, step."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QGridLayout,
    QLabel,
    QLineEdit,
    QSlider,
    QSpinBox,
    QWidget,
)

from attnviz.core.rows import row_noun, scored_rows
from attnviz.core.text_scores import TextScores
from attnviz.core.view import SCALES, SPEECH_PERCENTILE, ViewError, check_vmax, has_kind_scale, n_steps, pads_clip
from attnviz.core.view.palette import LOG_DECADES
from attnviz.gui.selection import MODE_TITLES, MODES
from attnviz.gui.widgets.elided_combo import ElidedCombo
from attnviz.gui.widgets.row_box import RowSpinBox

ROW_TIP = "which row of a padded batch to show (each row keeps its own tokens)"
SCALE_TIP = (
    "the top of the colour bar: 0–1 (weights are probabilities; near-uniform attention stays faint), the "
    "largest weight of any head of the block (heads compare; on Image regions, any head's weight on the image from "
    "the query shown), this map's own maximum (most contrast; these two, on a zoomed-in Head map, those of the "
    "positions in view), or each query row stretched to its own maximum (long causal maps, where row i spreads over "
    "i + 1 keys; the hover still reads the weight)"
)
VMAX_TIP = (
    "the top of the colour bar set by hand (a weight, e.g. 0.5; `attnviz figure --vmax`), for every view that draws "
    "one: weights above it take the top colour.  Empty: the colour scale's own top"
)
VMAX_EMPTY = "auto"  # the box's placeholder: no top set by hand
# the colour-scale box while a colour top is set by hand: greyed, saying so (it showed "fixed 0–1", a top not in force,
# and only the colour bar's label said otherwise); every view that draws a scale takes the top over the scale's
SCALE_BY_HAND = "top set by hand ({top:g})"
SCALE_BY_HAND_TIP = (
    "the colour top set by hand ({top:g}) is the top of every colour bar, whatever the colour scale: clear the "
    "colour-top box to choose a scale again"
)
# the Overview of a kind of model with a scale of its own (a speech model's: a top per block, core.view.overview_scale):
# the box offers it as a fourth choice, shown while it is in force (the box said "fixed 0–1" while it was drawn)
KIND_SCALE = "kind"  # the item's data: Selection.kind_scale, not a value of Selection.scale
KIND_SCALE_TIP = (
    "the Overview of a speech model draws each block (encoder self-attention, decoder self-attention, "
    "cross-attention) on its own scale, topped at the {q:g}th percentile of its heads' cells, the top on each "
    "block's small bar (their keys differ: one top over all was the encoder's, and saturated the decoder).  Choose "
    "fixed 0–1, shared or stretched for one scale over every block, or set a colour top by hand"
)
LOG_TIP = f"colours on a log scale, {LOG_DECADES} decades below the top weight (weak weights become visible)"
PADDING_TIP = (
    "the maps' frame axes end with the clip (the model's window pads it with silence: Whisper's 30 s); checked, they "
    "show the padding's frames too, as `figure --padding` draws them"
)
BEAM_TIP = "which hypothesis of the beam search to show, 0 the best (each with its own beam's attention)"
# a dual encoder's candidate texts: one image against them, so only the text tower's maps change
TEXT_TIP = (
    "which candidate text to show (each text's score is in the Run section): the text tower's maps are that "
    "text's; the image tower's maps are the same for every text (the one image's)"
)
IMAGE_TIP = (
    "which image to show (each image's score against the text is in the Run section): the image tower's maps and "
    "the picture are that image's; the text tower's maps are the same for every image (the one text's)"
)
PAIR_TIP = (
    "which image × text pair to show (row r: image r ÷ texts, text r mod texts; the score table is in the Run "
    "section): the image tower's maps are the pair's image's, the text tower's its text's"
)
ROW_TIPS = {"beam": BEAM_TIP, "text": TEXT_TIP, "image": IMAGE_TIP, "pair": PAIR_TIP}


class Controls(QWidget):
    """Edits ``session.sel``; mirrors it back when it changes elsewhere (keyboard, clicks).  ``invalid(text, param)``:
    a value typed into a box cannot be used (the window shows its one message)."""

    invalid = Signal(str, str)

    def __init__(self, session, parent=None):
        super().__init__(parent)
        self.session = session
        self.batch = RowSpinBox()  # a dual encoder's rows named (image 1 × text 0)
        self.batch.setToolTip(ROW_TIP)
        self.block = ElidedCombo()  # a VLM's block names are long
        self.layer = QSpinBox()
        self.head = QSpinBox()
        self.mode = QComboBox()
        for m in MODES:
            self.mode.addItem(MODE_TITLES[m], m)
        self.layer_lo = QSpinBox()
        self.layer_hi = QSpinBox()
        self.keep = QDoubleSpinBox()
        self.keep.setRange(1, 100)
        self.keep.setSuffix(" %")
        self.keep.setDecimals(0)
        self.keep.setValue(100)
        self.keep.setToolTip("keep, per row, the largest weights holding this share of the row's mass")
        self.log = QCheckBox("log scale")
        self.log.setToolTip(LOG_TIP)
        self.scale = QComboBox()
        for name, words in SCALES.items():
            self.scale.addItem(words, name)
        self.scale.setToolTip(SCALE_TIP)
        # the colour scale's top by hand: typed, as `figure --vmax` takes it (a spin box would round it, or need a
        # range and a step that suit 1e-4 and 0.9 alike); Selection.vmax holds it, every scale-drawing view reads it
        self.vmax = QLineEdit()
        self.vmax.setPlaceholderText(VMAX_EMPTY)
        self.vmax.setClearButtonEnabled(True)
        self.vmax.setToolTip(VMAX_TIP)
        self.hide_special = QCheckBox("hide special tokens")
        self.hide_special.setToolTip("drop [CLS]/[SEP]/BOS/EOS/pad rows and columns and renormalise rows")
        # a speech clip's maps end with the clip (core.view.clip); shown for a model whose window pads the clip alone
        self.padding = QCheckBox("show padding after the clip")
        self.padding.setToolTip(PADDING_TIP)
        self.step = QSlider(Qt.Horizontal)
        self.step.setRange(0, 0)
        self.step_label = QLabel("step –")
        g = QGridLayout(self)
        g.setContentsMargins(4, 4, 4, 4)
        rows = [
            ("batch row", self.batch),
            ("block", self.block),
            ("layer", self.layer),
            ("head", self.head),
            ("show", self.mode),
            ("layers from", self.layer_lo),
            ("layers to", self.layer_hi),
            ("keep mass", self.keep),
            ("colour scale", self.scale),
            ("colour top", self.vmax),
        ]
        self.labels: dict[str, QLabel] = {}
        for r, (name, w) in enumerate(rows):
            self.labels[name] = QLabel(name)
            g.addWidget(self.labels[name], r, 0)
            g.addWidget(w, r, 1)
        r = len(rows)
        g.addWidget(self.log, r, 0, 1, 2)
        g.addWidget(self.hide_special, r + 1, 0, 1, 2)
        g.addWidget(self.padding, r + 2, 0, 1, 2)
        g.addWidget(self.step_label, r + 3, 0)
        g.addWidget(self.step, r + 3, 1)
        g.setRowStretch(r + 4, 1)
        self.batch.valueChanged.connect(lambda v: self._set(batch=v))
        self.block.currentIndexChanged.connect(lambda i: self._set(block=i))
        self.layer.valueChanged.connect(lambda v: self._set(layer=v))
        self.head.valueChanged.connect(lambda v: self._set(head=v))
        self.mode.currentIndexChanged.connect(lambda i: self._set(mode=self.mode.itemData(i)))
        self.layer_lo.valueChanged.connect(lambda v: self._set(layer_lo=v))
        self.layer_hi.valueChanged.connect(lambda v: self._set(layer_hi=v))
        self.keep.valueChanged.connect(lambda v: self._set(keep=v / 100.0))
        self.log.toggled.connect(lambda on: self._set(log=on))
        self.scale.currentIndexChanged.connect(self._on_scale)
        self.vmax.editingFinished.connect(self._on_vmax)
        self.hide_special.toggled.connect(lambda on: self._set(hide_special=on))
        self.padding.toggled.connect(lambda on: self._set(padding=on))
        self.step.valueChanged.connect(self._on_step)
        session.result_changed.connect(self.rebuild)
        session.selection_changed.connect(self.sync)
        self._syncing = False
        self._scale_note: str | None = None  # the shown view's own scale (set_scale_note), else None
        self.scale_field = "scale"  # the field the colour-scale box sets (set_scale_field: a view's own)
        self._kind_offered = False  # the view shown draws its kind's own scale where it has one (the Overview)
        self.rebuild()

    def _set(self, **changes) -> None:
        if not self._syncing:
            self.session.select(**changes)

    def _on_scale(self, i: int) -> None:
        """A scale chosen in the box: the view's field, and (the token maps' box) the Overview's kind scale off, so
        the choice wins there too; the kind's own item back on."""
        data = self.scale.itemData(i)
        if data == KIND_SCALE:
            self._set(kind_scale=True)
        elif data is not None:
            self._set(**{self.scale_field: data}, **({"kind_scale": False} if self.scale_field == "scale" else {}))

    def _on_vmax(self) -> None:
        """The typed top: set (or, empty, cleared); a bad one (0, negative, NaN, text) is refused in one message
        and the box shows the top in force again."""
        try:
            top = check_vmax(self.vmax.text(), "colour top")  # (the box's name: the message names it)
        except ViewError as e:
            self._show_vmax(self.session.sel.vmax)
            self.invalid.emit(str(e), "vmax")
            return
        self._set(vmax=top)
        self._show_vmax(self.session.sel.vmax)  # as the selection holds it ("0.50" reads back "0.5")

    def _show_vmax(self, top: float | None) -> None:
        text = "" if top is None else f"{top:g}"
        if self.vmax.text() != text:
            self.vmax.setText(text)

    def _on_step(self, v: int) -> None:
        g = n_steps(self.session.result, self.session.sel.batch)  # a beam search's: the shown beam's own
        self._set(step=-1 if v >= g else v)

    def rebuild(self) -> None:
        self._syncing = True
        try:
            self.block.clear()
            for b in self.session.blocks:
                self.block.addItem(f"{b.name} ({b.n_layers}×{b.n_heads})")
            rows = self.session.result.batch_size if self.session.result is not None else 1
            self.batch.setRange(0, max(rows, 1) - 1)
            self.batch.setEnabled(rows > 1)
            noun = row_noun(self.session.result)  # a beam search's rows are its hypotheses, best first
            self.labels["batch row"].setText(noun)
            self.batch.setToolTip(ROW_TIPS.get(noun, ROW_TIP))
            self.batch.set_names(_row_names(self.session.result))
            g = n_steps(self.session.result, self.session.sel.batch)
            self.step.setRange(0, max(0, g))
            self.step.setValue(g)
            self.step.setEnabled(g > 0)
            self.padding.setVisible(pads_clip(self.session.result, self.session.blocks))
        finally:
            self._syncing = False
        self.sync()

    def set_scale_field(self, field: str) -> None:
        """The selection field the colour-scale box shows and sets: ``scale``, or a view's own (views.base.View
        .scale_field: Image regions' ``image_scale``, stretched by default)."""
        if field != self.scale_field:
            self.scale_field = field
            self.sync()

    def set_scale_note(self, note: str | None) -> None:
        """The view shown draws on its own scale (``note`` says how: views.base.View.scale_note): the colour-scale,
        colour-top and log boxes greyed, their tooltip the view's words; ``None``: both back as they were."""
        self._scale_note = note
        for box, tip in ((self.vmax, VMAX_TIP), (self.log, LOG_TIP)):
            box.setEnabled(note is None)
            box.setToolTip(tip if note is None else note)
        self._show_scale()

    def set_kind_scale_offered(self, offered: bool) -> None:
        """The view shown (the Overview) draws its kind of model's own scale where it has one: the box offers it."""
        if offered != self._kind_offered:
            self._kind_offered = offered
            self._show_scale()

    def _kind_item(self) -> bool:
        """The box's fourth item, the kind's own scale, there while offered for this result (added or removed)."""
        s = self.session
        want = self._kind_offered and self.scale_field == "scale" and has_kind_scale(s.result, s.blocks)
        at = self.scale.findData(KIND_SCALE)
        if want and at < 0:
            self.scale.addItem(f"per block: {SPEECH_PERCENTILE:g}th percentile", KIND_SCALE)
        elif not want and at >= 0:
            self.scale.removeItem(at)
        return want

    def _show_scale(self) -> None:
        """The colour-scale box: the selection's scale, or (a colour top set by hand, which every view that draws a
        scale takes over the scale) greyed and saying so, its tooltip how to choose a scale again."""
        note, top = self._scale_note, self.session.sel.vmax
        by_hand = note is None and top is not None
        syncing, self._syncing = self._syncing, True  # (showing the state is no choice of the user's)
        try:
            kind = self._kind_item() and self.session.sel.kind_scale and not by_hand
            tip = KIND_SCALE_TIP.format(q=SPEECH_PERCENTILE) if kind else SCALE_TIP
            self.scale.setEnabled(note is None and not by_hand)
            self.scale.setToolTip(note or (SCALE_BY_HAND_TIP.format(top=top) if by_hand else tip))
            self.scale.setPlaceholderText(SCALE_BY_HAND.format(top=top) if by_hand else "")
            field = KIND_SCALE if kind else getattr(self.session.sel, self.scale_field)
            self.scale.setCurrentIndex(-1 if by_hand else max(0, self.scale.findData(field)))
        finally:
            self._syncing = syncing

    def sync(self) -> None:
        s = self.session
        sel = s.sel
        blk = s.block
        self._syncing = True
        try:
            enabled = blk is not None
            for w in (self.block, self.layer, self.head, self.mode, self.layer_lo, self.layer_hi, self.keep):
                w.setEnabled(enabled)
            if blk is None:
                return
            self.batch.setValue(sel.batch)
            self.block.setCurrentIndex(sel.block)
            self.layer.setRange(0, blk.n_layers - 1)
            self.layer.setValue(sel.layer)
            self.head.setRange(0, blk.heads_in(sel.layer) - 1)
            self.head.setValue(sel.head)
            self.head.setEnabled(sel.mode == "head")
            self.layer.setEnabled(sel.mode == "head")
            self.mode.setCurrentIndex(MODES.index(sel.mode))
            for w in (self.layer_lo, self.layer_hi):
                w.setRange(0, blk.n_layers - 1)
                w.setEnabled(sel.mode != "head")
            self.layer_lo.setValue(sel.layer_lo)
            self.layer_hi.setValue(blk.n_layers - 1 if sel.layer_hi < 0 else sel.layer_hi)
            self.keep.setValue(round(sel.keep * 100))
            self.log.setChecked(sel.log)
            if not self.vmax.hasFocus():  # (a top being typed is not overwritten by a redraw)
                self._show_vmax(sel.vmax)
            self._show_scale()
            self.hide_special.setChecked(sel.hide_special)
            self.padding.setChecked(sel.padding)
            g = n_steps(s.result, sel.batch)  # a beam's own length: the slider follows the beam shown
            self.step.setRange(0, max(0, g))
            self.step.setValue(g if sel.step < 0 else min(sel.step, g))
            self.step_label.setText(f"step {g if sel.step < 0 else min(sel.step + 1, g)}/{g}" if g else "step –")
        finally:
            self._syncing = False


def _row_names(result) -> list[str]:
    """What each batch row holds where the rows are a dual encoder's scored pairs (else none: a bare number)."""
    scores = TextScores.from_info(result.info) if result is not None and scored_rows(result) else None
    return [scores.row_short(r) for r in range(len(scores.scores))] if scores is not None else []
