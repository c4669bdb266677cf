"""On-demand runs with Q and Kᵀ brought to the host against the same runs keeping them on the session's device
(runtime/kept.py), alternating in one process, each round's pair back to back (ondemand_bench.py's fresh process
per row moved by ±6 % between rows at load 8-10 on 2 cores).

    python bench/ondemand_qk_ab.py [--tokens 2048] [--rounds 8] [--provider cpu|cuda] [--inprocess]

Model: MiniLM's shape (bench/engine_bench.export_minilm, position table tiled to 4,096), one thread.  Two models
of the same file, one opened with ATTNVIZ_QK_DEVICE=off (host) and one with =on (kept); each warmed twice, then
``--rounds`` runs each, interleaved (order alternating).  Per run: wall, and CPU time of this process and the
isolation child (/proc).  Prints the medians, kept / host, and the median time to draw one head (site 0, head 0)
from the last result of each (host: numpy recompute; kept: the head model beside Q and Kᵀ).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--provider", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--inprocess", action="store_true", help="ATTNVIZ_INPROCESS=1 (no isolation child)")
    a = ap.parse_args()
    if a.inprocess:
        os.environ["ATTNVIZ_INPROCESS"] = "1"
    from engine_bench import export_minilm, feeds

    from attnviz.runtime import host
    from attnviz.runtime import model as rm

    tick = os.sysconf("SC_CLK_TCK")

    def cpu() -> float:
        total = time.process_time()
        if host._host is not None:
            st = open(f"/proc/{host._host.proc.pid}/stat").read().rsplit(")", 1)[1].split()
            total += (int(st[11]) + int(st[12])) / tick
        return total

    with tempfile.TemporaryDirectory() as tmp:
        path = export_minilm(Path(tmp), max(4096, a.tokens))
        f = feeds(a.tokens)
        models = {}
        for name, qk in (("host", "off"), ("kept", "on")):
            os.environ["ATTNVIZ_QK_DEVICE"] = qk  # read when the on-demand session is made (the first run)
            models[name] = rm.open_model(path, provider=a.provider, threads=1)
            for _ in range(2):
                r = models[name].run(f, mode="ondemand")
            print(f"{name}: {type(r.maps[0]).__name__} on {r.info['provider']}", flush=True)
            del r
        got: dict[str, list[tuple[float, float]]] = {k: [] for k in models}
        last = {}
        for i in range(a.rounds):
            for name in list(models) if i % 2 == 0 else list(reversed(models)):
                last.pop(name, None)  # the last result goes before the run, as a loop's reassignment would
                w, c = time.perf_counter(), cpu()
                last[name] = models[name].run(f, mode="ondemand")
                got[name].append((time.perf_counter() - w, cpu() - c))
        head = {}
        for name, r in last.items():
            took = []
            for _ in range(3):
                t0 = time.perf_counter()
                r.maps[0].head(0, 0)
                took.append(time.perf_counter() - t0)
            head[name] = statistics.median(took) * 1000
        med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in got.items()}
        print(f"{a.tokens} tokens, {a.rounds} rounds, {'in-process' if a.inprocess else 'isolated'}, {a.provider}")
        for k, (w, c) in med.items():
            cpus = " ".join(f"{x[1]:.2f}" for x in got[k])
            print(f"  {k}: wall {w * 1000:.1f} ms, CPU {c * 1000:.1f} ms ({cpus} s); a head drawn {head[k]:.1f} ms")
        # each round's pair ran back to back, under about the same load: the median of the pairs' ratios is
        # steadier than the ratio of the medians where the load moves between rounds
        pairs = [k[1] / h[1] for k, h in zip(got["kept"], got["host"])]
        print(
            f"  kept / host: wall {med['kept'][0] / med['host'][0]:.3f}x, CPU {med['kept'][1] / med['host'][1]:.3f}x;"
            f" CPU per round's pair: median {statistics.median(pairs):.3f}x ({' '.join(f'{p:.2f}' for p in pairs)});"
            f" least CPU {min(x[1] for x in got['kept']) / min(x[1] for x in got['host']):.3f}x;"
            f" load average {os.getloadavg()[0]:.1f}"
        )


if __name__ == "__main__":
    main()
