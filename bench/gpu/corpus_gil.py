"""Why ``BatchReducer.many`` stops at ~2.7 ms a batch on an H100 at every depth while 4 threads on the raw statistics
session reach ~1.5 (bench/corpus_loop_split.py, session 23): the hypothesis is the GIL — the host work of a batch
(statistics feeds, the session wrapper, ``finish``, ``fold_items``) held under one lock.  Rows, interleaved, in one
process, ms a batch: plain; ``many d4`` as shipped; with a shorter GIL switch interval; with the host code of 9077fb9
(before session 23's fold23: its stat_feeds, finish and fold_items, kept in tests/corpus/fold_9077fb9.py) in place of
this tree's (the same partials, more host CPU); with each batch's fold skipped (``InGraphReducer.partial``: finish and
fold_items); with the task's ``combine`` after it (a worker's whole task); the raw session, the wrapped one and the
memory check with onnxruntime's plain run (no I/O binding) from 4 threads.  Session 24 (gil24): ``many d4`` with
the host work of before gil24 (REAL built and fed [B, 1, T, T], every batch's statistics feeds made anew, DIVISOR
not C-ordered, the statistics run bound: page-locked on CUDA, onnxruntime-allocated on the CPU), and with the statistics through
onnxruntime's plain run (what gil24 does on the CPU; on CUDA the page-locked binding stays until these rows say).
Session 24 (fold24): ``many d4 + combine`` with gil24's fold (93201d0's ``ranked``, kept in
tests/corpus/ranked_93201d0.py, and ``combine`` as one merge a batch) against this tree's (the integer sort, a
task ranked at once).  Session 25 (host25): ``many d4`` with the fold's ranking on the host as before (the session's
RANKS ignored: runtime/statgraph.py _rank_nodes ranks each row in the graph, on the device).

    OMP_NUM_THREADS=1 python bench/gpu/corpus_gil.py --provider cuda --items 10000 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ["ATTNVIZ_INPROCESS"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "corpus"))

import corpus_bench as cb
import numpy as np
from corpus_loop_split import raw


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--provider", default="cuda", choices=("cpu", "cuda"))
    ap.add_argument("--items", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--minilm", metavar="DIR")
    ap.add_argument(
        "--null",
        action="store_true",
        help="the statistics session replaced by a null graph (every statistics input, the longest batch's outputs "
        "sliced to each batch: next to no compute): the rows other than plain are then the loop's host work alone",
    )
    ap.add_argument("--only", nargs="+", metavar="TEXT", help="only the rows whose names contain one of these")
    a = ap.parse_args()
    from attnviz.corpus import reduce as rd
    from attnviz.corpus.engines import SHARED_CHUNK
    from attnviz.corpus.items import read_texts
    from attnviz.corpus.plan import encode_items, plan_text
    from attnviz.runtime import statfeeds as sf
    from attnviz.runtime.session import make_session

    work = Path("/tmp/attnviz_corpus_bench")
    work.mkdir(parents=True, exist_ok=True)
    model, tok = cb.minilm(work, a.minilm)
    texts = cb.corpus_file(work, a.items)
    cores = os.cpu_count() or 1
    threads = max(1, cores // 4) if a.provider == "cuda" else cores
    plain_feeds, n = cb.plain_batches(str(model), tok, str(texts), 32)
    plain = raw(make_session(str(model), a.provider, threads=cores)[0])
    takes = {i.name for i in plain.get_inputs()}
    plain_feeds = [{k: v for k, v in f.items() if k in takes} for f in plain_feeds]
    red = rd.BatchReducer(str(model), a.provider, tok, threads, 5)
    red.prepare()
    ig = red.in_graph
    specs = plan_text(items := read_texts(texts), encode_items(red.model, items), None, None, 32, equal_lengths=False)
    stats_feeds = []
    for s in specs:
        f, lengths, special = red.feeds(s)
        lengths = np.asarray(lengths, np.int64)
        t = next(v.shape[-1] for v in f.values() if v.ndim == 2) if special is None else special.shape[1]
        stats_feeds.append({**f, **sf.stat_feeds(lengths, special, t, False)[0]})
    if a.null:
        ig.sess = _null_session(ig, stats_feeds, a.provider, threads)
    rs = raw(ig.sess)
    guarded = ig.sess._sess if hasattr(ig.sess._sess, "memory") else rs  # (GuardedSession: its run is the plain one)
    ex = ThreadPoolExecutor(4)
    from fold_9077fb9 import reference_finish, reference_fold, reference_stat_feeds
    from ranked_93201d0 import reference_ranked

    from attnviz.corpus import fold as fd

    partial, stat_feeds = ig.partial, sf.stat_feeds
    ranked, fold_at_once = fd.ranked, rd._fold_at_once
    from attnviz.runtime.guard import GuardedSession

    run_small = GuardedSession.run_small

    def gil23_feeds(lengths, special, t, causal=False):  # before gil24: made each batch, REAL [B, 1, T, T] fed,
        # DIVISOR a [B, 1, T, S] view of a [B, 1, S, T] array (copied by every run's binding)
        lengths = np.asarray(lengths, np.int64)
        f, idx = sf._made(lengths, None if special is None else np.asarray(special, bool)[:, :t], t, causal)
        f = dict(f)
        f[sf.REAL] = np.broadcast_to(f[sf.REAL], (len(lengths), 1, t, t)).copy()  # (the graph expands it alike)
        f[sf.DIVISOR] = np.ascontiguousarray(f[sf.DIVISOR].transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)  # its layout
        return f, idx

    def old_tail(ran, lengths, special, causal, items, k, batch_id):
        return reference_fold(reference_finish(ig.groups, ran), items, k, batch_id, int(lengths.sum()))

    def many(patch=None, interval=None, combine=False):
        def go():
            old = sys.getswitchinterval()
            if interval:
                sys.setswitchinterval(interval)
            if patch == "9077fb9":
                ig.partial, sf.stat_feeds = old_tail, reference_stat_feeds
            if patch == "no fold":
                ig.partial = lambda *x, **k: None
            if patch == "gil23":
                sf.stat_feeds, GuardedSession.run_small = gil23_feeds, GuardedSession.run_bound
            if patch == "gil23 feeds":
                sf.stat_feeds = gil23_feeds
            if patch == "bound run":
                GuardedSession.run_small = GuardedSession.run_bound
            if patch == "plain run":
                GuardedSession.run_small = GuardedSession.run
            if patch == "host ranking":
                ig.partial = lambda ran, *x: partial(({k: v for k, v in ran[0].items() if k != sf.RANKS}, *ran[1:]), *x)
            if patch == "gil24 fold":
                fd.ranked, rd._fold_at_once = reference_ranked, lambda acc, parts: False
            try:
                parts = red.many(specs, 4)
                if combine:
                    for i in range(0, len(parts), SHARED_CHUNK):  # a GPU worker's tasks (the shared layout)
                        rd.combine(parts[i : i + SHARED_CHUNK], red.k)
            finally:
                ig.partial, sf.stat_feeds, GuardedSession.run_small = partial, stat_feeds, run_small
                fd.ranked, rd._fold_at_once = ranked, fold_at_once
                sys.setswitchinterval(old)

        return go

    rows = {
        "plain": lambda: [plain.run(None, f) for f in plain_feeds],
        "many d4": many(),
        "many d4, gil23's host code (REAL [B,1,T,T], feeds each batch, bound run)": many("gil23"),
        "many d4, gil23's feeds only (REAL [B,1,T,T], made each batch)": many("gil23 feeds"),
        "many d4, gil23's bound run only": many("bound run"),
        "many d4, statistics by onnxruntime's plain run": many("plain run"),
        "many d4, 9077fb9's host code": many("9077fb9"),
        "many d4, switch interval 0.1 ms": many(interval=1e-4),
        "many d4, no finish or fold (partial skipped)": many("no fold"),
        "many d4, host ranking (before host25: the session's RANKS ignored)": many("host ranking"),
        "many d4 + combine (a worker's tasks)": many(combine=True),
        "many d4 + combine, gil24's fold (93201d0's ranked, a merge a batch)": many("gil24 fold", combine=True),
        "stats raw ×4": lambda: list(ex.map(lambda f: rs.run(ig.fetch, f), stats_feeds)),
        "stats wrapped ×4": lambda: list(ex.map(lambda f: ig.sess.run(ig.fetch, f), stats_feeds)),
        # the memory check and onnxruntime's plain run (no I/O binding, no page-locked outputs): what the wrapper's
        # binding costs or saves for outputs this small ([B, heads, S] sums and picks)
        "stats guarded, plain run ×4": lambda: list(ex.map(lambda f: guarded.run(ig.fetch, f), stats_feeds)),
    }
    if a.null:
        del rows["plain"]
    if a.only:
        rows = {k: f for k, f in rows.items() if k in ("plain", "many d4") or any(t in k for t in a.only)}
    print(
        f"{n} items, {len(specs)} batches; wrapper {type(ig.sess).__name__}; load {os.getloadavg()[0]:.1f}", flush=True
    )
    for fn in rows.values():
        fn()
    took: dict[str, list[float]] = {k: [] for k in rows}
    cpu: dict[str, list[float]] = {k: [] for k in rows}
    for r in range(a.rounds):
        for k in list(rows) if r % 2 == 0 else reversed(list(rows)):
            t0, c0 = time.perf_counter(), time.process_time()
            rows[k]()
            took[k].append(time.perf_counter() - t0)
            cpu[k].append(time.process_time() - c0)
    against = "many d4" if a.null else "plain"  # (with --null, plain's model runs and the rest do not: no ratio)
    base = statistics.median(took[against])
    # (the least CPU of the rounds too: on a loaded machine the other processes only ever add to it)
    print(
        f"| loop | ms a batch (median of {a.rounds}) | vs {against} | CPU ms a batch | least CPU | vs {against} |\n"
        "|---|---:|---:|---:|---:|---:|"
    )
    least = min(cpu[against])
    for k, v in took.items():
        m = statistics.median(v)
        print(
            f"| {k} | {1000 * m / len(specs):.3f} | {m / base:.2f}× | {1000 * statistics.median(cpu[k]) / len(specs):.3f} "
            f"| {1000 * min(cpu[k]) / len(specs):.3f} | {min(cpu[k]) / least:.2f}× |"
        )
    print(f"load average {os.getloadavg()[0]:.1f}")


def _null_session(ig, stats_feeds: list[dict], provider: str, threads: int):
    """An ExtraSession (in process: the memory check, on CUDA the page-locked outputs) of a graph that takes every
    input of the statistics session ``ig.sess`` and gives the statistics of its longest full batch, sliced to each batch's
    size (MiniLM's items all have two special keys, so every batch's picks index its own special slots)."""
    from onnx import helper, numpy_helper

    from attnviz.runtime import statgraph as sg
    from attnviz.runtime.extra_session import ExtraSession
    from attnviz.runtime.host import make_session
    from attnviz.runtime.statfeeds import PICKS, RANKS, SUMS

    longest = max(stats_feeds, key=lambda f: f["input_ids"].shape)  # (of the most items: B first)
    outs = dict(zip(ig.fetch, ig.sess.run(ig.fetch, longest)))
    elem = {"tensor(float)": 1, "tensor(int64)": 7, "tensor(int32)": 6, "tensor(bool)": 9}
    ins = [
        helper.make_tensor_value_info(i.name, elem[i.type], [f"{i.name}_{d}" for d in range(len(i.shape))])
        for i in raw(ig.sess).get_inputs()
    ]
    const = [numpy_helper.from_array(np.array([v], np.int64), n) for n, v in (("zero", 0), ("one", 1))]
    nodes = [
        helper.make_node("Shape", [ins[0].name], ["shape"]),
        helper.make_node("Slice", ["shape", "zero", "one"], ["b"]),
        *[helper.make_node("Slice", [f"{n}_all", "zero", "b", "zero"], [n]) for n in (SUMS, PICKS)],
    ]
    inits = const + [numpy_helper.from_array(np.ascontiguousarray(outs[n]), f"{n}_all") for n in (SUMS, PICKS)]
    out = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(outs[n].dtype), None) for n in (SUMS, PICKS)
    ]
    graph = helper.make_graph(nodes, "null", ins, out, inits)
    if RANKS in ig.fetch:  # the session's ranking of each batch's own (sliced) sums: the same nodes as the real one's
        sg._rank_nodes(sg._Nodes(graph, "null_rank_"), graph, 17)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return ExtraSession(make_session(m.SerializeToString(), provider, threads, label="null")[0])


if __name__ == "__main__":
    main()
