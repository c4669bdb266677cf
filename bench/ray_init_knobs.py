"""What each of ``ray.init``'s knobs does to a local start (session 24, ray24).

    OMP_NUM_THREADS=1 python bench/ray_init_knobs.py [--rounds 3] [--knobs base usage0 ...]

Each round starts, for each knob (interleaved), a fresh Python process that starts Ray as ``ray_engine._init``
does (1 CPU, no dashboard, no log to driver, Ray's logging left alone) plus that one knob, then runs a first plain
task and a first Ray Data pass (``from_items`` -> ``map_batches`` -> ``take_all``: its executor's start), then
``ray.shutdown()``.  It reports each phase's wall, and the CPU seconds of the process tree (the driver and every
Ray process under it, read with psutil just before the shutdown: Ray's daemons are not the driver's children to
reap).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

KNOBS = {
    "base": ({}, {}),
    "usage0": ({"RAY_USAGE_STATS_ENABLED": "0"}, {}),  # no usage-stats report / prompt
    "osm100M": ({}, {"object_store_memory": 100 * 2**20}),  # a small object store (shm sized to it)
    "noprestart": ({}, {"_system_config": {"enable_worker_prestart": False}}),
    "nometrics": ({}, {"_system_config": {"enable_metrics_collection": False}}),
    "noevents": ({}, {"_system_config": {"task_events_report_interval_ms": 0, "enable_timeline": False}}),
    "loglevel": ({"RAY_BACKEND_LOG_LEVEL": "fatal"}, {}),
    # the head processes ray.init starts whatever its arguments (no switch for them): skipped by replacing Ray's
    # Node method with a no-op for this start (what each costs, and whether the run still works without it)
    "no_api_server": ({}, {}, ("start_api_server",)),  # the dashboard head (UsageStatsHead only, no dashboard)
    "no_monitor": ({}, {}, ("start_monitor",)),  # the autoscaler monitor
    "no_log_monitor": ({}, {}, ("start_log_monitor",)),  # tails worker logs for log_to_driver (off)
    "no_all3": ({}, {}, ("start_api_server", "start_monitor", "start_log_monitor")),
}


def child(knob: str) -> None:
    import psutil

    env, kw, *skip = KNOBS[knob]
    os.environ.update(env)
    t0 = time.monotonic()
    import ray
    import ray.data
    from ray._private import node

    for name in skip[0] if skip else ():
        setattr(node.Node, name, lambda self, *a, **k: None)

    t_imp = time.monotonic()
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False, **kw)
    t_init = time.monotonic()

    @ray.remote
    def one() -> int:
        return 1

    ray.get(one.remote())
    t_task = time.monotonic()
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    ray.data.from_items([{"x": i} for i in range(8)]).map_batches(lambda b: b).take_all()
    t_data = time.monotonic()
    me = psutil.Process()
    cpu = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            c = p.cpu_times()
            cpu += c.user + c.system
        except psutil.Error:
            pass
    ray.shutdown()
    t_end = time.monotonic()
    print(
        json.dumps(
            dict(
                imports=t_imp - t0,
                init=t_init - t_imp,
                first_task=t_task - t_init,
                first_data=t_data - t_task,
                shutdown=t_end - t_data,
                tree_cpu=cpu,
            )
        )
    )


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[2])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--knobs", nargs="+", default=list(KNOBS))
    a = ap.parse_args()
    rows: dict[str, list[dict]] = {k: [] for k in a.knobs}
    for n in range(a.rounds):
        for k in a.knobs:
            t = time.monotonic()
            r = subprocess.run([sys.executable, __file__, "--child", k], capture_output=True, text=True)
            if r.returncode != 0:
                raise SystemExit(f"{k}: rc {r.returncode}\n{r.stderr[-2000:]}")
            rec = json.loads(r.stdout.strip().splitlines()[-1])
            rec.update(wall=time.monotonic() - t, load=os.getloadavg()[0], stderr_lines=len(r.stderr.splitlines()))
            rows[k].append(rec)
            print(f"round {n} {k}: " + ", ".join(f"{x} {v:.2f}" for x, v in rec.items()), flush=True)
    print(f"\nmedian of {a.rounds} interleaved rounds (load at the end {os.getloadavg()})")
    cols = ("init", "first_task", "first_data", "shutdown", "wall", "tree_cpu", "load")
    print("knob " + " ".join(f"{c:>10}" for c in cols))
    for k, rs in rows.items():
        print(f"{k:<11}" + " ".join(f"{statistics.median(r[c] for r in rs):10.2f}" for c in cols))


if __name__ == "__main__":
    main()
