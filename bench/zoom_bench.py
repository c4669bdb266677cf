"""The Head map's re-pool of a long map's visible region (zoom / pan / resize), timed and its memory traced.

    OMP_NUM_THREADS=1 QT_QPA_PLATFORM=offscreen python bench/zoom_bench.py [--tokens 2048 8192 30000] [--visible 2048]

For each map length (bench/long_map.py's map, one head), a Head map widget of 1,000 x 900 is shown, its view set to
a ``visible`` x ``visible`` region (alternating between two places so that each round draws anew; the range change
and its repaint of the axes untimed: they are the zoom's, with or without a re-pool), and timed: ``pool``, the view
model alone (plan_region + pool_region: what re-pooling reads); ``re-pool + paint``, the widget's whole re-pool
(the pooling, log/colour, setImage and the synchronous repaint it causes); and, once, the whole map in view (the
head switch / first draw) with its tracemalloc peak.  Wall and CPU medians; tracemalloc's peak of one re-pool beside the region's and the
map's sizes.  Target: re-pool + paint of a 2,048 x 2,048 region <= 16 ms (issue 26's head switch budget).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from long_map import make_map

TARGET_MS = 16.0


def timed(fn, repeats: int, before=lambda: None) -> tuple[float, float]:
    before()
    fn()  # warm-up
    wall, cpu = [], []
    for _ in range(repeats):
        before()
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - w0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    return statistics.median(wall), statistics.median(cpu)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[2048, 8192, 30000])
    ap.add_argument("--visible", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args(argv)

    from PySide6.QtCore import QRectF
    from PySide6.QtWidgets import QApplication

    from attnviz.core import view as vm
    from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
    from attnviz.gui.app import make_app
    from attnviz.gui.views.heatmap import HeatmapWidget

    app = make_app()
    hm = HeatmapWidget()
    hm.resize(1000, 900)
    hm.show()
    app.processEvents()
    print(f"load average {os.getloadavg()[0]:.2f} at start; {os.environ.get('QT_QPA_PLATFORM')} platform")
    print(
        f"{'tokens':>6} | {'visible':>7} | {'pixels':>9} | {'runs':>5} | {'region':>11} | {'pool ms wall/cpu':>16} |"
        f" {'re-pool+paint ms wall/cpu':>25} | {'peak MB':>7} | {'region MB':>9} | {'map MB':>7} | {'whole view ms':>13}"
        f" | {'whole peak MB':>13}"
    )
    ok = True
    for n in args.tokens:
        m = make_map(n)
        site = SiteInfo("encoder", "self", 0, 1, "synthetic_softmax", "softmax")
        result = AttentionResult([DenseMap(m)], [site], tokens=TokenAxis([f"t{i}" for i in range(n)]))
        mv = vm.head_map(result, vm.Selection(mode="head"))
        tracemalloc.start()
        w0 = time.perf_counter()
        hm.set_map(mv)
        app.processEvents()
        whole_ms = (time.perf_counter() - w0) * 1000
        whole_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        v = min(args.visible, n)
        places = [(n - v) // 4, (n - v) * 3 // 4]  # two regions apart: each round pools anew
        state = {"i": 0}

        def move() -> None:  # the zoom itself and its repaint (the axes' labels): not the re-pool's, not timed
            state["i"] ^= 1
            p = places[state["i"]]
            hm.vb.setRange(QRectF(p, p, v, v), padding=0)
            app.processEvents()
            hm._repool_timer.stop()  # the debounce is not timed either: the re-pool it starts is

        def repool() -> None:
            hm._draw_region(hm._plan())
            app.processEvents()  # the image's repaint

        def pool(a=mv.matrix) -> None:
            state["i"] ^= 1
            p = places[state["i"]]
            vm.pool_region(a, vm.plan_region(a.shape, (p, p + v), (p, p + v), hm._pixels()))

        pool_ms = timed(pool, args.repeats)
        draw_ms = timed(repool, args.repeats, before=move)
        move()
        tracemalloc.start()
        repool()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        r = hm.region
        region_mb = (r.q1 - r.q0) * (r.k1 - r.k0) * 4 / 1e6
        px = "x".join(str(round(p)) for p in hm._pixels())
        ok &= draw_ms[0] <= TARGET_MS or v < args.visible
        print(
            f"{n:>6} | {v:>7} | {px:>9} | {r.fq}x{r.fk:<3} | {r.q1 - r.q0:>5}x{r.k1 - r.k0:<5} |"
            f" {pool_ms[0]:>7.1f} / {pool_ms[1]:<6.1f} | {draw_ms[0]:>12.1f} / {draw_ms[1]:<10.1f} |"
            f" {peak / 1e6:>7.1f} | {region_mb:>9.1f} | {m.nbytes / 1e6:>7.0f} | {whole_ms:>13.0f}"
            f" | {whole_peak / 1e6:>13.1f}"
        )
        del m, result, mv, pool
    print(f"load average {os.getloadavg()[0]:.2f} at end")
    hm.close()
    QApplication.processEvents()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
