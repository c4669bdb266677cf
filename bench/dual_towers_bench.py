"""A dual encoder's N images × M texts: the towers fed apart (each image and each text run once) vs the pairs as rows
(each image repeated once per text, every text once per image: attnviz before dualtower27).

    python bench/dual_towers_bench.py [--images 4] [--texts 8] [--rounds 5] [--big] [--out DIR]

Models: the tests' tiny random-init CLIP and SigLIP (tests/hf_models.py: hidden 32, 2 + 2 layers, 4 heads, 32 px
images) and, with ``--big``, a random-init CLIPModel of ViT-B/32 shapes (vision 768 × 12 layers, 12 heads, 224 px,
patch 32; text 512 × 12 layers, 8 heads; 126 M parameters, a 504 MB export made once under ``--out``).  Each call
is ``model.analyze(image=[...], text=[...])`` through the crash-isolation child, as extract, open and figure run it,
after one warm call; the rows' way is the same code with ``dual_towers.fed_apart`` answering False.  Wall: the
median call; CPU: this process and its children over the rounds, a call's mean (psutil's times tick at 10 ms);
held: the result's maps' bytes (``DenseMap.held``); diff: the largest difference of any map, score or output.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

TEXTS = ["the cat sat on mat", "a dog ran", "blue", "the dog sat", "a cat ran on the mat", "mat", "blue cat", "a dog"]


def _cpu() -> float:
    import psutil

    me = psutil.Process()
    return sum(t.user + t.system for t in (p.cpu_times() for p in [me, *me.children(recursive=True)]))


def _tiny(arch: str, out: Path) -> Path:
    import dual_cache
    import hf_models

    folder = out / arch
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.onnx").write_bytes(dual_cache.export_dual(arch, "model", out).read_bytes())
    hf_models.word_tokenizer(99, bert_style=False).save_pretrained(str(folder))
    return folder / "model.onnx"


def _big(out: Path) -> Path:
    folder = out / "clip_b32"
    if (folder / "model.onnx").exists():
        return folder / "model.onnx"
    import hf_models
    import torch
    import transformers as T

    from attnviz.training.hf_onnx import onnx_export

    torch.manual_seed(0)
    text = dict(vocab_size=99, hidden_size=512, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=8)
    text |= dict(max_position_embeddings=77, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    vision = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12)
    vision |= dict(image_size=224, patch_size=32)
    m = T.CLIPModel(T.CLIPConfig(text_config=text, vision_config=vision, projection_dim=512))
    m.set_attn_implementation("eager")
    m.eval()
    kw = hf_models.dual_inputs()
    kw["pixel_values"] = torch.randn(2, 3, 224, 224)
    folder.mkdir(parents=True, exist_ok=True)
    onnx_export(m, kw, "logits_per_image", folder / "model.onnx")
    hf_models.word_tokenizer(99, bert_style=False).save_pretrained(str(folder))
    return folder / "model.onnx"


def _images(n: int, size: int, out: Path) -> list[str]:
    from PIL import Image

    paths = []
    for k in range(n):
        p = out / f"img{size}_{k}.png"
        px = np.random.default_rng(10 + k).integers(0, 256, (size, size, 3), dtype=np.uint8)
        Image.fromarray(px).save(p)
        paths.append(str(p))
    return paths


def _measure(model, images, texts, rounds: int, apart: bool):
    from attnviz.runtime import dual_towers

    with mock.patch.object(dual_towers, "fed_apart", dual_towers.fed_apart if apart else lambda model: False):
        res = model.analyze(image=images, text=texts)  # warm
        walls, c0 = [], _cpu()
        for _ in range(rounds):
            t0 = time.perf_counter()
            res = model.analyze(image=images, text=texts)
            walls.append(time.perf_counter() - t0)
        cpu = (_cpu() - c0) / rounds
    return res, statistics.median(walls), cpu


def _diff(a, b) -> float:
    d = [float(np.abs(x.array().astype(np.float64) - y.array()).max()) for x, y in zip(a.maps, b.maps)]
    d += [float(np.abs(np.asarray(a.outputs[k], np.float64) - b.outputs[k]).max()) for k in a.outputs]
    d.append(max(abs(p - q) for p, q in zip(a.info["text_scores"]["scores"], b.info["text_scores"]["scores"])))
    return max(d)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=4)
    ap.add_argument("--texts", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--big", action="store_true", help="also a random-init CLIP of ViT-B/32 shapes (504 MB)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/attnviz_dual_towers_bench"))
    a = ap.parse_args()
    from attnviz.runtime import open_model

    a.out.mkdir(parents=True, exist_ok=True)
    models = [("tiny CLIP", _tiny("clip", a.out), 32), ("tiny SigLIP", _tiny("siglip", a.out), 32)]
    if a.big:
        models.append(("CLIP ViT-B/32 shapes", _big(a.out), 224))
    texts = TEXTS[: a.texts]  # (at most 8)
    print(f"{a.images} images x {len(texts)} texts, {a.rounds} rounds")
    print("| model | way | wall (median) | CPU (mean) | maps held | max diff |")
    print("|---|---|---|---|---|---|")
    for name, path, size in models:
        model = open_model(path, provider="cpu")
        images = _images(a.images, size, a.out)
        rows, rw, rc = _measure(model, images, texts, a.rounds, apart=False)
        apart, aw, ac = _measure(model, images, texts, a.rounds, apart=True)
        for way, res, w, c in (("pairs as rows", rows, rw, rc), ("towers apart", apart, aw, ac)):
            held = sum(getattr(m, "nbytes", 0) for m in res.maps) / 2**20
            diff = f"{_diff(apart, rows):.1e}" if way == "towers apart" else ""
            print(f"| {name} | {way} | {w * 1e3:.1f} ms | {c * 1e3:.1f} ms | {held:.2f} MiB | {diff} |", flush=True)


if __name__ == "__main__":
    main()
