"""A long map's first opening in the Head map: how many times it is pooled, and what the opening costs.

    OMP_NUM_THREADS=1 xvfb-run -a -s "-screen 0 1600x1000x24" python bench/first_open_bench.py --tokens 8192 30000

For each map length (bench/long_map.py's map, one head), a fresh window of 1,600 x 1,000 shows the map and switches
to the Head map; the event loop then runs until nothing has been pooled for ``--settle`` ms (the re-pool timer is
80 ms), so a re-pool caused by the first paint's layout (the axes' rotated labels) is counted.  Printed per map: the
pools (``pool_region`` calls: the region's runs and its cells), their CPU, the wall from the Head map's tab switch to
the end of the last pool (a re-pool waits for the 80 ms timer), and the CPU from the switch until settled (the
waits cost none: it is the opening's and its paints').  One map per process (``--tokens`` one value
for a clean process each); the overview's thumbnails are pooled before the switch, untimed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from long_map import make_map


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[8192])
    ap.add_argument("--settle", type=int, default=600)
    ap.add_argument("--tag", default="")
    args = ap.parse_args(argv)

    from PySide6.QtCore import QEventLoop, QSettings, QTimer

    from attnviz.core import view as vm
    from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
    from attnviz.gui.app import make_app
    from attnviz.gui.main_window import MainWindow

    app = make_app()
    pools: list[tuple] = []
    real = vm.pool_region

    def counting(m, region, signed=False):
        c0 = time.process_time()
        out = real(m, region, signed)
        pools.append((region.fq, region.fk, region.cells, time.process_time() - c0, time.perf_counter()))
        return out

    vm.pool_region = counting  # the Head map reaches it as vm.pool_region

    def settle(ms: int) -> None:
        loop = QEventLoop()
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    for tokens in args.tokens:
        site = SiteInfo("encoder", "self", 0, 1, "synthetic_softmax", "softmax")
        result = AttentionResult(
            [DenseMap(make_map(tokens))], [site], tokens=TokenAxis([f"t{i}" for i in range(tokens)])
        )
        win = MainWindow(opener=lambda *a, **k: None, settings=QSettings(os.devnull, QSettings.IniFormat))
        win.resize(1600, 1000)
        win.show()
        win._show_result(result)
        settle(args.settle)  # the overview's thumbnails, untimed
        pools.clear()
        w0, c0 = time.perf_counter(), time.process_time()
        win.select_view("head")
        while True:  # until a settle wait passes with no pool
            n = len(pools)
            settle(args.settle)
            if len(pools) == n:
                break
        cpu = time.process_time() - c0  # the idle waits cost none
        last = (pools[-1][4] - w0) * 1000 if pools else float("nan")  # a re-pool runs inside a settle wait
        hm = win.head_map.heatmap
        px = hm._pixels()
        pool_cpu = sum(p[3] for p in pools)
        print(
            f"{args.tag}tokens {tokens}: pools {len(pools)} "
            f"{[(p[0], p[1], p[2]) for p in pools]}, pool CPU {pool_cpu * 1000:.0f} ms, "
            f"last pool done {last:.0f} ms after the switch, CPU {cpu * 1000:.0f} ms to settled, "
            f"view px {px[0]:.0f} x {px[1]:.0f}, load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        win.close()
        del win, result
    app.quit()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
