"""GUI benchmark: time to switch head and to redraw the full overview, 6 layers x 12 heads.

    QT_QPA_PLATFORM=offscreen python bench/gui_bench.py [--tokens 128 512] [--repeats 15]
    QT_QPA_PLATFORM=offscreen python bench/gui_bench.py --ondemand 4096 [--other-root DIR] [--rounds 3]

Synthetic softmax maps (the drawing cost does not depend on where the numbers came from).
Each timing includes the numpy work, the pyqtgraph item updates and a synchronous repaint of
the view's viewport.  Targets: head switch <= 16 ms, full overview redraw <= 150 ms.

``--ondemand T``: the row "head switch on demand T" instead: all-MiniLM-L6-v2 exported with its position table
tiled to T (bench/engine_bench.export_minilm), run on T tokens with the maps kept per head (``open --memory
ondemand``: each head recomputed from Q and Kᵀ, its epilogue in the isolation child), Token links shown, then
layer 2's heads switched one after another, each switch drawn (the view model's links, a synchronous paint of
the viewport).  Per switch: wall, CPU of the window's process, CPU of the isolation child (/proc).  A fresh
process a row and round; ``--other-root`` (a tree from ``git archive``) runs the same rows on that code,
interleaved round by round, order alternating; OpenBLAS's spin set as ``attnviz``'s command line sets it
(cli.calm_blas, where the tree has it).
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


ONDEMAND_CHILD = r"""
import json, os, sys, time
root, bench, model, t, switches = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
sys.path[:0] = [root, bench]
os.environ["QT_QPA_PLATFORM"] = "offscreen"
import attnviz.cli as cli
getattr(cli, "calm_blas", lambda: None)()  # what `attnviz open` does before numpy loads (a tree without it: none)
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication
from attnviz.app.jobs import open_model_ready
from attnviz.gui.app import make_app
from attnviz.gui.main_window import MainWindow
from engine_bench import feeds
assert __import__("attnviz").__file__.startswith(root)
from proc_cpu import children_cpu_s as child_cpu
app = make_app()
win = MainWindow(opener=lambda *a, **k: None, settings=QSettings(os.devnull, QSettings.IniFormat))
win.resize(1400, 900)
win.show()
m = open_model_ready(model, provider="cpu", probe=False)
res = m.run(feeds(t), mode="ondemand")
win._show_result(res)
win.select_view("links")
win.session.select(mode="head", layer=2, head=0)
app.processEvents()
out = []
for h in range(1, switches + 1):
    c0, k0, w0 = time.process_time(), child_cpu(), time.perf_counter()
    win.session.select(head=h % 12)
    QApplication.processEvents()  # (the paint)
    out.append((time.perf_counter() - w0, time.process_time() - c0, child_cpu() - k0))
print(json.dumps([out, type(res.maps[2]).__name__]))
"""


def ondemand_rows(tokens: int, rounds: int, switches: int, other: str | None) -> int:
    """The row "head switch on demand ``tokens``" (see the module's text), this tree and ``other``'s."""
    import json
    import subprocess
    import tempfile

    from engine_bench import export_minilm

    here = str(Path(__file__).resolve().parents[1])
    roots = {"this tree": here, **({"other": str(Path(other).resolve())} if other else {})}
    got: dict[str, list] = {k: [] for k in roots}
    kinds: dict[str, set] = {k: set() for k in roots}
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_THREAD_TIMEOUT", "PYTHONPATH")}
    with tempfile.TemporaryDirectory() as tmp:
        model = export_minilm(Path(tmp), tokens)
        print(f"load average at start: {os.getloadavg()[0]:.1f}")
        for r in range(rounds):
            for name in list(roots) if r % 2 == 0 else list(roots)[::-1]:
                done = subprocess.run(
                    [sys.executable, "-c", ONDEMAND_CHILD, roots[name], str(Path(__file__).parent), str(model)]
                    + [str(tokens), str(switches)],
                    capture_output=True,
                    text=True,
                    env=env,
                    check=True,
                )
                rows, kind = json.loads(done.stdout.strip().splitlines()[-1])
                got[name] += rows
                kinds[name].add(kind)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    print(f"head switch on demand {tokens} (Token links, MiniLM layer 2; {rounds} rounds x {switches} switches)")
    print(f"{'tree':>10} | {'wall median':>11} | {'window CPU':>10} | {'child CPU':>9} | {'CPU in all':>10} | maps")
    for name, rows in got.items():
        med = [statistics.median(x[i] for x in rows) * 1000 for i in range(3)]
        cpu = statistics.median((x[1] + x[2]) for x in rows) * 1000
        print(
            f"{name:>10} | {med[0]:>8.0f} ms | {med[1]:>7.0f} ms | {med[2]:>6.0f} ms | {cpu:>7.0f} ms"
            f" | {' / '.join(sorted(kinds[name]))}"
        )
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--ondemand", type=int, default=None, metavar="T", help="the on-demand head switch row at T tokens")
    ap.add_argument("--other-root", default=None, help="with --ondemand: a tree (git archive) run interleaved")
    ap.add_argument("--rounds", type=int, default=3, help="with --ondemand: interleaved rounds")
    ap.add_argument("--switches", type=int, default=8, help="with --ondemand: head switches a round")
    args = ap.parse_args(argv)
    if args.ondemand:
        sys.path.insert(0, str(Path(__file__).parent))
        return ondemand_rows(args.ondemand, args.rounds, args.switches, args.other_root)

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
