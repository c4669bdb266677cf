"""Peak memory of ``attnviz extract`` and of drawing its file for one prompt's two images of different sizes
(Qwen2-VL: each image resized to its own size, a tower run each), whose tower maps were laid out as one dense
block-diagonal ``[ΣP, ΣP]`` before towerhead17 and are kept as frames of two sizes since (a ``FramesMap``).

    python bench/sized_frames_bench.py [--root DIR ...]

The model: tests/qwen2vl_models.py's tiny random-init Qwen2-VL (4 heads, 2 layers, 8-pixel patches) with its
processor's ``longest_edge`` raised so that the two images keep their sizes: 384 x 512 (3,072 patches) and
320 x 384 (1,920).  Each ``--root`` (a checkout: its code runs the command) runs ``python -m attnviz.cli extract``
under ``/usr/bin/time -v`` (maximum resident set of the largest process, wall), then opens the file in a process of
its own and draws the thumbnails, Image regions of image 2 with the tower's attention (every patch's mean) and the
Head map as the window draws it (``head_map`` where the code has it, else ``compute_map``): ``ru_maxrss`` after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "<|vision_start|><|image_pad|><|vision_end|>dog<|vision_start|><|image_pad|><|vision_end|>where the cat"
SIZES = {"big1.png": (384, 512), "big2.png": (320, 384)}

VIEW = """
import resource, sys, time
t0 = time.perf_counter()
from attnviz.core import io, view as v
r = io.load_npz(sys.argv[1])
sel = v.Selection(mode="mean")
v.thumbnails(r, sel)
ov = v.overlay_view(r, sel.with_(image_from="tower", picture=1, query=-1))
(getattr(v, "head_map", None) or v.compute_map)(r, sel)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, time.perf_counter() - t0, ov.peak)
"""


def build(cache: Path) -> Path:
    repo = cache / "qwen2vl-big"
    if (repo / "onnx").exists():
        return repo
    sys.path.insert(0, str(ROOT / "tests"))
    import numpy as np
    import qwen2vl_models as qm
    import vlm_build as vb
    from PIL import Image

    vb.cached_repo(qm.save_repo, repo)
    pre = repo / "preprocessor_config.json"
    cfg = json.loads(pre.read_text())
    cfg["size"]["longest_edge"] = 1024 * 1024  # pixels: the images keep their own sizes
    pre.write_text(json.dumps(cfg))
    for name, hw in SIZES.items():
        Image.fromarray((np.random.default_rng(1).random((*hw, 3)) * 255).astype(np.uint8)).save(cache / name)
    return repo


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", action="append", default=[], help="a checkout to run (default: this one)")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "attnviz-sized-bench"))
    a = ap.parse_args()
    cache = Path(a.cache)
    cache.mkdir(parents=True, exist_ok=True)
    repo = build(cache)
    patches = [h * w // 64 for h, w in SIZES.values()]
    dense = 2 * 4 * sum(patches) ** 2 * 4 / 2**20
    own = 2 * 4 * sum(p * p for p in patches) * 4 / 2**20
    print(f"tower: images of {patches} patches, 4 heads, 2 layers; dense {dense:,.0f} MB, frames {own:,.0f} MB")
    for root in a.root or [str(ROOT)]:
        d = Path(tempfile.mkdtemp())
        out = d / "out.npz"
        env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1", MPLBACKEND="Agg")
        cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "attnviz.cli", "extract", str(repo), "--text", PROMPT]
        cmd += [x for name in SIZES for x in ("--image", str(cache / name))] + ["--out", str(out)]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=root)
        rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
        wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", p.stderr)
        said = (p.stdout or p.stderr).strip().splitlines()[0][:160] if (p.stdout or p.stderr).strip() else ""
        print(
            f"  {root}: extract rc {p.returncode}, max RSS {int(rss[1]) / 1024 if rss else 0:,.0f} MB, "
            f"wall {wall[1] if wall else '?'}, file {out.stat().st_size / 2**20 if out.exists() else 0:,.1f} MB; {said}"
        )
        if p.returncode == 0:
            q = subprocess.run(
                [sys.executable, "-c", VIEW, str(out)], env=env, capture_output=True, text=True, cwd=root
            )
            print(f"    opened and drawn: {q.stdout.strip() or q.stderr.strip().splitlines()[-1][:160]}")
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
