"""A Whisper folder: attnviz (every map) vs a plain onnxruntime greedy loop on the same files (issue 23).

    python bench/speech_bench.py [--rounds 3] [--threads 1] [--steps 16 64] [--size 256 4 4] [--provider cpu|cuda]
                                 [--folder DIR/onnx] [--code CHECKOUT]

A random-init Whisper (tests/optimum_env.py's script: 80 mel bins, a 5 s window = 250 encoder positions; hidden,
layers and heads from --size, 448 decoder positions) exported by optimum-onnx (``automatic-speech-recognition-with-
past``), EOS switched off so that every run makes exactly N tokens, a 2.5 s chirp, the forced prompt of 4 tokens.

- **attnviz (features)**: ``model.analyze(feeds={input_features, decoder_input_ids: prompt}, generate=N)`` — the
  encoder once (its maps kept), the prompt through ``decoder_model.onnx``, then the cache loop beside
  ``decoder_with_past_model.onnx`` with every step's maps kept and assembled;
- **attnviz (audio)**: ``model.analyze(audio=samples, generate=N)`` — the same plus the numpy log-mel features;
- **plain**: the loop a careful user writes on onnxruntime alone, no maps: the encoder, the full decoder on the
  prompt, then the with-past decoder fed its ``present.*`` back (the encoder half of the cache from the first run),
  ``argmax`` of the last logits; the same features, threads and provider.

Rounds interleave the loops; medians of the whole call, the encoder run every time in all three (the set's cache of
its last encoder run is cleared before each attnviz call); the token column says whether all three made the same ids.
Beside the wall ratio, the CPU ratio: each call's CPU time (this process's threads and the crash-isolation child's,
from ``/proc/PID/task/*/schedstat``, ns; plain runs in this process alone), as the median of each round's ratio
(features / plain) — on a shared machine steadier than wall time, which counts the other processes' turns too —
and the median of each round's CPU difference (features − plain, ms: the overhead itself, which a quiet run's
plain time turns into a ratio).  ``--code CHECKOUT`` times another checkout's attnviz with this script (runs of
two checkouts in turn compare them, e.g. main and a branch).
The load average is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# numpy's OpenBLAS threads, started by the audio loop's log-mel matrix products, spin on after it and were counted
# in this process's CPU time and took the second core from the next loop: a plain loop after an audio call measured
# up to 20 ms more CPU than the attnviz call beside it (CPU ratios of 0.8×).  One thread each, set before numpy loads.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))  # this checkout's attnviz, not an installed one
RATE = 16000


def plain_loop(folder: Path, feats: np.ndarray, prompt: list[int], n: int, threads: int, provider: str):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    prov = ["CUDAExecutionProvider", "CPUExecutionProvider"] if provider == "cuda" else ["CPUExecutionProvider"]
    enc, dec, past = (
        ort.InferenceSession(str(folder / f), so, providers=prov)
        for f in ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx")
    )
    dec_outs = [o.name for o in dec.get_outputs()]
    past_outs = [o.name for o in past.get_outputs()]
    past_ins = [i.name for i in past.get_inputs() if i.name.startswith("past_key_values")]

    def go() -> list[int]:
        states = enc.run(None, {"input_features": feats})[0]
        got = dict(zip(dec_outs, dec.run(dec_outs, {"input_ids": np.array([prompt]), "encoder_hidden_states": states})))
        cache = {p: got[p.replace("past_key_values", "present")] for p in past_ins}
        made = [int(np.argmax(got["logits"][0, -1]))]
        for _ in range(n - 1):
            out = dict(zip(past_outs, past.run(past_outs, {"input_ids": np.array([[made[-1]]]), **cache})))
            made.append(int(np.argmax(out["logits"][0, -1])))
            for p in past_ins:
                new = out.get(p.replace("past_key_values", "present"))
                if new is not None:  # the with-past file returns the decoder half; the encoder half stays
                    cache[p] = new
        return made

    return go


def cpu_s(*pids: int | None) -> float:
    """CPU seconds the threads of these processes have used (``/proc/PID/task/*/schedstat``: nanoseconds, where
    ``/proc/PID/stat`` counts 10 ms ticks, too coarse for an 80 ms call)."""
    ns = 0
    for pid in pids:
        if pid is None:
            continue
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                    ns += int(fh.read().split()[0])
            except OSError:
                pass  # a thread that ended meanwhile
    return ns / 1e9


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--size", type=int, nargs=3, default=[256, 4, 4], metavar=("HIDDEN", "LAYERS", "HEADS"))
    ap.add_argument("--provider", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--folder", type=Path, help="an export this script made before (its onnx/ folder): reused as is")
    ap.add_argument(
        "--code",
        type=Path,
        help="the checkout whose attnviz is timed (default this one): runs of two checkouts in turn compare them",
    )
    args = ap.parse_args()
    if args.code is not None:
        sys.path.insert(0, str(args.code.resolve()))
    import optimum_env

    import attnviz
    from attnviz.runtime import open_model
    from attnviz.runtime.audio import FeatureSpec, log_mel

    folder = args.folder
    if folder is None:
        script = optimum_env.WHISPER_SCRIPT.replace("max_target_positions=64", "max_target_positions=448")
        assert script != optimum_env.WHISPER_SCRIPT
        out = Path(tempfile.mkdtemp(prefix="attnviz-speech-"))
        optimum_env.run(script, "whisper", str(out), *map(str, args.size))
        folder = out / "onnx"
    m = open_model(folder, provider=args.provider, threads=args.threads)
    m.meta["special"] = {k: v for k, v in m.meta["special"].items() if k != "eos"}  # N tokens exactly
    t = np.arange(int(2.5 * RATE)) / RATE
    wave = (0.5 * np.sin(2 * np.pi * (100 * t + 3900 / 5 * t**2))).astype(np.float32)
    feats = log_mel([wave], FeatureSpec.from_dict(m.meta["audio"]))
    prompt = [int(x) for x in m.meta["speech_prompt"]["ids"]]
    feeds = {"input_features": feats, "decoder_input_ids": np.array([prompt])}
    m.analyze(feeds=feeds, generate=4)  # sessions made before any timing (each loop below warms up too)

    from attnviz.runtime import host

    child = host._host.proc.pid if host._host is not None else None  # the isolation child (None: in-process)
    print(
        f"Whisper {args.size} (5 s window), {args.threads} thread(s), provider {args.provider}; median of {args.rounds}; "
        f"load average {os.getloadavg()[0]:.1f}; attnviz from {Path(attnviz.__file__).parent.parent}"
    )
    print(
        "| new tokens | attnviz, features (maps) | attnviz, audio (maps) | plain ort (no maps) | attnviz / plain "
        "| CPU attnviz / plain | CPU attnviz − plain | same tokens |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for n in args.steps:

        def attnviz(n=n, **given):
            m._enc_cache = None  # the set keeps its last encoder run for the same input: each call runs it anew
            return m.analyze(generate=n, **given).info["generated_ids"]

        loops = {
            "features": lambda: attnviz(feeds=feeds),
            "audio": lambda: attnviz(audio=wave),
            "plain": plain_loop(folder, feats, prompt, n, args.threads, args.provider),
        }
        for go in loops.values():
            go()  # warm-up
        times: dict[str, list[float]] = {k: [] for k in loops}
        cpu: dict[str, list[float]] = {k: [] for k in loops}
        ids: dict[str, list[int]] = {}
        for r in range(args.rounds):
            for k in list(loops) if r % 2 == 0 else list(reversed(loops)):
                c0 = cpu_s(os.getpid(), child)
                t0 = time.perf_counter()
                ids[k] = list(loops[k]())
                times[k].append(time.perf_counter() - t0)
                cpu[k].append(cpu_s(os.getpid(), child) - c0)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        cpu_ratio = statistics.median(a / b for a, b in zip(cpu["features"], cpu["plain"]))
        cpu_over = statistics.median(a - b for a, b in zip(cpu["features"], cpu["plain"])) * 1e3
        same = all(v == ids["plain"] for v in ids.values())
        print(
            f"| {n} | {med['features']:.1f} ms | {med['audio']:.1f} ms | {med['plain']:.1f} ms "
            f"| {med['features'] / med['plain']:.2f}× | {cpu_ratio:.2f}× | {cpu_over:.1f} ms | {'yes' if same else 'NO'} |"
        )
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
