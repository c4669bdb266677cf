"""What opening the main window costs: ``MainWindow()`` alone, shown and painted, and with the default demo's
first result drawn; optionally where the time goes (cProfile).

    QT_QPA_PLATFORM=offscreen OMP_NUM_THREADS=1 python bench/window_open_bench.py [--rounds 15] [--demo 3]
        [--profile 25]

``construct``: ``MainWindow(opener, settings)`` (a fresh window per round; the first, which pays font and style
set-up once per process, is left out of the medians); ``shown``: that plus ``show()`` and the events that lay
out and paint it, as a test's window fixture does (``qtbot.waitExposed``); ``demo``: from ``MainWindow()`` to
the first result of the bundled demo drawn (the real opener and runtime; ``result_shown``), as
``attnviz open`` does.  Wall and CPU (process time) medians.  Run it once per tree (``PYTHONPATH``) to compare
two versions, interleaved by the caller.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def _close(win, app) -> None:
    win.workers.cancel()
    win.workers.wait(10000)
    win.stats.workers.wait(10000)
    win.close()
    win.deleteLater()
    app.processEvents()
    gc.collect()


def _timed(fn) -> tuple[float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15, help="windows constructed / shown (each)")
    ap.add_argument("--demo", type=int, default=3, help="windows opened on the default demo (0: none)")
    ap.add_argument("--profile", type=int, default=0, help="print cProfile's N costliest calls of MainWindow()")
    args = ap.parse_args(argv)

    from PySide6.QtCore import QEventLoop, QSettings, QTimer

    from attnviz.gui.app import demo_model, make_app
    from attnviz.gui.main_window import MainWindow

    app = make_app()
    settings = QSettings(os.devnull, QSettings.IniFormat)

    def no_opener(*_a, **_k):
        return None

    def construct():
        return MainWindow(opener=no_opener, settings=settings)

    def shown():
        win = construct()
        win.resize(1300, 850)
        win.show()
        app.processEvents()  # laid out and painted (offscreen: exposed at once)
        return win

    _close(shown(), app)  # warm-up: fonts, styles, pyqtgraph's first item
    rows = {}
    for name, make in (("construct", construct), ("shown", shown)):
        walls, cpus = [], []
        for _ in range(args.rounds):
            box = []
            wall, cpu = _timed(lambda make=make: box.append(make()))
            walls.append(wall)
            cpus.append(cpu)
            _close(box[0], app)
        rows[name] = (statistics.median(walls), statistics.median(cpus))

    demo = demo_model()
    if args.demo and demo is not None:
        walls, cpus = [], []
        for _ in range(args.demo):
            loop = QEventLoop()
            box = []

            def open_demo(box=box, loop=loop):
                win = MainWindow(settings=settings)
                box.append(win)
                win.resize(1400, 900)
                win.show()
                win.result_shown.connect(loop.quit)
                QTimer.singleShot(120_000, loop.quit)
                win.open_model(demo)
                loop.exec()
                app.processEvents()  # the first result painted

            wall, cpu = _timed(open_demo)
            walls.append(wall)
            cpus.append(cpu)
            if box[0].session.result is None:
                print(f"demo: no result ({box[0].last_error})", file=sys.stderr)
                return 1
            _close(box[0], app)
        rows[f"demo ({demo.name})"] = (statistics.median(walls), statistics.median(cpus))

    print(f"window open, median of {args.rounds} rounds ({args.demo} for the demo), load {os.getloadavg()[0]:.2f}")
    for name, (wall, cpu) in rows.items():
        print(f"{name:>24}: {wall * 1000:8.1f} ms wall  {cpu * 1000:8.1f} ms CPU")

    if args.profile:
        prof = cProfile.Profile()
        box = []
        prof.enable()
        box.append(shown())
        prof.disable()
        _close(box[0], app)
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(args.profile)
        print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.path.append(str(Path(__file__).resolve().parents[1]))  # PYTHONPATH picks the tree measured
    sys.exit(main())
