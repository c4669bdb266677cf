"""Audio regions: a speech model's attention over the sound, along time.

The waveform and the log-mel spectrogram of the clip, a heat band and a curve of the query's attention over the
encoder's frames (20 ms each for Whisper), all on one time axis.  The strip of words above makes a word the query
(the decoder's cross-attention: where in the sound that word looked); a click on the waveform or the spectrogram
makes that frame the query (the encoder's self-attention: where that instant looks).  Both are the session's
selection (block + query), so File ▸ Export view draws the same through :func:`attnviz.core.audio_view.audio_view`.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QVBoxLayout

from attnviz.app.fields import WINDOW
from attnviz.core import audio_view as av
from attnviz.core.view import query_names
from attnviz.core.view_names import tab_title
from attnviz.gui import style
from attnviz.gui.views import declared as declared_heads
from attnviz.gui.views.base import View, info_label
from attnviz.gui.widgets.query_buttons import QueryButtons

WAVE_BRUSH = (89, 89, 89)  # the figure's 0.35 grey
# panel heights relative to each other, as the figure's (waveform, spectrogram, heat band, curve)
PANEL_STRETCH = (75, 100, 14, 85)
LEFT_BAND = 48  # px: each panel's left axis band at least (the panels' time axes line up)


def _region(span: tuple[float, float], colour: str, alpha: int) -> pg.LinearRegionItem:
    c = pg.mkColor(colour)
    c.setAlpha(alpha)
    item = pg.LinearRegionItem(values=span, movable=False, brush=pg.mkBrush(c), pen=pg.mkPen(None))
    item.setZValue(-5)
    return item


class AudioRegionsView(View):
    title = tab_title("audio")
    scale_note = "Audio regions draw each word's weights over the frames on their own scale (the curve's axis)"

    def __init__(self, session, parent=None):
        super().__init__(session, parent)
        self.view: av.AudioView | None = None
        self._words_key: tuple | None = None

    def build(self) -> None:
        style.configure()
        self.word_bar = QueryButtons()
        self.glw = pg.GraphicsLayoutWidget()
        self.plots: list[pg.PlotItem] = []
        for i, stretch in enumerate(PANEL_STRETCH):
            p = self.glw.addPlot(row=i, col=0, enableMenu=False)
            p.setMouseEnabled(x=False, y=False)
            p.hideButtons()
            p.getAxis("left").setWidth(LEFT_BAND)
            for side in ("left", "bottom"):  # seconds and weights as they are, no "(x0.001)" on the label
                p.getAxis(side).enableAutoSIPrefix(False)
            if i:
                p.setXLink(self.plots[0])
            if i < len(PANEL_STRETCH) - 1:
                p.getAxis("bottom").setStyle(showValues=False)
            self.glw.ci.layout.setRowStretchFactor(i, stretch)
            self.plots.append(p)
        self.wave_plot, self.spec_plot, self.band_plot, self.curve_plot = self.plots
        self.wave_plot.setLabel("left", "sound")
        self.wave_plot.getAxis("left").setStyle(showValues=False)
        self.spec_plot.setLabel("left", "mel")
        self.band_plot.getAxis("left").setStyle(showValues=False)
        self.band_plot.setMaximumHeight(30)  # a band, as in the figure: the curve below says the values
        self.curve_plot.setLabel("left", "weight")
        self.curve_plot.setLabel("bottom", "time (s)")
        # the waveform: min and max per bin, filled between
        self.wave_lo = pg.PlotDataItem(pen=pg.mkPen(WAVE_BRUSH, width=0.5))
        self.wave_hi = pg.PlotDataItem(pen=pg.mkPen(WAVE_BRUSH, width=0.5))
        self.wave_fill = pg.FillBetweenItem(self.wave_lo, self.wave_hi, brush=pg.mkBrush(WAVE_BRUSH))
        for it in (self.wave_lo, self.wave_hi, self.wave_fill):
            self.wave_plot.addItem(it)
        self.spec_item = pg.ImageItem(axisOrder="row-major")  # grey levels 0..1, the default grey LUT
        self.spec_plot.addItem(self.spec_item)
        self.band_item = pg.ImageItem(axisOrder="row-major")
        self.band_item.setLookupTable(style.lut(style.HEAT_NAME))
        self.band_plot.addItem(self.band_item)
        fill = pg.mkColor(av.CURVE_COLOUR)
        fill.setAlpha(64)
        self.curve_item = pg.PlotDataItem(
            pen=pg.mkPen(av.CURVE_COLOUR, width=1.5), fillLevel=0.0, brush=pg.mkBrush(fill)
        )
        self.curve_plot.addItem(self.curve_item)
        self.marks: list[
            tuple[pg.PlotItem, pg.LinearRegionItem]
        ] = []  # the clicked frame, on the waveform and the spectrogram
        self.span_items: list = []  # word spans (timestamps) on the waveform
        self.glw.scene().sigMouseClicked.connect(self._on_click)
        self.info = info_label()
        lay = QVBoxLayout(self.body)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addWidget(self.word_bar)
        lay.addWidget(self.info)
        lay.addWidget(self.glw, 1)

    # -- which block / which query --------------------------------------------
    def blocks(self) -> tuple[int | None, int | None] | None:
        s = self.session
        return av.audio_blocks(s.result, s.blocks) if s.result is not None else None

    def source_block(self) -> int | None:
        """The block this view draws for the session's selection (the window selects it when the tab is shown)."""
        s = self.session
        src = av.audio_source(s.result, s.blocks, s.sel) if s.result is not None else None
        return src[0] if src is not None else None

    def reason(self) -> str | None:
        why = super().reason()
        if why:
            return why
        if self.blocks() is None:
            return av.no_audio(WINDOW) + "."
        return None

    def on_result(self) -> None:
        self._words_key = None
        found = self.blocks()
        if found is not None and found[0] is not None:  # declared alignment heads: opened on, as Alignment does
            declared_heads.open_on_declared(self.session, found[0])

    def select_word(self, row: int) -> None:
        found = self.blocks()
        if found is not None and found[0] is not None:
            self._select(found[0], row)

    def select_frame(self, frame: int) -> None:
        """The encoder's self-attention of ``frame`` (a click on the sound)."""
        found = self.blocks()
        if found is not None and found[1] is not None:
            self._select(found[1], frame)

    def _select(self, block: int, query: int) -> None:
        s = self.session
        mode = "mean" if s.sel.mode == "rollout" and s.blocks[block].kind == "cross" else s.sel.mode
        s.select(block=block, query=int(query), mode=mode)

    def _on_click(self, ev) -> None:
        v = self.view
        if v is None or ev.button() != Qt.MouseButton.LeftButton:
            return
        for p in (self.wave_plot, self.spec_plot):
            if p.sceneBoundingRect().contains(ev.scenePos()):
                t = p.vb.mapSceneToView(ev.scenePos()).x()
                frame = av.frame_at(t, v.frame_seconds, len(v.curve))
                if frame is not None:
                    self.select_frame(frame)
                return

    # -- drawing ----------------------------------------------------------------
    def _draw_words(self, v: av.AudioView) -> None:
        key = (id(self.session.result), self.session.sel.batch)
        rows = [row for _, row in v.words]
        if key != self._words_key:
            self._words_key = key
            # a word the transcript holds twice reads with its place, "the (3)", as the title names it
            self.word_bar.fill(query_names(v.words), lambda i: self.select_word(rows[i]))
            self.word_bar.setVisible(bool(v.words))  # an encoder alone on the sound (wav2vec2) has no words
        # a frame query (a click on the sound) checks no word
        self.word_bar.check(rows.index(v.query) if v.query_kind == "word" and v.query in rows else None)

    def draw(self) -> None:
        s = self.session
        v = av.audio_view(s.result, s.sel.with_(keep=1.0, hide_special=False), s.blocks)
        self.view = v
        self._draw_words(v)
        self.wave_lo.setData(v.env_times, v.env_lo)
        self.wave_hi.setData(v.env_times, v.env_hi)
        peak = max(float(np.abs(v.env_lo).max()), float(np.abs(v.env_hi).max()), 1e-6)
        self.wave_plot.setYRange(-1.05 * peak, 1.05 * peak, padding=0)
        mels = v.spec.shape[0]
        self.spec_item.setImage(v.spec, autoLevels=False, levels=(0.0, 1.0))
        self.spec_item.setRect(QRectF(0.0, 0.0, v.spec_seconds, mels))
        self.spec_plot.setYRange(0, mels, padding=0)
        self.spec_plot.getAxis("left").setTicks([[(0, "0"), (mels, str(mels))]])
        n = len(v.curve)
        self.band_item.setImage(v.heat[None, :], autoLevels=False, levels=(0.0, 1.0))
        self.band_item.setRect(QRectF(0.0, 0.0, n * v.frame_seconds, 1.0))
        self.band_plot.setYRange(0, 1, padding=0)
        self.curve_item.setData(v.times + v.frame_seconds / 2, v.curve)
        self.curve_plot.setYRange(0.0, 1.05 * v.vmax, padding=0)
        self.curve_plot.getAxis("left").setTicks([[(0.0, "0"), (v.vmax, f"{v.vmax:.3g}")]])
        self._fit_left_band(f"{v.vmax:.3g}")
        self.wave_plot.setXRange(0.0, v.duration, padding=0)
        self._draw_marks(v, peak)
        self.block_name = s.blocks[v.block_index].name
        what, query = v.title.rsplit(" · query", 1)  # the title's query: "“the” (word 3)" where the word is twice
        where = (
            "click the sound to see where a frame looks"
            if v.query_kind == "word" or not v.words
            else "click a word to see where it looks"
        )
        padding = "" if v.padding_mass is None else f" · weight after the clip (padding): {v.padding_mass:.2f}"
        self.info.setText(
            f"query{query} · {what} · peak at {v.peak_time:.2f} s · frames of "
            f"{v.frame_seconds * 1000:.0f} ms{padding} · {where}"
        )

    def _fit_left_band(self, top: str) -> None:
        """Every panel's left band wide enough for the weight axis's top label (pyqtgraph leaves out a label
        wider than its band: a 30 s clip's 1,499 frames peak at "0.000847", and the weights had no scale), the
        panels' bands kept equal so their time axes line up."""
        ax = self.curve_plot.getAxis("left")
        text = QFontMetrics(ax.style["tickFont"] or QFont()).boundingRect(top).width() + 2
        title = ax.label.boundingRect().height() * 0.8 if ax.label.isVisible() else 0.0
        need = text + ax.style["tickTextOffset"][0] + max(0, ax.style["tickLength"]) + title
        for p in self.plots:
            p.getAxis("left").setWidth(max(LEFT_BAND, int(np.ceil(need))))
        self.glw.ci.layout.activate()  # the bands at that width now (the labels are picked for the band drawn)
        for p in self.plots:
            p.layout.activate()

    def _draw_marks(self, v: av.AudioView, peak: float) -> None:
        for p, it in self.marks:
            p.removeItem(it)
        for it in self.span_items:
            self.wave_plot.removeItem(it)
        self.marks, self.span_items = [], []
        span = v.query_span
        if span is not None:
            for p in (self.wave_plot, self.spec_plot):
                mark = _region(span, av.QUERY_COLOUR, 115)
                mark.setZValue(10)
                p.addItem(mark)
                self.marks.append((p, mark))
        for ws in v.spans:  # word timestamps, when the result carries them (core.audio_view.word_spans)
            region = _region((ws.start, ws.end), av.SPAN_COLOUR, 46)
            text = pg.TextItem(ws.word, color="k", anchor=(0, 0))
            text.setPos(ws.start, peak)
            for it in (region, text):
                self.wave_plot.addItem(it)
                self.span_items.append(it)

    def shown_query(self) -> tuple[int, int] | None:
        """(block, query) drawn now, for the export."""
        return (self.view.block_index, self.view.query) if self.view is not None else None
