"""Seeded random actions over the bundled demos in the real window (issue 24's done-means).

The real main window (offscreen, real runtime) opens each demo in ``models/`` and then performs seeded random
actions a user could: switch demo, tab, block, layer, head, aggregate, scale, options; type tokens (and numbers
for the forecaster); run and cancel; press the arrow keys and View ▸ Ctrl+N; click and hover anywhere in the
current view; resize; compare with another demo and stop; switch heads off and on (the right-click menu); export
the view and the maps to a temporary folder and open the maps again; open a demo's sample image; toggle the
docks.  After each action the test waits for the window's workers to finish (``qtbot.waitUntil``), then fails on
anything that reached ``sys.excepthook``, a Qt warning or a Python RuntimeWarning/UserWarning (strict.py),
printing the seed and the last actions.  Each defect it found has its own test in test_random_action_finds.py.

``ATTNVIZ_RANDOM_ACTIONS`` sets how many actions (the suite runs 500 to stay in its 15 minutes; run thousands locally:
``ATTNVIZ_RANDOM_ACTIONS=5000 ATTNVIZ_RANDOM_SEED=7 pytest tests/gui/test_random_actions.py -s``) and
``ATTNVIZ_RANDOM_SEED`` the seed.
"""

from __future__ import annotations

import os
import time
from collections import deque
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QCheckBox,
    QComboBox,
    QSpinBox,
)
from strict import strict

REPO = Path(__file__).resolve().parents[2]
DEMOS = sorted((REPO / "models").glob("*.onnx"))
SAMPLES = sorted((REPO / "resources" / "samples").glob("*.png"))
ACTIONS = int(
    os.environ.get("ATTNVIZ_RANDOM_ACTIONS", "500")
)  # 10–50 s (quiet–loaded); 2,000: ~3 min (the suite then passes 15)
SEED = int(os.environ.get("ATTNVIZ_RANDOM_SEED", "24"))
WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "in", "the", "beginning", "God", "created", "é", "日本", "."]
WORDS += ["0.5", "-3", "42", "1e308", "nan", "inf", "7"]  # the forecaster reads numbers


class Monkey:
    """The actions, each a method; ``step`` picks one by weight and logs what it did."""

    def __init__(self, win, qtbot, rng: np.random.Generator, out: Path):
        self.w, self.qtbot, self.rng, self.out = win, qtbot, rng, out
        self.log: deque[str] = deque(maxlen=40)
        self.exports: list[Path] = []
        self.counts: dict[str, int] = {}
        self.elapsed = 0.0
        self.weights = {
            self.open_demo: 3,
            self.tab: 12,
            self.poke_control: 20,
            self.poke_view: 8,
            self.arrow_keys: 8,
            self.view_shortcut: 5,
            self.click_view: 10,
            self.type_text: 5,
            self.run: 3,
            self.run_and_cancel: 3,
            self.resize: 3,
            self.compare: 2,
            self.stop_compare: 1,
            self.export: 3,
            self.open_exported: 1,
            self.open_image: 1,
            self.ablate: 3,
            self.toggle_dock: 1,
        }
        self.names = list(self.weights)
        p = np.array(list(self.weights.values()), float)
        self.p = p / p.sum()

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def step(self, i: int) -> None:
        action = self.names[int(self.rng.choice(len(self.names), p=self.p))]
        what = action()
        name = action.__name__
        self.counts[name] = self.counts.get(name, 0) + 1
        self.log.append(f"{i}: {name} {what or ''}".rstrip())
        self.settle()

    def settle(self) -> None:
        """Until every job the action started has come back (and its queued slots have run)."""
        w = self.w
        self.qtbot.waitUntil(lambda: not w.workers.live() and not w.stats.workers.live(), timeout=120000)
        QApplication.processEvents()  # the pending zero-time timers (result_shown) and queued slots

    # -- actions --------------------------------------------------------------------------------------------
    def open_demo(self):
        p = self.pick(DEMOS)
        self.w.open_path(p)
        return p.name

    def tab(self):
        i = int(self.rng.integers(self.w.tabs.count()))
        self.w.tabs.setCurrentIndex(i)
        return self.w.tabs.tabText(i)

    def _controls(self, root):
        kinds = (QComboBox, QAbstractSpinBox, QCheckBox, QAbstractSlider)
        found = [c for k in kinds for c in root.findChildren(k)]
        return [c for c in found if c.isVisible() and c.isEnabled()]

    def _poke(self, c) -> str:
        if isinstance(c, QComboBox):
            if c.count() == 0:
                return "empty combo"
            i = int(self.rng.integers(c.count()))
            c.setCurrentIndex(i)
            return f"{type(c).__name__} -> {c.itemText(i)!r}"
        if isinstance(c, QCheckBox):
            c.click()
            return f"checkbox {c.text()!r} -> {c.isChecked()}"
        if isinstance(c, QAbstractSlider):
            v = int(self.rng.integers(c.minimum(), c.maximum() + 1))
            c.setValue(v)
            return f"slider -> {v}"
        if isinstance(c, QSpinBox):
            lo, hi = c.minimum(), min(c.maximum(), c.minimum() + 1000)
            if self.rng.random() < 0.5:  # the edges, where the bugs live (one generated word, one token)
                hi = min(hi, lo + 3)
            v = int(self.rng.integers(lo, hi + 1))
            c.setValue(v)
            return f"spinbox {c.objectName() or c.toolTip()[:20]!r} -> {v}"
        if isinstance(c, QAbstractSpinBox):
            v = float(self.rng.uniform(c.minimum(), c.maximum()))
            c.setValue(v)
            return f"spinbox -> {v:.2f}"
        return "?"

    def poke_control(self):
        found = self._controls(self.w.controls) + self._controls(self.w.inputs)
        if not found:
            return "no control"
        c = self.pick(found)
        what = self._poke(c)
        if self.w.inputs.isAncestorOf(c) and self.rng.random() < 0.6:  # a changed input field, then Run
            self.w.inputs.run_button.click()
            what += ", run"
        return what

    def run(self):
        self.w.inputs.run_button.click()

    def poke_view(self):
        found = self._controls(self.w.tabs.currentWidget())
        return self._poke(self.pick(found)) if found else "no control in view"

    def arrow_keys(self):
        key = self.pick([Qt.Key.Key_Left, Qt.Key.Key_Right, Qt.Key.Key_Up, Qt.Key.Key_Down])
        self.w.tabs.setFocus()
        self.qtbot.keyClick(self.w.tabs, key)
        return key.name

    def view_shortcut(self):
        actions = [a for a in self.w.menuBar().actions()[1].menu().actions() if a.shortcut().toString()]
        a = self.pick(actions)
        a.trigger()
        return a.shortcut().toString()

    def click_view(self):
        view = self.w.tabs.currentWidget()
        target = self._deepest(view)
        if target.width() < 2 or target.height() < 2:
            return "view too small"
        pos = QPoint(int(self.rng.integers(target.width())), int(self.rng.integers(target.height())))
        if self.rng.random() < 0.3:
            self.qtbot.mouseMove(target, pos)
            return f"hover {type(target).__name__} at {pos.x()},{pos.y()}"
        self.qtbot.mouseClick(target, Qt.MouseButton.LeftButton, pos=pos)
        return f"click {type(target).__name__} at {pos.x()},{pos.y()}"

    def _deepest(self, view):
        """The widget that takes the clicks: a graphics view's viewport, else a random visible child."""
        from PySide6.QtWidgets import QAbstractScrollArea

        areas = [a for a in view.findChildren(QAbstractScrollArea) if a.isVisible()]
        buttons = [b for b in view.findChildren(QAbstractButton) if b.isVisible()]
        if areas and (not buttons or self.rng.random() < 0.8):
            return self.pick(areas).viewport()
        return self.pick(buttons) if buttons else view

    def type_text(self):
        n = int(self.rng.integers(0, 12))
        text = " ".join(self.pick(WORDS) for _ in range(n))
        pair = " ".join(self.pick(WORDS) for _ in range(int(self.rng.integers(0, 6))))
        self.w.inputs.set_values(text=text, text_pair=pair if self.rng.random() < 0.3 else None)
        if self.rng.random() < 0.7:
            self.w.inputs.run_button.click()
        return repr(text)

    def run_and_cancel(self):
        self.w.inputs.run_button.click()
        if self.w.inputs.cancel_button.isEnabled():
            self.w.inputs.cancel_button.click()
            return "cancelled"
        return "nothing to cancel"

    def resize(self):
        size = (int(self.rng.integers(200, 1600)), int(self.rng.integers(150, 1000)))
        self.w.resize(*size)
        return f"{size[0]}x{size[1]}"

    def compare(self):
        p = self.pick(DEMOS)
        self.w.compare.compare_with(p)
        return p.name

    def stop_compare(self):
        self.w.compare.stop()

    def export(self):
        suffix = self.pick([".png", ".svg", ".pdf", ".npz"])
        p = self.out / f"export{len(self.exports)}{suffix}"
        self.w.export_view(p)
        self.settle()
        if p.suffix == ".npz" and p.is_file():
            self.exports.append(p)
        return p.name

    def open_exported(self):
        if not self.exports:
            return "no export yet"
        p = self.pick(self.exports)
        self.w.open_path(p)
        return p.name

    def open_image(self):
        p = self.pick(SAMPLES)
        self.w.open_path(p)
        return p.name

    def ablate(self):
        """Right-click a head: switch it off or on, or all heads back on (the menu's enabled entries)."""
        s = self.w.session
        if s.block is None:
            return "no block"
        layer = int(self.rng.integers(s.block.n_layers))
        head = int(self.rng.integers(max(1, s.block.heads_in(layer))))
        menu = self.w.ablation.menu_for(s.sel.block, layer, head, QPoint(0, 0))
        if menu is None:
            return "no menu"
        entries = [a for a in menu.actions() if a.isEnabled() and a.text() and not a.isSeparator()]
        a = self.pick(entries)
        menu.close()
        a.trigger()
        return f"L{layer} H{head}: {a.text()}"

    def toggle_dock(self):
        dock = self.pick([self.w.left_dock, self.w.right_dock])
        dock.toggleViewAction().trigger()
        return dock.objectName()


def run_actions(win, qtbot, out: Path, n: int, seed: int) -> Monkey:
    rng = np.random.default_rng(seed)
    monkey = Monkey(win, qtbot, rng, out)
    t0 = time.perf_counter()
    with strict() as seen:
        for demo in DEMOS:  # every demo once, then at random
            with qtbot.waitSignal(win.result_shown, timeout=120000):
                win.open_path(demo)
            monkey.log.append(f"open {demo.name}")
        for i in range(n):
            try:
                monkey.step(i)
            except Exception as e:
                seen.append(f"the action raised {type(e).__name__}: {e}")
            if seen:
                tail = "\n".join(monkey.log)
                raise AssertionError(
                    f"seed {seed}, action {i} of {n}: {len(seen)} unhandled\n{seen[0]}\nlast actions:\n{tail}"
                )
    monkey.elapsed = time.perf_counter() - t0
    return monkey


def test_seeded_random_actions_over_the_demos(real_window, qtbot, tmp_path):
    assert len(DEMOS) >= 5 and SAMPLES
    monkey = run_actions(real_window, qtbot, tmp_path, ACTIONS, SEED)
    done = sum(monkey.counts.values())
    print(f"seed {SEED}: {done} actions in {monkey.elapsed:.1f} s: {monkey.counts}")
    assert done == ACTIONS
    assert real_window.session.result is not None or real_window.last_error is not None
