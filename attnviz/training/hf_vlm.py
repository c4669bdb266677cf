"""A decoder-only vision–language model (LLaVA, Idefics3 / SmolVLM, PaliGemma, Qwen2-VL, Qwen2.5-VL) -> the Hugging
Face Hub's three-file ONNX layout, checked against transformers before anything is published.

Why three files and not one ``model.onnx``: the Hub (transformers.js / onnx-community) keeps a VLM as
``onnx/vision_encoder.onnx`` (pixel values -> image features, after the projector), ``onnx/embed_tokens.onnx`` (ids
-> embeddings) and ``onnx/decoder_model_merged.onnx`` (embeddings, mask, positions, past key values -> logits,
present key values), with ``config.json``, ``preprocessor_config.json``, the tokenizer and ``generation_config.json``
at the repository's top; attnviz opens exactly that as one model (:class:`attnviz.runtime.vlm.VLMSet`), which
expands the image placeholder, splices the features into the embeddings and steps through the cache.  The decoder
is written as a with-past decoder (no ``If``): fed an empty past it is the merged file's first branch, so the same
file serves the prompt and every cached step.

The check opens the staged folder with attnviz's :class:`VLMSet` and compares every map (the vision tower's layers
that the features use, then the decoder's self-attention) and the logits with transformers' eager
``output_attentions`` of the whole model, on a batch of two images (one image at two sizes where the family runs
one at a time) and at a second prompt length, within :func:`attnviz.training.hf_onnx.excess`'s tolerance
(relative to the map's scale), and greedy tokens with ``generate``.

Families register a :class:`~attnviz.training.hf_vlm_families.Recipe` in
:data:`~attnviz.training.hf_vlm_families.RECIPES` (keyed by config.json's ``model_type``): the image-features graph
and its inputs, the decoder's extra inputs, the prompt's layout and transformers' keywords for the check.  A
vision–language config of another type is refused in one line before its weights are loaded.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnviz import AttnvizError, __version__
from attnviz.core.untrusted import read_json
from attnviz.core.writes import publish_folder, staging_folder
from attnviz.runtime.sidecar import HUB_ONNX_FOLDER
from attnviz.runtime.vlm import DECODER_FILE, EMBED_FILE, VISION_FILE
from attnviz.training.hf_onnx import ATOL, RTOL, excess, export_or_explain
from attnviz.training.hf_vlm_families import RECIPES, Recipe, Sample
from attnviz.training.hf_vlm_families.base import IMAGE_TOKEN_KEYS, Embed

FAMILY = "vision-language"
TASK = "image-text-to-text"
PREPROCESSOR = "preprocessor_config.json"
# copied from the source to OUT's top, as a Hub repository holds them (the tokenizer, the processor's settings)
COPIED = (
    "config.json",
    "generation_config.json",
    PREPROCESSOR,
    "processor_config.json",
    "chat_template.json",
    "chat_template.jinja",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
)


# --------------------------------------------------------------------------- which folders are VLMs
def recipe_for(model_dir: Path) -> Recipe | None:
    """The family's recipe when config.json describes a decoder-only vision–language model (a vision and a text
    config and an image placeholder token), None for any other model; a VLM of a family without a recipe, or one
    without its image processor's settings, is refused here, before its weights are loaded."""
    cfg = read_json(model_dir / "config.json", "config.json")
    if not isinstance(cfg, dict):
        return None
    is_vlm = isinstance(cfg.get("vision_config"), dict) and isinstance(cfg.get("text_config"), dict)
    if not is_vlm or not any(isinstance(cfg.get(k), int) for k in IMAGE_TOKEN_KEYS):
        return None
    kind = cfg.get("model_type")
    family = RECIPES.get(str(kind))
    if family is None:
        raise AttnvizError(
            f"{model_dir}: a vision–language model of type {kind!r}; export-hf writes the three-file layout for "
            f"{', '.join(RECIPES)} only; export it with its own ONNX conversion (optimum, transformers.js scripts) "
            "and open the repository folder"
        )
    recipe = family()
    lacking = [k for k in recipe.needs if k not in cfg]
    if lacking:
        raise AttnvizError(f"{model_dir}: config.json lacks {', '.join(lacking)}; give the model's own config.json")
    if not (model_dir / PREPROCESSOR).is_file():
        raise AttnvizError(
            f"{model_dir}: a vision–language model needs its image processor's {PREPROCESSOR} beside config.json "
            "(the processor's save_pretrained writes it); without it the image's size and normalisation are unknown"
        )
    return recipe


# --------------------------------------------------------------------------- references
def reference(model, recipe: Recipe, s: Sample) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """transformers' eager maps (the vision layers the export keeps; the decoder's, of the whole model on the same
    image and prompt) and the logits."""
    import torch

    recipe.reset(model)
    with torch.no_grad():
        o = model(**s.torch_kw, output_attentions=True)
    return recipe.vision_maps(model, s), [a.numpy() for a in o.attentions], o.logits.numpy()


def greedy(model, recipe: Recipe, s: Sample, n: int) -> list[int]:
    """transformers' greedy tokens, exactly ``n`` (no stop at EOS)."""
    import torch

    recipe.reset(model)
    kw = recipe.generate_kw(s)
    with torch.no_grad():
        out = model.generate(
            **kw,
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )
    return out[0, kw["input_ids"].shape[1] :].tolist()


@dataclass
class Checked:
    sites: int
    max_diff: float
    output_max_diff: float
    lengths: list[int]


def check(folder: Path, model, recipe: Recipe, checks: list[Sample]) -> Checked:
    """Every map and the logits of the folder opened by attnviz equal transformers' within the relative tolerance,
    and greedy tokens equal ``generate``'s; raises in one line otherwise."""
    from attnviz.runtime import open_model
    from attnviz.runtime.vlm import VLMSet

    try:
        vs = open_model(folder, provider="cpu")
    except AttnvizError as e:
        raise AttnvizError(f"export check failed: attnviz cannot open the export ({e})") from None
    if not isinstance(vs, VLMSet):
        raise AttnvizError(f"export check failed: attnviz opens the export as {type(vs).__name__}, not one VLM")
    worst = worst_out = 0.0
    over = -np.inf
    n = 0
    for s in checks:
        vision, decoder, logits = reference(model, recipe, s)
        ref = vision + decoder
        try:
            res = vs.analyze(feeds=s.feeds)
        except AttnvizError as e:
            raise AttnvizError(f"export check failed: attnviz cannot run the export ({e})") from None
        labels = [(x.stack, x.kind) for x in res.sites]
        want = [("encoder", "self")] * len(vision) + [("decoder", "self")] * len(decoder)
        if len(res.maps) != len(ref) or labels != want:
            raise AttnvizError(
                f"export check failed: attnviz finds {len(res.maps)} attention sites ({labels}), transformers "
                f"returns {len(ref)} maps ({want})"
            )
        for i, (m, r) in enumerate(zip(res.maps, ref)):
            g = m.array()
            if g.shape != r.shape:
                raise AttnvizError(f"export check failed: map {i} is {g.shape} in ONNX, {r.shape} in transformers")
            worst = max(worst, float(np.abs(g - r).max()))
            over = max(over, excess(g, r, ATOL, RTOL))
        scale = max(1.0, float(np.abs(logits).max()))
        got = res.outputs["logits"]
        worst_out = max(worst_out, float(np.abs(got - logits).max()) / scale)
        over = max(over, excess(got / scale, logits / scale, ATOL, RTOL))
        n = len(ref)
    if over > 0:
        raise AttnvizError(
            f"export check failed: maps differ from transformers by {worst:.2e}, logits by {worst_out:.2e} "
            f"(relative to their scale), beyond {ATOL:g} + {RTOL:g} x the map's largest weight; try --opset 18 or "
            "report the model"
        )
    one = checks[-1]  # generation runs one sequence: the last check is one row
    n_new = recipe.generate_tokens
    # no stop at EOS on either side: a random or early-stopping model still shows its cached steps
    vs.meta["special"] = {k: v for k, v in vs.meta.get("special", {}).items() if k != "eos"}
    got_ids = [int(t) for t in vs.analyze(feeds=one.feeds, generate=n_new).info["generated_ids"]]
    want_ids = greedy(model, recipe, one, n_new)
    if got_ids != want_ids:
        raise AttnvizError(
            f"export check failed: greedy tokens {got_ids} through the exported decoder's cache, transformers "
            f"generates {want_ids}; report the model"
        )
    return Checked(n, worst, worst_out, [int(s.input_ids.shape[1]) for s in checks])


# --------------------------------------------------------------------------- writing
def _write(model, recipe: Recipe, checks: list[Sample], onnx_dir: Path, opset: int) -> None:
    """The three files into ``onnx_dir``: the vision graph traced on the last check's image (one row, the most
    images), the embeddings on the first check's ids, the decoder with a past."""
    import torch

    vision_in = recipe.vision_inputs(model, checks[-1].pixel_values)
    arch = type(model).__name__
    export_or_explain(
        recipe.vision(model).eval(),
        vision_in,
        "image_features",
        onnx_dir / VISION_FILE,
        opset=opset,
        label=f"{arch} ({HUB_ONNX_FOLDER}/{VISION_FILE})",
        module=True,
        axes=recipe.vision_axes(),
    )
    ids = torch.as_tensor(checks[0].input_ids[:1, :4])
    export_or_explain(
        Embed(model).eval(),
        {"input_ids": ids},
        "inputs_embeds",
        onnx_dir / EMBED_FILE,
        opset=opset,
        label=f"{arch} ({HUB_ONNX_FOLDER}/{EMBED_FILE})",
        module=True,
        axes={"input_ids": {0: "batch", 1: "sequence"}, "inputs_embeds": {0: "batch", 1: "sequence"}},
    )
    text = model.config.text_config
    layers = int(text.num_hidden_layers)
    kv = int(getattr(text, "num_key_value_heads", None) or text.num_attention_heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads)
    past_names = [f"past_key_values.{i}.{w}" for i in range(layers) for w in ("key", "value")]
    present_names = [p.replace("past_key_values", "present") for p in past_names]
    # traced with a past of 2 and 4 new tokens, so that neither length is a constant of the graph
    t, p = ids.shape[1], 2
    with torch.no_grad():
        emb = model.get_input_embeddings()(ids)
    extra, extra_axes = recipe.decoder_inputs(p, t)
    feeds = {
        "inputs_embeds": emb,
        "attention_mask": torch.ones(1, p + t, dtype=torch.long),
        **extra,
        **{n: torch.zeros(1, kv, p, head_dim) for n in past_names},
    }
    axes = {
        "inputs_embeds": {0: "batch", 1: "sequence"},
        "attention_mask": {0: "batch", 1: "total_sequence"},
        **extra_axes,
        "logits": {0: "batch", 1: "sequence"},
        **{n: {0: "batch", 2: "past_sequence"} for n in past_names},
        **{n: {0: "batch", 2: "total_sequence"} for n in present_names},
    }
    export_or_explain(
        recipe.decoder(model, layers).eval(),
        feeds,
        "logits",
        onnx_dir / DECODER_FILE,
        opset=opset,
        label=f"{arch} ({HUB_ONNX_FOLDER}/{DECODER_FILE})",
        module=True,
        axes=axes,
        outputs=["logits", *present_names],
    )


def _stamp(path: Path, provenance: dict) -> None:
    """Each file says where it came from (``attnviz.config``, the producer); no roles: the runtime reads the
    layout from the names, as for a Hub download."""
    import onnx

    from attnviz.core import metadata as meta_keys

    m = onnx.load(str(path))
    for k, v in meta_keys.dump({"config": provenance}).items():
        p = m.metadata_props.add()
        p.key, p.value = k, v
    m.producer_name = "attnviz export-hf"
    m.producer_version = __version__
    onnx.save(m, str(path))


def export_vlm(
    model,
    config,
    tok,
    bos: int | None,
    recipe: Recipe,
    model_dir: Path,
    out_dir: Path,
    opset: int,
    texts: tuple[str, ...],
    overwrite: bool = False,
) -> Checked:
    """Stage ``out_dir``'s repository layout, check it, publish it (one rename) only when the check passes."""
    import transformers

    checks = recipe.samples(model, tok, texts, bos)
    staging = staging_folder(out_dir)
    try:
        onnx_dir = staging / HUB_ONNX_FOLDER
        onnx_dir.mkdir()
        _write(model, recipe, checks, onnx_dir, opset)
        provenance = {
            "source": "huggingface",
            "architecture": type(model).__name__,
            "model_type": getattr(config, "model_type", ""),
            "family": FAMILY,
            "opset": opset,
            "transformers": transformers.__version__,
            "attnviz": __version__,
        }
        for name in (VISION_FILE, EMBED_FILE, DECODER_FILE):
            _stamp(onnx_dir / name, provenance)
        for name in COPIED:
            if (model_dir / name).is_file():
                shutil.copy2(model_dir / name, staging / name)
        if not (staging / "tokenizer.json").exists():
            tok.save_pretrained(str(staging))  # a fast tokenizer built from vocab files: write its tokenizer.json
        if not (staging / "generation_config.json").exists() and getattr(model, "generation_config", None):
            model.generation_config.save_pretrained(str(staging))
        checked = check(staging, model, recipe, checks)
        publish_folder(staging, out_dir, overwrite)  # absent, empty or an earlier export (checked by the caller)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return checked
