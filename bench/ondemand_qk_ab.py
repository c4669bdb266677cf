"""On-demand runs with Q and Kᵀ brought to the host against the same runs keeping them on the session's device
(runtime/kept.py), alternating in one process, each round's pair back to back (ondemand_bench.py's fresh process
per row moved by ±6 % between rows at load 8-10 on 2 cores).

    python bench/ondemand_qk_ab.py [--tokens 2048] [--rounds 8] [--provider cpu|cuda] [--inprocess]

Model: MiniLM's shape (bench/engine_bench.export_minilm, position table tiled to 4,096), one thread.  Two models
of the same file, one opened with ATTNVIZ_QK_DEVICE=off (host) and one with =on (kept); each warmed twice, then
``--rounds`` runs each, interleaved (order alternating).  Per run: wall, and CPU time of this process and the
isolation child (/proc).  Prints the medians, kept / host, and the median time to draw one head (site 0, head 0)
from the last result of each (host: numpy recompute; kept: the head model beside Q and Kᵀ).

``--thumbs N``: then N interleaved rounds of the overview's thumbnails of those last results, pooled afresh as a
step or filter change makes the window pool them (core/view/overview.thumbnails, use_cache=False; the drawing
itself is bench/gui_bench.py's): the host recompute's (each head recomputed and pooled here), the kept result's
as before session 14 (a request a head, each whole head brought back and pooled here) and as now (every head of a
site pooled beside Q and Kᵀ, one request a site, only the thumbnails back); and the time to bring one layer's
every head (Block.layer: a request a head before, one now).  ``--thumbs-host M``: time the host recompute's in
only the first M of those rounds (72 heads recomputed on the host take seconds a round at 2,048 tokens).
``--now-only``: only the kept result's thumbnails as now (no host recompute, no "before", no difference check).

Memory (session 14, memkept14): the resident set of the process that owns the sessions (the isolation child, or
this one with ``--inprocess``; /proc VmRSS, and VmHWM: its peak since the counter was reset by writing 5 to
/proc/<pid>/clear_refs, just before the thumbnails) before the thumbnails, after their first pass and after all
rounds; on a GPU also each process's GPU memory (nvidia-smi) at the same points.  The kept result's site sessions
(head model, pooling twin) hold memory only while a request runs since memkept14 (runtime/session.py
``arena=False``); before, each kept its arena's peak (12.5 GB of an H100 at 2,048 tokens).
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
    ap.add_argument("--thumbs", type=int, default=0, help="rounds timing the overview's thumbnails (0: none)")
    ap.add_argument(
        "--thumbs-host", type=int, default=None, help="of which the host recompute's (default all; 0: not timed)"
    )
    ap.add_argument("--now-only", action="store_true", help="only the kept thumbnails as now (memory runs)")
    a = ap.parse_args()
    if a.inprocess:
        os.environ["ATTNVIZ_INPROCESS"] = "1"
    from engine_bench import export_minilm, feeds
    from proc_cpu import ticks_cpu_s

    from attnviz.runtime import host
    from attnviz.runtime import model as rm

    def cpu() -> float:
        return time.process_time() + (ticks_cpu_s(host._host.proc.pid) if host._host is not None else 0.0)

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
        if a.thumbs:
            thumbs_table(last, a.thumbs, a.thumbs if a.thumbs_host is None else a.thumbs_host, cpu, a.now_only)
            helpers(models["kept"])


def helpers(model) -> None:
    """How the site sessions the kept result made hold memory, as onnxruntime reports it where they live."""
    made = [s for pair in model._heads.values() if pair for s in pair if s is not None and s._sess is not None]
    if made and hasattr(made[0], "helper_memory"):  # a checkout before memkept14 cannot say
        seen: dict = {}
        for s in made:
            got = s.helper_memory()
            seen[got] = seen.get(got, 0) + 1
        print(f"  {len(made)} site sessions: " + "; ".join(f"{n} x {m}" for m, n in seen.items()))


def owner() -> int:
    """The process whose sessions run: the isolation child, else this one."""
    from attnviz.runtime import host

    return host._host.proc.pid if host._host is not None else os.getpid()


def reset_peak() -> bool:
    """VmHWM counts from now (Linux >= 4.0; False where it cannot be reset: it then counts from the start)."""
    try:
        with open(f"/proc/{owner()}/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def memory(when: str) -> None:
    """The owning process's resident set now and its peak (module docstring), and each process's GPU memory."""
    pid = owner()
    got = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, val = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                got[key] = int(val.split()[0]) / 1024
    kind = "this process" if pid == os.getpid() else "the isolation child"
    print(f"  memory {when}: {kind} RSS {got['VmRSS']:.0f} MB, peak {got['VmHWM']:.0f} MB", flush=True)
    gpu_memory(when)


def gpu_memory(when: str) -> None:
    """What each process holds on the GPU now (nvidia-smi; nothing without one): before memkept14 every site's head
    model and pooling twin kept their CUDA arena's peak, one request a site's worth (sitemaps.KeptMap.SITE_ELEMS)."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi"):
        q = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"]
        got = subprocess.run(q, capture_output=True, text=True, check=False).stdout.strip().replace("\n", "; ")
        print(f"  GPU memory {when} (pid, used; the owner is {owner()}): {got or 'none listed'}", flush=True)


def thumbs_table(last: dict, rounds: int, host_rounds: int, cpu, now_only: bool = False) -> None:
    """The overview's pooling of the host and kept results, interleaved (module docstring)."""
    import numpy as np

    from attnviz.core import view as vm
    from attnviz.runtime.sitemaps import KeptMap

    kept_maps = [m for m in last["kept"].maps if isinstance(m, KeptMap)]

    def before(fn):  # the kept path as it was: no pooling twin, every head its own request
        def run():
            pools, elems = [m.pool for m in kept_maps], KeptMap.SITE_ELEMS
            KeptMap.SITE_ELEMS = 1
            for m in kept_maps:
                m.pool = None
            try:
                return fn()
            finally:
                KeptMap.SITE_ELEMS = elems
                for m, p in zip(kept_maps, pools):
                    m.pool = p

        return run

    sel = vm.Selection()
    blk = last["kept"].blocks(0)[0]

    def pool(name: str):
        return lambda: vm.thumbnails(last[name], sel, use_cache=False)

    kinds = {
        "thumbnails, host recompute": pool("host"),
        "thumbnails, kept: a head a request (before)": before(pool("kept")),
        "thumbnails, kept: pooled there (now)": pool("kept"),
        "a layer's heads, kept: a head a request (before)": before(lambda: blk.layer(0)),
        "a layer's heads, kept: one request (now)": lambda: blk.layer(0),
    }
    if now_only:
        kinds = {k: v for k, v in kinds.items() if k.endswith("(now)")}
    memory("before the thumbnails")
    peak = "since the thumbnails began" if reset_peak() else "since the process started"
    got = {k: fn() for k, fn in kinds.items()}  # warm: every session made, every slot mapped
    memory(f"after their first pass (peak {peak})")
    for k in ("thumbnails, kept: pooled there (now)", "thumbnails, kept: a head a request (before)"):
        if k not in got or "thumbnails, host recompute" not in got:
            continue
        diff = max(float(np.abs(got[k][key] - got["thumbnails, host recompute"][key]).max()) for key in got[k])
        print(f"  {k}: max |difference| from the host's {diff:.2e} over {len(got[k])} thumbnails")
    took: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    for i in range(rounds):
        for k in list(kinds) if i % 2 == 0 else list(reversed(kinds)):
            if k == "thumbnails, host recompute" and i >= host_rounds:  # 72 heads recomputed: seconds a round
                continue
            t0, c0 = time.perf_counter(), cpu()
            kinds[k]()
            took[k].append((time.perf_counter() - t0, cpu() - c0))
    memory(f"after {rounds} rounds (peak {peak})")
    heads = len(got["thumbnails, kept: pooled there (now)"])
    print(f"  overview pooling, {heads} heads, median of {rounds} rounds (wall; CPU of both processes):")
    for k, v in took.items():
        if v:
            w, c = statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)
            walls = " ".join(f"{x[0] * 1000:.0f}" for x in v)
            print(f"    {k}: {w * 1000:.1f} ms ({walls}); CPU {c * 1000:.1f} ms; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
