"""Runs INSIDE the optimum venv (tests/optimum_env.py): build one tiny random-init architecture, dump transformers'
eager attentions for a fixed padded batch, and export it with optimum in the requested variants.

    python optimum_zoo_venv.py ARCH OUT VARIANT [VARIANT ...]

VARIANT: ``cli`` (what ``optimum-cli export onnx`` does: main_export re-loads the folder with transformers' default
attention, sdpa where the class has it), ``cfg-eager`` (the same with attn_implementation=eager written into
config.json), ``eager`` (loaded eager in Python, exported with onnx_export_from_model), ``eager-nopast`` (the same,
the task without ``-with-past``).  Writes OUT/hf, OUT/ref.npz, OUT/onnx-VARIANT and
OUT/VARIANT.json (what optimum actually did: task, attention implementation it loaded, error if any).
Not imported by attnviz: bench/optimum_zoo.py passes this file's text to the venv.
"""

import inspect
import json
import sys
import traceback
from pathlib import Path

import numpy as np
import torch
import transformers as T
from tokenizers import Tokenizer, models, pre_tokenizers

H, L, NH = 32, 2, 4  # hidden, layers, heads
GEN = 6  # greedy steps checked through the exported KV cache
V = 99  # vocabulary: <pad> </s> <unk> w0..w95
COMMON = dict(vocab_size=V, pad_token_id=0, bos_token_id=1, eos_token_id=1)
BERTISH = dict(
    hidden_size=H, num_hidden_layers=L, num_attention_heads=NH, intermediate_size=2 * H, max_position_embeddings=64
)
LLAMAISH = dict(
    hidden_size=H, num_hidden_layers=L, num_attention_heads=NH, intermediate_size=2 * H, max_position_embeddings=64
)
BARTISH = dict(
    d_model=H,
    encoder_layers=L,
    decoder_layers=L,
    encoder_attention_heads=NH,
    decoder_attention_heads=NH,
    encoder_ffn_dim=2 * H,
    decoder_ffn_dim=2 * H,
    max_position_embeddings=64,
    decoder_start_token_id=1,
    forced_eos_token_id=None,
)
VISION = dict(
    hidden_size=H,
    num_hidden_layers=L,
    num_attention_heads=NH,
    intermediate_size=2 * H,
    image_size=32,
    patch_size=8,
    num_channels=3,
)


T5ISH = dict(d_model=H, d_kv=H // NH, d_ff=2 * H, num_layers=L, num_heads=NH, decoder_start_token_id=0)
XLMISH = dict(emb_dim=H, n_layers=L, n_heads=NH, max_position_embeddings=64, pad_index=0, bos_index=1, eos_index=1)
GEMMAISH = dict(LLAMAISH, num_key_value_heads=2, head_dim=H // NH)
# session 22 (zoo22): arch -> (family, config class, config kwargs, model class, task); the tiny sizes the configs
# allow (head dims of 8: Gemma/Qwen3 default to 128-256; rotary dims that fit them)
ZOO22 = {
    "gpt2": (
        "decoder",
        "GPT2Config",
        dict(n_embd=H, n_layer=L, n_head=NH, n_positions=64),
        "GPT2LMHeadModel",
        "text-generation",
    ),
    "gemma": ("decoder", "GemmaConfig", GEMMAISH, "GemmaForCausalLM", "text-generation"),
    "gemma2": (
        "decoder",
        "Gemma2Config",
        dict(GEMMAISH, query_pre_attn_scalar=8),
        "Gemma2ForCausalLM",
        "text-generation",
    ),
    "gemma3_text": (
        "decoder",
        "Gemma3TextConfig",
        dict(GEMMAISH, query_pre_attn_scalar=8),
        "Gemma3ForCausalLM",
        "text-generation",
    ),
    "phi3": ("decoder", "Phi3Config", dict(LLAMAISH, num_key_value_heads=2), "Phi3ForCausalLM", "text-generation"),
    "qwen3": ("decoder", "Qwen3Config", GEMMAISH, "Qwen3ForCausalLM", "text-generation"),
    "gptj": (
        "decoder",
        "GPTJConfig",
        dict(n_embd=H, n_layer=L, n_head=NH, n_positions=64, rotary_dim=4),
        "GPTJForCausalLM",
        "text-generation",
    ),
    "codegen": (
        "decoder",
        "CodeGenConfig",
        dict(n_embd=H, n_layer=L, n_head=NH, n_positions=64, n_ctx=64, rotary_dim=4),
        "CodeGenForCausalLM",
        "text-generation",
    ),
    "gpt_bigcode": (  # multi-query: one key/value head shared by the 4 query heads
        "decoder",
        "GPTBigCodeConfig",
        dict(n_embd=H, n_layer=L, n_head=NH, n_positions=64, multi_query=True),
        "GPTBigCodeForCausalLM",
        "text-generation",
    ),
    "gpt_neo": (  # layer 1 local: a sliding window of 4 positions
        "decoder",
        "GPTNeoConfig",
        dict(
            hidden_size=H,
            num_layers=L,
            num_heads=NH,
            max_position_embeddings=64,
            window_size=4,
            attention_types=[[["global", "local"], 1]],
        ),
        "GPTNeoForCausalLM",
        "text-generation",
    ),
    "granite": (
        "decoder",
        "GraniteConfig",
        dict(LLAMAISH, num_key_value_heads=2),
        "GraniteForCausalLM",
        "text-generation",
    ),
    "olmo": ("decoder", "OlmoConfig", LLAMAISH, "OlmoForCausalLM", "text-generation"),
    "olmo2": ("decoder", "Olmo2Config", LLAMAISH, "Olmo2ForCausalLM", "text-generation"),
    "stablelm": (
        "decoder",
        "StableLmConfig",
        dict(LLAMAISH, partial_rotary_factor=0.5),
        "StableLmForCausalLM",
        "text-generation",
    ),
    "mpt": (  # ALiBi position bias
        "decoder",
        "MptConfig",
        dict(d_model=H, n_heads=NH, n_layers=L, max_seq_len=64, expansion_ratio=2),
        "MptForCausalLM",
        "text-generation",
    ),
    "modernbert": ("encoder", "ModernBertConfig", BERTISH, "ModernBertModel", "feature-extraction"),
    "mobilebert": (
        "encoder",
        "MobileBertConfig",
        dict(BERTISH, embedding_size=16, intra_bottleneck_size=16, num_feedforward_networks=1),
        "MobileBertModel",
        "feature-extraction",
    ),
    "mpnet": ("encoder", "MPNetConfig", BERTISH, "MPNetModel", "feature-extraction"),
    "roformer": ("encoder", "RoFormerConfig", BERTISH, "RoFormerModel", "feature-extraction"),
    "camembert": ("encoder", "CamembertConfig", BERTISH, "CamembertModel", "feature-extraction"),
    "convbert": ("encoder", "ConvBertConfig", dict(BERTISH, embedding_size=H), "ConvBertModel", "feature-extraction"),
    "deberta": (
        "encoder",
        "DebertaConfig",
        dict(BERTISH, relative_attention=True, max_relative_positions=-1, pos_att_type=["p2c", "c2p"]),
        "DebertaModel",
        "feature-extraction",
    ),
    "xlm": ("encoder", "XLMConfig", XLMISH, "XLMModel", "feature-extraction"),
    "flaubert": ("encoder", "FlaubertConfig", XLMISH, "FlaubertModel", "feature-extraction"),
    "nystromformer": ("encoder", "NystromformerConfig", BERTISH, "NystromformerModel", "feature-extraction"),
    "marian": ("seq2seq", "MarianConfig", BARTISH, "MarianMTModel", "text2text-generation"),
    "m2m_100": ("seq2seq", "M2M100Config", BARTISH, "M2M100ForConditionalGeneration", "text2text-generation"),
    "blenderbot": (
        "seq2seq",
        "BlenderbotConfig",
        BARTISH,
        "BlenderbotForConditionalGeneration",
        "text2text-generation",
    ),
    "blenderbot-small": (
        "seq2seq",
        "BlenderbotSmallConfig",
        BARTISH,
        "BlenderbotSmallForConditionalGeneration",
        "text2text-generation",
    ),
    "mt5": ("seq2seq", "MT5Config", T5ISH, "MT5ForConditionalGeneration", "text2text-generation"),
    "longt5": (
        "seq2seq",
        "LongT5Config",
        dict(T5ISH, local_radius=2),
        "LongT5ForConditionalGeneration",
        "text2text-generation",
    ),
    "dinov2": (
        "vision",
        "Dinov2Config",
        {k: v for k, v in VISION.items() if k != "intermediate_size"},
        "Dinov2Model",
        "feature-extraction",
    ),
    "yolos": (
        "vision",
        "YolosConfig",
        dict(VISION, image_size=[32, 32], num_detection_tokens=3),
        "YolosModel",
        "feature-extraction",
    ),
    "data2vec-vision": (
        "vision",
        "Data2VecVisionConfig",
        dict(VISION, use_relative_position_bias=True),
        "Data2VecVisionModel",
        "feature-extraction",
    ),
    # two stages: 8x8 patches whose keys are reduced 2x2 (16 keys), then 4x4 patches, full keys
    "segformer": (
        "vision",
        "SegformerConfig",
        dict(
            num_encoder_blocks=2,
            depths=[1, 1],
            sr_ratios=[2, 1],
            hidden_sizes=[16, H],
            patch_sizes=[7, 3],
            strides=[4, 2],
            num_attention_heads=[2, NH],
            mlp_ratios=[2, 2],
            decoder_hidden_size=H,
        ),
        "SegformerModel",
        "feature-extraction",
    ),
    # second round: newer decoders, sparse/local encoders, vision models without output_attentions (CAPTURED)
    "gpt_oss": (  # attention sinks: a learned logit per head in the softmax, dropped after it
        "decoder",
        "GptOssConfig",
        dict(GEMMAISH, num_local_experts=2, num_experts_per_tok=1, sliding_window=4),
        "GptOssForCausalLM",
        "text-generation",
    ),
    "cohere": (
        "decoder",
        "CohereConfig",
        dict(LLAMAISH, num_key_value_heads=2),
        "CohereForCausalLM",
        "text-generation",
    ),
    "smollm3": (
        "decoder",
        "SmolLM3Config",
        dict(LLAMAISH, num_key_value_heads=2),
        "SmolLM3ForCausalLM",
        "text-generation",
    ),
    "qwen3_moe": (
        "decoder",
        "Qwen3MoeConfig",
        dict(GEMMAISH, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16),
        "Qwen3MoeForCausalLM",
        "text-generation",
    ),
    "deepseek_v3": (  # multi-head latent attention
        "decoder",
        "DeepseekV3Config",
        dict(
            LLAMAISH,
            num_key_value_heads=NH,
            kv_lora_rank=16,
            q_lora_rank=None,
            qk_rope_head_dim=4,
            qk_nope_head_dim=4,
            v_head_dim=8,
            n_routed_experts=2,
            num_experts_per_tok=1,
            n_group=1,
            topk_group=1,
            first_k_dense_replace=1,
            moe_intermediate_size=16,
        ),
        "DeepseekV3ForCausalLM",
        "text-generation",
    ),
    "nemotron": (
        "decoder",
        "NemotronConfig",
        dict(LLAMAISH, num_key_value_heads=2),
        "NemotronForCausalLM",
        "text-generation",
    ),
    "helium": ("decoder", "HeliumConfig", dict(GEMMAISH), "HeliumForCausalLM", "text-generation"),
    "glm": ("decoder", "GlmConfig", dict(GEMMAISH), "GlmForCausalLM", "text-generation"),
    "arcee": ("decoder", "ArceeConfig", dict(LLAMAISH, num_key_value_heads=2), "ArceeForCausalLM", "text-generation"),
    "longformer": (
        "encoder",
        "LongformerConfig",
        dict(BERTISH, attention_window=4),
        "LongformerModel",
        "feature-extraction",
    ),
    "big_bird": (
        "encoder",
        "BigBirdConfig",
        dict(BERTISH, block_size=2, num_random_blocks=1),
        "BigBirdModel",
        "feature-extraction",
    ),
    "esm": ("encoder", "EsmConfig", dict(BERTISH, position_embedding_type="rotary"), "EsmModel", "feature-extraction"),
    "squeezebert": (
        "encoder",
        "SqueezeBertConfig",
        dict(BERTISH, embedding_size=H),
        "SqueezeBertModel",
        "feature-extraction",
    ),
    "rembert": (
        "encoder",
        "RemBertConfig",
        dict(BERTISH, input_embedding_size=16, output_embedding_size=16),
        "RemBertModel",
        "feature-extraction",
    ),
    "megatron-bert": ("encoder", "MegatronBertConfig", BERTISH, "MegatronBertModel", "feature-extraction"),
    "bigbird_pegasus": (
        "seq2seq",
        "BigBirdPegasusConfig",
        dict(BARTISH, block_size=2, num_random_blocks=1),
        "BigBirdPegasusForConditionalGeneration",
        "text2text-generation",
    ),
    # 32x32 pixels in 4x4 patches, 4x4 windows, layer 1 shifted: as swin above
    "swinv2": (
        "vision",
        "Swinv2Config",
        dict(image_size=32, patch_size=4, embed_dim=H, depths=[2], num_heads=[NH], window_size=4),
        "Swinv2Model",
        "feature-extraction",
    ),
    "pvt": (  # as segformer: keys reduced 2x2 in stage 1
        "vision",
        "PvtConfig",
        dict(
            image_size=32,
            num_encoder_blocks=2,
            depths=[1, 1],
            sequence_reduction_ratios=[2, 1],
            hidden_sizes=[16, H],
            patch_sizes=[4, 2],
            strides=[4, 2],
            num_attention_heads=[2, NH],
            mlp_ratios=[2, 2],
        ),
        "PvtModel",
        "feature-extraction",
    ),
    # 64x64 pixels: a 4x4 grid after the 16x conv stem, subsampled to 2x2 (queries fewer than keys), then 1x1
    "levit": (
        "vision",
        "LevitConfig",
        dict(
            image_size=64,
            hidden_sizes=[32, 48, 64],
            num_attention_heads=[NH, NH, NH],
            depths=[1, 1, 1],
            key_dim=[8, 8, 8],
        ),
        "LevitModel",
        "feature-extraction",
    ),
    "mobilevit": (  # attention across patches, once per pixel offset within a 2x2 patch
        "vision",
        "MobileViTConfig",
        dict(
            image_size=32,
            hidden_sizes=[16, 24, 32],
            neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 32],
            num_attention_heads=NH,
        ),
        "MobileViTModel",
        "feature-extraction",
    ),
}


# arch -> (family, config class, config kwargs, model class, task without -with-past)
ARCHS = {
    "bert": ("encoder", "BertConfig", BERTISH, "BertModel", "feature-extraction"),
    "roberta": ("encoder", "RobertaConfig", BERTISH, "RobertaModel", "feature-extraction"),
    "distilbert": (
        "encoder",
        "DistilBertConfig",
        dict(dim=H, n_layers=L, n_heads=NH, hidden_dim=2 * H, max_position_embeddings=64),
        "DistilBertModel",
        "feature-extraction",
    ),
    "albert": ("encoder", "AlbertConfig", dict(BERTISH, embedding_size=16), "AlbertModel", "feature-extraction"),
    "electra": ("encoder", "ElectraConfig", dict(BERTISH, embedding_size=H), "ElectraModel", "feature-extraction"),
    "xlm-roberta": ("encoder", "XLMRobertaConfig", BERTISH, "XLMRobertaModel", "feature-extraction"),
    "deberta-v2": (
        "encoder",
        "DebertaV2Config",
        dict(
            BERTISH,
            relative_attention=True,
            position_buckets=16,
            max_relative_positions=-1,
            pos_att_type=["p2c", "c2p"],
        ),
        "DebertaV2Model",
        "feature-extraction",
    ),
    "llama": ("decoder", "LlamaConfig", dict(LLAMAISH, num_key_value_heads=2), "LlamaForCausalLM", "text-generation"),
    "mistral": (
        "decoder",
        "MistralConfig",
        dict(LLAMAISH, num_key_value_heads=2),
        "MistralForCausalLM",
        "text-generation",
    ),
    "qwen2": ("decoder", "Qwen2Config", dict(LLAMAISH, num_key_value_heads=2), "Qwen2ForCausalLM", "text-generation"),
    "gpt-neox": ("decoder", "GPTNeoXConfig", LLAMAISH, "GPTNeoXForCausalLM", "text-generation"),
    "opt": (
        "decoder",
        "OPTConfig",
        dict(
            hidden_size=H,
            num_hidden_layers=L,
            num_attention_heads=NH,
            ffn_dim=2 * H,
            max_position_embeddings=64,
            word_embed_proj_dim=H,
        ),
        "OPTForCausalLM",
        "text-generation",
    ),
    "bloom": (
        "decoder",
        "BloomConfig",
        dict(hidden_size=H, n_layer=L, n_head=NH),
        "BloomForCausalLM",
        "text-generation",
    ),
    "falcon": (
        "decoder",
        "FalconConfig",
        dict(hidden_size=H, num_hidden_layers=L, num_attention_heads=NH, max_position_embeddings=64),
        "FalconForCausalLM",
        "text-generation",
    ),
    "phi": ("decoder", "PhiConfig", dict(LLAMAISH, partial_rotary_factor=0.5), "PhiForCausalLM", "text-generation"),
    "bart": ("seq2seq", "BartConfig", BARTISH, "BartForConditionalGeneration", "text2text-generation"),
    "mbart": ("seq2seq", "MBartConfig", BARTISH, "MBartForConditionalGeneration", "text2text-generation"),
    "pegasus": ("seq2seq", "PegasusConfig", BARTISH, "PegasusForConditionalGeneration", "text2text-generation"),
    "t5": (
        "seq2seq",
        "T5Config",
        dict(d_model=H, d_kv=H // NH, d_ff=2 * H, num_layers=L, num_heads=NH, decoder_start_token_id=0),
        "T5ForConditionalGeneration",
        "text2text-generation",
    ),
    "vit": ("vision", "ViTConfig", VISION, "ViTModel", "feature-extraction"),
    "deit": ("vision", "DeiTConfig", VISION, "DeiTModel", "feature-extraction"),
    "beit": ("vision", "BeitConfig", dict(VISION, use_relative_position_bias=True), "BeitModel", "feature-extraction"),
    # 32x32 pixels in 4x4 patches: an 8x8 grid in 4x4 windows (4 windows), layer 1 shifted by 2
    "swin": (
        "vision",
        "SwinConfig",
        dict(image_size=32, patch_size=4, embed_dim=H, depths=[2], num_heads=[NH], window_size=4),
        "SwinModel",
        "feature-extraction",
    ),
    # session 22 (zoo22): the architectures optimum-onnx 0.1 exports beyond the 23 above, most used first
    **ZOO22,
}


def feeds(family: str, size: int = 32) -> dict:
    """A fixed batch of 2: row 1 right-padded (ids set to <pad>, as a tokenizer pads), decoder ids unpadded."""
    g = torch.Generator().manual_seed(1)
    if family == "vision":
        return {"pixel_values": torch.randn(2, 3, size, size, generator=g)}
    ids = torch.randint(3, V, (2, 7), generator=g)
    mask = torch.ones_like(ids)
    mask[1, -2:] = 0
    ids[mask == 0] = 0
    f = {"input_ids": ids, "attention_mask": mask}
    if family == "seq2seq":
        f["decoder_input_ids"] = torch.randint(3, V, (2, 5), generator=g)
    return f


def canonical(family: str, o) -> list:
    """Reference maps in attnviz's order: encoder self layers, then per decoder layer self and cross."""
    if family == "seq2seq":
        refs = list(o.encoder_attentions)
        for s, c in zip(o.decoder_attentions, o.cross_attentions):
            refs += [s, c]
        return refs
    return list(o.attentions)


# weights drawn ~15x wider than the defaults: a default-init tiny model attends almost uniformly, and then a map
# from the wrong head or layer would still "match" transformers'
INIT = {
    "OPTConfig": "init_std",
    "BartConfig": "init_std",
    "MBartConfig": "init_std",
    "PegasusConfig": "init_std",
    **dict.fromkeys(
        (
            "MarianConfig",
            "M2M100Config",
            "BlenderbotConfig",
            "BlenderbotSmallConfig",
            "XLMConfig",
            "FlaubertConfig",
            "BigBirdPegasusConfig",
        ),
        "init_std",
    ),
}
INIT_VALUE = {
    **dict.fromkeys(("T5Config", "MT5Config", "LongT5Config"), ("initializer_factor", 5.0)),
}


def build(arch: str, src: Path) -> tuple[str, str]:
    family, cfg_cls, kw, model_cls, task = ARCHS[arch]
    torch.manual_seed(0)
    init = dict([INIT_VALUE.get(cfg_cls, (INIT.get(cfg_cls, "initializer_range"), 0.3))])
    cfg = getattr(T, cfg_cls)(**({} if family == "vision" else COMMON), **kw, **init)
    model = getattr(T, model_cls)(cfg).eval()
    model.save_pretrained(src)
    if family == "vision":
        px = IMAGE_SIZE.get(arch, 32)
        T.ViTImageProcessor(size={"height": px, "width": px}).save_pretrained(src)
    else:
        vocab = {w: i for i, w in enumerate(["<pad>", "</s>", "<unk>"] + [f"w{i}" for i in range(V - 3)])}
        tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
        tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        T.PreTrainedTokenizerFast(
            tokenizer_object=tk, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
        ).save_pretrained(src)
    return family, task


# transformers returns only the last block's attentions per Swin stage: every block's come from its attention module
HOOKED = {"swin": "SwinSelfAttention", "swinv2": "Swinv2SelfAttention"}
IMAGE_SIZE = {"levit": 64}
# no output_attentions in transformers: every softmax over the last axis taken as the forward computes it
CAPTURED = {"levit", "mobilevit"}


def captured_softmax(model, f: dict) -> list:
    got: list = []
    fn, meth = torch.nn.functional.softmax, torch.Tensor.softmax

    def keep(p, dim):
        if dim in (-1, p.dim() - 1):
            got.append(p)
        return p

    torch.nn.functional.softmax = lambda x, dim=None, *a, **k: keep(fn(x, dim, *a, **k), dim)
    torch.Tensor.softmax = lambda x, dim=None, *a, **k: keep(meth(x, dim, *a, **k), dim)
    try:
        with torch.no_grad():
            model(**f)
    finally:
        torch.nn.functional.softmax, torch.Tensor.softmax = fn, meth
    return got


def reference(arch: str, family: str, src: Path, out: Path) -> None:
    model = getattr(T, ARCHS[arch][3]).from_pretrained(src, attn_implementation="eager").eval()
    f = feeds(family, IMAGE_SIZE.get(arch, 32))
    hooked: list = []
    for m in model.modules():
        if type(m).__name__ == HOOKED.get(arch):
            m.register_forward_hook(lambda mod, args, outs: hooked.append(outs[1]))
    if arch in CAPTURED:
        refs = captured_softmax(model, f)
    else:
        with torch.no_grad():
            o = model(**f, output_attentions=True)
        refs = hooked or canonical(family, o)
    arrays = {f"ref_{i:03d}": r.numpy() for i, r in enumerate(refs)}
    arrays.update({f"feed_{k}": v.numpy() for k, v in f.items()})
    if family == "decoder":  # batched LLM use pads on the left: row 1's first two positions
        left = {"input_ids": f["input_ids"].clone(), "attention_mask": torch.ones_like(f["attention_mask"])}
        left["attention_mask"][1, :2] = 0
        left["input_ids"][1, :2] = 0
        # positions counted over each row's real tokens, as generate() counts them: a plain forward counts 0..T-1
        # over the pads too, which shifts a left-padded row of a model with absolute positions (GPT-2; OPT counts
        # from the mask itself)
        pos = {}
        if "position_ids" in inspect.signature(model.forward).parameters:
            pos["position_ids"] = (left["attention_mask"].cumsum(-1) - 1).masked_fill(left["attention_mask"] == 0, 1)
        with torch.no_grad():
            ol = model(**left, **pos, output_attentions=True)
        arrays.update({f"left_{i:03d}": r.numpy() for i, r in enumerate(ol.attentions)})
        arrays.update({f"leftfeed_{k}": v.numpy() for k, v in left.items()})
    if family in ("decoder", "seq2seq"):  # greedy ids from the unpadded row: the exports' KV cache must give them
        with torch.no_grad():
            ids = model.generate(
                input_ids=f["input_ids"][:1],
                attention_mask=f["attention_mask"][:1],
                max_new_tokens=GEN,
                do_sample=False,
                num_beams=1,
                min_length=0,
                forced_eos_token_id=None,
                bad_words_ids=None,
            )
        arrays["gen_ids"] = ids[0].numpy()
    np.savez(out / "ref.npz", **arrays)


def _exporter(variant: str, src: Path, task: str):
    """How each variant reaches optimum: ``cli`` is exactly ``optimum-cli export onnx`` (main_export re-loads the
    folder with transformers' default attention); ``cfg-eager`` is the same after writing attn_implementation=eager
    into config.json; ``eager``/``eager-nopast`` load the model eager in Python and hand it to onnx_export_from_model
    (main_export's own second half), the way that reliably keeps eager attention."""
    from optimum.exporters.onnx import main_export, onnx_export_from_model
    from optimum.utils.save_utils import maybe_load_preprocessors

    cfg_path = src / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.pop("attn_implementation", None)
    if variant == "cfg-eager":
        cfg["attn_implementation"] = "eager"
    cfg_path.write_text(json.dumps(cfg, indent=2))
    if variant in ("cli", "cfg-eager"):
        return lambda out: main_export(str(src), output=str(out), task=task, do_validation=False)

    def from_model(out):
        from optimum.exporters.tasks import TasksManager

        model = TasksManager.get_model_from_task(task, str(src), framework="pt", attn_implementation="eager")
        onnx_export_from_model(
            model, str(out), task=task, do_validation=False, preprocessors=maybe_load_preprocessors(str(src))
        )

    return from_model


def export(src: Path, out: Path, variant: str, family: str, task: str) -> dict:
    if family in ("decoder", "seq2seq") and not variant.endswith("nopast"):
        task += "-with-past"
    loaded = {}
    real = T.PreTrainedModel._check_and_adjust_attn_implementation

    def spy(self, *a, **k):  # what the model optimum exports really runs with
        r = real(self, *a, **k)
        loaded.setdefault("attn", r)
        return r

    T.PreTrainedModel._check_and_adjust_attn_implementation = spy
    info = {"variant": variant, "task": task}
    try:
        _exporter(variant, src, task)(out / f"onnx-{variant}")
    except Exception as e:
        info["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        traceback.print_exc()
    finally:
        T.PreTrainedModel._check_and_adjust_attn_implementation = real
    info["attn_loaded"] = loaded.get("attn")
    (out / f"{variant}.json").write_text(json.dumps(info))
    return info


def main() -> None:
    arch, out, variants = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
    src = out / "hf"
    src.mkdir(parents=True, exist_ok=True)
    family, task = build(arch, src)
    reference(arch, family, src, out)
    for v in variants:
        print(json.dumps(export(src, out, v, family, task)))


main()
