"""Per-batch cost of a corpus worker: statistics computed inside onnxruntime vs maps reduced by numpy.

    OMP_NUM_THREADS=1 python bench/statgraph_bench.py [--items 2000] [--batch 32] [--provider cpu|cuda]
                                                      [--threads N] [--rounds 3] [--model X.onnx --tokenizer T]

Three things run the same length-sorted padded batches (attnviz.corpus.plan), interleaved batch by batch in one
process so that load from other jobs hits them alike; the first round warms up, the best later round is kept:
  - plain: the model's own session, model outputs only (the baseline the issue's ≥ 0.8× target is against);
  - maps: BatchReducer(in_graph=False): every [B, H, T, T] map copied out (off the GPU) and reduced by numpy;
  - in-graph: BatchReducer(): statistics computed by nodes appended to the graph; only [B, H, S] leaves it;
  - in-graph, pipelined: the same with BatchReducer.many over all batches (the next batch runs in onnxruntime
    while this one folds, as a GPU worker does), timed per round rather than per batch.
Both reducers fold into an Accumulator, as a worker and the driver do.  The last column checks that the two
give the same head statistics on this device (max |difference| of the per-head means).
Model: the real all-MiniLM-L6-v2 (exported once, as bench/corpus_bench.py does) unless --model is given.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
os.environ["ATTNVIZ_INPROCESS"] = "1"  # as in the corpus workers: onnxruntime in this process


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--provider", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", help="an .onnx text model (default: MiniLM exported to --work)")
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--work", default="/tmp/attnviz_corpus_bench")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    from corpus_bench import corpus_file, minilm

    if a.model:
        model, tok = Path(a.model), a.tokenizer
    else:
        model, tok = minilm(work)
    texts = corpus_file(work, a.items)

    from attnviz.corpus.items import read_texts
    from attnviz.corpus.plan import encode_items, plan_text, text_feeds
    from attnviz.corpus.reduce import Accumulator, BatchReducer
    from attnviz.runtime.session import make_session

    maps = BatchReducer(str(model), a.provider, tok, a.threads, in_graph=False)
    graph = BatchReducer(str(model), a.provider, tok, a.threads)
    items = read_texts(texts)
    specs = plan_text(items, encode_items(maps.model, items), None, None, a.batch, equal_lengths=False)
    feeds = [text_feeds(maps.model, s)[0] for s in specs]
    plain, _ = make_session(str(model), a.provider, threads=a.threads)
    nh = sum(g.heads for g in maps.groups)
    pipe = BatchReducer(str(model), a.provider, tok, a.threads)
    best = {"plain": 0.0, "maps": 0.0, "in-graph": 0.0, "in-graph, pipelined": 0.0}
    means = {}
    for rnd in range(a.rounds):
        took = dict.fromkeys(best, 0.0)
        accs = {"maps": Accumulator(nh, 5), "in-graph": Accumulator(nh, 5)}
        for spec, f in zip(specs, feeds):
            t0 = time.perf_counter()
            plain.run(None, f)
            t1 = time.perf_counter()
            accs["maps"].fold(maps(spec))
            t2 = time.perf_counter()
            accs["in-graph"].fold(graph(spec))
            t3 = time.perf_counter()
            took["plain"] += t1 - t0
            took["maps"] += t2 - t1
            took["in-graph"] += t3 - t2
        # a worker's GPU tasks: batch n+1 runs while batch n folds (all batches in one call, not interleaved)
        acc = Accumulator(nh, 5)
        t0 = time.perf_counter()
        for part in pipe.many(specs):
            acc.fold(part)
        took["in-graph, pipelined"] = time.perf_counter() - t0
        if rnd or a.rounds == 1:
            for k in best:
                best[k] = max(best[k], len(items) / took[k])
        means = {k: acc.means() for k, acc in accs.items()}
    assert not isinstance(graph.in_graph, bool) and graph.in_graph is not None, "the statistics session was not used"
    diff = float(np.nanmax(np.abs(means["maps"] - means["in-graph"])))
    provider = graph.in_graph.sess.provider
    lengths = [int(s.lengths.max()) for s in specs if s.lengths is not None]
    print(
        f"\n{model.name}, {len(items)} items in {len(specs)} batches of {a.batch} (T {min(lengths)}-{max(lengths)}), "
        f"{provider}, {a.threads} threads, best of rounds 2..{a.rounds}, interleaved per batch\n"
    )
    print("| path | items/s | vs plain | vs maps |")
    print("|---|---:|---:|---:|")
    for k, v in best.items():
        print(f"| {k} | {v:.0f} | {v / best['plain']:.2f}x | {v / best['maps']:.2f}x |")
    print(f"\nhead statistics, maps vs in-graph: max |difference| {diff:.2e}")


if __name__ == "__main__":
    main()
