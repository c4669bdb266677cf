"""`attnviz corpus` variants against plain onnxruntime, whole commands, interleaved rounds, medians (issue 26: the
corpus on CUDA).  A variant is ``ROOT:WORKERSxTHREADS[:ENV=VALUE,...]``: ROOT ``main`` (this checkout) or ``other``
(``--other-root DIR``: e.g. a tree before a change, ``git archive REV attnviz | tar -x -C DIR``), the corpus's
``--workers``/``--threads``, and environment for that command (``layout=threads`` sets ATTNVIZ_CORPUS_LAYOUT,
``chunk=64`` ATTNVIZ_CORPUS_CHUNK, ``sessions=2`` ATTNVIZ_CORPUS_SESSIONS).  Every variant runs one unmeasured command first (what it keeps between commands
is then kept: the measured commands are second commands, as a researcher's are), then ``--rounds`` rounds, the
order reversed every other round.  Prints per variant the median wall, the median of its per-round ratios to plain's
wall, the median CPU of all its processes, and whether its heads.parquet / examples.parquet are the first variant's
bytes.  The model and corpus are bench/corpus_bench.py's (``--minilm DIR`` there; on a GPU box after
``source bench/gpu/device_env.sh``).

    python bench/corpus_ab.py --provider cuda --items 10000 --rounds 5 main:4x4 main:2x8 other:4x4 --other-root .g9
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

import corpus_bench as cb

ENV = {"layout": cb.LAYOUT_ENV, "chunk": "ATTNVIZ_CORPUS_CHUNK", "sessions": "ATTNVIZ_CORPUS_SESSIONS"}


def parse(v: str) -> tuple[str, int, int, dict[str, str]]:
    root, shape, *rest = v.split(":")
    w, t = (int(x) for x in shape.split("x"))
    env = dict(kv.split("=", 1) for kv in (rest[0].split(",") if rest else []))
    return root, w, t, {ENV.get(k, k): val for k, val in env.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--provider", default="cuda", choices=("cpu", "cuda"))
    ap.add_argument("--items", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--plain", default=None, help="plain's PROCESSESxTHREADS (default 1x<cores>)")
    ap.add_argument("--other-root", type=Path)
    ap.add_argument("--minilm", metavar="DIR")
    ap.add_argument("--work", default="/tmp/attnviz_corpus_bench")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    model, tok = cb.minilm(work, a.minilm)
    texts = cb.corpus_file(work, a.items)
    cores = os.cpu_count() or 1
    pp, pt = (int(x) for x in (a.plain or f"1x{cores}").split("x"))
    roots = {"main": cb.ROOT, "other": a.other_root}
    for r in {roots[parse(v)[0]] for v in a.variants}:
        cb.compiled(r)

    def command(v: str, i: int) -> dict:
        root, w, t, env = parse(v)
        layout = env.pop(cb.LAYOUT_ENV, None)  # (corpus_rate sets it itself)
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            out = work / f"ab_{i}"
            return cb.corpus_rate(
                model, tok, texts, out, "local", w, t, a.provider, a.batch, roots[root], layout=layout
            )
        finally:
            for k, old in saved.items():
                if old is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = old

    for i, v in enumerate(a.variants):  # the first command of each: not measured
        command(v, i)
    walls: dict[str, list[float]] = {v: [] for v in ["plain", *a.variants]}
    cpus: dict[str, list[float]] = {v: [] for v in walls}
    for rnd in range(a.rounds):
        order = list(walls) if rnd % 2 == 0 else list(reversed(walls))
        for v in order:
            if v == "plain":
                r = cb.plain_command(model, tok, texts, pp, pt, a.provider, a.batch)
            else:
                r = command(v, a.variants.index(v))
            walls[v].append(r["wall_s"])
            cpus[v].append(r["cpu_s"])
        print(
            f"round {rnd}: "
            + ", ".join(f"{v} {walls[v][-1]:.2f} s" for v in walls)
            + f"; load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    print(
        f"\n{a.items} items, provider {a.provider}, plain {pp} x {pt}; medians of {a.rounds} interleaved rounds "
        "(every attnviz command a second command)"
    )
    print("| variant | wall s | vs plain (median of per-round ratios) | CPU s | walls |")
    print("|---|---:|---:|---:|---|")
    for v in walls:
        ratio = statistics.median(p / x for p, x in zip(walls["plain"], walls[v]))
        print(
            f"| {v} | {statistics.median(walls[v]):.3f} | {ratio:.3f}× | {statistics.median(cpus[v]):.2f} | "
            + ", ".join(f"{x:.2f}" for x in walls[v])
            + " |"
        )
    cb.same_outputs({v: work / f"ab_{i}" for i, v in enumerate(a.variants)})


if __name__ == "__main__":
    main()
