"""The vision–language families attnviz opens, each in the decoder forms the Hub ships, against transformers
(issue 22, Done means: "a families table like the optimum zoo (each family × exporter: sites, max diff,
generation)").

    python bench/vlm_families.py [--rounds 7] [--threads 1] [--work DIR]

Models: the seeded tiny random-init models the tests build (tests/vlm_models.py, tests/idefics3_models.py,
tests/paligemma_models.py), each as a Hub repository with ``save_repo``; every family in these decoder forms:
- **merged**: optimum's If-merged ``decoder_model_merged.onnx`` (the prompt through the no-cache branch);
- **with-past**: the with-past decoder alone under the merged name (fed an empty cache), as some Hub exports;
- **int8**: ``_int8`` siblings of the merged repository's three files (onnxruntime's ``quantize_dynamic``, QInt8
  weights), opened with ``--variant int8``.
PaliGemma has two decoders: the Hub's (the language model alone, no ``token_type_ids``: causal, which attnviz says
in one line) and one exported with ``token_type_ids`` (the prefix mask in the graph); each in the forms above.

Input: the sample image (resources/samples/captioning.png) and a caption, through attnviz's preprocessing.
Columns: **sites** attnviz finds (vision + decoder); **max |Δ|**: the largest difference of any map from
transformers' eager ``output_attentions`` of the whole fp32 model on the same pixel values and ids (the vision
tower's layers the export keeps, Idefics3's per tile; every decoder layer; PaliGemma with the processor's
``token_type_ids``, i.e. the model's own mask); **greedy**: 4 greedy tokens (EOS off) equal to transformers'
``generate`` on the processor's inputs; **maps / plain**: median wall time of ``analyze(feeds=...)`` (every map)
against plain onnxruntime on the same three files and arrays (vision, embeddings, splice, decoder with an empty
cache: logits only), one thread each, rounds interleaved; ratio per round, median.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's attnviz, not an installed one
sys.path.insert(0, str(ROOT / "tests"))  # the tests' model builders
SAMPLE = ROOT / "resources" / "samples" / "captioning.png"
GENERATE = 4


@dataclass
class Form:
    family: str
    form: str
    repo: Path
    variant: str | None = None
    prefix_mask: bool = True  # PaliGemma: the decoder takes token_type_ids


# --------------------------------------------------------------------------- the repositories
def quantized(repo: Path, out: Path) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    shutil.copytree(repo, out)
    for f in ("vision_encoder", "embed_tokens", "decoder_model_merged"):
        quantize_dynamic(out / "onnx" / f"{f}.onnx", out / "onnx" / f"{f}_int8.onnx", weight_type=QuantType.QInt8)
    return out


def with_past(repo: Path, out: Path, export) -> Path:
    """The repository with its decoder replaced by the with-past file alone (``export(path)`` writes it)."""
    shutil.copytree(repo, out)
    export(out / "onnx" / "decoder_model_merged.onnx")
    return out


def build_forms(work: Path) -> tuple[list[Form], dict]:
    import idefics3_models as im
    import paligemma_models as pm
    import torch
    import vlm_models as vm

    models = {"llava": vm.build(), "idefics3": im.build(), "paligemma": pm.build()}
    ids = torch.tensor([[2, 5, 6, 7]])
    forms: list[Form] = []
    llava = vm.save_repo(work / "llava" / "tiny-llava")
    forms += [
        Form("llava", "merged", llava),
        Form("llava", "with-past", vm.save_repo(work / "llava-past" / "tiny-llava", merged=False)),
        Form("llava", "int8", quantized(llava, work / "llava-int8" / "tiny-llava"), "int8"),
    ]
    idefics = im.save_repo(work / "idefics3" / "tiny-idefics3")
    forms += [
        Form("idefics3", "merged", idefics),
        Form(
            "idefics3",
            "with-past",
            with_past(
                idefics,
                work / "idefics3-past" / "tiny-idefics3",
                lambda p: vm._export_decoder(models["idefics3"], ids, p, with_past=True, layers=im.LAYERS),
            ),
        ),
        Form("idefics3", "int8", quantized(idefics, work / "idefics3-int8" / "tiny-idefics3"), "int8"),
    ]
    for prefix in (False, True):
        name = "paligemma" + (" (token_type_ids)" if prefix else " (Hub: no token_type_ids)")
        repo = pm.save_repo(work / f"pg-{prefix}" / "tiny-paligemma", prefix=prefix)

        def export(p, prefix=prefix):
            if prefix:
                pm._export_prefix_decoder(models["paligemma"], ids, p, with_past=True)
            else:
                vm._export_decoder(models["paligemma"], ids, p, with_past=True, layers=pm.LAYERS)

        forms += [
            Form(name, "merged", repo, prefix_mask=prefix),
            Form(
                name, "with-past", with_past(repo, work / f"pg-{prefix}-past" / "tiny-paligemma", export), None, prefix
            ),
            Form(name, "int8", quantized(repo, work / f"pg-{prefix}-int8" / "tiny-paligemma"), "int8", prefix),
        ]
    return forms, models


# --------------------------------------------------------------------------- transformers' side
def reference(f: Form, model, m, caption: str):
    """(transformers' eager maps in attnviz's site order, or per-tile for Idefics3's vision; greedy tokens)."""
    import idefics3_models as im
    import paligemma_models as pm
    import torch
    import vlm_models as vm
    from PIL import Image

    from attnviz.runtime import builders as bd
    from attnviz.runtime.request import AnalyzeRequest

    img = Image.open(SAMPLE).convert("RGB")
    prep = bd.prepare(m, AnalyzeRequest(text=caption, image=str(SAMPLE)))
    px, ids = prep.feeds["pixel_values"], np.asarray(prep.prompts, np.int64)
    if f.family == "llava":
        vision, decoder, _ = vm.reference(model, px, ids)
        enc = {"input_ids": ids, "pixel_values": px, "attention_mask": np.ones_like(ids)}
    elif f.family == "idefics3":
        enc = dict(im.processor(f.repo)(text=[caption], images=[[img]], return_tensors="np"))
        vision, decoder, _ = im.reference(model, enc)
    else:
        vision, decoder, _ = pm.reference(model, px, ids, token_type_ids=pm.token_types(ids))
        enc = dict(pm.processor(f.repo)(text=caption, images=img, return_tensors="np"))
    with torch.no_grad():
        t = {k: torch.as_tensor(np.asarray(v)) for k, v in enc.items()}
        out = model.generate(**t, max_new_tokens=GENERATE, do_sample=False, eos_token_id=None)
    return vision, decoder, out[0, t["input_ids"].shape[1] :].tolist(), prep


def max_diff(r, vision, decoder) -> float:
    enc = [i for i, s in enumerate(r.sites) if s.stack == "encoder"]
    dec = [i for i, s in enumerate(r.sites) if s.stack == "decoder"]
    diffs = [float(np.abs(r.maps[i].array() - want).max()) for i, want in zip(dec, decoder, strict=True)]
    for i, want in zip(enc, vision):
        a = r.maps[i].array()
        if a.shape == want.shape:
            diffs.append(float(np.abs(a - want).max()))
        else:  # Idefics3: the tiles' maps on the diagonal of one block, transformers' one per tile
            n, p = want.shape[0], want.shape[-1]
            diffs += [
                float(np.abs(a[0, :, k * p : (k + 1) * p, k * p : (k + 1) * p] - want[k]).max()) for k in range(n)
            ]
    return max(diffs)


# --------------------------------------------------------------------------- plain onnxruntime
class Plain:
    """The three files on onnxruntime alone, logits only: what a careful user writes for this family."""

    def __init__(self, f: Form, threads: int):
        import json

        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")  # attnviz's setting: same footing
        suffix = f"_{f.variant}" if f.variant else ""
        self.vision, self.embed, self.decoder = (
            ort.InferenceSession(str(f.repo / "onnx" / f"{n}{suffix}.onnx"), so, providers=["CPUExecutionProvider"])
            for n in ("vision_encoder", "embed_tokens", "decoder_model_merged")
        )
        cfg = json.loads((f.repo / "config.json").read_text())
        self.token = cfg.get("image_token_index", cfg.get("image_token_id"))
        self.first_position = 1 if cfg["model_type"] == "paligemma" else 0  # PaliGemma counts from 1
        text = cfg["text_config"]
        self.kv = text.get("num_key_value_heads") or text["num_attention_heads"]
        self.dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]

    def caption(self, px: np.ndarray, ids: np.ndarray) -> np.ndarray:
        vf = {"pixel_values": px}
        if any(i.name == "pixel_attention_mask" for i in self.vision.get_inputs()):  # Idefics3: every tile real
            vf["pixel_attention_mask"] = np.ones((*px.shape[:2], *px.shape[3:]), bool)
        feats = self.vision.run(None, vf)[0]
        emb = self.embed.run(None, {"input_ids": ids})[0]
        emb[ids == self.token] = feats.reshape(-1, feats.shape[-1])
        t = ids.shape[1]
        feeds = {}
        for i in self.decoder.get_inputs():
            if i.name == "inputs_embeds":
                feeds[i.name] = emb
            elif i.name == "attention_mask":
                feeds[i.name] = np.ones_like(ids)
            elif i.name == "position_ids":
                feeds[i.name] = np.arange(self.first_position, self.first_position + t, dtype=np.int64)[None]
            elif i.name == "token_type_ids":  # the prompt is all prefix: image and text attend both ways
                feeds[i.name] = np.zeros_like(ids)
            elif i.name == "use_cache_branch":
                feeds[i.name] = np.array([False])
            elif i.name.startswith("past_key_values"):
                feeds[i.name] = np.zeros((1, self.kv, 0, self.dim), np.float32)
        return self.decoder.run(["logits"], feeds)[0]


# --------------------------------------------------------------------------- the table
def measure(f: Form, model, rounds: int, threads: int, caption: str) -> dict:
    from attnviz.runtime import open_model

    m = open_model(f.repo, provider="cpu", threads=threads, **({"variant": f.variant} if f.variant else {}))
    vision, decoder, want_tokens, prep = reference(f, model, m, caption)
    r = m.analyze(text=caption, image=str(SAMPLE))
    g = m.analyze(text=caption, image=str(SAMPLE), generate=GENERATE)
    px, ids = prep.feeds["pixel_values"], np.asarray(prep.prompts, np.int64)
    feeds = {"pixel_values": px, "input_ids": ids, "attention_mask": np.ones_like(ids)}
    plain = Plain(f, threads)
    assert np.abs(plain.caption(px, ids) - m.analyze(feeds=feeds).outputs["logits"]).max() < 1e-3, f
    cases = {"attnviz": lambda: m.analyze(feeds=feeds), "plain": lambda: plain.caption(px, ids)}
    for go in cases.values():
        go()
    wall: dict[str, list[float]] = {k: [] for k in cases}
    for i in range(rounds):
        for k in list(cases) if i % 2 == 0 else list(cases)[::-1]:
            t0 = time.perf_counter()
            cases[k]()
            wall[k].append((time.perf_counter() - t0) * 1e3)
    n_vis = sum(s.stack == "encoder" for s in r.sites)
    return {
        "sites": f"{n_vis} + {len(r.sites) - n_vis}",
        "max_diff": max_diff(r, vision, decoder),
        "greedy": g.info["generated_ids"] == want_tokens,
        "attnviz_ms": statistics.median(wall["attnviz"]),
        "plain_ms": statistics.median(wall["plain"]),
        "ratio": statistics.median(np.array(wall["attnviz"]) / np.array(wall["plain"])),
        "tokens": ids.shape[1],
        "fidelity": bool(r.info.get("fidelity")),
    }


CAPTIONS = {"llava": "<s> <image> a photo of the cat", "idefics3": "<s> <image> a photo of the cat"}
PALIGEMMA_CAPTION = "<image>a photo of the cat"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--work", help="folder for the repositories (default: a new temporary one)")
    a = ap.parse_args()
    import warnings

    warnings.filterwarnings("ignore")
    work = Path(a.work or tempfile.mkdtemp(prefix="attnviz-vlm-families-"))
    t0 = time.perf_counter()
    forms, models = build_forms(work)
    print(f"built {len(forms)} repositories in {time.perf_counter() - t0:.0f} s under {work}", flush=True)
    load0 = os.getloadavg()
    rows = []
    for f in forms:
        fam = f.family.split()[0]
        rows.append((f, measure(f, models[fam], a.rounds, a.threads, CAPTIONS.get(fam, PALIGEMMA_CAPTION))))
        print(f.family, f.form, rows[-1][1], flush=True)
    load1 = os.getloadavg()
    print(
        f"\ntiny random-init models, the sample image; {a.threads} thread(s), CPU, median of {a.rounds} interleaved "
        f"rounds; load average {load0[0]:.1f} -> {load1[0]:.1f}\n"
    )
    print(
        "| family | decoder | sites (vision + decoder) | tokens | max \\|Δ\\| vs eager | greedy = transformers' | "
        "maps | plain | ratio |"
    )
    print("|---|---|---|---:|---:|---|---:|---:|---:|")
    for f, r in rows:
        note = " (said: causal)" if r["fidelity"] else ""
        print(
            f"| {f.family} | {f.form} | {r['sites']} | {r['tokens']} | {r['max_diff']:.1e}{note} | "
            f"{'yes' if r['greedy'] else 'no'} | {r['attnviz_ms']:.1f} ms | {r['plain_ms']:.1f} ms | "
            f"{r['ratio']:.2f}× |"
        )


if __name__ == "__main__":
    main()
