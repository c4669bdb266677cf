"""Generation per token: the crash-isolation path against the in-process loop and a plain onnxruntime loop.

    python bench/gen_isolation_bench.py --folder DIR [--provider cpu|cuda] [--steps 64 128 256] [--rounds 5]

DIR: an export of ``bench/generation_plain_bench.py`` (``--export-only``; holds ``onnx/``).  Three loops on that
one file, greedy, EOS off so every run makes exactly N tokens, rounds interleaved (the order reversed every other
round), each generation fed a prompt of its own (a model answers the same feeds again from its last result):

- **isolated**: ``model.analyze(feeds, generate=N)`` with the session in the crash-isolation child (the default);
- **in-process**: the same on a second model opened with ``ATTNVIZ_INPROCESS=1`` (the loop in this process);
- **plain**: the loop a careful user writes, no maps (numpy feeds on CPU; on CUDA IO binding, the cache on the GPU).

Printed per length: median wall per token, CPU per token (this process and its children), the ratios, and
whether the three made the same tokens and the two attnviz paths bit-equal maps.  With ``ATTNVIZ_TRACE=1`` (set
here) the isolated rows also split into the parent's and the child's parts (``host.take_trace``): per generation
the requests, the child's loop (its ``steps`` requests' handling, the prompt's run included), the child's other
work, the requests and replies in transit (the parent's prepare/adopt included), and the parent's time outside
requests (building feeds, assembling maps, the result); beside them the in-process loop's own time (its
``advance`` calls) within that path's wall, so that the child's loop and the in-process one compare directly.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

os.environ["ATTNVIZ_TRACE"] = "1"  # read when the isolation child starts (here and in it)
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from generation_plain_bench import cpu_s, plain_iobind_loop, plain_loop


def open_generator(folder: Path, provider: str, inprocess: bool):
    """A model whose sessions live in this process (``inprocess``) or in the isolation child; EOS off."""
    from attnviz.runtime import open_model

    if inprocess:
        os.environ["ATTNVIZ_INPROCESS"] = "1"  # read when a session is made: the warm-up below makes them
    try:
        m = open_model(folder / "onnx", provider=provider, threads=1)
        m.meta["special"] = {k: v for k, v in (m.meta.get("special") or {}).items() if k != "eos"}
        p = np.random.default_rng(99).integers(3, 99, (1, 8))
        m.analyze(feeds={"input_ids": p, "attention_mask": np.ones_like(p)}, generate=4)
    finally:
        os.environ.pop("ATTNVIZ_INPROCESS", None)
    return m


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--folder", type=Path, required=True)
    ap.add_argument("--provider", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--steps", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    from attnviz.runtime import host
    from attnviz.runtime import model_loop as loop_module

    # the in-process loop's own time (its chunks, as the child's trace spans time the child's): advance, timed
    loop_s = [0.0]
    real_advance = loop_module.advance

    def timed_advance(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return real_advance(*args, **kwargs)
        finally:
            loop_s[0] += time.perf_counter() - t0

    loop_module.advance = timed_advance

    models = {
        "isolated": open_generator(a.folder, a.provider, False),
        "in-process": open_generator(a.folder, a.provider, True),
    }
    model_file = next(
        p for p in ((a.folder / "onnx" / n) for n in ("model.onnx", "decoder_model_merged.onnx")) if p.exists()
    )
    rng = np.random.default_rng(0)
    print(f"{a.provider}, 1 thread; per token, median of {a.rounds} interleaved rounds; load {os.getloadavg()[0]:.1f}")
    print(
        "| new tokens | isolated | in-process | plain | isolated / in-process | isolated / plain | in-process / plain | CPU isolated / in-process | same tokens, maps |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for n in a.steps:
        prompt = rng.integers(3, 99, (1, 8))
        if a.provider == "cuda":  # the loop a careful CUDA user writes: the cache kept on the GPU
            plain = plain_iobind_loop(model_file, prompt, n, 1)
        else:
            plain = plain_loop(model_file, prompt, n, 1, "cpu")
        seeds = iter(range(1000, 100000))

        def attnviz(m, feeds=None):
            if feeds is None:
                p = np.random.default_rng(next(seeds)).integers(3, 99, (1, 8))
                feeds = {"input_ids": p, "attention_mask": np.ones_like(p)}
            return m.analyze(feeds=feeds, generate=n)

        loops = {
            "isolated": lambda: attnviz(models["isolated"]),
            "in-process": lambda: attnviz(models["in-process"]),
            "plain": plain,
        }
        for go in loops.values():
            go()  # warm-up: shapes learned, slots and buffers made
        host.take_trace()
        wall: dict[str, list[float]] = {k: [] for k in loops}
        cpu: dict[str, list[float]] = {k: [] for k in loops}
        split: list[tuple[int, float, float, float, float]] = []
        here_loop: list[float] = []
        for r in range(a.rounds):
            for k in loops if r % 2 == 0 else list(reversed(loops)):
                host.take_trace()
                loop_s[0] = 0.0
                c0, t0 = cpu_s(), time.perf_counter()
                loops[k]()
                wall[k].append(time.perf_counter() - t0)
                cpu[k].append(cpu_s() - c0)
                if k == "in-process":
                    here_loop.append(loop_s[0])
                if k == "isolated":
                    parent, kid = host.take_trace()
                    # (called, sent, received, returned) here; (received, ort start, ort done, replied) there
                    loop = sum(c[2] - c[1] for c in kid)
                    kid_rest = sum(c[3] - c[0] for c in kid) - loop
                    transit = sum(c[0] - p[0] + p[3] - c[3] for p, c in zip(parent, kid))
                    split.append((len(parent), loop, kid_rest, transit, wall[k][-1] - loop - kid_rest - transit))
        # same prompt through all three: tokens, and the two attnviz paths' maps bit for bit
        feeds = {"input_ids": prompt, "attention_mask": np.ones_like(prompt)}
        ri, rp = attnviz(models["isolated"], feeds), attnviz(models["in-process"], feeds)
        same_ids = ri.info["generated_ids"] == rp.info["generated_ids"] == list(plain())
        same_maps = all(np.array_equal(x.array(), y.array()) for x, y in zip(ri.maps, rp.maps)) and len(ri.maps) == len(
            rp.maps
        )
        med = {k: statistics.median(v) / n * 1e3 for k, v in wall.items()}
        mc = {k: statistics.median(v) / n * 1e3 for k, v in cpu.items()}
        print(
            f"| {n} | {med['isolated']:.3f} ms | {med['in-process']:.3f} ms | {med['plain']:.3f} ms "
            f"| {med['isolated'] / med['in-process']:.2f}× | {med['isolated'] / med['plain']:.2f}× "
            f"| {med['in-process'] / med['plain']:.2f}× | {mc['isolated'] / mc['in-process']:.2f}× "
            f"| {'yes' if same_ids else 'NO'}, {'bit-equal' if same_maps else 'DIFFER'} |"
        )
        reqs, loop, kid_rest, transit, here = (statistics.median(s[i] for s in split) for i in range(5))
        print(
            f"  (isolated, per generation: {reqs:.0f} requests; onnxruntime runs and the loop {loop * 1e3:.2f} ms, the "
            f"child's other work {kid_rest * 1e3:.2f} ms, requests and replies in transit (with the parent's "
            f"prepare/adopt) {transit * 1e3:.2f} ms, the parent outside requests {here * 1e3:.2f} ms; in-process, "
            f"its loop {statistics.median(here_loop) * 1e3:.2f} ms of {statistics.median(wall['in-process']) * 1e3:.2f} "
            f"ms; load {os.getloadavg()[0]:.1f})"
        )


if __name__ == "__main__":
    main()
