"""``attnviz figure MAPS.npz --out x.FMT`` of long maps: wall, CPU and peak RSS, this tree against an old one.

    OMP_NUM_THREADS=1 python bench/figure_bench.py --old 71574a4 --tokens 512 2048 8192 --formats pdf png svg

(session 21, pdfcells21: ``--old 0311d8e --tokens 128 512 2048 8192 --rounds 3``; the last column says whether the
two trees' files of a kind were byte-identical.)

Each run is a fresh process (``/usr/bin/time -v``) in a scratch folder, the two trees interleaved round by round
(old, new, old, new ...) so that load drifts over both alike.  The old tree is ``git archive REV attnviz``
unpacked beside the maps.  The maps are bench/long_map.py's (a diagonal, a line beside it, thin columns on
random weights up to 0.02), written once.  Prints a table of medians and the new/old ratios.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


@dataclass(frozen=True)
class Run:
    wall: float
    cpu: float
    rss_mb: float


def _time(tree: Path, maps: Path, out: Path, cwd: Path, extra: tuple[str, ...] = ()) -> Run:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "attnviz", "figure", str(maps), "--out", str(out), *extra]
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr[-2000:]}")

    def field(name: str) -> str:
        return re.search(rf"{re.escape(name)}: (.+)", p.stderr).group(1).strip()

    h, _, s = field("Elapsed (wall clock) time (h:mm:ss or m:ss)").rpartition(":")
    wall = float(s) + 60 * sum(float(x) * 60**i for i, x in enumerate(reversed(h.split(":"))) if x)
    cpu = float(field("User time (seconds)")) + float(field("System time (seconds)"))
    return Run(wall, cpu, float(field("Maximum resident set size (kbytes)")) / 1024)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", default="71574a4", help="the git revision to compare with")
    ap.add_argument("--new", default="", help="a git revision to measure as the new tree (default: this checkout)")
    ap.add_argument("--tokens", type=int, nargs="+", default=[128, 512, 2048, 8192])
    ap.add_argument("--formats", nargs="+", default=["pdf", "png", "svg"])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)

    from long_map import make_map

    from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
    from attnviz.core.io import save_npz

    with tempfile.TemporaryDirectory(prefix="figure_bench_") as tmp:
        tmp = Path(tmp)

        def unpacked(rev: str, name: str) -> Path:
            tree = tmp / name
            tree.mkdir()
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", rev, "attnviz"], capture_output=True, check=True
            )
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
            return tree

        old = unpacked(args.old, "old")
        site = SiteInfo("encoder", "self", 0, 1, "synthetic_softmax", "softmax")
        maps = {}
        for n in args.tokens:
            maps[n] = tmp / f"m{n}.npz"
            tokens = TokenAxis([f"t{i}" for i in range(n)])
            save_npz(AttentionResult([DenseMap(make_map(n))], [site], tokens=tokens), maps[n])
        trees = {"old": old, "new": unpacked(args.new, "new") if args.new else ROOT}
        runs: dict[tuple, list] = {}
        start_load = os.getloadavg()[0]
        for _ in range(args.rounds):
            for n in args.tokens:
                for fmt in args.formats:
                    for name, tree in trees.items():
                        out = tmp / f"{name}{n}.{fmt}"
                        runs.setdefault((n, fmt, name), []).append(_time(tree, maps[n], out, tmp))
                        runs.setdefault((n, fmt, name + "_bytes"), []).append(out.stat().st_size)
                    same = (tmp / f"old{n}.{fmt}").read_bytes() == (tmp / f"new{n}.{fmt}").read_bytes()
                    runs.setdefault((n, fmt, "same"), []).append(same)
        print(
            f"load: {start_load:.2f} (1 min) at the start, {os.getloadavg()[0]:.2f} at the end; medians of {args.rounds} rounds, interleaved"
        )
        print(
            f"{'tokens':>6} {'fmt':>4} | {'wall old':>8} {'new':>6} {'ratio':>5} | {'CPU old':>7} {'new':>6} "
            f"{'ratio':>5} | {'RSS old MB':>10} {'new':>6} {'ratio':>5} | {'file old MB':>11} {'new':>6} | same bytes"
        )
        for n in args.tokens:
            for fmt in args.formats:
                o, w = runs[(n, fmt, "old")], runs[(n, fmt, "new")]

                def med(rs, attr):
                    return statistics.median(getattr(r, attr) for r in rs)

                wo, wn = med(o, "wall"), med(w, "wall")
                co, cn = med(o, "cpu"), med(w, "cpu")
                ro, rn = med(o, "rss_mb"), med(w, "rss_mb")
                fo = runs[(n, fmt, "old_bytes")][-1] / 2**20
                fn = runs[(n, fmt, "new_bytes")][-1] / 2**20
                print(
                    f"{n:>6} {fmt:>4} | {wo:>8.2f} {wn:>6.2f} {wn / wo:>5.2f} | {co:>7.2f} {cn:>6.2f} {cn / co:>5.2f} | "
                    f"{ro:>10.0f} {rn:>6.0f} {rn / ro:>5.2f} | {fo:>11.2f} {fn:>6.2f} | {all(runs[(n, fmt, 'same')])}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
