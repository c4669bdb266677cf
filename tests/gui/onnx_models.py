"""Tiny random-init Hugging Face models exported to ONNX for the GUI tests, with WordLevel tokenizers.

Every builder writes ``NAME.onnx`` and, for text models, ``NAME.tokenizer.json`` beside it (the runtime
looks there), and stores an ``attnviz.sample`` input in the metadata like the demo models do.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

WORDS = (
    "the cat sat on mat a dog ran in park red blue square circle small big le chat est sur tapis "
    "un chien rouge bleu carre petit grand is was and with of to"
).split()


def word_tokenizer(path: Path, pair_template: bool = True) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
    for w in WORDS:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    if pair_template:
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
        )
    tok.save(str(path))
    return path


def _set_meta(path: Path, meta: dict) -> None:
    import onnx

    m = onnx.load(str(path))
    for k, v in meta.items():
        p = m.metadata_props.add()
        p.key = f"attnviz.{k}"
        p.value = v if isinstance(v, str) else json.dumps(v)
    onnx.save(m, str(path))


def _export(module, args, names, out_names, path: Path, dyn: dict) -> None:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            args,
            str(path),
            input_names=names,
            output_names=out_names,
            opset_version=17,
            dynamic_axes=dyn,
            dynamo=False,
        )


class _Wrap:
    pass


def build_bert(folder: Path) -> Path:
    import torch
    import transformers as T

    torch.manual_seed(0)
    vocab = len(WORDS) + 4
    cfg = T.BertConfig(
        vocab_size=vocab,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        attn_implementation="eager",
    )
    m = T.BertModel(cfg, add_pooling_layer=False).eval()

    class W(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    ids = torch.tensor([[2, 5, 6, 7, 3]])
    path = folder / "textenc.onnx"
    dyn = {n: {0: "batch", 1: "seq"} for n in ("input_ids", "attention_mask", "token_type_ids")}
    _export(
        W().eval(),
        (ids, torch.ones_like(ids), torch.zeros_like(ids)),
        ["input_ids", "attention_mask", "token_type_ids"],
        ["last_hidden_state"],
        path,
        dyn,
    )
    word_tokenizer(folder / "textenc.tokenizer.json")
    _set_meta(path, {"task": "encoder", "sample": {"text": "the cat sat on the mat"}})
    return path


def build_bart(folder: Path) -> Path:
    import torch
    import transformers as T

    torch.manual_seed(0)
    vocab = len(WORDS) + 4
    cfg = T.BartConfig(
        vocab_size=vocab,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        attn_implementation="eager",
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
        decoder_start_token_id=2,
        forced_eos_token_id=None,
    )
    m = T.BartForConditionalGeneration(cfg).eval()

    class W(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, decoder_input_ids):
            return self.m(
                input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids, use_cache=False
            ).logits

    ids = torch.tensor([[2, 5, 6, 7, 3]])
    dec = torch.tensor([[2, 8, 9]])
    path = folder / "mt.onnx"
    dyn = {
        "input_ids": {0: "batch", 1: "src"},
        "attention_mask": {0: "batch", 1: "src"},
        "decoder_input_ids": {0: "batch", 1: "tgt"},
    }
    _export(
        W().eval(),
        (ids, torch.ones_like(ids), dec),
        ["input_ids", "attention_mask", "decoder_input_ids"],
        ["logits"],
        path,
        dyn,
    )
    word_tokenizer(folder / "mt.tokenizer.json")
    _set_meta(
        path,
        {
            "task": "translation",
            "special": {"bos": 2, "eos": 3, "pad": 0, "decoder_start": 2},
            "sample": {"text": "the cat sat on the mat"},
        },
    )
    return path


def build_vit(folder: Path) -> Path:
    import torch
    import transformers as T

    torch.manual_seed(0)
    cfg = T.ViTConfig(
        image_size=32,
        patch_size=8,
        num_channels=3,
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        intermediate_size=64,
        attn_implementation="eager",
    )
    m = T.ViTModel(cfg, add_pooling_layer=False).eval()

    class W(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, pixel_values):
            return self.m(pixel_values=pixel_values).last_hidden_state

    path = folder / "vit.onnx"
    _export(
        W().eval(),
        (torch.randn(1, 3, 32, 32),),
        ["pixel_values"],
        ["last_hidden_state"],
        path,
        {"pixel_values": {0: "batch"}},
    )
    _set_meta(
        path,
        {
            "task": "vit-classification",
            "image": {
                "size": [32, 32],
                "channels": 3,
                "mean": [0.5] * 3,
                "std": [0.5] * 3,
                "grid": [4, 4],
                "offset": 1,
            },
        },
    )
    return path


def build_no_attention(folder: Path) -> Path:
    """A two-layer MLP: valid ONNX, no attention anywhere."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.normal(size=(8, 16)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.normal(size=(16, 4)).astype(np.float32), "w2")
    g = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"]),
            helper.make_node("Relu", ["h"], ["r"]),
            helper.make_node("MatMul", ["r", "w2"], ["y"]),
        ],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        [w1, w2],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what onnxruntime 1.2x reads
    path = folder / "mlp.onnx"
    onnx.save(model, str(path))
    return path


def sample_image(folder: Path) -> Path:
    from PIL import Image

    a = np.zeros((48, 48, 3), np.uint8)
    a[..., 2] = 160
    a[8:24, 24:44] = (220, 30, 30)  # a red square top-right
    path = folder / "square.png"
    Image.fromarray(a).save(path)
    return path


def build_gpt2(folder: Path) -> Path:
    import torch
    import transformers as T

    torch.manual_seed(0)
    vocab = len(WORDS) + 4
    m = T.GPT2LMHeadModel(
        T.GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=4, n_positions=64, attn_implementation="eager")
    ).eval()

    class W(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).logits

    ids = torch.tensor([[5, 6, 7, 8]])
    path = folder / "gpt.onnx"
    dyn = {n: {0: "batch", 1: "seq"} for n in ("input_ids", "attention_mask")}
    _export(W().eval(), (ids, torch.ones_like(ids)), ["input_ids", "attention_mask"], ["logits"], path, dyn)
    word_tokenizer(folder / "gpt.tokenizer.json", pair_template=False)
    _set_meta(path, {"task": "language-model", "sample": {"text": "the cat sat"}})
    return path


def build_captioner(folder: Path) -> Path:
    """ViT encoder + GPT-2 decoder with cross-attention (VisionEncoderDecoder), image 32 px, 4x4 patches + CLS."""
    import torch
    import transformers as T

    torch.manual_seed(0)
    vocab = len(WORDS) + 4
    enc = T.ViTConfig(
        image_size=32,
        patch_size=8,
        num_channels=3,
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        intermediate_size=64,
    )
    dec = T.GPT2Config(
        vocab_size=vocab, n_embd=32, n_layer=2, n_head=4, n_positions=64, add_cross_attention=True, is_decoder=True
    )
    cfg = T.VisionEncoderDecoderConfig.from_encoder_decoder_configs(enc, dec)
    cfg._attn_implementation = "eager"
    m = T.VisionEncoderDecoderModel(cfg)
    m.set_attn_implementation("eager")
    m.eval()

    class W(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, pixel_values, decoder_input_ids):
            return self.m(pixel_values=pixel_values, decoder_input_ids=decoder_input_ids).logits

    path = folder / "captioner.onnx"
    _export(
        W().eval(),
        (torch.randn(1, 3, 32, 32), torch.tensor([[2, 5, 6]])),
        ["pixel_values", "decoder_input_ids"],
        ["logits"],
        path,
        {"pixel_values": {0: "batch"}, "decoder_input_ids": {0: "batch", 1: "tgt"}},
    )
    word_tokenizer(folder / "captioner.tokenizer.json", pair_template=False)
    _set_meta(
        path,
        {
            "task": "captioning",
            "special": {"bos": 2, "eos": 3, "pad": 0, "decoder_start": 2},
            "image": {
                "size": [32, 32],
                "channels": 3,
                "mean": [0.5] * 3,
                "std": [0.5] * 3,
                "grid": [4, 4],
                "offset": 1,
            },
        },
    )
    return path
