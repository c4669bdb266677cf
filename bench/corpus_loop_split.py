"""Where a corpus worker's loop loses to plain onnxruntime's, batch for batch, in one process (issue 26: the corpus
on CUDA, whose whole-command gap is in the loop: session 19's H100 timeline had the worker at ~2.9 ms a batch
inside a task against plain's ~2.0).  On the same length-sorted batches (bench/corpus_bench.py's model and corpus):

- ``plain``: the model's own session, default options, run batch after batch on feeds built beforehand (plain's loop);
- ``stats raw``: the statistics session (``InGraphReducer``'s graph, as a worker makes it) run the same way: the
  graph's own cost;
- ``stats wrapped``: the same through attnviz's session wrappers (the memory check; on CUDA the page-locked outputs);
- ``stats raw ×N``: N threads running the raw statistics session at once (what ``BatchReducer.many`` overlaps);
- ``many dN``: ``BatchReducer.many(specs, N)`` (feeds, statistics feeds, runs N in flight, the fold): the worker's
  whole loop less the driver.

Rounds interleaved, the order reversed every other round; ms a batch, median of the rounds.

    OMP_NUM_THREADS=1 python bench/corpus_loop_split.py --provider cuda --items 10000 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ["ATTNVIZ_INPROCESS"] = "1"  # the session in this process, as a corpus worker holds it
sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus_bench as cb
import numpy as np


def raw(sess):
    """The onnxruntime session under attnviz's wrappers."""
    import onnxruntime as ort

    while hasattr(sess, "_sess") and not isinstance(sess, ort.InferenceSession):
        sess = sess._sess
    return sess


def placement(path: str, provider: str) -> str:
    """Which nodes of the graph at ``path`` onnxruntime runs off the device: the graph it optimised for ``provider``
    saved, its Memcpy nodes counted and the ops fed by a MemcpyToHost named (on the CPU: none)."""
    import collections
    import tempfile

    import onnx
    import onnxruntime as ort

    if provider != "cuda":
        return "CPU session: no copies"
    with tempfile.TemporaryDirectory(dir=str(Path(path).parent)) as tmp:
        so = ort.SessionOptions()
        so.log_severity_level = 4
        so.optimized_model_filepath = str(Path(tmp) / "opt.onnx")
        ort.InferenceSession(path, so, providers=[("CUDAExecutionProvider", {"use_tf32": "0"}), "CPUExecutionProvider"])
        m = onnx.load(so.optimized_model_filepath, load_external_data=False)
    nodes = list(m.graph.node)
    copies = collections.Counter(n.op_type for n in nodes if n.op_type.startswith("Memcpy"))
    to_host = {o for n in nodes if n.op_type == "MemcpyToHost" for o in n.output}
    on_cpu = collections.Counter(n.op_type for n in nodes if any(i in to_host for i in n.input))
    return f"{len(nodes)} nodes optimised, copies {dict(copies)}, ops fed from the device's copies {dict(on_cpu)}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--provider", default="cuda", choices=("cpu", "cuda"))
    ap.add_argument("--items", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--depths", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument(
        "--threads", type=int, default=0, help="onnxruntime intra-op threads (0: cores, or cores/4 on CUDA)"
    )
    ap.add_argument("--minilm", metavar="DIR")
    ap.add_argument("--work", default="/tmp/attnviz_corpus_bench")
    a = ap.parse_args()

    from attnviz.corpus.items import read_texts
    from attnviz.corpus.plan import encode_items, plan_text
    from attnviz.corpus.reduce import BatchReducer
    from attnviz.runtime import statfeeds as sf
    from attnviz.runtime.session import make_session

    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    model, tok = cb.minilm(work, a.minilm)
    texts = cb.corpus_file(work, a.items)
    cores = os.cpu_count() or 1
    threads = a.threads or (max(1, cores // 4) if a.provider == "cuda" else cores)
    plain_feeds, n = cb.plain_batches(str(model), tok, str(texts), a.batch)
    plain, _ = make_session(str(model), a.provider, threads=cores)  # plain's: one session × all cores
    plain = raw(plain)
    takes = {i.name for i in plain.get_inputs()}  # (plain drops the inputs its session does not take)
    plain_feeds = [{k: v for k, v in f.items() if k in takes} for f in plain_feeds]
    red = BatchReducer(str(model), a.provider, tok, threads, 5)
    red.prepare()
    ig = red.in_graph
    items = read_texts(texts)
    specs = plan_text(items, encode_items(red.model, items), None, None, a.batch, equal_lengths=False)
    stats_feeds = []
    for s in specs:
        f, lengths, special = red.feeds(s)
        lengths = np.asarray(lengths, np.int64)
        t = next(v.shape[-1] for v in f.values() if v.ndim == 2) if special is None else special.shape[1]
        extra, _ = sf.stat_feeds(lengths, special, t, False)
        stats_feeds.append({**f, **extra})
    rs = raw(ig.sess)
    from attnviz.runtime import statgraph_kept

    g, _, _ = statgraph_kept.stats_model(red.model, {gr.site for gr in ig.groups}, False, ig.joined)
    stats_path = Path(model).parent / "loop_split_stats.onnx"  # beside the model: its weights are named relative
    stats_path.write_bytes(g.SerializeToString())
    for name, path in (("plain", model), (f"statistics (joined={ig.joined})", stats_path)):
        try:
            print(f"{name}: {placement(str(path), a.provider)}", flush=True)
        except Exception as e:  # the tables below matter more than this line
            print(f"{name}: placement not read ({str(e).splitlines()[0][:160]})", flush=True)
    print(
        f"{n} items, {len(specs)} batches of {a.batch}; plain {plain.get_providers()[0]}, statistics session "
        f"{rs.get_providers()[0]} ({threads} threads); load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )

    def seq(sess, feeds, fetch=None):
        for f in feeds:
            sess.run(fetch, f)

    def threaded(k):
        ex = ThreadPoolExecutor(k)

        def go():
            list(ex.map(lambda f: rs.run(ig.fetch, f), stats_feeds))

        return go

    rows = {
        "plain": lambda: seq(plain, plain_feeds),
        "stats raw": lambda: seq(rs, stats_feeds, ig.fetch),
        "stats wrapped": lambda: seq(ig.sess, stats_feeds, ig.fetch),
    }
    for k in a.depths:
        if k > 1:
            rows[f"stats raw ×{k}"] = threaded(k)
    for k in a.depths:
        rows[f"many d{k}"] = lambda k=k: red.many(specs, k)
    # sessions of their own, one thread each (each CUDA session has its own stream: runs on one session from
    # several threads may share one, so that only the host work overlaps): the batches dealt round-robin
    for name, path, feeds, fetch in (("plain", model, plain_feeds, None), ("stats", stats_path, stats_feeds, ig.fetch)):
        own = [raw(make_session(str(path), a.provider, threads=threads)[0]) for _ in range(2)]
        ex2 = ThreadPoolExecutor(2)

        def dealt(own=own, feeds=feeds, fetch=fetch, ex2=ex2):
            list(ex2.map(lambda i: seq(own[i], feeds[i::2], fetch), range(2)))

        rows[f"{name}, 2 sessions × 1 thread"] = dealt
    for fn in rows.values():  # first runs (handles, arenas) out of the way
        fn()
    took: dict[str, list[float]] = {k: [] for k in rows}
    cpu: dict[str, list[float]] = {k: [] for k in rows}
    for r in range(a.rounds):
        for k in list(rows) if r % 2 == 0 else reversed(list(rows)):
            t0, c0 = time.perf_counter(), time.process_time()
            rows[k]()
            took[k].append(time.perf_counter() - t0)
            cpu[k].append(time.process_time() - c0)
    base, cbase = statistics.median(took["plain"]), statistics.median(cpu["plain"])
    print(f"\n| loop | ms a batch (median of {a.rounds}) | vs plain | CPU ms a batch (all threads) | vs plain |")
    print("|---|---:|---:|---:|---:|")
    for k, v in took.items():
        m, c = statistics.median(v), statistics.median(cpu[k])
        print(
            f"| {k} | {1000 * m / len(specs):.3f} | {m / base:.2f}× | {1000 * c / len(specs):.3f} | {c / cbase:.2f}× |"
        )
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
