"""Where a corpus batch's time goes on the in-graph path: onnxruntime, the statistics inputs, the numpy tail.

    OMP_NUM_THREADS=1 python bench/fold_tail_bench.py [--items 2000] [--batch 32] [--rounds 5] [--profile]
                                                      [--provider cpu|cuda] [--threads N]

Each batch of MiniLM (as bench/statgraph_bench.py plans them), interleaved batch by batch, best later round:
  - plain: the model's own session on the same feeds (the baseline of the issue's >= 0.8x target);
  - stat inputs: ``statgraph.stat_feeds`` (masks for the appended nodes, built per batch in numpy);
  - session: the statistics session's run (per-item [B, H, S] outputs only);
  - tail: ``statgraph.item_stats`` + ``reduce.fold_items`` (what is left of the numpy after the run;
    before the per-item reduction moved into the graph it was 12.8 ms here: bench/RESULTS.md, foldvec).
--profile: cProfile of the tail (top functions).
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
    ap.add_argument("--provider", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument(
        "--join",
        choices=("auto", "yes", "no"),
        default="auto",
        help="one set of statistic nodes for all sites (auto: on CUDA, as attnviz does)",
    )
    ap.add_argument("--work", default="/tmp/attnviz_corpus_bench")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    from corpus_bench import corpus_file, minilm

    from attnviz.core.row_sums import ItemStats
    from attnviz.corpus.items import read_texts
    from attnviz.corpus.plan import encode_items, plan_text
    from attnviz.corpus.reduce import BatchReducer, fold_items
    from attnviz.runtime import statgraph as sg
    from attnviz.runtime.session import make_session

    model, tok = minilm(work)
    items = read_texts(corpus_file(work, a.items))
    br = BatchReducer(str(model), a.provider, tok, a.threads)
    specs = plan_text(items, encode_items(br.model, items), None, None, a.batch, equal_lengths=False)
    br(specs[0])  # builds the statistics session
    red = br.in_graph
    assert red is not None and not isinstance(red, bool), "the statistics session was not used"
    if a.join != "auto":
        from attnviz.corpus.graph_reduce import InGraphReducer

        red = InGraphReducer(br.model, br.groups, join=a.join == "yes")
    nodes = _appended_nodes(br.model, br.groups, red.joined)
    plain, _ = make_session(str(model), a.provider, threads=a.threads)
    causal = br.kind == "decoder"
    batches = []
    for s in specs:
        feeds, lengths, special = br.feeds(s)
        batches.append((s, feeds, np.asarray(lengths, np.int64), special))

    heads = np.cumsum([0] + [g.heads for g in red.groups])
    assert sorted(red.outputs) == [g.site for g in red.groups], "every site in the graph (MiniLM)"

    def tail(s, lengths, got, extra, positions):  # as InGraphReducer.items + __call__
        st = sg.item_stats(got[sg.SUMS], got[sg.PICKS], extra, positions)
        parts = [
            (g, ItemStats(st.sums[:, h], st.counts, st.rows[:, h], st.keys[:, h]))
            for g, h in zip(red.groups, (slice(a, b) for a, b in zip(heads, heads[1:])))
        ]
        return fold_items(parts, s.items, br.k, s.batch_id, int(lengths.sum()))

    best = dict.fromkeys(("plain", "stat inputs", "session", "tail"), np.inf)
    kept = []
    for rnd in range(a.rounds):
        took = dict.fromkeys(best, 0.0)
        kept = []
        for s, feeds, lengths, special in batches:
            t0 = time.perf_counter()
            plain.run(None, feeds)
            t1 = time.perf_counter()
            extra, positions = sg.stat_feeds(lengths, special, special.shape[1], causal)
            t2 = time.perf_counter()
            got = dict(zip(red.fetch, red.sess.run(red.fetch, {**feeds, **extra})))
            t3 = time.perf_counter()
            tail(s, lengths, got, extra, positions)
            t4 = time.perf_counter()
            for k, v in zip(best, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                took[k] += v
            kept.append((s, lengths, got, extra, positions))
        if rnd or a.rounds == 1:
            best = {k: min(best[k], took[k]) for k in best}
    n = len(batches)
    lengths = [int(s.lengths.max()) for s in specs if s.lengths is not None]
    print(
        f"\n{model.name}, {len(items)} items in {n} batches of {a.batch} (T {min(lengths)}-{max(lengths)}), "
        f"{sum(g.heads for g in br.groups)} heads, {red.sess.provider}, {a.threads} threads, "
        f"best of rounds 2..{a.rounds}, interleaved per batch; statistics nodes {'joined' if red.joined else 'per site'}"
        f" ({nodes} appended, constants not counted)\n"
    )
    print("| step | ms / batch | vs plain run |")
    print("|---|---:|---:|")
    for k, v in best.items():
        print(f"| {k} | {1000 * v / n:.2f} | {v / best['plain']:.2f}x |")
    worker = best["stat inputs"] + best["session"] + best["tail"]
    print(f"\nstatistics path (inputs + session + tail) / plain run: {worker / best['plain']:.2f}x")
    if a.profile:
        prof = cProfile.Profile()
        for args in kept:
            prof.runcall(tail, *args)
        print(f"\n--- cProfile, tail, {n} batches ---")
        pstats.Stats(prof).sort_stats("tottime").print_stats(8)


def _appended_nodes(model, groups, join: bool) -> int:
    from attnviz.runtime import statgraph as sg

    m, _, _ = sg.stats_model(model.graph, model._sites, {g.site for g in groups}, join=join)
    return sum(1 for n in m.graph.node if n.name.startswith("attnviz_stat") and n.op_type != "Constant")


if __name__ == "__main__":
    main()
