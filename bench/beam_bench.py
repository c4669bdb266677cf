"""Beam search per step: ``--beams 1`` (greedy) vs ``--beams K``, on the translation demo and a cached decoder.

    OMP_NUM_THREADS=1 python bench/beam_bench.py [--rounds 5] [--beams 1 4] [--steps 32] [--folder DIR]

- **demo**: ``models/translation.onnx`` (no KV cache: each running beam's sequence re-run per step, then one run
  of each final hypothesis for its maps), the Greek sample verse, up to ``--steps`` tokens (EOS stops it);
- **gpt2**: the random-init GPT-2 of ``generation_plain_bench.py`` (hidden 256, 4 layers, 8 heads, one with-past
  file: the KV cache, reordered by the beams' parents each step), EOS switched off so every run makes ``--steps``;
- **idefics3**: the tests' tiny random-init Idefics3 / SmolVLM folder (tests/idefics3_models.py: hidden 32, 2 + 2
  layers, 4 heads; three files, the merged decoder's cache), a 40 x 100 image (1 x 2 tiles and the global image:
  the tower's frames, one set every beam shares), EOS off.  ``--models`` picks which run (default all three).

Each call is ``model.analyze(..., generate=N, beams=K)`` through the crash-isolation child, as the CLI runs it.
Per step = the call's wall (and CPU: this process and its children) over the steps run (a beam step runs all K
beams).  Rounds interleave every (model, K); medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from generation_plain_bench import cpu_s, gpt2_export

TEXT = "μακάριοι οἱ καθαροὶ τῇ καρδίᾳ ὅτι αὐτοὶ τὸν θεὸν ὄψονται"


def idefics3_folder(folder: Path):
    """The tests' tiny Idefics3 folder (exported once) and a 40 x 100 picture, opened."""
    import numpy as np
    from PIL import Image

    from attnviz.runtime import open_model

    repo = folder / "tiny-idefics3"
    if not (repo / "onnx").is_dir():
        import idefics3_models

        idefics3_models.save_repo(repo)
    image = folder / "wide.png"
    Image.fromarray((np.random.default_rng(3).random((40, 100, 3)) * 255).astype(np.uint8)).save(image)
    return open_model(repo, provider="cpu"), image


def main() -> None:
    import numpy as np

    from attnviz.runtime import open_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--folder", type=Path, default=Path("/tmp/attnviz-beam-bench-gpt2"))
    ap.add_argument("--models", nargs="+", default=["demo", "gpt2", "idefics3"])
    args = ap.parse_args()
    calls = {}
    if "demo" in args.models:
        demo = open_model(ROOT / "models" / "translation.onnx", provider="cpu")
        calls["demo"] = lambda k: demo.analyze(text=TEXT, generate=args.steps, beams=k)
    if "gpt2" in args.models:
        _, gpt2_file = gpt2_export(args.folder, args.steps, (256, 4, 8), "attnviz-beam-")
        gpt2 = open_model(gpt2_file, provider="cpu")
        gpt2.meta.setdefault("special", {}).pop("eos", None)  # every run makes exactly --steps tokens
        prompt = np.random.default_rng(0).integers(3, 99, (1, 8))  # the export script's vocabulary: 99
        calls["gpt2"] = lambda k: gpt2.analyze(
            feeds={"input_ids": prompt, "attention_mask": np.ones_like(prompt)}, generate=args.steps, beams=k
        )
    if "idefics3" in args.models:
        vlm, image = idefics3_folder(args.folder.with_name("attnviz-beam-bench-idefics3"))
        vlm.meta.setdefault("special", {}).pop("eos", None)
        calls["idefics3"] = lambda k: vlm.analyze(
            text="<s> <image> a photo of the cat", image=str(image), generate=args.steps, beams=k
        )
    for name in calls:  # warm: sessions made, the child started
        for k in args.beams:
            calls[name](k)
    per: dict[tuple[str, int], list[tuple[float, float]]] = {(n, k): [] for n in calls for k in args.beams}
    facts: dict[tuple[str, int], str] = {}
    for _ in range(args.rounds):
        for name, call in calls.items():
            for k in args.beams:
                t0, c0 = time.perf_counter(), cpu_s()
                r = call(k)
                wall, cpu = time.perf_counter() - t0, cpu_s() - c0
                steps = r.info.get("beam_steps") or len(r.info.get("generated_ids") or [])
                per[(name, k)].append((wall / steps, cpu / steps))
                facts[(name, k)] = f"{steps} steps, {r.info.get('generation')}, {r.batch_size} row(s)"
    print(f"per step, median of {args.rounds} interleaved rounds (ms wall / ms CPU)")
    for name in calls:
        base = statistics.median(w for w, _ in per[(name, args.beams[0])])
        base_c = statistics.median(c for _, c in per[(name, args.beams[0])])
        for k in args.beams:
            w = statistics.median(x for x, _ in per[(name, k)])
            c = statistics.median(x for _, x in per[(name, k)])
            print(
                f"{name:5s} K={k:<2d} {w * 1000:7.2f} / {c * 1000:7.2f}  "
                f"x{w / base:.2f} wall, x{c / base_c:.2f} CPU  ({facts[(name, k)]})"
            )


if __name__ == "__main__":
    main()
