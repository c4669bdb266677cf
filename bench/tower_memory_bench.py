"""Peak memory of ``attnviz extract`` on an Idefics3 / SmolVLM vision encoder opened alone, at SmolVLM's frame and
patch counts with a tiny width (towermem16).

    python bench/tower_memory_bench.py [--heads 2] [--layers 1] [--tiles 4] [--root DIR ...] [--view]

The tower: tests/idefics3_models.py's random-init Idefics3 with a 512-pixel tile and 16-pixel patches (1,024
patches a frame, as SmolVLM's), ``--heads`` heads of width 8, ``--layers`` layers, the processor splitting an image
into at most ``--tiles`` × ``--tiles`` tiles plus the global image (4: 17 frames, 17,408 keys).  The image is a
square of ``--tiles`` tiles a side, so it splits into all of them.  Each ``--root`` (a checkout: its code runs the
command, e.g. /work/main for the code before) runs ``python -m attnviz.cli extract REPO/onnx/vision_encoder.onnx
--image X --out OUT.npz`` under ``/usr/bin/time -v``: its maximum resident set (the largest single process of the
command and the crash-isolation child it waits for), its wall time, and the file's size.  A dense map of the
tower's keys is ``heads × (frames · 1024)² × 4`` bytes a layer; the frames' maps are ``frames × heads × 1024² × 4``.
``--view``: the file is then opened and drawn in a process of its own (:data:`VIEW`: the overview's thumbnails,
Image regions, mean over heads, and its figure; then the Head map as the window draws it, ``head_map`` where the
code has it — one frame — else ``compute_map``; then the whole token map), its ``ru_maxrss`` after each.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TILE, PATCH = 512, 16


def build(repo: Path, heads: int, layers: int, tiles: int) -> Path:
    """The tower's repository (config, processor, the three ONNX files), built once per size."""
    if (repo / "onnx" / "vision_encoder.onnx").exists():
        return repo
    import json

    sys.path.insert(0, str(ROOT / "tests"))
    import idefics3_models as im
    import torch
    import vlm_build as vb

    im.TILE, im.PATCH, im.HEADS, im.HIDDEN, im.LAYERS = TILE, PATCH, heads, 8 * heads, layers
    im.SIDE = TILE // PATCH // im.SCALE
    im.N_TILE = im.SIDE * im.SIDE
    im.LONGEST = tiles * TILE
    m = im.build()  # the vision file alone is exported (the tower is what is measured)
    onnx_dir = vb.start_repo(repo, m, im.tokenizer(), im.image_processor())
    (repo / "processor_config.json").write_text(json.dumps({"image_seq_len": im.N_TILE}))
    px = torch.randn(1, 2, 3, TILE, TILE, generator=torch.Generator().manual_seed(1))
    mask = torch.ones(1, 2, TILE, TILE, dtype=torch.bool)
    axes = {"pixel_values": {0: "batch", 1: "images"}, "pixel_attention_mask": {0: "batch", 1: "images"}}
    axes["image_features"] = {0: "real_images"}
    vb.export_vision(im._Vision(m), (px, mask), onnx_dir, ["pixel_values", "pixel_attention_mask"], axes)
    return repo


def image(path: Path, tiles: int) -> Path:
    import numpy as np
    from PIL import Image

    side = tiles * TILE
    Image.fromarray((np.random.default_rng(0).random((side, side, 3)) * 255).astype(np.uint8)).save(path)
    return path


def extract(root: Path, model: Path, picture: Path, out: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="2")
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "attnviz.cli", "extract", str(model)]
    cmd += ["--image", str(picture), "--out", str(out)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=root)
    err = p.stderr

    def field(name: str) -> str:
        m = re.search(rf"{re.escape(name)}: (.+)", err)
        return m.group(1).strip() if m else "?"

    said = (p.stdout.strip().splitlines() or [""])[0] if p.returncode == 0 else err.strip().splitlines()[0]
    return {
        "rc": p.returncode,
        "max_rss_mb": int(field("Maximum resident set size (kbytes)")) / 1024 if p.returncode != 127 else 0,
        "wall": field("Elapsed (wall clock) time (h:mm:ss or m:ss)"),
        "file_mb": out.stat().st_size / 2**20 if out.exists() else 0.0,
        "said": said[:200],
    }


# the window's first draw of the file, in a process of its own: the overview's thumbnails, Image regions (mean over
# heads, every patch's row, then one patch's row) and its figure; the peak then (what drawing Image regions holds),
# and again after the token map (mean over heads: the whole [Tq, Tk], laid out when the user opens the Head map)
VIEW = """
import resource, sys, time
t0 = time.perf_counter()
from attnviz.core import io, view as v
from attnviz.figures import figure_bytes, render_figure
r = io.load_npz(sys.argv[1])
sel = v.Selection(mode="mean")
v.thumbnails(r, sel)
ov = v.overlay_view(r, sel)
v.overlay_view(r, sel.with_(query=40))
figure_bytes(render_figure(r, "image", sel))
drawn, t1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, time.perf_counter() - t0
# the Head map as the window draws it (its session's current_map): head_map where the code has it (one frame)
(getattr(v, "head_map", None) or v.compute_map)(r, sel)
head, t2 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, time.perf_counter() - t0
v.compute_map(r, sel)
print(drawn, t1, head, t2, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, time.perf_counter() - t0, ov.peak)
"""


def view(root: Path, npz: Path) -> str:
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="2", MPLBACKEND="Agg")
    p = subprocess.run([sys.executable, "-c", VIEW, str(npz)], env=env, capture_output=True, text=True, cwd=root)
    if p.returncode:
        return f"failed: {(p.stderr.strip().splitlines() or [''])[-1][:160]}"
    rss, wall, rss_head, wall_head, rss_map, wall_map, peak = p.stdout.split(maxsplit=6)
    return (
        f"thumbnails + Image regions + its figure: max RSS {float(rss):,.0f} MB, {float(wall):.1f} s; then the Head "
        f"map: max RSS {float(rss_head):,.0f} MB, {float(wall_head):.1f} s; then the whole token map (compute_map): "
        f"max RSS {float(rss_map):,.0f} MB, {float(wall_map):.1f} s; {peak.strip()}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--heads", type=int, default=2, help="at least 2 (the tiny decoder's 2 key-value heads)")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--tiles", type=int, default=4)
    ap.add_argument("--root", action="append", default=[], help="a checkout to run (default: this one)")
    ap.add_argument("--view", action="store_true", help="also open each file and draw it (peak RSS)")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "attnviz-tower-bench"))
    a = ap.parse_args()
    repo = build(Path(a.cache) / f"h{a.heads}-l{a.layers}-t{a.tiles}", a.heads, a.layers, a.tiles)
    picture = image(Path(a.cache) / f"square-{a.tiles}.png", a.tiles)
    frames, keys = a.tiles * a.tiles + 1, (TILE // PATCH) ** 2
    dense = a.layers * a.heads * (frames * keys) ** 2 * 4 / 2**20
    own = a.layers * frames * a.heads * keys * keys * 4 / 2**20
    print(f"tower: {frames} frames x {keys} patches, {a.heads} heads, {a.layers} layers")
    print(f"  maps laid out dense: {dense:,.0f} MB; the frames' own maps: {own:,.0f} MB")
    for root in a.root or [str(ROOT)]:
        with tempfile.TemporaryDirectory() as d:
            r = extract(Path(root), repo / "onnx" / "vision_encoder.onnx", picture, Path(d) / "out.npz")
            print(
                f"  {root}: extract rc {r['rc']}, max RSS {r['max_rss_mb']:,.0f} MB, wall {r['wall']}, "
                f"file {r['file_mb']:,.1f} MB; {r['said']}"
            )
            if a.view and r["rc"] == 0:
                print(f"    the file opened and drawn: {view(Path(root), Path(d) / 'out.npz')}")


if __name__ == "__main__":
    main()
