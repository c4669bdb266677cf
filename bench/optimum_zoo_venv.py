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
}


def feeds(family: str) -> dict:
    """A fixed batch of 2: row 1 right-padded (ids set to <pad>, as a tokenizer pads), decoder ids unpadded."""
    g = torch.Generator().manual_seed(1)
    if family == "vision":
        return {"pixel_values": torch.randn(2, 3, 32, 32, generator=g)}
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
INIT = {"OPTConfig": "init_std", "BartConfig": "init_std", "MBartConfig": "init_std", "PegasusConfig": "init_std"}
INIT_VALUE = {"T5Config": ("initializer_factor", 5.0)}


def build(arch: str, src: Path) -> tuple[str, str]:
    family, cfg_cls, kw, model_cls, task = ARCHS[arch]
    torch.manual_seed(0)
    init = dict([INIT_VALUE.get(cfg_cls, (INIT.get(cfg_cls, "initializer_range"), 0.3))])
    cfg = getattr(T, cfg_cls)(**({} if family == "vision" else COMMON), **kw, **init)
    model = getattr(T, model_cls)(cfg).eval()
    model.save_pretrained(src)
    if family == "vision":
        T.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(src)
    else:
        vocab = {w: i for i, w in enumerate(["<pad>", "</s>", "<unk>"] + [f"w{i}" for i in range(V - 3)])}
        tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
        tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        T.PreTrainedTokenizerFast(
            tokenizer_object=tk, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
        ).save_pretrained(src)
    return family, task


# transformers returns only the last block's attentions per Swin stage: every block's come from its attention module
HOOKED = {"swin": "SwinSelfAttention"}


def reference(arch: str, family: str, src: Path, out: Path) -> None:
    model = getattr(T, ARCHS[arch][3]).from_pretrained(src, attn_implementation="eager").eval()
    f = feeds(family)
    hooked: list = []
    for m in model.modules():
        if type(m).__name__ == HOOKED.get(arch):
            m.register_forward_hook(lambda mod, args, outs: hooked.append(outs[1]))
    with torch.no_grad():
        o = model(**f, output_attentions=True)
    refs = hooked or canonical(family, o)
    arrays = {f"ref_{i:03d}": r.numpy() for i, r in enumerate(refs)}
    arrays.update({f"feed_{k}": v.numpy() for k, v in f.items()})
    if family == "decoder":  # batched LLM use pads on the left: row 1's first two positions
        left = {"input_ids": f["input_ids"].clone(), "attention_mask": torch.ones_like(f["attention_mask"])}
        left["attention_mask"][1, :2] = 0
        left["input_ids"][1, :2] = 0
        with torch.no_grad():
            ol = model(**left, output_attentions=True)
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
