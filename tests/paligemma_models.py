"""A tiny random-init PaliGemma (SigLIP vision tower + linear projector, Gemma decoder) saved as a Hub repository
in the three-file ONNX layout (``REPO/onnx/vision_encoder.onnx``, ``embed_tokens.onnx``,
``decoder_model_merged.onnx``), with its eager reference maps.  The export helpers are tests/vlm_models.py's.

PaliGemma's decoder attends bidirectionally over the image and the prompt prefix (token_type_ids 0) and causally
after it; transformers builds that mask inside ``PaliGemmaModel.forward`` from ``token_type_ids``.  The Hub's
decoder file is the language model alone (``inputs_embeds``, a 2-D ``attention_mask``, ``position_ids``, past
key/values: transformers.js feeds no token_type_ids), whose mask is causal.  ``save_repo(prefix=False)`` exports it
that way; ``prefix=True`` exports ``PaliGemmaModel`` itself with a ``token_type_ids`` input (its without-past branch
builds the prefix mask, its with-past branch is causal, as transformers' cached steps are).
"""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path

import onnx
import vlm_models as vm

torch = __import__("pytest").importorskip("torch")
transformers = __import__("pytest").importorskip("transformers")

IMAGE, PATCH = 32, 8
GRID = IMAGE // PATCH  # 4 x 4 patches, every one an image token (SigLIP has no CLS token)
N_IMAGE = GRID * GRID
LAYERS, HEADS, HIDDEN, HEAD_DIM = 2, 4, 32, 8
WORDS = "a photo of the cat sat on mat dog red blue green caption describe where looks".split()
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<image>", "\n"]
VOCAB_SIZE = 64
IMAGE_TOKEN = SPECIALS.index("<image>")
MEAN, STD = [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]  # SigLIP's


def vocab() -> dict[str, int]:
    words = SPECIALS + WORDS
    words += [f"w{i}" for i in range(VOCAB_SIZE - len(words))]
    return {w: i for i, w in enumerate(words)}


def build():
    """The seeded tiny PaliGemmaForConditionalGeneration (eager attention everywhere)."""
    T = transformers
    torch.manual_seed(0)
    vision = T.SiglipVisionConfig(
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        image_size=IMAGE,
        patch_size=PATCH,
        vision_use_head=False,
    )
    text = T.GemmaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=2,
        head_dim=HEAD_DIM,
        max_position_embeddings=128,
        bos_token_id=2,
        eos_token_id=1,
        pad_token_id=0,
    )
    cfg = T.PaliGemmaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=IMAGE_TOKEN,
        projection_dim=HIDDEN,
        hidden_size=HIDDEN,
        vocab_size=VOCAB_SIZE,
    )
    m = T.PaliGemmaForConditionalGeneration(cfg)
    m.set_attn_implementation("eager")
    m.config.use_cache = False
    return m.eval()


def tokenizer():
    """Word-level, with ``\\n`` a token of its own (the processor ends the prefix with it, as Gemma's tokenizer
    keeps it)."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

    tk = Tokenizer(models.WordLevel(vocab(), unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.add_tokens([AddedToken("\n", normalized=False)])
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tk,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        additional_special_tokens=["<image>"],
    )


def image_processor():
    """SigLIP's processor, PIL backend (resize to the tower's size, bicubic; rescale; mean/std 0.5)."""
    p = transformers.SiglipImageProcessorPil(size={"height": IMAGE, "width": IMAGE}, image_mean=MEAN, image_std=STD)
    p.image_seq_length = N_IMAGE  # what PaliGemmaProcessor expands <image> to (the Hub's preprocessor_config has it)
    return p


def processor(repo=None):
    """transformers' own PaliGemmaProcessor (the prompt layout's and the pixel values' reference)."""
    tok = transformers.PreTrainedTokenizerFast.from_pretrained(str(repo)) if repo else tokenizer()
    return transformers.PaliGemmaProcessor(image_processor=image_processor(), tokenizer=tok)


class _Vision(torch.nn.Module):
    """pixel_values -> image_features (SigLIP's last hidden state through the projector)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, pixel_values):
        return self.m.model.get_image_features(pixel_values).pooler_output


class _PrefixDecoder(torch.nn.Module):
    """PaliGemmaModel on spliced embeddings with token_type_ids: the prefix mask where the cache is empty."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, inputs_embeds, attention_mask, position_ids, token_type_ids, *past):
        cache = transformers.DynamicCache(config=self.m.config.text_config)
        for i in range(LAYERS if past else 0):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.m.model(
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            token_type_ids=token_type_ids,
            past_key_values=cache,
            use_cache=True,
        )
        present = []
        for layer in out.past_key_values.layers:
            present += [layer.keys, layer.values]
        return (self.m.lm_head(out.last_hidden_state), *present)


def _export_prefix_decoder(m, ids, path: Path, with_past: bool) -> None:
    """As vlm_models._export_decoder, with a token_type_ids input after position_ids."""
    kv = m.config.text_config.num_key_value_heads
    past_names = [f"past_key_values.{i}.{w}" for i in range(LAYERS) for w in ("key", "value")]
    present_names = [n.replace("past_key_values", "present") for n in past_names]
    emb = m.get_input_embeddings()(ids)
    past = [torch.zeros(1, kv, 2, HEAD_DIM) for _ in past_names] if with_past else []
    total = emb.shape[1] + (2 if with_past else 0)
    axes = {
        "inputs_embeds": {0: "batch", 1: "seq"},
        "attention_mask": {0: "batch", 1: "total"},
        "position_ids": {0: "batch", 1: "seq"},
        "token_type_ids": {0: "batch", 1: "seq"},
        "logits": {0: "batch", 1: "seq"},
    }
    axes.update({n: {0: "batch", 2: "past"} for n in past_names if with_past})
    axes.update({n: {0: "batch", 2: "total"} for n in present_names})
    types = torch.zeros(ids.shape, dtype=torch.int64)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _PrefixDecoder(m),
            (
                emb,
                torch.ones(1, total, dtype=torch.int64),
                torch.arange(total - emb.shape[1], total)[None] + 1,
                types,
                *past,
            ),
            str(path),
            input_names=["inputs_embeds", "attention_mask", "position_ids", "token_type_ids", *past_names[: len(past)]],
            output_names=["logits", *present_names],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )


def save_repo(repo: Path, prefix: bool = False) -> Path:
    """The Hub repository: config.json, preprocessor_config.json (with image_seq_length), the tokenizer at REPO/,
    the three ONNX files (an If-merged decoder) in REPO/onnx/."""
    m = build()
    repo = Path(repo)
    onnx_dir = repo / "onnx"
    onnx_dir.mkdir(parents=True, exist_ok=True)
    m.config.save_pretrained(str(repo))
    tokenizer().save_pretrained(str(repo))
    image_processor().save_pretrained(str(repo))
    pre = json.loads((repo / "preprocessor_config.json").read_text())
    pre["image_seq_length"] = N_IMAGE
    (repo / "preprocessor_config.json").write_text(json.dumps(pre, indent=2))
    px = torch.randn(1, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(1))
    ids = torch.tensor([[2, 7, 8, 9]])
    how = dict(opset_version=17, dynamo=False)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Vision(m),
            (px,),
            str(onnx_dir / "vision_encoder.onnx"),
            input_names=["pixel_values"],
            output_names=["image_features"],
            dynamic_axes={"pixel_values": {0: "batch"}, "image_features": {0: "batch"}},
            **how,
        )
        torch.onnx.export(
            vm._Embed(m),
            (ids,),
            str(onnx_dir / "embed_tokens.onnx"),
            input_names=["input_ids"],
            output_names=["inputs_embeds"],
            dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "inputs_embeds": {0: "batch", 1: "seq"}},
            **how,
        )
    with tempfile.TemporaryDirectory() as tmp:
        no_past, with_past = Path(tmp) / "decoder_model.onnx", Path(tmp) / "decoder_with_past_model.onnx"
        if prefix:
            _export_prefix_decoder(m, ids, no_past, with_past=False)
            _export_prefix_decoder(m, ids, with_past, with_past=True)
        else:  # the language model alone, as the Hub's file (vm._Decoder takes model.language_model)
            vm._export_decoder(m, ids, no_past, with_past=False, layers=LAYERS)
            vm._export_decoder(m, ids, with_past, with_past=True, layers=LAYERS)
        vm.merge_decoders(onnx.load(str(no_past)), onnx.load(str(with_past)), onnx_dir / "decoder_model_merged.onnx")
    return repo


def token_types(ids, suffix_from: list[int] | None = None):
    """The processor's token_type_ids: 0 over the image and prefix, 1 from each row's suffix on."""
    t = torch.zeros(torch.as_tensor(ids).shape, dtype=torch.int64)
    for b, k in enumerate(suffix_from or []):
        t[b, k:] = 1
    return t


def reference(m, pixel_values, input_ids, attention_mask=None, token_type_ids=None):
    """transformers' eager maps: the vision tower's every layer, then the decoder's
    (PaliGemmaForConditionalGeneration on the same image and prompt; ``token_type_ids`` None: the causal mask
    transformers builds without them), and the logits."""
    ids = torch.as_tensor(input_ids)
    with torch.no_grad():
        v = m.model.vision_tower(torch.as_tensor(pixel_values), output_attentions=True)
        o = m(
            input_ids=ids,
            pixel_values=torch.as_tensor(pixel_values),
            attention_mask=torch.ones(ids.shape, dtype=torch.int64) if attention_mask is None else attention_mask,
            token_type_ids=token_type_ids,
            output_attentions=True,
        )
    return [a.numpy() for a in v.attentions], [a.numpy() for a in o.attentions], o.logits.numpy()
