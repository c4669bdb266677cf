"""A tiny random-init PaliGemma (SigLIP vision tower + linear projector, Gemma decoder) saved as a Hub repository
in the three-file ONNX layout (``REPO/onnx/vision_encoder.onnx``, ``embed_tokens.onnx``,
``decoder_model_merged.onnx``), with its eager reference maps.  The export helpers are tests/vlm_build.py's.

PaliGemma's decoder attends bidirectionally over the image and the prompt prefix (token_type_ids 0) and causally
after it; transformers builds that mask inside ``PaliGemmaModel.forward`` from ``token_type_ids``.  The Hub's
decoder file is the language model alone (``inputs_embeds``, a 2-D ``attention_mask``, ``position_ids``, past
key/values: transformers.js feeds no token_type_ids), whose mask is causal.  ``save_repo(prefix=False)`` exports it
that way; ``prefix=True`` exports ``PaliGemmaModel`` itself with a ``token_type_ids`` input (its without-past branch
builds the prefix mask, its with-past branch is causal, as transformers' cached steps are).
"""

from __future__ import annotations

from pathlib import Path

import vlm_build as vb
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
    return vb.word_vocab(SPECIALS, WORDS, VOCAB_SIZE)


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
    special = dict(pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", additional_special_tokens=["<image>"])
    return vb.word_tokenizer(vocab(), "<unk>", added=("\n",), **special)


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


def _PrefixDecoder(m):
    """PaliGemmaModel on spliced embeddings with token_type_ids: the prefix mask where the cache is empty."""
    return vb.CachedDecoder(m.model, m.lm_head, m.config.text_config, LAYERS, extra=("token_type_ids",))


def _export_prefix_decoder(m, ids, path: Path, with_past: bool) -> None:
    """As vlm_models._export_decoder, with a token_type_ids input after position_ids."""
    emb, mask, pos = vb.decoder_example(m, ids, with_past)
    seq = {0: "batch", 1: "seq"}
    inputs = {
        "inputs_embeds": (emb, seq),
        "attention_mask": (mask, {0: "batch", 1: "total"}),
        "position_ids": (pos + 1, seq),  # Gemma's positions count from 1 (the mask's cumulative sum)
        "token_type_ids": (torch.zeros(ids.shape, dtype=torch.int64), seq),
    }
    vb.export_decoder(
        _PrefixDecoder(m), path, inputs, with_past, LAYERS, m.config.text_config.num_key_value_heads, HEAD_DIM
    )


def save_repo(repo: Path, prefix: bool = False) -> Path:
    """The Hub repository: config.json, preprocessor_config.json (with image_seq_length), the tokenizer at REPO/,
    the three ONNX files (an If-merged decoder) in REPO/onnx/."""
    m = build()
    onnx_dir = vb.start_repo(repo, m, tokenizer(), image_processor(), image_seq_length=N_IMAGE)
    px = torch.randn(1, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(1))
    ids = torch.tensor([[2, 7, 8, 9]])
    batch = {0: "batch"}
    vb.export_vision(_Vision(m), (px,), onnx_dir, ["pixel_values"], {"pixel_values": batch, "image_features": batch})
    vb.export_embed(m, ids, onnx_dir)
    if prefix:
        vb.export_merged_decoder(lambda path, past: _export_prefix_decoder(m, ids, path, with_past=past), onnx_dir)
    else:  # the language model alone, as the Hub's file (vm._Decoder takes model.language_model)
        vb.export_merged_decoder(
            lambda path, past: vm._export_decoder(m, ids, path, with_past=past, layers=LAYERS), onnx_dir
        )
    return Path(repo)


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
