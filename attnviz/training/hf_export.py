"""A local Hugging Face model folder -> an ONNX file attnviz opens well, checked against transformers.

Why a wrapper: under transformers 5 a model's forward takes keyword arguments and returns a ``ModelOutput``
with caches, which ``torch.onnx.export`` cannot trace directly; :class:`HFWrapper` maps positional inputs
(in ONNX input order) to keywords and returns one plain tensor. Why eager attention: the ``sdpa`` and flash
kernels never materialise the probabilities, so an export of them has no Softmax for attnviz to expose.

Exporter: the TorchScript one (``dynamo=False``, opset 17) as in :mod:`attnviz.training.export` — dynamic
batch/sequence axes and module-path node names. The export is checked with attnviz's own engine against
transformers' ``output_attentions`` at two input lengths (a traced shape constant would show up there) and
published (a folder rename) only when every map agrees within :data:`ATOL`.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attnviz import AttnvizError, __version__
from attnviz.core import metadata as meta_keys
from attnviz.core import preprocess
from attnviz.core.links import readable_beside
from attnviz.core.untrusted import read_json
from attnviz.core.writes import publish_folder, staging_folder
from attnviz.runtime.graph.labels import DUAL_ENCODER_MODEL_TYPES
from attnviz.training.hf_onnx import (  # noqa: F401
    _AXES,
    ATOL,
    OPSET,
    RTOL,
    HFWrapper,
    excess,
    export_or_explain,
    onnx_export,
)

SAMPLE_TEXTS = (
    "attention shows where a model looks",
    "a longer second sentence checks that every length works the same",
)
# files copied beside model.onnx (the runtime finds tokenizer.json there; the rest documents the source)
COPIED = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "preprocessor_config.json",
    "config.json",
    "generation_config.json",
)
# image normalisation presets (ImageNet, CLIP, 0.5, none); the one matched is recorded in the metadata
IMAGE_PRESETS = {k: (list(p.mean), list(p.std)) for k, p in preprocess.PRESETS.items()}


@dataclass(frozen=True)
class Family:
    """How one kind of model is fed and what attnviz metadata says about it."""

    name: str  # encoder | decoder | encoder-decoder | vision | vision-decoder
    inputs: tuple[str, ...]  # forward keywords in ONNX input order (those the model's forward lacks are dropped)
    roles: dict[str, str] = field(default_factory=dict)
    text: bool = True  # needs a tokenizer
    image: bool = False


_TEXT_ROLES = {"input_ids": "tokens", "attention_mask": "mask", "token_type_ids": "token_types"}
FAMILIES = {
    "encoder": Family("encoder", ("input_ids", "attention_mask", "token_type_ids"), _TEXT_ROLES),
    "decoder": Family("decoder", ("input_ids", "attention_mask"), _TEXT_ROLES),
    "encoder-decoder": Family(
        "encoder-decoder",
        ("input_ids", "attention_mask", "decoder_input_ids"),
        {**_TEXT_ROLES, "decoder_input_ids": "decoder_tokens"},
    ),
    "vision": Family("vision", ("pixel_values",), {"pixel_values": "image"}, text=False, image=True),
    "vision-decoder": Family(
        "vision-decoder",
        ("pixel_values", "decoder_input_ids"),
        {"pixel_values": "image", "decoder_input_ids": "decoder_tokens"},
        image=True,
    ),
    # a speech encoder-decoder (Whisper): log-mel frames in, a transcript's tokens out; written as two files
    "speech": Family(
        "speech",
        ("input_features", "decoder_input_ids"),
        {"input_features": "audio", "decoder_input_ids": "decoder_tokens"},
    ),
    # a contrastive dual encoder (CLIPModel, SiglipModel): both towers in one graph, an image and a text in
    "dual": Family(
        "dual",
        ("input_ids", "pixel_values", "attention_mask"),
        {"input_ids": "tokens", "pixel_values": "image", "attention_mask": "mask"},
        image=True,
    ),
}
# task names written to attnviz.task ("...classification" + labels makes the sidebar show the prediction)
TASKS = {
    "encoder": "text-encoder",
    "decoder": "text-generation",
    "encoder-decoder": "text2text-generation",
    "vision": "image-encoder",
    "vision-decoder": "image-to-text",
    "dual": "zero-shot-image-classification",
    "speech": "automatic-speech-recognition",
}
# outputs written as the graph's one output, first found first (a dual encoder's image-by-text similarities)
OUTPUTS = ("logits", "last_hidden_state", "logits_per_image")


# --------------------------------------------------------------------------- reading the folder
def _load(model_dir: Path):
    """(model in eval mode with eager attention, its config)."""
    import transformers

    try:
        config = transformers.AutoConfig.from_pretrained(str(model_dir))
    except Exception as e:
        raise AttnvizError(
            f"{model_dir}: transformers cannot read its config.json ({str(e).splitlines()[0][:160]})"
        ) from None
    archs = list(getattr(config, "architectures", None) or [])
    cls = getattr(transformers, archs[0], None) if archs else None
    cls = cls or transformers.AutoModel
    try:
        model, info = cls.from_pretrained(str(model_dir), attn_implementation="eager", output_loading_info=True)
    except Exception as e:
        raise AttnvizError(
            f"{model_dir}: cannot load the weights with {cls.__name__} ({str(e).splitlines()[0][:160]})"
        ) from None
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("eager")  # composite models (VisionEncoderDecoder) set their parts too
    if hasattr(model.config, "use_cache"):
        model.config.use_cache = False  # no key/value cache outputs in the graph
    return model.eval(), config, sorted(info.get("missing_keys") or [])


def _forward_params(model) -> set[str]:
    import inspect

    return set(inspect.signature(model.forward).parameters)


def family_of(model, config) -> Family:
    """Which feed pattern the model needs; decoder vs encoder is decided later from causality."""
    params = _forward_params(model)
    if "input_features" in params:  # speech: log-mel frames in, not tokens or pixels
        if getattr(config, "model_type", "") != "whisper" or "decoder_input_ids" not in params:
            raise AttnvizError(
                f"{type(model).__name__} takes input_features (audio); export-hf exports Whisper's only (attnviz "
                "computes Whisper's log-mel features); export it with optimum-cli and open it with --inputs FEEDS.npz"
            )
        return FAMILIES["speech"]
    if {"pixel_values", "input_ids"} <= params and isinstance(getattr(model, "logit_scale", None), torch_parameter()):
        # an image and a text in, and a learned temperature over their similarities: a contrastive dual encoder
        # (CLIP, SigLIP), not a vision-language decoder (which takes both too, and predicts tokens)
        return FAMILIES["dual"]
    if "pixel_values" in params:
        return FAMILIES["vision-decoder" if "decoder_input_ids" in params else "vision"]
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in params:
        return FAMILIES["encoder-decoder"]
    if "input_ids" in params:
        return FAMILIES["encoder"]  # refined to "decoder" when transformers' maps are causal
    raise AttnvizError(
        f"{type(model).__name__} takes neither input_ids nor pixel_values; export-hf handles text, "
        "vision and vision->text models (export others with torch.onnx.export, see README)"
    )


def torch_parameter():
    import torch

    return torch.nn.Parameter


def _tokenizer(model_dir: Path):
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(model_dir))
    except Exception as e:
        raise AttnvizError(
            f"{model_dir}: no usable tokenizer ({str(e).splitlines()[0][:160]}); copy tokenizer.json "
            "(and tokenizer_config.json) from the model's repository into the folder"
        ) from None
    if not getattr(tok, "is_fast", False):
        raise AttnvizError(
            f"{model_dir}: the tokenizer has no fast (tokenizer.json) form, which attnviz needs; "
            "save one with transformers (AutoTokenizer.from_pretrained(...).save_pretrained) first"
        )
    return tok


def _special(tok, config) -> dict:
    out = {}
    for key, attr in (
        ("pad", "pad_token_id"),
        ("bos", "bos_token_id"),
        ("eos", "eos_token_id"),
        ("cls", "cls_token_id"),
        ("sep", "sep_token_id"),
        ("unk", "unk_token_id"),
    ):
        v = getattr(tok, attr, None) if tok is not None else None
        if v is None:
            v = getattr(config, attr, None)
        if isinstance(v, int):
            out[key] = v
    start = getattr(config, "decoder_start_token_id", None)
    if start is None and getattr(config, "decoder", None) is not None:
        start = getattr(config.decoder, "decoder_start_token_id", None) or getattr(config.decoder, "bos_token_id", None)
    if isinstance(start, int):
        out["decoder_start"] = start
    return out


def _check_preprocessor(pre, path: Path) -> None:
    """The fields image_settings reads, of the types transformers' image processor takes; else one line: a list
    for the whole file (AttributeError) or a size of "abc" (int()'s ValueError) was an internal error, and an
    image_std of 0 was written into the export's metadata."""
    fix = f"fix {path} (it is what transformers' image processor reads)"
    if not isinstance(pre, dict):
        raise AttnvizError(f"{path.name}: holds {type(pre).__name__} JSON, not an object of settings; {fix}")
    for key in ("image_mean", "image_std"):
        v = pre.get(key)
        if v is not None and not (
            isinstance(v, list) and v and all(type(x) in (int, float) and math.isfinite(x) for x in v)
        ):
            raise AttnvizError(f"{path.name}: {key} is {repr(v)[:40]}, not a list of numbers per channel; {fix}")
        if key == "image_std" and v is not None and 0 in v:
            raise AttnvizError(f"{path.name}: image_std {v} holds 0 (every pixel would divide by zero); {fix}")
    s = pre.get("size")
    if isinstance(s, dict) and "height" in s and "width" in s:
        for side in ("height", "width"):
            if type(s[side]) is not int or not 0 < s[side] <= 16384:
                raise AttnvizError(f"{path.name}: size {side} is {repr(s[side])[:40]}, not pixels in 1..16384; {fix}")


def image_settings(model_dir: Path, config) -> dict:
    """attnviz.image metadata from preprocessor_config.json (or the config's size and the 0.5 preset)."""
    vcfg = getattr(config, "encoder", None) or getattr(config, "vision_config", None) or config
    channels = int(getattr(vcfg, "num_channels", 3) or 3)
    size = getattr(vcfg, "image_size", 224)
    size = list(size) if isinstance(size, (list, tuple)) else [int(size), int(size)]
    pre_file = model_dir / "preprocessor_config.json"
    pre = read_json(pre_file, pre_file.name) if pre_file.is_file() else {}
    if pre:
        _check_preprocessor(pre, pre_file)
        mean, std = pre.get("image_mean", IMAGE_PRESETS["0.5"][0]), pre.get("image_std", IMAGE_PRESETS["0.5"][1])
        if pre.get("do_normalize") is False:
            mean, std = IMAGE_PRESETS["none"]
        preset = preprocess.name_of(mean, std)
        s = pre.get("size")
        if isinstance(s, dict) and "height" in s and "width" in s:
            size = [s["height"], s["width"]]
        source = "preprocessor_config.json"
    else:  # transformers' ViTImageProcessor default
        mean, std = IMAGE_PRESETS["0.5"]
        preset, source = "0.5", "default (no preprocessor_config.json)"
    patch = getattr(vcfg, "patch_size", None)
    patch = list(patch) if isinstance(patch, (list, tuple)) else [patch, patch] if patch else None
    out = {
        "size": size,
        "channels": channels,
        "mean": [float(x) for x in mean][:channels],
        "std": [float(x) for x in std][:channels],
        "preset": preset,
        "preset_source": source,
    }
    if patch:
        out["grid"] = [size[0] // int(patch[0]), size[1] // int(patch[1])]
    return out


# --------------------------------------------------------------------------- example inputs and references
def example_inputs(fam: Family, model, tok, special: dict, image: dict | None, text: str) -> dict:
    """Keyword inputs for one check: ``text`` tokenised, a seeded random image, a short decoder prompt."""
    import torch

    params = _forward_params(model)
    kw = {}
    if "input_features" in fam.inputs:  # seeded frames of the one length the encoder takes (Whisper's 2 x positions)
        g = torch.Generator().manual_seed(len(text))
        cfg = model.config
        kw["input_features"] = torch.randn(1, cfg.num_mel_bins, 2 * cfg.max_source_positions, generator=g)
    if fam.image and image is not None:
        g = torch.Generator().manual_seed(len(text))
        h, w = image["size"]
        kw["pixel_values"] = torch.randn(1, image["channels"], h, w, generator=g)
    if "input_ids" in fam.inputs:
        enc = tok(text, return_tensors="pt")
        kw["input_ids"] = enc["input_ids"]
        kw["attention_mask"] = torch.ones_like(enc["input_ids"])
        if (
            "token_type_ids" in fam.inputs
            and "token_type_ids" in params
            and getattr(model.config, "type_vocab_size", None)
        ):
            kw["token_type_ids"] = torch.zeros_like(enc["input_ids"])
    if "decoder_input_ids" in fam.inputs:
        start = special.get("decoder_start", special.get("bos", 0))
        words = tok(text, add_special_tokens=False)["input_ids"][: max(2, len(text) // 12)]
        kw["decoder_input_ids"] = torch.tensor([[start, *words]], dtype=torch.long)
    return {k: v for k, v in kw.items() if k in params}


def reference_maps(model, kw: dict) -> tuple[list[np.ndarray], list[tuple[str, str, int]], np.ndarray]:
    """transformers' eager probabilities in attnviz's canonical order, their labels, and the output tensor."""
    import torch

    with torch.no_grad():
        o = model(**kw, output_attentions=True)
    enc = getattr(o, "encoder_attentions", None)
    maps: list[np.ndarray] = []
    labels: list[tuple[str, str, int]] = []
    if getattr(o, "logits_per_image", None) is not None:  # a dual encoder: image tower (+ pooling head), text tower
        maps, labels = _dual_maps(model, kw, o)
    elif enc is not None or getattr(o, "cross_attentions", None):
        for i, a in enumerate(enc or ()):
            maps.append(a.numpy())
            labels.append(("encoder", "self", i))
        cross = getattr(o, "cross_attentions", None) or ()
        for i, a in enumerate(o.decoder_attentions or ()):
            maps.append(a.numpy())
            labels.append(("decoder", "self", i))
            if i < len(cross):
                maps.append(cross[i].numpy())
                labels.append(("decoder", "cross", i))
    else:
        atts = list(o.attentions or [])
        causal = (
            len(atts) > 0 and all(np.allclose(np.triu(a.numpy()[0, 0], 1), 0.0) for a in atts) and atts[0].shape[-1] > 1
        )
        # a dual encoder's text tower alone (CLIPTextModel) masks causally and is an encoder (runtime/graph/labels.py)
        tower = getattr(model.config, "model_type", "") in DUAL_ENCODER_MODEL_TYPES
        stack = "decoder" if causal and not tower else "encoder"
        for i, a in enumerate(atts):
            maps.append(a.numpy())
            labels.append((stack, "self", i))
    out = next(getattr(o, n) for n in OUTPUTS if getattr(o, n, None) is not None)
    return maps, labels, out.numpy()


def _dual_maps(model, kw: dict, o) -> tuple[list[np.ndarray], list[tuple[str, str, int]]]:
    """A dual encoder's maps in attnviz's order: the image tower's layers, its attention-pooling head (SigLIP's,
    kind ``pooling``), then the text tower's layers, each tower numbered from 0."""
    maps = [a.numpy() for a in o.vision_model_output.attentions]
    labels = [("encoder", "self", i) for i in range(len(maps))]
    pooled = _pooling_head_maps(model, kw)
    if pooled is not None:
        maps.append(pooled)
        labels.append(("encoder", "pooling", 0))
    text = [a.numpy() for a in o.text_model_output.attentions]
    return maps + text, labels + [("encoder", "self", i) for i in range(len(text))]


def _pooling_head_maps(model, kw: dict) -> np.ndarray | None:
    """SigLIP's attention-pooling head's probabilities ``[B, H, 1, N]`` (None without one): transformers returns
    none, so its ``nn.MultiheadAttention`` is run again on the inputs it got, asking for the per-head weights."""
    import torch

    head = getattr(getattr(getattr(model, "vision_model", None), "head", None), "attention", None)
    if not isinstance(head, torch.nn.MultiheadAttention):
        return None
    seen: dict = {}
    hook = head.register_forward_pre_hook(lambda mod, args, kwargs: seen.update(args=args), with_kwargs=True)
    try:
        with torch.no_grad():
            model.vision_model(pixel_values=kw["pixel_values"])
            q, k, v = seen["args"][:3]
            return head(q, k, v, need_weights=True, average_attn_weights=False)[1].numpy()
    finally:
        hook.remove()


def _max_positions(config) -> int | None:
    """How many positions the text side has (BERT/BART max_position_embeddings, GPT-2 n_positions)."""
    for c in (getattr(config, "decoder", None), config):  # vision->text: the decoder's
        for attr in ("max_position_embeddings", "n_positions"):
            v = getattr(c, attr, None) if c is not None else None
            if isinstance(v, int) and v > 0:
                return v
    return None


def _output_name(model, kw) -> str:
    import torch

    with torch.no_grad():
        o = model(**kw)
    for n in OUTPUTS:
        if getattr(o, n, None) is not None:
            return n
    raise AttnvizError(f"{type(model).__name__} returns none of {', '.join(OUTPUTS)}")


@dataclass
class ExportReport:
    path: Path
    family: str
    task: str
    sites: int
    max_diff: float
    output_max_diff: float
    lengths: list[int]  # key tokens of the first map, per checked input
    missing_weights: list[str] = field(default_factory=list)  # initialised randomly by transformers


def check_against_transformers(
    onnx_path: Path, model, inputs: list[dict], atol: float = ATOL, rtol: float = RTOL
) -> tuple[float, float, int]:
    """Every map attnviz extracts equals transformers' within ``atol + rtol * max|map|`` (and the labels agree);
    raises otherwise.  Returns the largest absolute map difference, the output's relative one, the map count."""
    import onnxruntime as ort

    from attnviz.runtime import open_model

    am = open_model(onnx_path, provider="cpu")
    worst = worst_out = 0.0
    over = over_out = -np.inf  # the largest excess over the tolerance (<= 0: every element within)
    n = 0
    for kw in inputs:
        ref, labels, out = reference_maps(model, kw)
        feeds = {k: v.numpy() for k, v in kw.items()}
        try:
            res = am.analyze(feeds=feeds)
        except AttnvizError as e:
            raise AttnvizError(f"export check failed: attnviz cannot run the export ({e})") from None
        got = [m.array() for m in res.maps]
        got_labels = [(s.stack, s.kind, s.layer) for s in res.sites]
        if len(got) != len(ref):
            raise AttnvizError(
                f"export check failed: attnviz found {len(got)} attention sites, transformers returns {len(ref)} maps"
            )
        if got_labels != labels:
            raise AttnvizError(
                f"export check failed: attnviz labels the sites {got_labels}, transformers' order is {labels}"
            )
        for i, (g, r) in enumerate(zip(got, ref)):
            if g.shape != r.shape:
                raise AttnvizError(f"export check failed: map {i} is {g.shape} in ONNX, {r.shape} in transformers")
            worst = max(worst, float(np.abs(g - r).max()))
            over = max(over, excess(g, r, atol, rtol))
        if onnx_path.is_dir():  # a folder (speech): its decoder's logits after its encoder, as the folder runs them
            o = am.logits(feeds)
        else:
            sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
            o = sess.run(None, {i.name: feeds[i.name] for i in sess.get_inputs()})[0]
        scale = max(1.0, float(np.abs(out).max()))
        worst_out = max(worst_out, float(np.abs(o - out).max()) / scale)
        over_out = max(over_out, excess(o / scale, out / scale, atol, rtol))
        n = len(ref)
    if over > 0 or over_out > 0:
        raise AttnvizError(
            f"export check failed: maps differ from transformers by {worst:.2e}, outputs by {worst_out:.2e} "
            f"(relative to their scale), beyond {atol:g} + {rtol:g} x the map's largest weight; try --opset 18 or "
            "report the model"
        )
    return worst, worst_out, n


# --------------------------------------------------------------------------- the command's work
PRODUCER = b"attnviz export-hf"  # every ONNX file an export writes says so (_write_metadata, hf_vlm._stamp)


def holds_export(out_dir: Path) -> bool:
    """Whether ``out_dir`` holds an export this command wrote: an ONNX file at its top or in ``onnx/`` (a
    vision–language model's) whose producer is ``attnviz export-hf``.  Protobuf writes a model's fields in number
    order, the producer (field 2) after the IR version alone, so the file's first bytes say it: a multi-GB
    export is not read to find out."""
    for f in [*out_dir.glob("*.onnx"), *(out_dir / "onnx").glob("*.onnx")]:
        try:
            with open(f, "rb") as fh:
                if PRODUCER in fh.read(256):
                    return True
        except OSError:
            continue
    return False


def _check_out(out_dir: Path, overwrite: bool) -> None:
    """``--out`` is new or empty; with ``overwrite``, an earlier export of this command (replaced whole once the
    new one passes its check), never a folder of other files: the wording is ``train``'s."""
    if out_dir.exists() and not out_dir.is_dir():
        raise AttnvizError(f"--out {out_dir} is a file; choose a folder name")
    names = sorted(p.name for p in out_dir.iterdir()) if out_dir.is_dir() else []
    if not names:
        return
    shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
    if not overwrite:
        raise AttnvizError(
            f"--out {out_dir} is not empty ({shown}); choose an empty folder or pass --overwrite to replace it"
        )
    if not holds_export(out_dir):
        raise AttnvizError(
            f"--out {out_dir} is not empty ({shown}) and holds no earlier export to replace (--overwrite replaces "
            "what export-hf wrote, never other files); choose an empty folder"
        )


def _check_paths(model_dir: Path, out_dir: Path, overwrite: bool = False) -> None:
    if model_dir.is_file():  # config.json (or a weights file) itself: its folder is the model
        raise AttnvizError(
            f"{model_dir} is a file; give the folder that holds it ({model_dir.parent}: config.json + weights + "
            "tokenizer)"
        )
    if not model_dir.is_dir():
        from attnviz.runtime.folder import hub_name_hint

        raise AttnvizError(
            hub_name_hint(model_dir)
            or f"{model_dir}: no such folder; give a local Hugging Face model folder (config.json + weights + tokenizer)"
        )
    if not (model_dir / "config.json").is_file():
        raise AttnvizError(
            f"{model_dir}: no config.json; give the folder of a Hugging Face model (e.g. from huggingface-cli download)"
        )
    if not any(model_dir.glob("*.safetensors")) and not any(model_dir.glob("*.bin")):
        raise AttnvizError(f"{model_dir}: no weights (*.safetensors or pytorch_model.bin) beside config.json")
    for entry in sorted(model_dir.iterdir()):  # what transformers and the copy read: no link out (core.links)
        readable_beside(entry, model_dir)
    _check_out(out_dir, overwrite)
    if not out_dir.resolve().parent.is_dir():
        raise AttnvizError(
            f"--out {out_dir}: folder {out_dir.resolve().parent} does not exist; create it or choose another --out"
        )
    staging_folder(out_dir).rmdir()  # a folder that cannot be written is refused now, not after the export


def export_hf(
    model_dir: str | Path,
    out_dir: str | Path,
    opset: int = OPSET,
    text: str | None = None,
    atol: float = ATOL,
    overwrite: bool = False,
) -> ExportReport:
    """Export ``model_dir`` to ``out_dir/model.onnx`` (+ tokenizer, metadata); nothing is left at ``out_dir``
    unless the check against transformers passes (``overwrite``: an earlier export there stays until then)."""
    import torch
    import transformers

    from attnviz.training.hf_speech import DECODER, ENCODER, check_source, export_speech
    from attnviz.training.hf_vlm import FAMILY, TASK, export_vlm, recipe_for

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    _check_paths(model_dir, out_dir, overwrite)
    vlm = recipe_for(model_dir)  # a vision–language model: its family known before the weights load, or refused
    torch.manual_seed(0)
    transformers.logging.set_verbosity_error()  # load reports and progress bars: the missing weights are reported below
    transformers.utils.logging.disable_progress_bar()
    model, config, missing = _load(model_dir)
    if vlm is not None:  # the Hub's three files in out_dir/onnx/, the repository's files at its top
        texts = (text, text + " " + text) if text else SAMPLE_TEXTS
        tok = _tokenizer(model_dir)
        bos = _special(tok, config).get("bos")
        c = export_vlm(model, config, tok, bos, vlm, model_dir, out_dir, opset, texts, overwrite)
        return ExportReport(out_dir, FAMILY, TASK, c.sites, c.max_diff, c.output_max_diff, c.lengths, missing)
    fam = family_of(model, config)
    if fam.name == "speech":
        check_source(model_dir)
    tok = _tokenizer(model_dir) if fam.text else None
    special = _special(tok, config)
    image = image_settings(model_dir, config) if fam.image else None
    texts = (text, text + " " + text) if text else SAMPLE_TEXTS
    inputs = [example_inputs(fam, model, tok, special, image, t) for t in texts]
    ref, labels, _ = reference_maps(model, inputs[0])
    if fam.name == "encoder" and labels and labels[0][0] == "decoder":  # causal maps: a decoder-only model
        fam = FAMILIES["decoder"]
        inputs = [example_inputs(fam, model, tok, special, image, t) for t in texts]
    if image is not None and "grid" in image and ref:
        # leading non-patch tokens (CLS, distillation, registers): the first encoder map's keys minus the patches
        extra = ref[0].shape[-1] - image["grid"][0] * image["grid"][1]
        if extra >= 0:
            image["offset"] = int(extra)
    output = _output_name(model, inputs[0])
    # the output's batch axis and, for per-token outputs, its sequence axis (else the exporter names them by node)
    out_axes = {0: "batch"}
    seq_in = (
        "decoder_input_ids" if "decoder_input_ids" in inputs[0] else "input_ids" if "input_ids" in inputs[0] else None
    )
    if fam.name == "dual":
        out_axes[1] = "texts"  # logits_per_image: images by texts
    elif seq_in is not None and labels and "classification" not in type(model).__name__.lower():
        out_axes[1] = _AXES[seq_in][1]

    task = TASKS[fam.name]
    arch = type(model).__name__
    id2label = getattr(config, "id2label", None) or {}
    if arch.endswith("ForSequenceClassification"):
        task = "sequence-classification"
    elif arch.endswith("ForImageClassification"):
        task = "image-classification"
    meta: dict = {
        # titles and the sidebar say the source's name, not the file's ("model"); the config as written on disk
        "name": meta_keys.source_name(model_dir.resolve().name, _config_json(model_dir)) or arch,
        "task": task,
        "inputs": {n: fam.roles[n] for n in inputs[0]},
        "special": special,
        "config": {
            "source": "huggingface",
            "architecture": arch,
            "model_type": getattr(config, "model_type", ""),
            "family": fam.name,
            "output": output,
            "opset": opset,
            "transformers": transformers.__version__,
            "attnviz": __version__,
        },
    }
    positions = _max_positions(config)
    if positions and fam.text:
        meta["max_positions"] = positions
    # a dual encoder's classes are the texts it is given: its config's id2label is transformers' LABEL_0, LABEL_1
    # placeholder, which the sidebar then named as a two-text run's prediction
    if task.endswith("classification") and id2label and fam.name != "dual":
        meta["labels"] = [id2label[i] if i in id2label else id2label.get(str(i), str(i)) for i in range(len(id2label))]
    if image is not None:
        meta["image"] = image
    if fam.text and inputs[0].get("input_ids") is not None and "decoder_input_ids" not in inputs[0]:
        meta["sample"] = {"text": texts[0]}

    staging = staging_folder(out_dir)
    try:
        if fam.name == "speech":  # two files, as optimum writes them; each names the source, the roles are by name
            onnx_path = staging
            export_speech(model, inputs[0], staging, opset)
            for name in (ENCODER, DECODER):
                _write_metadata(staging / name, {k: v for k, v in meta.items() if k != "inputs"})
        else:
            onnx_path = staging / "model.onnx"
            export_or_explain(model, inputs[0], output, onnx_path, opset=opset, output_axes=out_axes)
            _write_metadata(onnx_path, meta)
        for name in COPIED:
            if (model_dir / name).is_file():
                shutil.copy2(model_dir / name, staging / name)
        if tok is not None and not (staging / "tokenizer.json").exists():
            tok.save_pretrained(str(staging))  # a fast tokenizer built from vocab files: write its tokenizer.json
        worst, worst_out, n = check_against_transformers(onnx_path, model, inputs, atol)
        publish_folder(staging, out_dir, overwrite)  # out_dir is absent, empty or an earlier export (checked above)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    first = -1 if fam.name == "dual" else 0  # a dual encoder's text tower is the one whose length varies
    if fam.name == "speech":  # the frames are fixed: the transcript's tokens vary
        lengths = [int(kw["decoder_input_ids"].shape[-1]) for kw in inputs]
    else:
        lengths = [int(reference_maps(model, kw)[0][first].shape[-1]) for kw in inputs]
    path = out_dir if fam.name == "speech" else out_dir / "model.onnx"
    return ExportReport(path, fam.name, task, n, worst, worst_out, lengths, missing)


def _config_json(model_dir: Path) -> dict:
    """The source folder's config.json as written (``_name_or_path`` survives there, not in the loaded config)."""
    try:
        d = read_json(model_dir / "config.json", "config.json")
    except AttnvizError:
        return {}
    return d if isinstance(d, dict) else {}


def _write_metadata(path: Path, meta: dict) -> None:
    import onnx

    m = onnx.load(str(path))
    for k, v in meta_keys.dump(meta).items():
        p = m.metadata_props.add()
        p.key, p.value = k, v
    m.producer_name = "attnviz export-hf"
    m.producer_version = __version__
    onnx.save(m, str(path))
