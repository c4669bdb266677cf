"""Input panel: text, text pair, image, audio (and how much of it), generation steps, run / cancel, progress."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QWidget,
)

from attnviz.app.fields import LABELS
from attnviz.app.rules import takes_audio
from attnviz.core import preprocess
from attnviz.gui.widgets.texts_box import TextsBox, split_lines
from attnviz.runtime.audio import AUDIO_SUFFIXES
from attnviz.runtime.request import MAX_BEAMS, AnalyzeRequest

if TYPE_CHECKING:
    from attnviz.runtime.protocol import AttnModel

EDITED = "input changed: press Run to see it"  # the progress bar after an edit (the views keep the last run)
MAX_SECONDS = 86400.0  # a day of sound: the field's top (the reader takes the first S seconds from the header)
IMAGE_FILTER = "Images (*.png *.jpg *.jpeg *.bmp *.gif *.webp *.tif *.tiff)"
AUDIO_FILTER = f"Sound files ({' '.join('*' + s for s in AUDIO_SUFFIXES)});;All files (*)"  # what load_audio reads
# a speech model's decoder text is its transcript: what `--text-pair` means on the command line for the same model
TRANSCRIPT_HINT = "transcript, or empty to generate one"
TRANSCRIPT_TIP = (
    "The transcript is fed to the decoder after the model's forced prompt (<|startoftranscript|>, language, task), "
    "exactly like --text-pair on the command line: with generate 0 each word's attention over the sound is shown "
    "as given. Leave it empty to generate a transcript from the sound."
)
TEXT_HINT = "input text (Enter runs)"
# a captioning model's text is its decoder's: what `--text` means on the command line for the same model
CAPTION_HINT = "caption, or empty to generate one"
CAPTION_TIP = (
    "The caption is fed to the decoder after its start token, exactly like --text on the command line. "
    "With generate > 0 the model continues it; with generate 0 every caption word's attention over the "
    "image is shown as given (each word at the decoder row that chose it). Leave it empty to generate a caption "
    "from the image alone."
)


def takes_caption(model: AttnModel | None) -> bool:
    """A vision model whose decoder reads tokens (image captioning, VisionEncoderDecoder folders)."""
    if model is None or model.kind != "vision-decoder":
        return False
    return bool({"decoder_tokens", "tokens"} & set(model.roles.values()))


IMAGE_SEPARATOR = "; "  # between the files of one prompt's several images in the image box


def several_images(text: str | None) -> str | list[str] | None:
    """The image box's text as the request's image: one path, or the paths of several images (``a.png; b.png``)."""
    if not text:
        return text
    paths = [p.strip() for p in text.split(";") if p.strip()]
    return paths if len(paths) > 1 else text


def takes_image_and_text(model: AttnModel | None) -> bool:
    """A dual encoder (CLIP, SigLIP whole): an image tower and a text tower, both fed on every run."""
    return model is not None and model.kind == "vision" and "tokens" in set(model.roles.values())


# the text boxes' length cap: Qt's largest (its default, 32,767 characters, cut long documents without a word)
TEXT_MAX_CHARS = 2**31 - 1


class InputPanel(QWidget):
    """Signals: ``run_requested()`` (the window then asks :meth:`request` for what to run); ``cancel_requested()``."""

    run_requested = Signal()
    cancel_requested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.text = QLineEdit()
        self.text.setPlaceholderText(TEXT_HINT)
        self.text_pair = QLineEdit()
        self.text_pair.setPlaceholderText("optional second sentence")
        for box in (self.text, self.text_pair):
            # Qt's default cap (32,767 characters) silently cut a pasted or `open --text` long document, about
            # 7,000 tokens of English: the run was of another text than the one given, and nothing said so
            box.setMaxLength(TEXT_MAX_CHARS)
        # a dual encoder's candidate texts, one a line (shown in the text row's place: configure_for)
        self.texts = TextsBox()
        self.image = QLineEdit()
        self.image.setPlaceholderText("image file for vision / captioning models (several: a.png; b.png)")
        self.browse = QPushButton("…")
        self.browse.setFixedWidth(28)
        self.audio = QLineEdit()
        self.audio.setPlaceholderText("sound file (WAV, FLAC, OGG) for speech models")
        self.audio_browse = QPushButton("…")
        self.audio_browse.setFixedWidth(28)
        # what `--max-seconds S` sets on the command line: a long recording's refusal names this field
        self.max_seconds = QDoubleSpinBox()
        self.max_seconds.setRange(0.0, MAX_SECONDS)
        self.max_seconds.setDecimals(2)
        self.max_seconds.setSuffix(" s")
        self.max_seconds.setSpecialValueText("whole clip")  # 0: not cut (a clip over the model's limit is refused)
        self.max_seconds.setToolTip(
            "keep only the first S seconds of the sound (whole clip: all of it; one longer than the model takes "
            "is refused, naming the value to set here), as --max-seconds S on the command line"
        )
        # image normalisation: the model's metadata by default, or a named preset (what was used shows in the run info)
        self.preprocess = QComboBox()
        self.preprocess.addItem("model default", None)
        for p in preprocess.PRESETS.values():
            self.preprocess.addItem({"imagenet": "ImageNet", "clip": "CLIP"}.get(p.name, p.name), p.name)
            self.preprocess.setItemData(self.preprocess.count() - 1, p.note, Qt.ToolTipRole)
        self.preprocess.setToolTip(
            "image mean/std: the model's metadata (else the 0.5 preset, said in the run info) or a preset"
        )
        self.image_size = QSpinBox()
        self.image_size.setRange(0, 4096)
        self.image_size.setSpecialValueText("model default")
        self.image_size.setSuffix(" px")
        self.image_size.setToolTip("resize images to N × N pixels (model default: metadata or the input shape)")
        self.generate = QSpinBox()
        self.generate.setRange(0, 512)
        self.generate.setToolTip("greedy generation steps for decoder / encoder-decoder models (0 = just run)")
        self.beams = QSpinBox()
        self.beams.setRange(1, MAX_BEAMS)
        self.beams.setToolTip(
            "beam search with this many beams (1 = greedy); every finished hypothesis becomes a row, best first, "
            "with its own beam's attention (the beam box beside the views switches them)"
        )
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(0, 1_000_000)
        self.max_tokens.setSpecialValueText("all")  # 0: keep every token (the model's position limit is checked)
        self.max_tokens.setToolTip(
            "keep only the first N tokens of the text (all: every token; a text longer than the model's positions "
            "offers to truncate); a text pair keeps its special tokens and loses tokens of the longer sentence first "
            "(Hugging Face tokenizers' longest_first, as a corpus run cuts it); an encoder–decoder's source keeps its "
            "first N tokens and its target the decoder's first N rows (the start token, then the target's tokens)"
        )
        self.run_button = QPushButton("Run")
        self.run_button.setDefault(True)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.progress.setTextVisible(True)
        self.progress.setFormat("idle")
        self.progress.setValue(0)
        img_row = QHBoxLayout()
        img_row.addWidget(self.image, 1)
        img_row.addWidget(self.browse)
        audio_row = QHBoxLayout()
        audio_row.addWidget(self.audio, 1)
        audio_row.addWidget(self.audio_browse)
        btn_row = QHBoxLayout()
        btn_row.addWidget(self.run_button)
        btn_row.addWidget(self.cancel_button)
        form = self.form = QFormLayout(self)
        form.addRow("text", self.text)
        form.addRow("texts", self.texts)
        form.setRowVisible(self.texts, False)
        form.addRow("text pair", self.text_pair)
        form.addRow("image", img_row)
        form.addRow("audio", audio_row)
        form.addRow(LABELS["max_seconds"], self.max_seconds)
        form.setRowVisible(self.max_seconds, False)  # a speech model's only (configure_for)
        self.max_seconds.setEnabled(False)
        prep_row = QHBoxLayout()
        prep_row.addWidget(self.preprocess, 1)
        prep_row.addWidget(self.image_size)
        form.addRow("normalise", prep_row)
        form.addRow(LABELS["generate"], self.generate)  # the words a refusal names them by (app/fields.py)
        form.addRow(LABELS["beams"], self.beams)
        form.addRow(LABELS["max_tokens"], self.max_tokens)
        form.addRow(btn_row)
        form.addRow(self.progress)
        self.text.returnPressed.connect(self.request_run)
        self.texts.run_requested.connect(self.request_run)
        self.texts.textChanged.connect(self._on_edited)
        self.text_pair.returnPressed.connect(self.request_run)
        self.image.returnPressed.connect(self.request_run)
        self.audio.returnPressed.connect(self.request_run)
        self.audio_browse.clicked.connect(self._browse_audio)
        self.run_button.clicked.connect(self.request_run)
        self.cancel_button.clicked.connect(self.cancel_requested)
        self.browse.clicked.connect(self._browse)
        # the fields the shown result was run on: an edit after it says the views still show the old input
        self._done_values: dict | None = None
        self._busy = False
        self._pair = False  # a dual encoder: the text box takes several candidate texts (configure_for)
        for box in (self.text, self.text_pair, self.image, self.audio):
            box.textChanged.connect(self._on_edited)
        for spin in (self.generate, self.beams, self.max_tokens, self.image_size, self.max_seconds):
            spin.valueChanged.connect(self._on_edited)
        self.preprocess.currentIndexChanged.connect(self._on_edited)

    def request(self) -> AnalyzeRequest:
        """What the fields ask for, as the same :class:`AnalyzeRequest` the CLI builds from the equivalent flags
        (checked by the same rule: a bad value raises the same one-line :class:`AttnvizError`)."""
        values = self.values()
        text = split_lines(values["text"]) if self._pair else values["text"]
        return AnalyzeRequest(**values | {"image": several_images(values["image"]), "text": text})

    def values(self) -> dict:
        """The fields by :class:`AnalyzeRequest` field name (also what :mod:`attnviz.gui.restore` saves).  Fields
        the current model does not take are disabled and not sent; an empty box is a flag not given."""
        return {
            "text": self._text(),
            "text_pair": (self.text_pair.text() or None) if self.text_pair.isEnabled() else None,
            "image": (self.image.text().strip() or None) if self.image.isEnabled() else None,
            "audio": (self.audio.text().strip() or None) if self.audio.isEnabled() else None,
            "generate": int(self.generate.value()) if self.generate.isEnabled() else 0,
            # beams search a generation: with none to search (generate 0, a model that generates nothing) greedy
            "beams": int(self.beams.value()) if self.generate.isEnabled() and self.generate.value() else 1,
            "max_tokens": (int(self.max_tokens.value()) or None) if self.max_tokens.isEnabled() else None,
            "max_seconds": (float(self.max_seconds.value()) or None) if self.max_seconds.isEnabled() else None,
            **self.image_options(),
        }

    def _text(self) -> str | None:
        """The text box's text; a dual encoder's: its texts box's lines (one text a line, split by request)."""
        if self._pair:
            return self.texts.toPlainText().strip() or None
        return (self.text.text() or None) if self.text.isEnabled() else None

    def image_options(self) -> dict:
        """image_mean / image_std / image_size for the runtime, only for what the user chose."""
        out: dict = {}
        if not self.preprocess.isEnabled():
            return out
        name = self.preprocess.currentData()
        if name:
            out["image_mean"], out["image_std"] = preprocess.stats(name)
        if self.image_size.value():
            out["image_size"] = (self.image_size.value(), self.image_size.value())
        return out

    def set_values(
        self,
        text=None,
        text_pair=None,
        image=None,
        generate=None,
        max_tokens=None,
        audio=None,
        beams=None,
        max_seconds=None,
    ) -> None:
        if text is not None:  # (a list, or lines: a dual encoder's texts, one a line in its texts box)
            several = isinstance(text, (list, tuple))
            # another model's one text as given (a document's line breaks kept); a list's texts as before the box
            self.text.setText("; ".join(map(str, text)) if several else str(text))
            self.texts.setPlainText("\n".join(map(str, text)) if several else str(text))
        if text_pair is not None:
            self.text_pair.setText(text_pair)
        if image is not None:
            self.image.setText(
                IMAGE_SEPARATOR.join(map(str, image)) if isinstance(image, (list, tuple)) else str(image)
            )
        if audio is not None:
            self.audio.setText(str(audio))
        if generate is not None:
            self.generate.setValue(int(generate))
        if beams is not None:
            self.beams.setValue(int(beams))
        if max_tokens is not None:
            self.max_tokens.setValue(int(max_tokens))
        if max_seconds is not None:
            self.max_seconds.setValue(float(max_seconds))

    def configure_for(self, model: AttnModel | None) -> None:
        """Show the inputs the model can take."""
        kind = model.kind if model is not None else ""
        vision = kind.startswith("vision")
        self.image.setEnabled(vision or model is None)
        self.browse.setEnabled(vision or model is None)
        caption = takes_caption(model)
        self.text.setEnabled(not vision or caption or takes_image_and_text(model) or model is None)
        pair = takes_image_and_text(model)
        if pair != self._pair:  # the text typed goes with it into the box shown
            if pair and not self.texts.toPlainText().strip():
                self.texts.setPlainText(self.text.text())
            elif not pair and not self.text.text():
                self.text.setText("; ".join(t for t in self.texts.toPlainText().splitlines() if t.strip()))
        self._pair = pair
        self.form.setRowVisible(self.text, not pair)
        self.form.setRowVisible(self.texts, pair)
        self.text.setPlaceholderText(CAPTION_HINT if caption else TEXT_HINT)
        self.text.setToolTip(CAPTION_TIP if caption else "")
        label = self.form.labelForField(self.text)
        if label is not None:
            label.setText("caption" if caption else "text")
        speech = takes_audio(model)
        self.audio.setEnabled(speech or model is None)
        self.audio_browse.setEnabled(speech or model is None)
        self.max_seconds.setEnabled(speech)  # disabled: not sent (values); hidden: not there to wonder about
        self.form.setRowVisible(self.max_seconds, speech)
        if speech:  # the encoder hears the sound; the only text is the decoder's transcript
            self.text.setEnabled(False)
        self.text_pair.setEnabled(not vision or model is None)
        self.text_pair.setPlaceholderText(TRANSCRIPT_HINT if speech else "optional second sentence")
        self.text_pair.setToolTip(TRANSCRIPT_TIP if speech else "")
        pair_label = self.form.labelForField(self.text_pair)
        if pair_label is not None:
            pair_label.setText("transcript" if speech else "text pair")
        self.max_tokens.setEnabled(not vision or model is None)
        self.preprocess.setEnabled(vision or model is None)
        self.image_size.setEnabled(vision or model is None)
        self.generate.setEnabled(kind in ("decoder", "encoder-decoder", "vision-decoder") or model is None)
        self.beams.setEnabled(self.generate.isEnabled())

    def request_run(self) -> None:
        self.run_requested.emit()

    def set_busy(self, busy: bool, text: str = "") -> None:
        self._busy = busy
        if not busy and text == "done":  # the views now show these fields' run
            self._done_values = self.values()
        self.cancel_button.setEnabled(busy)
        if busy:
            self.progress.setRange(0, 0)  # busy indicator until a percentage arrives
            self.progress.setFormat(text or "running…")
        else:
            self.progress.setRange(0, 100)
            self.progress.setValue(100 if text == "done" else 0)
            self.progress.setFormat(text or "idle")

    def _on_edited(self, *_) -> None:
        """An input edited after a run: "done" would read as the views showing it; they show the run's input."""
        if self._busy or self._done_values is None:
            return
        same = self.values() == self._done_values
        self.progress.setRange(0, 100)
        self.progress.setValue(100 if same else 0)
        self.progress.setFormat("done" if same else EDITED)

    def set_progress(self, percent: int, text: str) -> None:
        if percent >= 0:
            self.progress.setRange(0, 100)
            self.progress.setValue(percent)
        self.progress.setFormat(text or "%p%")

    def _browse_audio(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose a sound file", "", AUDIO_FILTER)
        if path:
            self.audio.setText(path)
            self.request_run()

    def _browse(self) -> None:
        # several files chosen at once: several images in one prompt (a vision–language model), in order
        paths, _ = QFileDialog.getOpenFileNames(self, "Choose an image (or several)", "", IMAGE_FILTER)
        if paths:
            self.image.setText(IMAGE_SEPARATOR.join(paths))
            self.request_run()
