"""GUI benchmark: time to switch head and to redraw the full overview, 6 layers x 12 heads.

    QT_QPA_PLATFORM=offscreen python bench/gui_bench.py [--tokens 128 512] [--repeats 15]

Synthetic softmax maps (the drawing cost does not depend on where the numbers came from).
Each timing includes the numpy work, the pyqtgraph item updates and a synchronous repaint of
the view's viewport.  Targets: head switch <= 16 ms, full overview redraw <= 150 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np

from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis

TARGET_HEAD_MS = 16.0
TARGET_OVERVIEW_MS = 150.0


def synthetic_result(tokens: int, layers: int = 6, heads: int = 12, seed: int = 0) -> AttentionResult:
    rng = np.random.default_rng(seed)
    maps, sites = [], []
    for i in range(layers):
        x = rng.standard_normal((1, heads, tokens, tokens), dtype=np.float32) * 2
        x = np.exp(x - x.max(-1, keepdims=True))
        maps.append(DenseMap(x / x.sum(-1, keepdims=True)))
        sites.append(SiteInfo("encoder", "self", i, heads, f"/layer.{i}/Softmax", "softmax"))
    labels = ["[CLS]"] + [f"tok{i}" for i in range(tokens - 2)] + ["[SEP]"]
    special = [True] + [False] * (tokens - 2) + [True]
    return AttentionResult(maps, sites, tokens=TokenAxis(labels, special), info={"provider": "synthetic"})


def timed(fn, repeats: int) -> float:
    fn()  # warm-up (first draw builds caches, fonts, LUTs)
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return statistics.median(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args(argv)

    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from attnviz.gui.app import make_app
    from attnviz.gui.main_window import MainWindow

    app = make_app()
    settings = QSettings(os.devnull, QSettings.IniFormat)
    win = MainWindow(opener=lambda *a, **k: None, settings=settings)
    win.resize(1400, 900)
    win.show()
    app.processEvents()
    rows = []
    for n in args.tokens:
        result = synthetic_result(n)
        win._show_result(result)
        app.processEvents()

        win.select_view("head")
        app.processEvents()
        state = {"h": 0}

        def switch_head():
            state["h"] = (state["h"] + 1) % 12
            win.session.select(head=state["h"])
            QApplication.processEvents()  # delivers the update: the view repaints here

        # the window opens on "mean over heads" (view.default_selection): a head switch there changes no map
        win.session.select(mode="mean")  # a second result keeps the user's focus: the last round left "head"
        app.processEvents()
        mean_ms = timed(switch_head, args.repeats)
        win.session.select(mode="head", layer=0)
        app.processEvents()
        head_ms = timed(switch_head, args.repeats)

        win.select_view("overview")
        app.processEvents()

        def redraw_overview(use_cache):
            win.overview.redraw(use_cache=use_cache)
            QApplication.processEvents()

        ov_ms = timed(lambda: redraw_overview(False), max(5, args.repeats // 2))
        ov_cached_ms = timed(lambda: redraw_overview(True), max(5, args.repeats // 2))
        win.session.select(hide_special=True)  # rows renormalised: pooled again from the full maps
        app.processEvents()
        ov_hidden_ms = timed(lambda: redraw_overview(False), 2)
        win.session.select(hide_special=False)
        app.processEvents()
        rows.append((n, mean_ms, head_ms, ov_ms, ov_cached_ms, ov_hidden_ms, len(win.overview.thumbs)))

    print(
        f"attnviz GUI benchmark — 6 layers × 12 heads, synthetic maps, {os.environ.get('QT_QPA_PLATFORM', 'native')} platform"
    )
    print(
        "(median of repeats; 'switch head' in single-head mode, 'under mean' the window's opening mode where the map"
        " stays;\n 'full' pools every map again as a step / hide-special change does, 'cached' re-uses the pooling"
        " kept with the result as a log/scale change or the first draw does,\n 'hidden' pools again with the special tokens hidden)"
    )
    print(
        f"{'tokens':>7} | {'under mean (ms)':>15} | {'switch head (ms)':>16} | {'target':>6} | {'overview full (ms)':>18} | {'target':>6} | {'overview cached (ms)':>20} | {'full, hidden (ms)':>17} | thumbs"
    )
    print("-" * 142)
    ok = True
    for n, hm, h, o, oc, oh, t in rows:
        hs = "ok" if h <= TARGET_HEAD_MS else "SLOW"
        os_ = "ok" if o <= TARGET_OVERVIEW_MS else "SLOW"
        ok &= hs == "ok" and os_ == "ok"
        print(f"{n:>7} | {hm:>15.1f} | {h:>16.1f} | {hs:>6} | {o:>18.1f} | {os_:>6} | {oc:>20.1f} | {oh:>17.1f} | {t}")
    win.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
