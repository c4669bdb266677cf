"""The main window: menus, docks, tabbed views, workers, errors, drag and drop, recent files."""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path

from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QFrame,
    QLabel,
    QMainWindow,
    QMessageBox,
    QScrollArea,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from attnviz import AttnvizError
from attnviz.app import gold, rules, word_times
from attnviz.app.compare import save_compared
from attnviz.app.export_recipe import RunSources, WindowExport, save_with_recipe, without_recipe
from attnviz.app.fields import WINDOW
from attnviz.app.jobs import analyze, open_model_ready
from attnviz.app.maps_file import MapsFile
from attnviz.core.setting_words import Wording, worded
from attnviz.core.view import Selection, opening_view
from attnviz.core.view_names import FIGURE_VIEWS, TAB_VIEWS, tab_title, view_key
from attnviz.core.writes import command_scope, guard
from attnviz.gui import style
from attnviz.gui.ablation import AblationController
from attnviz.gui.app import make_settings
from attnviz.gui.compare import CompareController
from attnviz.gui.export import (
    VIEW_FORMATS,
    export_npz,
    export_widget,
    figures_renderer,
    maps_dialog_start,
    remember_export,
    view_dialog_start,
)
from attnviz.gui.export_width import add_width_menu, with_width
from attnviz.gui.session import Session
from attnviz.gui.views.alignment import AlignmentView
from attnviz.gui.views.audio_regions import AudioRegionsView
from attnviz.gui.views.base import View
from attnviz.gui.views.corpus import open_corpus_dialog, open_corpus_results
from attnviz.gui.views.head_map import HeadMapView
from attnviz.gui.views.image_regions import ImageRegionsView
from attnviz.gui.views.overview import OverviewView
from attnviz.gui.views.stats_table import StatsView
from attnviz.gui.views.token_links import TokenLinksView
from attnviz.gui.widgets.controls import Controls
from attnviz.gui.widgets.input_panel import AUDIO_FILTER, IMAGE_FILTER, InputPanel
from attnviz.gui.widgets.model_sidebar import ModelSidebar
from attnviz.gui.widgets.status_bar import ElidingStatusBar
from attnviz.gui.workers import WorkerPool, error_text
from attnviz.runtime.errors import Cancelled
from attnviz.runtime.request import AnalyzeRequest

MAX_RECENT = 10
REOPENED = ("text", "text_pair", "image", "generate", "audio", "beams")  # the input fields open_model takes
DOCK_FLOOR = 240  # px a dock keeps when the view tabs need its width (_fit_tabs)
CLOSE_GRACE_MS = 5000  # how long a closing window (and `open --screenshot` after it) waits for its running jobs
# the window opens models with this (a module global, so a test can swap it for a stuck one)
_default_opener = open_model_ready


class MainWindow(QMainWindow):
    """Signals: ``result_shown()`` after a new result has been drawn; ``error_shown(str)``; ``corpus_shown(view)``."""

    result_shown = Signal()
    error_shown = Signal(str)
    input_needed = Signal(str)  # a model opened and waits for an input it cannot run without (a sound)
    corpus_shown = Signal(object)  # a corpus results view (its own window) has opened

    def __init__(self, opener=None, settings: QSettings | None = None, provider: str = "auto", parent=None):
        super().__init__(parent)
        style.configure()
        self.setStatusBar(ElidingStatusBar())  # a long message ends in "…" before the device label
        self.setWindowTitle("attnviz")
        self.resize(1400, 900)
        self.setAcceptDrops(True)
        self.opener = opener or _default_opener
        self.provider = provider
        self.settings = settings if settings is not None else make_settings()
        self.session = Session(self)
        self.workers = WorkerPool(max_threads=2, parent=self)
        self.waited_on_close = False  # (closeEvent)
        self.workers.wording = WINDOW  # every job's refusal or note names the window's fields, not the CLI's flags
        self._context: dict[int, tuple] = {}  # request id -> what the request was about
        self.workers.returned.connect(self._on_worker_returned)
        self.workers.errored.connect(self._on_worker_errored)
        self.workers.progress.connect(self._on_worker_progress)
        self.workers.finished.connect(lambda kind, rid: self._context.pop(rid, None))
        self._latest = {"open": 0, "run": 0, "export": 0, "gold": 0, "word_times": 0, "compare": 0, "ablate": 0}
        self.last_request: AnalyzeRequest | None = None  # what the shown result was run on (None: loaded maps)
        self.pending_values: dict | None = None
        self.last_error: str | None = None
        self.error_box: QMessageBox | None = None
        self.last_export: Path | None = None
        self.last_recipe: Path | None = None  # the recipe the last export wrote beside it (None: none)
        self.tokenizer: Path | None = None  # a tokenizer.json the user chose (else: metadata / beside the model)
        self.variant: str | None = None  # a Hub repository's quantized siblings (attnviz open --variant)
        # how a run keeps its maps (attnviz open --memory; no control in the window): auto picks by the estimate
        self.memory = "auto"
        # a tab asked for (open --view, a restored session): the next model opened shows it, not its kind's
        self.view_pinned = False

        # views
        self.tabs = QTabWidget()
        self.overview = OverviewView(self.session)
        self.head_map = HeadMapView(self.session)
        self.links = TokenLinksView(self.session)
        self.alignment = AlignmentView(self.session)
        self.image_regions = ImageRegionsView(self.session)
        self.audio_regions = AudioRegionsView(self.session)
        self.stats = StatsView(self.session)
        # the tabs, in this order (View ▸ Ctrl+1…7 follow it)
        tabs: tuple[View, ...] = (
            self.overview,
            self.head_map,
            self.links,
            self.alignment,
            self.image_regions,
            self.audio_regions,
            self.stats,
        )
        self.views: dict[str, View] = {v.title: v for v in tabs}
        for v in tabs:
            self.tabs.addTab(v, v.title)
        self.tabs.setElideMode(Qt.TextElideMode.ElideNone)  # a tab's whole title, or _fit_tabs makes room for it
        self.setCentralWidget(self.tabs)
        self.tabs.currentChanged.connect(self._follow_view_block)
        self.overview.picked.connect(lambda b, l, h: self.session.select(block=b, layer=l, head=h, mode="head"))
        self.stats.picked.connect(self._focus_from_stats)
        self.stats.browsed.connect(lambda layer, head: self.session.select(layer=layer, head=head, mode="head"))

        # docks
        self.inputs = InputPanel()
        self.controls = Controls(self.session)
        self.controls.invalid.connect(lambda text, param: self.show_error(text, param=param))
        left = QWidget()
        lv = QVBoxLayout(left)
        lv.setContentsMargins(0, 0, 0, 0)
        lv.addWidget(self.inputs)
        lv.addWidget(self.controls, 1)
        # in a scroll area: the panel's fields (inputs, selection, colour scale and top, ...) would otherwise set
        # the window's minimum height (720 px once the colour-top box came), taller than a 1366x768 laptop's screen
        # and than `open --size 1000x700`; the panel scrolls where the window is shorter than its fields
        scroll = QScrollArea()
        scroll.setWidget(left)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # as wide as the panel was, and a scroll bar's width more only while the bar shows (the fields are not cut)
        bar, panel_width = scroll.verticalScrollBar(), left.minimumSizeHint().width()
        bar.rangeChanged.connect(
            lambda _lo, hi: scroll.setMinimumWidth(panel_width + (bar.sizeHint().width() if hi else 0))
        )
        scroll.setMinimumWidth(panel_width)
        self.left_dock = QDockWidget("Input && view", self)
        self.left_dock.setObjectName("input_dock")
        self.left_dock.setWidget(scroll)
        self.left_dock.setFeatures(
            QDockWidget.DockWidgetFeature.DockWidgetMovable | QDockWidget.DockWidgetFeature.DockWidgetFloatable
        )
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, self.left_dock)
        self.sidebar = ModelSidebar(self.session)
        # right-click a head ▸ Switch head off: the output change shows above the sidebar
        self.ablation = AblationController(self)
        self.overview.context_requested.connect(self.ablation.menu_for)
        self.stats.context_requested.connect(
            lambda layer, head, at: self.ablation.menu_for(self.session.sel.block, layer, head, at)
        )
        right = QWidget()
        rv = QVBoxLayout(right)
        rv.setContentsMargins(0, 0, 0, 0)
        rv.addWidget(self.ablation.panel)
        rv.addWidget(self.sidebar, 1)
        self.right_dock = QDockWidget("Model", self)
        self.right_dock.setObjectName("model_dock")
        self.right_dock.setWidget(right)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.right_dock)
        self.resizeDocks([self.left_dock, self.right_dock], [300, 320], Qt.Orientation.Horizontal)

        self.status_device = QLabel("")
        self.statusBar().addPermanentWidget(self.status_device)
        self.inputs.run_requested.connect(self.run_analysis)
        self.inputs.cancel_requested.connect(self.cancel)
        self.session.selection_changed.connect(self._update_title)
        self.compare = CompareController(self)  # File ▸ Compare with…: model B beside this one
        self._build_menus()
        self._build_keys()
        self._restore_layout()
        self.statusBar().showMessage("Open an ONNX model: File ▸ Open model…, or drop an .onnx file on the window.")

    @property
    def wording(self) -> Wording:
        """How the window's messages name their fixes: its fields (:data:`attnviz.app.fields.WINDOW`), or the flags
        of the command that started it where its message is that command's line (``open --screenshot``)."""
        return self.workers.wording or WINDOW

    @wording.setter
    def wording(self, wording: Wording) -> None:
        self.workers.wording = wording

    # -- menus ---------------------------------------------------------------------
    def _action(
        self, text: str, slot, shortcut: QKeySequence | QKeySequence.StandardKey | str | None = None
    ) -> QAction:
        a = QAction(text, self)
        if shortcut is not None:
            a.setShortcut(shortcut)
        a.triggered.connect(slot)
        return a

    def _add_demo_menu(self, fm) -> None:
        """File ▸ Open demo: the bundled demos (the speech folder included), each opened on its own sample."""
        from attnviz.gui.app import demo_models

        demos = demo_models()
        menu = fm.addMenu("Open &demo")
        menu.setEnabled(bool(demos))
        for p in demos:
            name = p.stem if p.suffix == ".onnx" else p.name
            menu.addAction(self._action(name, lambda _=False, p=p: self.open_path(str(p)), None))

    def _build_menus(self) -> None:
        fm = self.menuBar().addMenu("&File")
        for text, slot, key in (
            ("&Open model…", self.open_model_dialog, QKeySequence.StandardKey.Open),
            ("Open model &folder (optimum export)…", self.open_folder_dialog, None),
            ("Open &image…", self.open_image_dialog, None),
            ("Open &audio…", self.open_audio_dialog, None),
            ("Open attention &maps (.npz)…", self.open_npz_dialog, None),
            ("Choose &tokenizer (tokenizer.json)…", self.choose_tokenizer_dialog, None),
            ("Load &gold alignments (Pharaoh)…", self.load_gold_dialog, None),
            ("Load &word times (TSV/TextGrid)…", self.load_word_times_dialog, None),
            ("Open &corpus results…", lambda: open_corpus_dialog(self), None),
        ):
            fm.addAction(self._action(text, slot, key))
        self.recent_menu = fm.addMenu("Open &recent")
        self._add_demo_menu(fm)
        fm.addSeparator()
        for a in self.compare.actions():
            fm.addAction(a)
        fm.addSeparator()
        self.export_view_action = self._action("&Export view (PNG/SVG/PDF)…", self.export_view_dialog, "Ctrl+E")
        fm.addAction(self.export_view_action)
        self.export_width_menu = add_width_menu(fm, self.settings)  # a paper's column, as figure --width
        fm.addAction(self._action("Export &maps (.npz)…", self.export_npz_dialog, "Ctrl+Shift+E"))
        fm.addSeparator()
        fm.addAction(self._action("&Quit", self.close, QKeySequence.StandardKey.Quit))
        vm = self.menuBar().addMenu("&View")
        for i, title in enumerate(self.views):
            vm.addAction(self._action(title, lambda _=False, i=i: self.tabs.setCurrentIndex(i), f"Ctrl+{i + 1}"))
        vm.addSeparator()
        vm.addAction(self.left_dock.toggleViewAction())
        vm.addAction(self.right_dock.toggleViewAction())
        self._rebuild_recent()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        # once the docks have their new widths: a window sized before it is shown (attnviz open --size) gets its
        # first resize before its layout has placed them
        QTimer.singleShot(0, self._fit_tabs)

    def _fit_tabs(self) -> None:
        """Give the view tabs the width their titles need, taken from the docks (the Model sidebar first) down to
        :data:`DOCK_FLOOR`: at 1280 px the seventh tab, Head stats, was scrolled out of sight behind two arrows.
        Only ever narrows a dock, and only by what the tabs lack; a window too narrow still scrolls the tabs."""
        bar = self.tabs.tabBar()
        need = sum(bar.tabSizeHint(i).width() for i in range(bar.count()))
        lack = need - self.tabs.width() + 2
        if lack <= 0:
            return
        docks = [d for d in (self.right_dock, self.left_dock) if d.isVisible() and not d.isFloating()]
        widths = {d: d.width() for d in docks}
        for d in docks:
            give = max(0, min(lack, widths[d] - DOCK_FLOOR))
            widths[d] -= give
            lack -= give
        if docks and any(widths[d] != d.width() for d in docks):
            self.resizeDocks(docks, [widths[d] for d in docks], Qt.Orientation.Horizontal)

    def _build_keys(self) -> None:
        for key, fn in (
            (Qt.Key.Key_Left, lambda: self.step_head(-1)),
            (Qt.Key.Key_Right, lambda: self.step_head(1)),
            (Qt.Key.Key_Up, lambda: self.step_layer(-1)),
            (Qt.Key.Key_Down, lambda: self.step_layer(1)),
        ):
            sc = QShortcut(QKeySequence(key), self.tabs)
            sc.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            sc.activated.connect(fn)

    def step_head(self, d: int) -> None:
        s = self.session
        if s.block is None:
            return
        layer, head = rules.head_step(s.sel, s.block.n_layers, s.block.heads_in, d)
        s.select(head=head, layer=layer, mode="head")

    def step_layer(self, d: int) -> None:
        if self.session.block is not None:
            self.session.select(layer=self.session.sel.layer + d, mode="head")

    def _follow_view_block(self, _index: int = -1) -> None:
        """Alignment and Image regions show one block (cross-attention, the image block): select it, so the
        block box names what is drawn instead of the block another tab was on.  A view on a scale of its own greys
        the colour-scale and log boxes (View.scale_note)."""
        s = self.session
        view = self.current_view()
        self.controls.set_scale_note(getattr(view, "scale_note", None))
        self.controls.set_scale_field(getattr(view, "scale_field", "scale"))
        self.controls.set_kind_scale_offered(view is self.overview)
        if s.result is None or not s.blocks:
            return
        want = None
        if view is self.alignment:
            want = self.alignment.cross_block()
        elif view is self.image_regions:
            src = self.image_regions.source()
            want = src[0] if src is not None else None
        elif view is self.audio_regions:
            want = self.audio_regions.source_block()
        if want is not None and want != s.sel.block:
            moved = rules.on_block(s.sel, s.blocks, want)
            s.select(block=moved.block, mode=moved.mode)

    def _focus_from_stats(self, layer: int, head: int) -> None:
        self.session.select(layer=layer, head=head, mode="head")
        self.tabs.setCurrentWidget(self.head_map)

    def _update_title(self) -> None:
        m = self.session.model
        name = (m.name if m is not None else None) or (
            self.session.result.info.get("model") if self.session.result else None
        )
        self.setWindowTitle(f"attnviz — {name}" if name else "attnviz")

    # -- recent files ----------------------------------------------------------------
    def recent_files(self) -> list[str]:
        v = self.settings.value("recent", [])
        items = [v] if isinstance(v, str) else v if isinstance(v, (list, tuple)) else []  # QSettings: str or list
        return [str(x) for x in items]

    def add_recent(self, path) -> None:
        p = str(Path(path).resolve())
        items = [p] + [x for x in self.recent_files() if x != p]
        self.settings.setValue("recent", items[:MAX_RECENT])
        self.settings.sync()
        self._rebuild_recent()

    def _rebuild_recent(self) -> None:
        self.recent_menu.clear()
        files = self.recent_files()
        for p in files:
            self.recent_menu.addAction(self._action(p, lambda _=False, p=p: self.open_path(p)))
        self.recent_menu.setEnabled(bool(files))

    # -- errors ----------------------------------------------------------------------
    def param_widget(self, param: str | None):
        """The control that fixes an :class:`AttnvizError` about ``param`` (the CLI maps the same names to flags)."""
        c, i = self.controls, self.inputs
        widgets = {
            "text": i.text,
            "text_pair": i.text_pair,
            "image": i.image,
            "audio": i.audio,
            "generate": i.generate,
            "beams": i.beams,
            "max_tokens": i.max_tokens,
            "max_seconds": i.max_seconds,
            "block": c.block,
            "layer": c.layer,
            "layers": c.layer_lo,
            "head": c.head,
            "aggregate": c.mode,
            "step": c.step,
            "scale": c.scale,
            "vmax": c.vmax,
        }
        return widgets.get(param or "")

    def show_error(self, text: str, title: str = "attnviz", param: str | None = None) -> QMessageBox:
        """One readable message: status bar + a non-modal dialog (replacing any previous one); the control
        that fixes it (``param``, from :class:`AttnvizError`) gets the keyboard focus and a red frame."""
        w = self.param_widget(param)
        if w is not None:
            self._mark_widget(w)
        self.last_error = text
        self.statusBar().showMessage(f"Error: {text}")
        if self.error_box is not None:
            self.error_box.close()
            self.error_box.deleteLater()
        box = QMessageBox(QMessageBox.Icon.Warning, title, text, QMessageBox.StandardButton.Ok, self)
        box.setModal(False)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose, False)
        box.show()
        self.error_box = box
        self.error_shown.emit(text)
        return box

    def _on_worker_returned(self, kind: str, rid: int, value) -> None:
        ctx = self._context.get(rid, ())
        if kind == "open" and ctx:
            self._on_model(rid, value, *ctx)
        elif kind == "run":
            self._on_result(rid, value)
        elif kind == "export" and ctx:
            self._on_exported(rid, value or ctx[0])
        elif kind == "gold" and rid == self._latest["gold"]:
            self._on_gold(value)
        elif kind == "word_times" and rid == self._latest["word_times"]:
            self._on_word_times(value)
        elif kind == "compare":
            self.compare.returned(rid, value)
        elif kind == "ablate":
            self.ablation.returned(rid, value)

    def _on_worker_errored(self, kind: str, rid: int, exc) -> None:
        if kind == "compare":
            self.compare.errored(rid, exc)
            return
        if kind == "ablate":
            self.ablation.errored(rid, exc)
            return
        self._on_error(kind, rid, exc)

    def _on_worker_progress(self, kind: str, rid: int, percent: int, text: str) -> None:
        if kind == "run" and rid == self._latest["run"]:
            self.inputs.set_progress(percent, text)

    def _on_error(self, kind: str, rid: int, exc) -> None:
        if rid != self._latest.get(kind):
            return  # superseded
        if isinstance(exc, Cancelled):
            self.inputs.set_busy(False, "cancelled")
            self.statusBar().showMessage("Cancelled.")
            if kind == "run":
                self.session.set_run_note("The run was cancelled: press Run to run the input again.")
            return
        self.inputs.set_busy(False, "error")
        if os.environ.get("ATTNVIZ_DEBUG") and getattr(exc, "__attnviz_traceback__", None):
            print(exc.__attnviz_traceback__)
        if kind == "run" and getattr(exc, "limit", None) is not None:  # runtime.limits.InputTooLong
            self.offer_truncation(exc.n, exc.limit, error_text(exc))
            return
        text = error_text(exc)
        if kind == "run":
            self.session.set_run_note(f"The run stopped: {text}")
        self.show_error(text, param=getattr(exc, "param", None))

    def _mark_widget(self, w) -> None:
        """Focus the control to fix and frame it in red until its value changes."""
        w.setFocus()
        w.setStyleSheet("border: 2px solid #d62728;")
        self.marked_widget = w
        for sig in ("textChanged", "valueChanged", "currentIndexChanged"):
            if hasattr(w, sig):
                getattr(w, sig).connect(lambda *_a, w=w: w.setStyleSheet(""))
                break

    def offer_truncation(self, n: int, limit, text: str) -> None:
        """A text longer than the model's positions: say so (``text``, the refusal as the run worded it: what was too
        long and the fix, "set max tokens to 16", or for `open --screenshot` the flag) and offer to run on the first
        tokens that fit.  It said "N tokens; ... stop at 16 (...)." alone, so `open --screenshot`'s line named no fix
        and the window dropped what was long ("the text pair (decoder side)")."""
        box = self.show_error(text)
        self.session.set_run_note(
            f"The run stopped: {n} tokens, and this model's positions stop at {limit.tokens}. Truncate from the "
            f"message, or set max tokens to {limit.tokens} and press Run."
        )
        button = box.addButton(f"Truncate to {limit.tokens} tokens", QMessageBox.ButtonRole.AcceptRole)

        def truncate():
            self.inputs.set_values(max_tokens=limit.tokens)
            self.run_analysis()

        button.clicked.connect(truncate)

    # -- opening ---------------------------------------------------------------------
    def open_path(self, path, **values) -> None:
        """Open by extension: .onnx model (or an export folder), image, .npz attention maps, or a corpus results
        folder (``attnviz corpus --out DIR``)."""
        try:
            kind = rules.file_kind(path)
        except AttnvizError as e:
            self.show_error(str(e))
            return
        {
            "model": lambda: self.open_model(path, **values),
            "image": lambda: self.open_image(path),
            "audio": lambda: self.open_audio(path),
            "maps": lambda: self.open_npz(path),
            "corpus": lambda: open_corpus_results(self, path),
        }[kind]()

    def open_model(
        self, path, text=None, text_pair=None, image=None, generate=None, run=True, audio=None, beams=None
    ) -> None:
        """Load a model in a worker; on success show its sidebar and run the given or sample input."""
        path = Path(path)
        self.workers.cancel("open")
        tokenizer = str(self.tokenizer) if self.tokenizer else None
        # a variant only when asked for (the openers tests substitute take none)
        opener = functools.partial(self.opener, variant=self.variant) if self.variant else self.opener
        w = self.workers.start(
            opener, str(path), provider=self.provider, tokenizer=tokenizer, probe=not run, kind="open"
        )
        self._latest["open"] = w.request_id
        given = {
            k: v
            for k, v in dict(
                text=text, text_pair=text_pair, image=image, generate=generate, audio=audio, beams=beams
            ).items()
            if v is not None
        }
        self._context[w.request_id] = (path, given, run)
        self.inputs.set_busy(True, f"opening {path.name}…")
        self.statusBar().showMessage(f"Opening {path}…")

    def _on_model(self, rid, model, path: Path, given: dict, run: bool) -> None:
        if rid != self._latest["open"]:
            return
        self.inputs.set_busy(False)
        self.session.run_note = ""  # a new model: the last one's run said nothing about it (set_model redraws)
        self.session.set_result(None)
        self.session.set_model(model)
        self.inputs.configure_for(model)
        self.add_recent(path)
        self._update_title()
        self.status_device.setText(f"device: {model.provider}")
        if not model.sites:
            self.show_error(f"{path.name}: no attention to show — {rules.no_attention_reason(model)}")
            return
        values = rules.first_input(model, given, self.inputs.image.text(), self.inputs.audio.text())
        self.inputs.set_values(
            text=values.get("text", ""),
            text_pair=values.get("text_pair", ""),
            image=values.get("image"),
            generate=values["generate"],
            audio=values.get("audio"),
            beams=values.get("beams", 1),  # a model opened after a beam search: greedy unless asked again
        )
        self.statusBar().showMessage(
            f"Opened {path.name}: {len(model.sites)} attention sites, {rules.model_kind_words(model)}"
        )
        several = rules.several_texts_problem(model, given)
        if several:  # (`open --text a --text b` on a model that takes one: extract's line, not a tokenizer's)
            self.show_error(several, param="text")
            return
        waiting = rules.waiting_for_audio(model, values)
        if waiting:  # nothing to hear yet: say what to do instead of running into the engine's refusal
            self.statusBar().showMessage(waiting)
            self.session.set_run_note(f"{waiting}.")  # the views too, where they would say "run an input"
            self.inputs.audio.setFocus()
            self.input_needed.emit(waiting)
            return
        if run:
            self.run_analysis()

    def open_image(self, path) -> None:
        try:
            rules.check_image_model(self.session.model, path, self.wording)
        except AttnvizError as e:
            self.show_error(str(e), param=e.param)
            return
        self.inputs.set_values(image=str(path))
        self.add_recent(path)
        self.run_analysis()

    def open_audio(self, path) -> None:
        """Run the open speech model on a sound file (File ▸ Open audio…, a dropped .wav)."""
        try:
            rules.check_audio_model(self.session.model, path)
        except AttnvizError as e:
            self.show_error(str(e), param=e.param)
            return
        self.inputs.set_values(audio=str(path))
        self.add_recent(path)
        self.run_analysis()

    def open_npz(self, path) -> None:
        from attnviz.core.io import load_npz

        try:
            result = load_npz(path)
        except AttnvizError as e:
            self.show_error(str(e))
            return
        self.session.set_model(None, maps_path=Path(path))  # a figure's recipe names it (attnviz figure --maps)
        self.add_recent(path)
        try:
            self._show_result(result)
        except Exception as e:
            self.show_error(f"{Path(path).name}: cannot show these maps ({error_text(e)})")
            return
        # the input panel shows the run the file holds (its steps, its text), not what the last model was given
        self.inputs.configure_for(None)
        self.inputs.set_values(**MapsFile.of(path, result).input_values())

    # -- running -----------------------------------------------------------------------
    def run_analysis(self, request: AnalyzeRequest | None = None) -> None:
        """Run ``request``, by default the one the input panel's fields build (a bad value is one message, the
        control that fixes it framed)."""
        m = self.session.model
        try:
            rules.check_runnable(m)
            if request is None:
                with worded(self.wording):  # the fields' own check (beams without generate) names the fields
                    request = self.inputs.request()
            if request.mode == "auto" and self.memory != "auto":
                request = dataclasses.replace(request, mode=self.memory)
        except AttnvizError as e:
            self.show_error(str(e), param=e.param)
            return
        self.workers.cancel("run")  # the older run's result will be dropped
        w = self.workers.start(analyze, m, request, kind="run")
        self._latest["run"] = w.request_id
        self._context[w.request_id] = (request,)
        self.inputs.set_busy(True, "running…")
        self.statusBar().showMessage("Running…")
        self.session.set_run_note(f"Running {rules.model_name(m)}…" if m is not None else "Running…")

    def cancel(self) -> None:
        for kind in ("run", "open", "export"):
            self.workers.cancel(kind)
            self._latest[kind] = -1  # drop whatever comes back
        self.inputs.set_busy(False, "cancelled")
        self.statusBar().showMessage("Cancelled.")
        self.session.set_run_note("The run was cancelled: press Run to run the input again.")

    def _on_result(self, rid, result) -> None:
        if rid != self._latest["run"]:
            return
        self.inputs.set_busy(False, "done")
        self._show_result(result, self._context.get(rid, (None,))[0])

    def _show_result(self, result, request: AnalyzeRequest | None = None) -> None:
        """Show ``result``, run on ``request`` (None: maps loaded from a file); a model compared beside it runs
        the same request."""
        self.last_request = request
        self._draw_result(result)
        self.compare.on_result(request)
        self.ablation.on_result(request)

    def _draw_result(self, result) -> None:
        if not result.maps:  # nothing to draw: what is shown stays (an empty result would leave no views)
            what = "the model ran but returned" if self.session.model is not None else "this result holds"
            self.show_error(f"{what} no attention maps")
            return
        fresh = self.session.fresh
        self.session.set_result(result)
        if fresh:
            self._open_on_kind_view(result)
        self._follow_view_block()
        info = result.info or {}
        t = info.get("timings") or {}
        total = info.get("total_s") or t.get("analyze (wall)")
        dev = info.get("provider") or (self.session.model.provider if self.session.model is not None else "")
        self.status_device.setText(
            f"device: {dev}" + (f" · {total * 1000:.0f} ms" if isinstance(total, (int, float)) else "")
        )
        self.statusBar().showMessage(rules.result_status(result))
        self._update_title()
        QTimer.singleShot(0, self.result_shown.emit)

    # -- dialogs -------------------------------------------------------------------------
    def open_model_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open ONNX model", "", "ONNX models (*.onnx);;All files (*)")
        if path:
            self.open_path(path)

    def open_folder_dialog(self) -> None:
        # an optimum export folder (encoder_model.onnx + decoder files + tokenizer.json) opens as one model
        path = QFileDialog.getExistingDirectory(self, "Open model folder")
        if path:
            self.open_path(path)

    def open_image_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open image", "", IMAGE_FILTER)
        if path:
            self.open_path(path)

    def open_audio_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open audio", "", AUDIO_FILTER)
        if path:
            self.open_path(path)

    def open_npz_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open attention maps", "", "attnviz maps (*.npz)")
        if path:
            self.open_path(path)

    def load_gold_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self,
            "Gold alignments (Pharaoh; X.src and X.tgt beside it)",
            "",
            "Pharaoh alignments (*.gold *.txt *.align);;All files (*)",
        )
        if path:
            self.load_gold(path)

    def load_gold(self, path) -> None:
        """Score every cross-attention head on a gold test set (``X.gold`` + ``X.src`` + ``X.tgt``) in a worker;
        Head stats then ranks the heads by AER."""
        m = self.session.model
        try:
            gold.check_gold_model(m)
        except AttnvizError as e:
            self.show_error(str(e))
            return
        w = self.workers.start(gold.score, m, str(path), kind="gold")
        self._latest["gold"] = w.request_id
        self.statusBar().showMessage(f"Scoring every cross-attention head against {Path(path).name}…")

    def _on_gold(self, table: dict) -> None:
        self.stats.set_gold(table)
        b = self.session.block_index("decoder", "cross")
        if b is not None:
            self.session.select(block=b)
        self.tabs.setCurrentWidget(self.stats)
        self.statusBar().showMessage(gold.summary(table))

    def load_word_times_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Reference word times", "", "Word times (*.tsv *.TextGrid *.textgrid);;All files (*)"
        )
        if path:
            self.load_word_times(path)

    def load_word_times(self, path) -> None:
        """Score every cross head of the shown speech run against reference word times (``word start end`` TSV
        or a TextGrid) in a worker; Head stats then ranks them by boundaries within 50 ms."""
        try:
            word_times.check_speech_result(self.session.result)
        except AttnvizError as e:
            self.show_error(str(e))
            return
        w = self.workers.start(word_times.score, self.session.model, self.session.result, str(path), kind="word_times")
        self._latest["word_times"] = w.request_id
        self.statusBar().showMessage(f"Scoring every cross-attention head against {Path(path).name}…")

    def _on_word_times(self, scores) -> None:
        self.stats.set_word_times(scores)
        b = self.session.block_index("decoder", "cross")
        if b is not None:
            self.session.select(block=b)
        self.tabs.setCurrentWidget(self.stats)
        self.statusBar().showMessage(word_times.summary(scores))

    def choose_tokenizer_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose tokenizer", "", "Hugging Face tokenizer (*.json)")
        if path:
            self.set_tokenizer(path)

    def set_tokenizer(self, path) -> None:
        """Use this tokenizer.json from now on; re-open the current model with it."""
        p = Path(path)
        if not p.is_file() or p.suffix.lower() != ".json":
            self.show_error(f"{p.name}: choose a Hugging Face tokenizer.json file")
            return
        self.tokenizer = p
        self.statusBar().showMessage(f"Tokenizer: {p}")
        m = self.session.model
        if m is not None:  # the inputs open_model takes; the spin boxes (max tokens, max seconds) keep theirs
            given = {k: v for k, v in self.inputs.values().items() if k in REOPENED and v not in (None, "")}
            self.open_model(m.path, **given)

    def export_view_dialog(self) -> None:
        title = self.tabs.tabText(self.tabs.currentIndex()).lower().replace(" ", "-")
        start, filters, selected = view_dialog_start(self.settings, f"attnviz-{title}")  # last folder and format
        path, _ = QFileDialog.getSaveFileName(self, "Export view", start, filters, selected)
        if path:
            remember_export(self.settings, path)
            self.export_view(path)

    def export_npz_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self, "Export maps", maps_dialog_start(self.settings), "attnviz maps (*.npz)"
        )
        if path:
            remember_export(self.settings, path)
            self.export_maps(path)

    # -- export ------------------------------------------------------------------------------
    def select_view(self, name: str) -> None:
        """Show a tab by its --view name (core.view_names: the figure's names, "head", "stats") or its title."""
        key = view_key(name)
        title = tab_title(key) if key in TAB_VIEWS else name
        if title not in self.views:
            raise AttnvizError(f"unknown view {name!r}; use one of {', '.join(TAB_VIEWS)}")
        self.tabs.setCurrentWidget(self.views[title])

    def pin_view(self, name: str) -> None:
        """Show a tab asked for by name, and keep it when the model being opened shows its first result."""
        self.select_view(name)
        self.view_pinned = True

    def _open_on_kind_view(self, result) -> None:
        """A newly opened model's first result shows the tab its kind reads best on (core.view.opening: the view
        ``attnviz figure`` draws without ``--view``), unless a tab was asked for (``open --view``, a restored
        session): a speech model opens on Audio regions, where its cross-attention's Overview was dim."""
        if self.view_pinned:
            self.view_pinned = False
            return
        self.select_view(opening_view(result, self.session.blocks).window)

    def current_view(self):
        return self.tabs.currentWidget()

    def export_view(self, path) -> None:
        """Current view to PNG/SVG/PDF: the matplotlib renderer when available (in a worker), else a Qt render."""
        path = Path(path)
        if path.suffix.lower() == ".npz":
            self.export_maps(path)
            return
        if not self._export_allowed(path):
            return
        if path.suffix.lower() not in VIEW_FORMATS:
            self.show_error(f"cannot export to {path.name}: use .png, .svg, .pdf (or .npz for the raw maps)")
            return
        if self.session.result is None:
            self.show_error("nothing to export yet: open a model and run an input first")
            return
        view = self.current_view()
        what = self.figure_selection(view) if figures_renderer() is not None else None
        held, shown = self.session.comparison, self.head_map.shown()
        if what is not None and view is self.head_map and held is not None and shown != "A":
            sel, blocks = self.session.sel, self.session.blocks  # model B's map, or A − B, as Head map shows it
            style = with_width(None, self.settings)  # File ▸ Export width
            why = "a comparison with model B is not in a recipe ('attnviz compare --figure' draws one)"
            self._start_export(lambda: without_recipe(save_compared(held, shown, sel, path, blocks, style), why), path)
            return
        if what is not None:  # a publication figure from the shared matplotlib renderer, off the GUI thread
            result, (name, sel) = self.session.result, what
            style = None
            if view is self.overview and held is not None and held.result_a is result:  # the frames too
                style = held.overview_style(self.session.blocks, sel.block)
            if view is self.overview and self.session.ablation.off:  # the switched-off heads' crosses too
                style = self.session.ablation.overview_style(self.session.blocks, sel.block, style)
            zoomed = self.head_map.heatmap.visible_span() if view is self.head_map else None
            if zoomed is not None:  # a zoomed-in Head map exports what it shows, as `figure --span --key-span` draws
                from dataclasses import replace

                from attnviz.figures.spec import FigureStyle

                style = replace(style or FigureStyle(), span=zoomed[0], key_span=zoomed[1])
            style = with_width(style, self.settings)  # File ▸ Export width
            sources = self.run_sources()  # with the recipe `attnviz figure --recipe` draws it from again
            self._start_export(lambda: save_with_recipe(result, name, sel, path, style, sources), path)
            return
        try:
            self.last_export = export_widget(view.export_target(), path)
        except AttnvizError as e:
            self.show_error(str(e))
            return
        self.statusBar().showMessage(f"Exported {path} (as shown on screen)")

    def run_sources(self) -> RunSources:
        """What the shown result was made from, for the export's recipe (made in the worker, which hashes the
        files); ``why_not`` where the command line could not make it again."""
        m, s = self.session.model, self.session
        why = None
        if m is not None and self.opener is not open_model_ready:
            why = "the model was opened by a stand-in for the runtime, which the command line cannot run"
        elif s.ablation.off:
            why = "heads are switched off (Switch head off), which the command line cannot run"
        return RunSources(
            model=str(m.path) if m is not None else None,
            maps=str(s.maps_path) if m is None and s.maps_path is not None else None,
            request=self.last_request if m is not None else None,
            provider=self.provider or "auto",
            tokenizer=str(self.tokenizer) if self.tokenizer else None,
            variant=self.variant,
            why_not=why,
        )

    def figure_selection(self, view) -> tuple[str, Selection] | None:
        """``(figure view name, selection)`` that ``attnviz.figures.render_figure`` draws for what ``view``
        shows: the session's selection plus what the view itself holds (checked heads, image query); None for
        the stats table, which the export then renders from the widget."""
        s = self.session
        if s.block is None or view is self.stats:
            return None
        name = view_key(view.title)
        if name not in FIGURE_VIEWS:
            return None
        sel = s.sel
        if view is self.alignment:
            b = self.alignment.cross_block()
            if b is None:
                return None
            sel = rules.on_block(sel, s.blocks, b)
        if view is self.image_regions:
            src = self.image_regions.source()
            if src is None or not self.image_regions.queries:
                return None
            row = self.image_regions.queries[self.image_regions.query][1]
            sel = rules.on_block(sel, s.blocks, src[0], query=None if row < 0 else int(row))
            sel = sel.with_(heads=())  # the tab draws one map (several heads side by side: `figure --head 0,3`)
        if view is self.audio_regions:
            shown = self.audio_regions.shown_query()
            if shown is None:
                return None
            sel = rules.on_block(sel, s.blocks, shown[0], query=shown[1])  # the block and query drawn
        if view is self.links and sel.mode == "head":
            sel = sel.with_(heads=tuple(sorted(self.links.checked)))
        return name, sel

    def export_maps(self, path) -> None:
        if not self._export_allowed(Path(path)):
            return
        if self.session.result is None:
            self.show_error("nothing to export yet: open a model and run an input first")
            return
        result = self.session.result
        self._start_export(lambda: export_npz(result, path), Path(path))

    def _export_allowed(self, path: Path) -> bool:
        """The CLI's rule in the window: an export never replaces the model, tokenizer or image it was made from."""
        model = self.session.model.path if self.session.model is not None else None
        inputs = {
            "the open model": model,
            "the tokenizer": self.tokenizer,
            "the input image": self.inputs.image.text(),
            "the input sound": self.inputs.audio.text(),
        }
        try:
            with command_scope():
                guard(inputs, {"export file": path})
        except AttnvizError as e:
            self.show_error(str(e))
            return False
        return True

    def _start_export(self, fn, path: Path) -> None:
        w = self.workers.start(fn, kind="export")
        self._latest["export"] = w.request_id
        self._context[w.request_id] = (path,)
        self.statusBar().showMessage(f"Exporting {path}…")

    def _on_exported(self, rid, path) -> None:
        if rid != self._latest["export"]:
            return
        done = path if isinstance(path, WindowExport) else WindowExport(Path(path))
        self.last_export = done.path
        self.last_recipe = done.recipe
        self.statusBar().showMessage(done.status() if isinstance(path, WindowExport) else f"Exported {path}")

    # -- drag and drop ---------------------------------------------------------------------
    def dragEnterEvent(self, ev):
        if ev.mimeData().hasUrls():
            ev.acceptProposedAction()

    def dropEvent(self, ev):
        what = rules.dropped([u.toLocalFile() for u in ev.mimeData().urls() if u.isLocalFile()])
        if what is None:
            return
        ev.acceptProposedAction()
        model_or_file, image = what
        self.open_path(model_or_file, **({"image": image} if image else {}))

    def _restore_layout(self) -> None:
        geo, state = self.settings.value("window/geometry"), self.settings.value("window/state")
        try:
            if geo is not None:
                self.restoreGeometry(geo)
            if state is not None:
                self.restoreState(state)
        except TypeError:  # a settings file from elsewhere: keep the defaults
            pass

    def closeEvent(self, ev):
        from attnviz.gui import restore

        restore.save(self)  # last model, input, view, selection: `attnviz` reopens them
        self.settings.setValue("window/geometry", self.saveGeometry())
        self.settings.setValue("window/state", self.saveState())
        self.settings.sync()
        self.workers.cancel()
        self.workers.wait(CLOSE_GRACE_MS)
        self.stats.workers.wait(CLOSE_GRACE_MS)
        self.waited_on_close = True  # its jobs had their grace: gui/command.py does not wait for a stuck one again
        if self.error_box is not None:
            self.error_box.close()
        super().closeEvent(ev)
