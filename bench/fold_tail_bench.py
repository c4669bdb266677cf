"""The numpy tail of the in-graph corpus path (after onnxruntime): the per-group loop vs the vectorised fold.

    OMP_NUM_THREADS=1 python bench/fold_tail_bench.py [--items 2000] [--batch 32] [--rounds 5] [--profile]

Each batch of MiniLM (as bench/statgraph_bench.py plans them) runs through the statistics session ONCE; its
outputs are kept and both tails then run on them, interleaved batch by batch, so only numpy is timed:
  - loop: ``InGraphReducer.rows`` (row_sums + stats_from_sums per site) + the per-group, per-statistic fold that
    graph_reduce.fold_rows was before (kept as tests/corpus/test_fold_vectorised.py:reference_fold);
  - vectorised: ``InGraphReducer.blocks`` (one stats_from_sums for all sites) + ``fold_blocks``.
Every partial is checked to be bit for bit the loop's.  --profile: cProfile of both tails (top functions).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "corpus"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
os.environ["ATTNVIZ_INPROCESS"] = "1"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--work", default="/tmp/attnviz_corpus_bench")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    from corpus_bench import corpus_file, minilm
    from test_fold_vectorised import FIELDS, reference_fold

    from attnviz.corpus.graph_reduce import fold_blocks
    from attnviz.corpus.items import read_texts
    from attnviz.corpus.plan import encode_items, plan_text
    from attnviz.corpus.reduce import BatchReducer

    model, tok = minilm(work)
    items = read_texts(corpus_file(work, a.items))
    br = BatchReducer(str(model), "cpu", tok, 1)
    specs = plan_text(items, encode_items(br.model, items), None, None, a.batch, equal_lengths=False)
    br(specs[0])  # builds the statistics session
    red = br.in_graph
    assert red is not None and not isinstance(red, bool), "the statistics session was not used"
    causal = br.kind == "decoder"
    runs = []
    for s in specs:
        feeds, lengths, special = br.feeds(s)
        lengths = np.asarray(lengths, np.int64)
        runs.append((s, lengths, special, red._run(feeds, lengths, special)))
    cached = {}

    def _run(feeds, lengths, special):
        return cached["out"]

    red._run = _run  # type: ignore[method-assign]  # the session ran above; time numpy only

    def loop(s, lengths, special):
        rows = red.rows({}, lengths, special, causal)
        return reference_fold(rows, s.items, br.k, s.batch_id, int(lengths.sum()))

    def vec(s, lengths, special):
        return fold_blocks(red.blocks({}, lengths, special, causal), s.items, br.k, s.batch_id, int(lengths.sum()))

    best = {"loop": np.inf, "vectorised": np.inf}
    for rnd in range(a.rounds):
        took = dict.fromkeys(best, 0.0)
        for s, lengths, special, out in runs:
            cached["out"] = out
            t0 = time.perf_counter()
            pa = loop(s, lengths, special)
            t1 = time.perf_counter()
            pb = vec(s, lengths, special)
            t2 = time.perf_counter()
            took["loop"] += t1 - t0
            took["vectorised"] += t2 - t1
            assert all(np.array_equal(getattr(pa, f), getattr(pb, f)) for f in FIELDS), f"batch {s.batch_id} differs"
        if rnd or a.rounds == 1:
            best = {k: min(best[k], took[k]) for k in best}
    n = len(runs)
    lengths = [int(s.lengths.max()) for s in specs if s.lengths is not None]
    print(
        f"\n{model.name}, {len(items)} items in {n} batches of {a.batch} (T {min(lengths)}-{max(lengths)}), "
        f"{sum(g.heads for g in br.groups)} heads, numpy tail only, best of rounds 2..{a.rounds}, interleaved\n"
    )
    print("| tail | ms / batch | vs loop |")
    print("|---|---:|---:|")
    for k, v in best.items():
        print(f"| {k} | {1000 * v / n:.2f} | {best['loop'] / v:.2f}x |")
    print("\nevery partial bit for bit equal (sums, counts, top value/item/row/col)")
    if a.profile:
        for name, fn in (("loop", loop), ("vectorised", vec)):
            prof = cProfile.Profile()
            for s, lengths, special, out in runs:
                cached["out"] = out
                prof.runcall(fn, s, lengths, special)
            print(f"\n--- cProfile, {name} tail, {n} batches ---")
            pstats.Stats(prof).sort_stats("tottime").print_stats(8)


if __name__ == "__main__":
    main()
