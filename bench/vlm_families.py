"""The vision–language families attnviz opens, each from two exporters and in the decoder forms the Hub ships,
against transformers (issue 22, Done means: "a families table like the optimum zoo (each family × exporter: sites,
max diff, generation)").

    python bench/vlm_families.py [--families llava idefics3 paligemma qwen2vl qwen25vl]
        [--exporters tests export-hf] [--forms merged with-past int8] [--rounds 7] [--threads 1] [--image PNG]
        [--work DIR]

Models: the seeded tiny random-init models the tests build (tests/vlm_models.py, idefics3_models.py,
paligemma_models.py, qwen2vl_models.py, qwen25vl_models.py), the same weights through two exporters:
- **tests**: the builder's ``save_repo``, the Hub's layout as the runtime's tests export it (torch.onnx of each
  part, optimum's If-merge);
- **export-hf**: ``attnviz export-hf`` on the model, tokenizer and image processor as ``save_pretrained`` writes
  them (a Hub download's folder), as tests/training/test_export_hf_vlm*.py do; a family it has no recipe for is
  a row whose note is its one-line refusal.
Decoder forms:
- **merged**: ``decoder_model_merged.onnx`` as the exporter writes it (the prompt through the no-cache branch);
- **with-past** (tests only): the with-past decoder alone under the merged name (fed an empty cache), as some Hub
  exports;
- **int8**: ``_int8`` siblings of the merged repository's three files (onnxruntime's ``quantize_dynamic``, QInt8
  weights), opened with ``--variant int8``.
PaliGemma from the tests' exporter comes twice: the Hub's decoder (the language model alone, no
``token_type_ids``: causal, which attnviz says in one line) and one exported with ``token_type_ids``.

Input: the sample image (resources/samples/captioning.png, 64 × 64; ``--image`` another) and a caption, through
attnviz's preprocessing.
Columns: **sites** attnviz finds (vision + decoder); **max |Δ|**: the largest difference of any map from
transformers' eager attention of the whole fp32 model on the same pixel values and ids, vision and decoder apart
(the vision layers the export keeps — Idefics3's per tile, Qwen's recorded through transformers' attention
interface; every decoder layer; PaliGemma with the processor's ``token_type_ids``, i.e. the model's own mask);
**image grid**: the grid attnviz places the decoder's image-token keys on, and whether every cell's key is where
the processor's ids put it (Idefics3: each tile's run after its ``<row_r_col_c>`` marker, the global image's after
``<global-img>``; Qwen: ``image_grid_thw`` / merge, row by row);
**greedy**: 4 greedy tokens (EOS off) equal to transformers' ``generate`` on the processor's inputs (where they
differ, the note says whether they are the files' own: plain onnxruntime, the whole sequence each step); **maps /
plain**: median wall time of ``analyze(feeds=...)`` (every map) against plain onnxruntime on the same three files
and arrays (vision, embeddings, splice, decoder with an empty cache: logits only; Qwen's patches and M-RoPE
positions by attnviz's numpy functions), one thread each, rounds interleaved; ratio per round, median.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's attnviz, not an installed one
sys.path.insert(0, str(ROOT / "tests"))  # the tests' model builders
SAMPLE = ROOT / "resources" / "samples" / "captioning.png"
GENERATE = 4
PARTS = ("vision_encoder", "embed_tokens", "decoder_model_merged")
QWEN_PROMPT = "<|vision_start|><|image_pad|><|vision_end|>a photo of the cat"


@dataclass
class Form:
    family: str
    exporter: str
    form: str
    repo: Path | None  # None: the exporter refused the family (``note`` says how)
    variant: str | None = None
    label: str = ""  # PaliGemma's two decoders from the tests' exporter
    note: str = ""


# --------------------------------------------------------------------------- the repositories
def built(repo: Path, make: Callable[[Path], object]) -> Path:
    """REPO, made by ``make(repo)`` unless a earlier run under the same --work left it complete."""
    if not (repo / "onnx" / "decoder_model_merged.onnx").is_file():
        shutil.rmtree(repo, ignore_errors=True)
        make(repo)
    return repo


def quantized(repo: Path, out: Path) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    def make(out: Path) -> None:
        import logging

        logging.getLogger().setLevel(logging.ERROR)  # quantize_dynamic's advice on every file
        shutil.copytree(repo, out)
        for f in PARTS:
            quantize_dynamic(out / "onnx" / f"{f}.onnx", out / "onnx" / f"{f}_int8.onnx", weight_type=QuantType.QInt8)

    if not (out / "onnx" / "decoder_model_merged_int8.onnx").is_file():
        shutil.rmtree(out, ignore_errors=True)
        make(out)
    return out


def with_past(repo: Path, out: Path, export: Callable[[Path], None]) -> Path:
    """The repository with its decoder replaced by the with-past file alone (``export(path)`` writes it)."""
    marker = out / "onnx" / "with-past"
    if not marker.is_file():
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(repo, out)
        export(out / "onnx" / "decoder_model_merged.onnx")
        marker.write_text("the decoder is the with-past file alone\n")
    return out


@dataclass
class Family:
    """One family's builder module and how its tests export it and save it for export-hf."""

    module: str
    save_repos: Callable[[Path], list[tuple[str, Path, Callable[[Path], None]]]]  # (label, repo, with-past export)
    source: Callable[[Path], None]  # save_pretrained as a Hub download holds the model
    caption: str
    generate_with_cache: bool = False  # transformers' generate needs use_cache on (M-RoPE's rope deltas)


def _ids():
    import torch

    return torch.tensor([[2, 5, 6, 7]])


def _llava_repos(work: Path):
    import vlm_models as vm

    repo = built(work / "llava" / "tiny-llava", vm.save_repo)
    return [("", repo, lambda p: vm._export_decoder(vm.build(), _ids(), p, with_past=True))]


def _llava_source(src: Path) -> None:
    import transformers
    import vlm_models as vm

    vm.build().save_pretrained(str(src))
    vm.tokenizer().save_pretrained(str(src))
    size = {"height": vm.IMAGE, "width": vm.IMAGE}
    transformers.CLIPImageProcessor(
        size=size, crop_size=size, do_center_crop=False, image_mean=vm.MEAN, image_std=vm.STD
    ).save_pretrained(str(src))


def _idefics3_repos(work: Path):
    import idefics3_models as im
    import vlm_models as vm

    repo = built(work / "idefics3" / "tiny-idefics3", im.save_repo)
    return [("", repo, lambda p: vm._export_decoder(im.build(), _ids(), p, with_past=True, layers=im.LAYERS))]


def _idefics3_source(src: Path) -> None:
    import idefics3_models as im

    im.build().save_pretrained(str(src))
    im.tokenizer().save_pretrained(str(src))
    im.image_processor().save_pretrained(str(src))
    (src / "processor_config.json").write_text(json.dumps({"image_seq_len": im.N_TILE}))


def _paligemma_repos(work: Path):
    import paligemma_models as pm
    import vlm_models as vm

    out = []
    for prefix in (False, True):

        def export(p: Path, prefix: bool = prefix) -> None:
            if prefix:
                pm._export_prefix_decoder(pm.build(), _ids(), p, with_past=True)
            else:
                vm._export_decoder(pm.build(), _ids(), p, with_past=True, layers=pm.LAYERS)

        repo = built(work / f"pg-{prefix}" / "tiny-paligemma", lambda r, prefix=prefix: pm.save_repo(r, prefix=prefix))
        out.append(("token_type_ids" if prefix else "Hub: no token_type_ids", repo, export))
    return out


def _paligemma_source(src: Path) -> None:
    import paligemma_models as pm

    pm.build().save_pretrained(str(src))
    pm.tokenizer().save_pretrained(str(src))
    pm.image_processor().save_pretrained(str(src))
    pre = json.loads((src / "preprocessor_config.json").read_text())
    (src / "preprocessor_config.json").write_text(json.dumps(pre | {"image_seq_length": pm.N_IMAGE}))


def _qwen_repos(name: str):
    def repos(work: Path):
        import qwen2vl_models as q2

        mod = __import__(FAMILIES[name].module)
        repo = built(work / name / f"tiny-{name}", mod.save_repo)
        return [("", repo, lambda p: q2._export_decoder(mod.build(), _ids(), p, with_past=True))]

    return repos


def _qwen_source(name: str):
    def source(src: Path) -> None:
        import qwen2vl_models as q2

        __import__(FAMILIES[name].module).build().save_pretrained(str(src))
        q2.tokenizer().save_pretrained(str(src))
        q2.image_processor().save_pretrained(str(src))

    return source


FAMILIES: dict[str, Family] = {
    "llava": Family("vlm_models", _llava_repos, _llava_source, "<s> <image> a photo of the cat"),
    "idefics3": Family("idefics3_models", _idefics3_repos, _idefics3_source, "<s> <image> a photo of the cat"),
    "paligemma": Family("paligemma_models", _paligemma_repos, _paligemma_source, "<image>a photo of the cat"),
    "qwen2vl": Family("qwen2vl_models", _qwen_repos("qwen2vl"), _qwen_source("qwen2vl"), QWEN_PROMPT, True),
    "qwen25vl": Family("qwen25vl_models", _qwen_repos("qwen25vl"), _qwen_source("qwen25vl"), QWEN_PROMPT, True),
}


def export_hf(name: str, work: Path) -> tuple[Path | None, str]:
    """``attnviz export-hf`` of the family's save_pretrained folder: (the exported repository, "") or (None, the
    one line it refused with)."""
    from attnviz.cli import main as cli

    out = work / f"{name}-export-hf" / f"tiny-{name}-onnx"
    if (out / "onnx" / "decoder_model_merged.onnx").is_file():
        return out, ""
    src = work / f"{name}-src" / f"tiny-{name}"
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(out.parent, ignore_errors=True)
    out.parent.mkdir(parents=True)
    FAMILIES[name].source(src)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = cli(["export-hf", str(src), "--out", str(out)])
    if rc != 0:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        said = (lines[-1] if lines else "(nothing said)").replace(str(src), "SRC")
        return None, f"export-hf exit {rc}: {said}"
    return out, ""


def build_forms(work: Path, families: list[str], exporters: list[str], forms: list[str]) -> list[Form]:
    out: list[Form] = []
    for name in families:
        fam = FAMILIES[name]
        if "tests" in exporters:
            for label, repo, export in fam.save_repos(work):
                tag = label.replace(" ", "").replace(":", "")
                if "merged" in forms:
                    out.append(Form(name, "tests", "merged", repo, label=label))
                if "with-past" in forms:
                    past = with_past(repo, work / f"{name}{tag}-past" / repo.name, export)
                    out.append(Form(name, "tests", "with-past", past, label=label))
                if "int8" in forms:
                    q = quantized(repo, work / f"{name}{tag}-int8" / repo.name)
                    out.append(Form(name, "tests", "int8", q, "int8", label=label))
        if "export-hf" in exporters:
            repo, note = export_hf(name, work)
            if repo is None:
                out.append(Form(name, "export-hf", "—", None, note=note))
                continue
            if "merged" in forms:
                out.append(Form(name, "export-hf", "merged", repo))
            if "int8" in forms:
                out.append(
                    Form(
                        name, "export-hf", "int8", quantized(repo, work / f"{name}-export-hf-int8" / repo.name), "int8"
                    )
                )
    return out


# --------------------------------------------------------------------------- transformers' side
def qwen2vl_vision(model, px, grid) -> list[np.ndarray]:
    """transformers' eager vision attention of every Qwen2-VL layer (one image: one chunk a layer)."""
    import qwen2vl_models as q2

    return q2.record_vision_attention(model, px, grid)


@dataclass
class Reference:
    vision: list[np.ndarray]  # Idefics3: one [tiles, H, p, p] a layer
    decoder: list[np.ndarray]
    generate: dict  # transformers' generate inputs (torch tensors)
    pixels: np.ndarray  # what attnviz feeds: the set's pixel_values
    ids: np.ndarray
    grid_thw: np.ndarray | None = None  # Qwen: the image processor's [1, 3]


def reference(f: Form, model, m, caption: str) -> Reference:
    import torch
    from PIL import Image

    from attnviz.runtime import builders as bd
    from attnviz.runtime.request import AnalyzeRequest

    img = Image.open(SAMPLE).convert("RGB")
    prep = bd.prepare(m, AnalyzeRequest(text=caption, image=str(SAMPLE)))
    px, ids = prep.feeds["pixel_values"], np.asarray(prep.prompts, np.int64)
    tensors = lambda d: {k: torch.as_tensor(np.asarray(v)) for k, v in d.items()}  # noqa: E731
    if f.family == "llava":
        import vlm_models as vm

        vision, decoder, _ = vm.reference(model, px, ids)
        gen = tensors({"input_ids": ids, "pixel_values": px, "attention_mask": np.ones_like(ids)})
    elif f.family == "idefics3":
        import idefics3_models as im

        enc = dict(im.processor(f.repo)(text=[caption], images=[[img]], return_tensors="np"))
        assert enc["input_ids"].tolist() == ids.tolist(), "attnviz's ids are not Idefics3Processor's"
        vision, decoder, _ = im.reference(model, enc)
        gen = tensors(enc)
    elif f.family == "paligemma":
        import paligemma_models as pm

        vision, decoder, _ = pm.reference(model, px, ids, token_type_ids=pm.token_types(ids))
        gen = tensors(dict(pm.processor(f.repo)(text=caption, images=img, return_tensors="np")))
    else:  # Qwen2-VL, Qwen2.5-VL: transformers' image processor's flattened patches and grid
        import qwen2vl_models as q2
        import qwen25vl_models as q5

        p = q2.image_processor()(images=img, return_tensors="np")
        flat, grid = p["pixel_values"], p["image_grid_thw"]
        assert ids[0].tolist() == q2.tokenizer()(q2.expand(caption, grid))["input_ids"], "ids are not the processor's"
        vision = (
            qwen2vl_vision(model, flat, grid) if f.family == "qwen2vl" else q5.vision_reference(model, flat, grid)[0]
        )
        _, decoder, _ = q2.reference(model, flat, grid, ids)
        t = torch.as_tensor(ids)
        gen = {
            "input_ids": t,
            "pixel_values": torch.as_tensor(flat),
            "image_grid_thw": torch.as_tensor(grid),
            "mm_token_type_ids": q2.image_types(t),
            "attention_mask": torch.ones_like(t),
        }
    return Reference(vision, decoder, gen, px, ids, grid if f.family.startswith("qwen") else None)


def greedy(model, kw: dict, with_cache: bool) -> list[int]:
    import torch

    if with_cache:  # Qwen: M-RoPE's rope deltas are computed on the prompt and kept in the cached generate
        model.model.rope_deltas = None
    old = model.config.use_cache
    model.config.use_cache = with_cache or old
    try:
        with torch.no_grad():
            out = model.generate(**kw, max_new_tokens=GENERATE, do_sample=False, eos_token_id=None)
    finally:
        model.config.use_cache = old
    return out[0, kw["input_ids"].shape[1] :].tolist()


def max_diffs(r, ref: Reference) -> tuple[float, float]:
    """(vision, decoder) largest |attnviz − transformers| over every map of each."""
    enc = [i for i, s in enumerate(r.sites) if s.stack == "encoder"]
    dec = [i for i, s in enumerate(r.sites) if s.stack == "decoder"]
    # LLaVA's vision file ends at vision_feature_layer (-2): its layers are transformers' first ones
    assert 0 < len(enc) <= len(ref.vision) and len(dec) == len(ref.decoder), (len(enc), len(ref.vision), len(dec))
    d = [float(np.abs(r.maps[i].array() - want).max()) for i, want in zip(dec, ref.decoder, strict=True)]
    v = []
    for i, want in zip(enc, ref.vision):
        a = r.maps[i].array()
        if a.shape == want.shape:
            v.append(float(np.abs(a - want).max()))
        else:  # Idefics3: the tiles' maps on the diagonal of one block, transformers' one per tile
            n, p = want.shape[0], want.shape[-1]
            v += [float(np.abs(a[0, :, k * p : (k + 1) * p, k * p : (k + 1) * p] - want[k]).max()) for k in range(n)]
    return max(v), max(d)


# --------------------------------------------------------------------------- the image grid
def processor_grid(family: str, ref: Reference) -> tuple[int, int, list[int], list[int]]:
    """(rows, cols, the key of each cell row-major, the global image's keys) as the processor lays the image tokens
    out in its ids: LLaVA / PaliGemma a square of the builder's patches, Qwen grid_thw's merge units row by row,
    Idefics3 each tile's run after its ``<row_r_col_c>`` marker and the global image's after ``<global-img>``."""
    row = ref.ids[0].tolist()
    if family == "idefics3":
        import idefics3_models as im

        v, side = im.vocab(), im.SIDE
        tiles = {(r, c): row.index(v[m]) for r, c, m in ((int(m[5]), int(m[11]), m) for m in im.MARKERS) if v[m] in row}
        rows, cols = max(r for r, _ in tiles) * side, max(c for _, c in tiles) * side
        keys = [
            tiles[R // side + 1, C // side + 1] + 1 + (R % side) * side + C % side
            for R in range(rows)
            for C in range(cols)
        ]
        first = row.index(v["<global-img>"]) + 1
        return rows, cols, keys, list(range(first, first + side * side))
    mod = __import__(FAMILIES[family].module)
    keys = [i for i, t in enumerate(row) if t == mod.IMAGE_TOKEN]
    if ref.grid_thw is not None:
        _, h, w = (int(x) for x in ref.grid_thw[0])
        return h // mod.MERGE, w // mod.MERGE, keys, []
    return mod.GRID, mod.GRID, keys, []


def grid_check(family: str, ref: Reference, g) -> str:
    """attnviz's grid of the decoder's image keys, and whether each cell's key is the processor's."""
    if g is None:
        return "none"
    rows, cols, keys, global_keys = processor_grid(family, ref)
    got = [g.key(r, c) for r in range(g.rows) for c in range(g.cols)]
    gg = g.global_grid
    got_global = [gg.key(r, c) for r in range(gg.rows) for c in range(gg.cols)] if gg is not None else []
    same = (g.rows, g.cols, got, got_global) == (rows, cols, keys, global_keys)
    shown = f"{g.rows}×{g.cols}" + (f" + global {gg.rows}×{gg.cols}" if gg is not None else "")
    return shown + (" = processor's" if same else f" ≠ processor's {rows}×{cols}")


# --------------------------------------------------------------------------- plain onnxruntime
class Plain:
    """The three files on onnxruntime alone, logits only: what a careful user writes for this family."""

    def __init__(self, f: Form, threads: int):
        import onnxruntime as ort

        assert f.repo is not None
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")  # attnviz's setting: same footing
        suffix = f"_{f.variant}" if f.variant else ""
        self.vision, self.embed, self.decoder = (
            ort.InferenceSession(str(f.repo / "onnx" / f"{n}{suffix}.onnx"), so, providers=["CPUExecutionProvider"])
            for n in PARTS
        )
        cfg = json.loads((f.repo / "config.json").read_text())
        self.token = cfg.get("image_token_index", cfg.get("image_token_id"))
        self.first_position = 1 if cfg["model_type"] == "paligemma" else 0  # PaliGemma counts from 1
        vis = cfg["vision_config"]
        # Qwen: the processor's flattened patches and image_grid_thw in, M-RoPE positions [3, B, T] to the decoder
        self.qwen = (
            (vis["patch_size"], vis["spatial_merge_size"], vis["temporal_patch_size"])
            if any(i.name == "image_grid_thw" for i in self.vision.get_inputs())
            else None
        )
        text = cfg["text_config"]
        self.kv = text.get("num_key_value_heads") or text["num_attention_heads"]
        self.dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]

    def caption(self, px: np.ndarray, ids: np.ndarray, prompt: int | None = None) -> np.ndarray:
        """Logits of the whole sequence with an empty cache; tokens from ``prompt`` on are generated ones
        (PaliGemma: suffix, token type 1)."""
        from attnviz.runtime.vlm_families.qwen2vl import patchify, rope_index

        mask = np.ones_like(ids)
        if self.qwen:
            patch, merge, temporal = self.qwen
            flat, thw = patchify(px[0], patch, merge, temporal)
            vf = {"pixel_values": flat, "image_grid_thw": thw}
            positions = rope_index(ids, mask, self.token, [tuple(thw[0])], merge)[0]
        else:
            vf = {"pixel_values": px}
            t = ids.shape[1]
            positions = np.arange(self.first_position, self.first_position + t, dtype=np.int64)[None]
        if any(i.name == "pixel_attention_mask" for i in self.vision.get_inputs()):  # Idefics3: every tile real
            vf["pixel_attention_mask"] = np.ones((*px.shape[:2], *px.shape[3:]), bool)
        feats = self.vision.run(None, vf)[0]
        emb = self.embed.run(None, {"input_ids": ids})[0]
        emb[ids == self.token] = feats.reshape(-1, feats.shape[-1])
        feeds = {}
        for i in self.decoder.get_inputs():
            if i.name == "inputs_embeds":
                feeds[i.name] = emb
            elif i.name == "attention_mask":
                feeds[i.name] = mask
            elif i.name == "position_ids":
                feeds[i.name] = positions
            elif i.name == "token_type_ids":  # the prompt is all prefix: image and text attend both ways
                feeds[i.name] = np.zeros_like(ids)
                feeds[i.name][:, prompt or ids.shape[1] :] = 1
            elif i.name == "use_cache_branch":
                feeds[i.name] = np.array([False])
            elif i.name.startswith("past_key_values"):
                feeds[i.name] = np.zeros((1, self.kv, 0, self.dim), np.float32)
        return self.decoder.run(["logits"], feeds)[0]

    def greedy(self, px: np.ndarray, ids: np.ndarray, n: int) -> list[int]:
        """The files' own greedy tokens, the whole sequence again each step (no cache: independent of attnviz's
        loop)."""
        made: list[int] = []
        for _ in range(n):
            seq = np.concatenate([ids, np.asarray([made], np.int64).reshape(1, -1)], axis=1)
            made.append(int(np.argmax(self.caption(px, seq, ids.shape[1])[0, -1])))
        return made


# --------------------------------------------------------------------------- the table
def measure(f: Form, model, rounds: int, threads: int) -> dict:
    from attnviz.runtime import open_model

    assert f.repo is not None
    fam = FAMILIES[f.family]
    m = open_model(f.repo, provider="cpu", threads=threads, **({"variant": f.variant} if f.variant else {}))
    ref = reference(f, model, m, fam.caption)
    want_tokens = greedy(model, ref.generate, fam.generate_with_cache)
    r = m.analyze(text=fam.caption, image=str(SAMPLE))
    m.meta["special"] = {k: v for k, v in m.meta["special"].items() if k != "eos"}  # GENERATE tokens exactly
    got = m.analyze(text=fam.caption, image=str(SAMPLE), generate=GENERATE).info["generated_ids"]
    px, ids = ref.pixels, ref.ids
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
    vision, decoder = max_diffs(r, ref)
    return {
        "sites": f"{n_vis} + {len(r.sites) - n_vis}",
        "vision": vision,
        "decoder": decoder,
        "greedy": got == want_tokens,
        "attnviz_ms": statistics.median(wall["attnviz"]),
        "plain_ms": statistics.median(wall["plain"]),
        "ratio": statistics.median(np.array(wall["attnviz"]) / np.array(wall["plain"])),
        "tokens": ids.shape[1],
        "fidelity": bool(r.info.get("fidelity")),
        "grid": grid_check(f.family, ref, r.token_grid),
        # int8: tokens may part from the fp32 model's; then whether they are the int8 files' own
        "files_greedy": None if got == want_tokens else got == plain.greedy(px, ids, GENERATE),
    }


def row(f: Form, r: dict | None) -> str:
    name = f"{f.family} ({f.label})" if f.label else f.family
    if r is None:
        return f"| {name} | {f.exporter} | {f.form} | — | — | — | — | — | — | — | — | — | {f.note} |"
    notes = ["said: causal (the file has no prefix mask)"] if r["fidelity"] else []
    if r["files_greedy"] is not None:
        notes.append(f"greedy {'=' if r['files_greedy'] else '≠'} the int8 files' own (plain onnxruntime, no cache)")
    note = "; ".join(notes)
    return (
        f"| {name} | {f.exporter} | {f.form} | {r['sites']} | {r['tokens']} | {r['vision']:.1e} | "
        f"{r['decoder']:.1e} | {r['grid']} | {'yes' if r['greedy'] else 'no'} | {r['attnviz_ms']:.1f} ms | {r['plain_ms']:.1f} ms | "
        f"{r['ratio']:.2f}× | {note} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--families", nargs="+", choices=list(FAMILIES), default=list(FAMILIES))
    ap.add_argument("--exporters", nargs="+", choices=["tests", "export-hf"], default=["tests", "export-hf"])
    ap.add_argument(
        "--forms", nargs="+", choices=["merged", "with-past", "int8"], default=["merged", "with-past", "int8"]
    )
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--image", help="the picture (default: the sample); another size tiles and merges otherwise")
    ap.add_argument("--work", help="folder for the repositories, reused by a later run (default: a new temporary one)")
    a = ap.parse_args()
    global SAMPLE
    SAMPLE = Path(a.image).resolve() if a.image else SAMPLE
    import warnings

    from PIL import Image

    warnings.filterwarnings("ignore")
    work = Path(a.work or tempfile.mkdtemp(prefix="attnviz-vlm-families-"))
    t0 = time.perf_counter()
    forms = build_forms(work, a.families, a.exporters, a.forms)
    print(f"built {len(forms)} repositories in {time.perf_counter() - t0:.0f} s under {work}", flush=True)
    models = {name: __import__(FAMILIES[name].module).build() for name in a.families}
    load0, t1 = os.getloadavg(), time.perf_counter()
    rows = []
    for f in forms:
        rows.append(row(f, None if f.repo is None else measure(f, models[f.family], a.rounds, a.threads)))
        print(rows[-1], flush=True)
    load1 = os.getloadavg()
    print(
        f"\ntiny random-init models, {SAMPLE.name} ({Image.open(SAMPLE).size[0]}×{Image.open(SAMPLE).size[1]}); {a.threads} thread(s), CPU, median of {a.rounds} interleaved "
        f"rounds; measured in {time.perf_counter() - t1:.0f} s, load average {load0[0]:.1f} -> {load1[0]:.1f} "
        f"on {os.cpu_count()} cores\n"
    )
    print(
        "| family | exporter | decoder | sites (vision + decoder) | tokens | max \\|Δ\\| vision | max \\|Δ\\| decoder | image grid | "
        "greedy = transformers' | maps | plain | ratio | note |"
    )
    print("|---|---|---|---|---:|---:|---:|---|---|---:|---:|---:|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
