"""What drawing a long map's overview thumbnails or its figure holds beside the map: tracemalloc's peak, the
process's peak RSS over what it held before, and CPU.

    OMP_NUM_THREADS=1 python bench/pool_memory_bench.py --tokens 30000 --what thumbs
    OMP_NUM_THREADS=1 python bench/pool_memory_bench.py --tokens 30000 --what figure
    OMP_NUM_THREADS=1 python bench/pool_memory_bench.py --tokens 8192 --what diff

One operation per process (peak RSS only grows), on bench/long_map.py's map (one head): ``thumbs``, the overview's
thumbnails pooled afresh (``thumbnails(..., use_cache=False)``, 64 cells a side); ``figure``, the Head map figure
(``render_figure(result, "heatmap")``, the default style: where the map is pooled), then written as PDF
(matplotlib's part); ``diff``, the same for the A - B figure of the map against itself scaled by 0.9 (a signed map:
pooled by magnitude).  Printed per step: tracemalloc's peak (numpy's arrays included; the map made before it
starts), the process's ``ru_maxrss`` after it, CPU and wall.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from long_map import make_map


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=30000)
    ap.add_argument("--what", choices=("thumbs", "figure", "diff"), required=True)
    ap.add_argument("--tag", default="")
    args = ap.parse_args(argv)

    from attnviz.core import view as vm
    from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
    from attnviz.figures import FigureStyle, figure_bytes, render_diff_figure, render_figure

    def result_of(m):
        site = SiteInfo("encoder", "self", 0, 1, "synthetic_softmax", "softmax")
        return AttentionResult([DenseMap(m)], [site], tokens=TokenAxis([f"t{i}" for i in range(args.tokens)]))

    m = make_map(args.tokens)
    result = result_of(m)
    sel = vm.Selection(mode="head")
    if args.what == "thumbs":
        steps = {"thumbnails": lambda _: vm.thumbnails(result, sel, use_cache=False)}
    else:
        other = result_of(m * 0.9) if args.what == "diff" else None

        def render(_):
            if other is None:
                return render_figure(result, "heatmap", sel, FigureStyle())
            return render_diff_figure(result, other, sel, FigureStyle())

        steps = {"render": render, "save pdf": lambda fig: figure_bytes(fig, "pdf")}

    vm.thumbnails(result, sel)  # the "shared" scale's top, kept: the figure reads it (not part of the drawing)
    figure_bytes(render_figure(result_of(m[..., :64, :64].copy()), "heatmap", sel, FigureStyle()), "pdf")  # warm
    line = f"{args.tag}{args.what} tokens {args.tokens}:"
    before_max = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    line += f" RSS {rss_mb():.0f} MB before (max {before_max:.0f});"
    out = None
    for name, step in steps.items():
        tracemalloc.start()
        w0, c0 = time.perf_counter(), time.process_time()
        out = step(out)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        after_max = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        line += (
            f" {name}: tracemalloc peak {peak / 2**20:.1f} MB, max RSS {after_max:.0f} MB, CPU {cpu * 1000:.0f} ms,"
            f" wall {wall * 1000:.0f} ms;"
        )
    print(f"{line} load {os.getloadavg()[0]:.2f} (tracemalloc on)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
