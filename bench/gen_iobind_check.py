"""The generation loop with the KV cache kept on the device (IO binding) against the numpy-fed loop, on one model.

    python bench/gen_iobind_check.py --provider cuda [--folder DIR] [--steps 64 128 256 1024] [--rounds 3]

One random-init GPT-2 exported by optimum (``text-generation-with-past``), as ``bench/generation_plain_bench.py``
makes it (``--folder``: an export that script or this one made before, holding ``onnx/``; reused as is).  The
same generations run with ``ATTNVIZ_LOOP_BINDING=off`` (numpy feeds: the cache copied to the host and back each
step) and ``on`` (on CUDA the cache stays in GPU memory; on CPU cpu OrtValues through the same code), each on its
own model opened the same way, EOS off so every run makes exactly N tokens.  Printed per length:

- whether the two paths made the same tokens (and the plain IO-binding loop of generation_plain_bench too), and the
  largest absolute difference between their maps (every site, the prompt's rows and every step's);
- where each loop kept its cache (the run facts' ``loop_cache``: numpy | cpu | cuda);
- per-token wall time of both paths and of the plain IO-binding loop (no maps), medians of interleaved rounds.

The first generation of each model (the prompt's run and the loop as separate requests, the output shapes learned)
is compared too.  Exit status 1 when tokens differ or a bound loop on CUDA did not keep its cache there.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))  # this checkout's attnviz, not an installed one

MODES = ("off", "on")


def max_diff(a, b) -> float:
    """Largest |a - b| over every map of two results (inf where shapes or NaN positions differ)."""
    worst = 0.0
    for x, y in zip(a.maps, b.maps):
        x, y = x.array(), y.array()
        if x.shape != y.shape or not np.array_equal(np.isnan(x), np.isnan(y)):
            return float("inf")
        both = ~np.isnan(x)
        if both.any():
            worst = max(worst, float(np.max(np.abs(x[both].astype(np.float64) - y[both]))))
    return worst


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--provider", default="cuda", choices=["cpu", "cuda"])
    ap.add_argument("--folder", type=Path, help="an export generation_plain_bench.py made (holds onnx/): reused")
    ap.add_argument("--steps", type=int, nargs="+", default=[64, 128, 256, 1024])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--size", type=int, nargs=3, default=[256, 4, 8], metavar=("HIDDEN", "LAYERS", "HEADS"))
    args = ap.parse_args()
    from generation_plain_bench import gpt2_export, plain_iobind_loop

    from attnviz.runtime import open_model
    from attnviz.runtime.steps import BINDING_ENV

    out, model_file = gpt2_export(args.folder, max(args.steps), args.size, "attnviz-iobind-")
    onnx_dir = out / "onnx"
    prompt = np.random.default_rng(0).integers(3, 99, (1, 8))
    feeds = {"input_ids": prompt, "attention_mask": np.ones_like(prompt)}

    def generate(m, mode: str, n: int):
        os.environ[BINDING_ENV] = mode  # read by the parent as each generation starts
        return m.analyze(feeds=feeds, generate=n)

    models = {}
    ok = True
    for mode in MODES:
        os.environ[BINDING_ENV] = mode
        models[mode] = m = open_model(onnx_dir, provider=args.provider, threads=args.threads)
        m.meta["special"] = {k: v for k, v in (m.meta.get("special") or {}).items() if k != "eos"}
    first = {mode: generate(models[mode], mode, 8) for mode in MODES}  # each model's first: separate requests
    same = first["off"].info["generated_ids"] == first["on"].info["generated_ids"]
    ok &= same
    print(
        f"GPT-2 {args.size}, provider {args.provider} ({first['on'].info['provider']}), {args.threads} thread(s); "
        f"first generation (8 tokens, shapes learned): same tokens {'yes' if same else 'NO'}, "
        f"max |map diff| {max_diff(first['off'], first['on']):.3g}"
    )
    print("| new tokens | numpy feeds | cache bound | plain IO binding | bound / numpy | bound / plain IO | same tokens | max abs map diff | loop_cache (off, on) |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---|---:|---|")
    for n in args.steps:
        plain = plain_iobind_loop(model_file, prompt, n, args.threads, args.provider)
        loops = {mode: (lambda mode=mode, n=n: generate(models[mode], mode, n)) for mode in MODES}
        results = {mode: go() for mode, go in loops.items()}  # warm-up, and the results compared
        plain_ids = plain()
        times: dict[str, list[float]] = {k: [] for k in (*MODES, "plain")}
        for r in range(args.rounds):
            order = [*MODES, "plain"] if r % 2 == 0 else ["plain", *reversed(MODES)]
            for k in order:
                t0 = time.perf_counter()
                if k == "plain":
                    plain()
                else:
                    loops[k]()
                times[k].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) / n * 1e3 for k, v in times.items()}
        ids = {k: r.info["generated_ids"] for k, r in results.items()}
        same = ids["off"] == ids["on"] == list(plain_ids)
        where = [results[k].info.get("loop_cache", "?") for k in MODES]
        ok &= same and (args.provider != "cuda" or where[1] == "cuda")
        print(
            f"| {n} | {med['off']:.2f} ms | {med['on']:.2f} ms | {med['plain']:.2f} ms | {med['on'] / med['off']:.2f}× "
            f"| {med['on'] / med['plain']:.2f}× | {'yes' if same else 'NO'} | {max_diff(results['off'], results['on']):.3g} "
            f"| {', '.join(where)} |"
        )
    print("OK: same tokens, bound cache where expected" if ok else "MISMATCH (see the table)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
