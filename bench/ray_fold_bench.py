"""The Ray driver's fold alone: the whole partials table (session 20 before rayfold20) against the streamed fold
(ray_engine._keys + _fold, a row group at a time), on partial files written as Ray Data writes them.

    OMP_NUM_THREADS=1 python bench/ray_fold_bench.py [--batches 3125] [--rounds 3]

Files of 16 batches (RESUME_BATCHES), each batch its own row group (what ``write_parquet`` of the actors' one-row
tables gives), arrays of 8 heads x 12 positions x top 10 and 64 named texts a batch.  Each round folds both ways
(alternating which goes first), each fold in a fresh process, and reports its CPU and wall time and its peak
resident set (VmHWM) above the process's after its imports."""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from attnviz.corpus import ray_engine as re
from attnviz.corpus.fold import Partial

NH, S, KB = 8, 12, 10


def write(folder: Path, batches: int) -> None:
    rng = np.random.default_rng(0)
    per = re.RESUME_BATCHES
    for f in range(0, batches, per):
        rows = []
        for b in range(f, min(f + per, batches)):
            p = Partial(
                -1,
                64,
                640,
                rng.normal(size=(NH, S)),
                rng.integers(0, 9, (NH, S)),
                rng.normal(size=(S, NH, KB)),
                rng.integers(0, batches * 64, (S, NH, KB)),
                rng.integers(0, S, (S, NH, KB)),
                rng.integers(0, S, (S, NH, KB)),
            )
            named = {b * 64 + i: (f"some words of item {b * 64 + i} " * 4, "a pair of words") for i in range(64)}
            rows.append(re.partial_row(p, 3 + b // 500, b * 64, named, list(range(b * 64, b * 64 + 64))))
        writer = None
        for row in rows:  # one row group a batch
            t = pa.Table.from_pylist([row])
            writer = writer or pq.ParquetWriter(folder / f"{f:06d}.parquet", t.schema)
            writer.write_table(t)
        assert writer is not None
        writer.close()


def whole(folder: Path) -> int:
    table = pa.concat_tables([pq.read_table(f) for f in sorted(folder.glob("*.parquet"))])
    cols = [table.column(k).to_pylist() for k in ("first_length", "first_item")]
    order = sorted(range(table.num_rows), key=lambda i: tuple(c[i] for c in cols))
    n = 0
    for b, i in enumerate(order):
        n += re.partial_from_row(table.slice(i, 1).to_pylist()[0], b).items
    return n


def streamed(folder: Path) -> int:
    store = re.PartialsStore(folder, "")
    store.drop = lambda: None  # type: ignore[method-assign]  # keep the files for the next round
    keys = re._keys(store.files(), ("first_length", "first_item"))
    return sum(p.items for p in re._fold(store, keys))


def hwm() -> int:
    return next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM"))


def one(name: str, folder: Path) -> None:
    """One fold in this (fresh) process: its items, CPU, wall, and peak resident set above the start."""
    start = hwm()
    t, c = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_utime
    n = {"whole": whole, "streamed": streamed}[name](folder)
    wall, cpu = time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_utime - c
    print("ONE", n, cpu, wall, (hwm() - start) / 1024)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=3125)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # (way, folder): a child's one fold
    args = ap.parse_args()
    if args.one:
        return one(args.one[0], Path(args.one[1]))
    with tempfile.TemporaryDirectory(prefix="rayfold-") as tmp:
        folder = Path(tmp)
        write(folder, args.batches)
        size = sum(f.stat().st_size for f in folder.glob("*.parquet")) / 2**20
        print(f"{args.batches} batches, {size:.1f} MiB of partial files; load {os.getloadavg()}", flush=True)
        ways = ["whole", "streamed"]
        for r in range(args.rounds):
            for name in ways if r % 2 == 0 else reversed(ways):
                p = subprocess.run(
                    [sys.executable, __file__, "--one", name, str(folder)], capture_output=True, text=True, check=True
                )
                _, n, cpu, wall, peak = next(x for x in p.stdout.splitlines() if x.startswith("ONE")).split()
                print(
                    f"round {r} {name}: {n} items, CPU {float(cpu):.2f} s, wall {float(wall):.2f} s, "
                    f"peak +{float(peak):.1f} MiB; load {os.getloadavg()}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
