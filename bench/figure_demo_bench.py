"""The README's demo figures as PDF (and SVG): peak RSS, CPU, wall and file size, this tree against an old one.

    OMP_NUM_THREADS=1 python bench/figure_demo_bench.py --old 0311d8e --new HEAD --rounds 3

The maps are extracted once with this checkout (``attnviz extract models/translation.onnx --text ... --generate 12``,
``models/captioning.onnx`` and ``models/vit-classification.onnx`` on their sample images); then each figure is
drawn by a fresh ``attnviz figure`` process (``/usr/bin/time -v``) of each tree, old and new interleaved round by
round.  Prints medians, the new/old ratios, the embedded image sizes (PDF) and whether the bytes were the same.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "figures"))

from figure_bench import _time

TEXT = "μακάριοι οἱ πτωχοὶ τῷ πνεύματι, ὅτι αὐτῶν ἐστιν ἡ βασιλεία τῶν οὐρανῶν"
EXTRACTS = {
    "translation": ["models/translation.onnx", "--text", TEXT, "--generate", "12"],
    "captioning": ["models/captioning.onnx", "--image", "resources/samples/captioning.png", "--generate", "8"],
    "vit": ["models/vit-classification.onnx", "--image", "resources/samples/vit-classification.png"],
}
FIGURES = [  # name, maps, extra figure arguments
    ("translation", "translation", ()),
    ("translation overview", "translation", ("--view", "overview")),
    ("translation alignment", "translation", ("--view", "alignment")),
    ("captioning image", "captioning", ("--view", "image")),
    ("captioning strip", "captioning", ("--view", "strip")),
    ("vit image", "vit", ("--view", "image")),
    ("vit overview", "vit", ("--view", "overview")),
]


def _unpacked(rev: str, tree: Path) -> Path:
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "attnviz"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", default="0311d8e")
    ap.add_argument("--new", default="HEAD")
    ap.add_argument("--formats", nargs="+", default=["pdf"])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    from _pdfimages import pdf_images

    with tempfile.TemporaryDirectory(prefix="figure_demo_") as tmp:
        tmp = Path(tmp)
        trees = {"old": _unpacked(args.old, tmp / "old"), "new": _unpacked(args.new, tmp / "new")}
        maps = {}
        for name, extract in EXTRACTS.items():
            maps[name] = tmp / f"{name}.npz"
            cmd = [sys.executable, "-m", "attnviz", "extract", *extract, "--out", str(maps[name])]
            env = {**os.environ, "PYTHONPATH": str(trees["new"]), "OMP_NUM_THREADS": "1"}
            subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)
        start_load = os.getloadavg()[0]
        runs: dict[tuple, list] = {}
        for _ in range(args.rounds):
            for k, (name, m, extra) in enumerate(FIGURES):
                for fmt in args.formats:
                    for tree_name, tree in trees.items():
                        out = tmp / f"{tree_name}{k}.{fmt}"
                        runs.setdefault((name, fmt, tree_name), []).append(_time(tree, maps[m], out, tmp, extra))
        print(
            f"load: {start_load:.2f} (1 min) at the start, {os.getloadavg()[0]:.2f} at the end; medians of "
            f"{args.rounds} rounds, interleaved"
        )
        for k, (name, _, _) in enumerate(FIGURES):
            for fmt in args.formats:
                o, w = runs[(name, fmt, "old")], runs[(name, fmt, "new")]

                def med(rs, attr):
                    return statistics.median(getattr(r, attr) for r in rs)

                fo, fn = (tmp / f"old{k}.{fmt}"), (tmp / f"new{k}.{fmt}")
                sizes = ""
                if fmt == "pdf":

                    def dims(p):
                        return "+".join(f"{i.width}x{i.height}" for i in pdf_images(p.read_bytes()))

                    sizes = f" | images old {dims(fo)} new {dims(fn)}"
                print(
                    f"{name:>22} {fmt} | wall {med(o, 'wall'):.2f} -> {med(w, 'wall'):.2f} | CPU {med(o, 'cpu'):.2f} -> "
                    f"{med(w, 'cpu'):.2f} ({med(w, 'cpu') / med(o, 'cpu'):.2f}) | RSS MB {med(o, 'rss_mb'):.0f} -> "
                    f"{med(w, 'rss_mb'):.0f} | file KB {fo.stat().st_size / 1024:.1f} -> {fn.stat().st_size / 1024:.1f} | "
                    f"same bytes {fo.read_bytes() == fn.read_bytes()}{sizes}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
