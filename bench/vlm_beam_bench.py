"""``--beams K`` on a vision-language model: the decoder's KV cache reordered by the beams' parents
(``VLMCache.reorder``, :func:`attnviz.runtime.beams.cache_search`) vs re-running every running beam's whole
sequence (image tokens included) each step.

    OMP_NUM_THREADS=1 python bench/vlm_beam_bench.py [--rounds 7] [--beams 3] [--steps 12] [--folder DIR]

The tiny random-init LLaVA of ``tests/vlm_models.py`` with a 64 x 64 image of 8 x 8 patches: 64 image tokens
(hidden 32, 2 + 2 layers), built once into ``--folder``.  Each call is ``model.analyze(..., generate=N, beams=K,
use_cache=...)`` through the crash-isolation child (``ATTNVIZ_INPROCESS=1``: in this process) as the CLI runs it.
Per step = the search's own time (``generate_s``) over the steps run; the call's wall and CPU (this process and its
children) beside it.  Rounds alternate which runner goes first; medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from generation_plain_bench import cpu_s

PROMPT = "<s> <image> a photo of the cat"


def llava64(folder: Path) -> Path:
    import vlm_models as vm

    vm.IMAGE, vm.GRID, vm.N_IMAGE = 64, 8, 64  # 8 x 8 patches of 8 pixels: a 64-token image
    if not (folder / "onnx" / "decoder_model_merged.onnx").exists():
        vm.save_repo(folder)
    return folder


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--beams", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--folder", type=Path, default=None)
    a = ap.parse_args()
    import numpy as np
    from PIL import Image

    from attnviz.runtime import open_model

    repo = llava64(a.folder or Path(tempfile.mkdtemp(prefix="vlmbeam")) / "llava64")
    img = repo.parent / "photo.png"
    Image.fromarray((np.random.default_rng(3).random((48, 40, 3)) * 255).astype(np.uint8)).save(img)
    m = open_model(repo, provider="cpu")
    runners = {"kv-cache": True, "full re-run": False}
    for uc in runners.values():  # warm-up: sessions made, shapes learned
        m.analyze(text=PROMPT, image=str(img), generate=a.steps, beams=a.beams, use_cache=uc)
    got: dict[str, list[tuple[float, float, float]]] = {k: [] for k in runners}
    steps = {}
    for r in range(a.rounds):
        for name in list(runners)[:: 1 if r % 2 == 0 else -1]:
            c0, t0 = cpu_s(), time.perf_counter()
            res = m.analyze(text=PROMPT, image=str(img), generate=a.steps, beams=a.beams, use_cache=runners[name])
            wall, cpu = time.perf_counter() - t0, cpu_s() - c0
            assert res.info["generation"] == name
            steps[name] = res.info["beam_steps"]
            got[name].append((res.info["generate_s"] / steps[name], wall, cpu))
    med = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in got.items()}
    for k, (step, wall, cpu) in med.items():
        print(
            f"{k:12s} {steps[k]} steps: per step {step * 1e3:.2f} ms; call wall {wall * 1e3:.1f} ms, cpu {cpu * 1e3:.1f} ms"
        )
    c, f = med["kv-cache"], med["full re-run"]
    print(f"re-run / cache: per step {f[0] / c[0]:.2f}x, call wall {f[1] / c[1]:.2f}x, call cpu {f[2] / c[2]:.2f}x")


if __name__ == "__main__":
    main()
