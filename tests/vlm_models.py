"""A tiny random-init LLaVA (CLIP-ViT vision tower + Llama decoder) saved as a Hub repository and exported to the
Hub's three-file ONNX layout (``REPO/onnx/vision_encoder.onnx``, ``embed_tokens.onnx``,
``decoder_model_merged.onnx``; config, preprocessor and tokenizer at ``REPO/``), with its eager reference maps.

``decoder_model_merged.onnx`` comes in both forms found on the Hub: ``merged=True`` (the default) exports a
without-past and a with-past decoder and merges them as optimum's ``merge_decoders`` does (:func:`merge_decoders`:
one ``If`` on ``use_cache_branch``, the with-past graph its then-branch, the without-past graph its else-branch,
initializers deduplicated by content into the outer graph, node and tensor names left as exported, so both
branches hold the same names); ``merged=False`` writes the with-past decoder alone under the merged name (fed an
empty past it is the first step), as some onnx-community exports do.
"""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path

import onnx
from onnx import helper

torch = __import__("pytest").importorskip("torch")
transformers = __import__("pytest").importorskip("transformers")

IMAGE, PATCH = 32, 8
GRID = IMAGE // PATCH  # 4 x 4 patches; the CLS token is dropped ("default" feature select strategy)
N_IMAGE = GRID * GRID
LAYERS, HEADS, HIDDEN = 2, 4, 32
WORDS = "a photo of the cat sat on mat dog red blue green image shows where looks".split()
SPECIALS = ["<pad>", "<unk>", "<s>", "</s>", "<image>"]
VOCAB_SIZE = 64
IMAGE_TOKEN = SPECIALS.index("<image>")
MEAN, STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]  # CLIP's


def vocab() -> dict[str, int]:
    words = SPECIALS + WORDS
    words += [f"w{i}" for i in range(VOCAB_SIZE - len(words))]
    return {w: i for i, w in enumerate(words)}


def build():
    """The seeded tiny LlavaForConditionalGeneration (eager attention everywhere)."""
    T = transformers
    torch.manual_seed(0)
    vision = T.CLIPVisionConfig(
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        image_size=IMAGE,
        patch_size=PATCH,
        projection_dim=HIDDEN,
    )
    text = T.LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=2,
        eos_token_id=3,
        pad_token_id=0,
    )
    cfg = T.LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=IMAGE_TOKEN,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        image_seq_length=N_IMAGE,
    )
    m = T.LlavaForConditionalGeneration(cfg)
    m.set_attn_implementation("eager")
    m.config.use_cache = False
    return m.eval()


def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers

    tk = Tokenizer(models.WordLevel(vocab(), unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tk,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        additional_special_tokens=["<image>"],
    )


class _Vision(torch.nn.Module):
    """pixel_values -> image_features (the projector's output for the chosen layer, CLS dropped)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, pixel_values):
        # as LlavaModel.get_image_features: the chosen layer's states, CLS dropped, through the projector
        cfg = self.m.config
        out = self.m.model.vision_tower(pixel_values, output_hidden_states=True)
        states = out.hidden_states[cfg.vision_feature_layer][:, 1:]
        return self.m.model.multi_modal_projector(states)


class _Embed(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.e = m.get_input_embeddings()

    def forward(self, input_ids):
        return self.e(input_ids)


class _Decoder(torch.nn.Module):
    """inputs_embeds, attention_mask, position_ids, past key/values -> logits, present key/values."""

    def __init__(self, m):
        super().__init__()
        # LLaVA's decoder is model.language_model, Idefics3's model.text_model (tests/idefics3_models.py)
        self.lm = getattr(m.model, "language_model", None) or m.model.text_model
        self.head = m.lm_head

    def forward(self, inputs_embeds, attention_mask, position_ids, *past):
        cache = transformers.DynamicCache(config=self.lm.config)
        for i in range(self.lm.config.num_hidden_layers if past else 0):  # without past: an empty cache
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.lm(
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
        )
        present = []
        for layer in out.past_key_values.layers:
            present += [layer.keys, layer.values]
        return (self.head(out.last_hidden_state), *present)


def _image_features(m) -> int:
    """The number of image features per image (what the LLaVA processor expands ``<image>`` to)."""
    return N_IMAGE


def save_repo(repo: Path, merged: bool = True) -> Path:
    """The Hub repository: config.json, preprocessor_config.json, tokenizer at REPO/, the three ONNX files in
    REPO/onnx/."""
    m = build()
    repo = Path(repo)
    onnx_dir = repo / "onnx"
    onnx_dir.mkdir(parents=True, exist_ok=True)
    m.config.save_pretrained(str(repo))
    tokenizer().save_pretrained(str(repo))
    transformers.CLIPImageProcessor(
        size={"height": IMAGE, "width": IMAGE},
        crop_size={"height": IMAGE, "width": IMAGE},
        do_center_crop=False,
        image_mean=MEAN,
        image_std=STD,
    ).save_pretrained(str(repo))
    pre = json.loads((repo / "preprocessor_config.json").read_text())
    pre["image_seq_length"] = _image_features(m)  # LlavaProcessor's patch count (num_image_tokens)
    (repo / "preprocessor_config.json").write_text(json.dumps(pre, indent=2))
    px = torch.randn(1, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(1))
    ids = torch.tensor([[2, 5, 6, 7]])
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
            _Embed(m),
            (ids,),
            str(onnx_dir / "embed_tokens.onnx"),
            input_names=["input_ids"],
            output_names=["inputs_embeds"],
            dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "inputs_embeds": {0: "batch", 1: "seq"}},
            **how,
        )
        if merged:
            with tempfile.TemporaryDirectory() as tmp:
                _export_decoder(m, ids, Path(tmp) / "decoder_model.onnx", with_past=False)
                _export_decoder(m, ids, Path(tmp) / "decoder_with_past_model.onnx", with_past=True)
                merge_decoders(
                    onnx.load(str(Path(tmp) / "decoder_model.onnx")),
                    onnx.load(str(Path(tmp) / "decoder_with_past_model.onnx")),
                    onnx_dir / "decoder_model_merged.onnx",
                )
        else:
            _export_decoder(m, ids, onnx_dir / "decoder_model_merged.onnx", with_past=True)
    return repo


def _export_decoder(m, ids, path: Path, with_past: bool, layers: int = LAYERS) -> None:
    """The decoder alone: inputs_embeds, attention_mask, position_ids (and past key/values when ``with_past``) ->
    logits and present key/values, as optimum's decoder_model.onnx / decoder_with_past_model.onnx."""
    kv, hd = m.config.text_config.num_key_value_heads, HIDDEN // HEADS
    past_names = [f"past_key_values.{i}.{w}" for i in range(layers) for w in ("key", "value")]
    present_names = [n.replace("past_key_values", "present") for n in past_names]
    emb = m.get_input_embeddings()(ids)
    past = [torch.zeros(1, kv, 2, hd) for _ in past_names] if with_past else []
    total = emb.shape[1] + (2 if with_past else 0)
    axes = {
        "inputs_embeds": {0: "batch", 1: "seq"},
        "attention_mask": {0: "batch", 1: "total"},
        "position_ids": {0: "batch", 1: "seq"},
        "logits": {0: "batch", 1: "seq"},
    }
    axes.update({n: {0: "batch", 2: "past"} for n in past_names if with_past})
    axes.update({n: {0: "batch", 2: "total"} for n in present_names})
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Decoder(m),
            (emb, torch.ones(1, total, dtype=torch.int64), torch.arange(total - emb.shape[1], total)[None], *past),
            str(path),
            input_names=["inputs_embeds", "attention_mask", "position_ids", *(past_names if with_past else [])],
            output_names=["logits", *present_names],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )


def _in_branch(t: onnx.TensorProto) -> bool:
    """optimum keeps scalars and 1-D int32/int64 initializers inside each branch (ONNX Runtime breaks otherwise)."""
    return len(t.dims) == 0 or (len(t.dims) == 1 and t.data_type in (onnx.TensorProto.INT32, onnx.TensorProto.INT64))


def merge_decoders(no_past: onnx.ModelProto, with_past: onnx.ModelProto, out: Path) -> None:
    """optimum.onnx.merge_decoders, written out: ``If(use_cache_branch)`` whose then-branch is the with-past graph
    and else-branch the without-past graph; the inputs are the union of both (past key/values are fed to both
    and ignored by the else-branch); the weights of both, deduplicated by content, are initializers of the outer
    graph under shared names; small constants stay in their branch."""
    shared: dict[tuple, str] = {}
    outer: list[onnx.TensorProto] = []
    branches = []
    for model, name in ((with_past, "with_past"), (no_past, "no_past")):
        rename: dict[str, str] = {}
        kept = []
        for t in model.graph.initializer:
            if _in_branch(t):
                kept.append(t)
                continue
            key = (t.data_type, tuple(t.dims), t.raw_data or onnx.numpy_helper.to_array(t).tobytes())
            if key not in shared:
                shared[key] = f"merged_{len(shared)}"
                w = onnx.TensorProto()
                w.CopyFrom(t)
                w.name = shared[key]
                outer.append(w)
            rename[t.name] = shared[key]
        for node in model.graph.node:
            for k, i in enumerate(node.input):
                node.input[k] = rename.get(i, i)
        g = helper.make_graph(list(model.graph.node), name, [], list(model.graph.output), initializer=kept)
        branches.append(g)
    if [o.name for o in no_past.graph.output] != [o.name for o in with_past.graph.output]:
        raise ValueError("the two decoders' outputs differ")
    inputs, seen = [], set()
    for model in (no_past, with_past):  # optimum's _get_all_inputs: first the decoder's, then the new ones
        for i in model.graph.input:
            if i.name not in seen:
                seen.add(i.name)
                inputs.append(i)
    flag = helper.make_tensor_value_info("use_cache_branch", onnx.TensorProto.BOOL, [1])
    node = helper.make_node(
        "If",
        ["use_cache_branch"],
        [o.name for o in no_past.graph.output],
        name="optimum::if",
        then_branch=branches[0],
        else_branch=branches[1],
    )
    graph = helper.make_graph([node], "merged", [*inputs, flag], list(no_past.graph.output), initializer=outer)
    model = helper.make_model_gen_version(graph, producer_name="optimum-onnx", opset_imports=no_past.opset_import)
    model.ir_version = 9
    onnx.save(model, str(out))


def reference(m, pixel_values, input_ids):
    """transformers' eager maps: the vision tower's every layer, then the decoder's (LlavaForConditionalGeneration
    on the same image and expanded prompt), and the logits."""
    with torch.no_grad():
        v = m.model.vision_tower(torch.as_tensor(pixel_values), output_attentions=True)
        o = m(
            input_ids=torch.as_tensor(input_ids),
            pixel_values=torch.as_tensor(pixel_values),
            attention_mask=torch.ones(input_ids.shape, dtype=torch.int64),
            output_attentions=True,
        )
    return [a.numpy() for a in v.attentions], [a.numpy() for a in o.attentions], o.logits.numpy()
