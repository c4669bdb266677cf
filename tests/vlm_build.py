"""What the tiny VLM builders share (tests/vlm_models.py: LLaVA, idefics3_models.py, paligemma_models.py,
qwen2vl_models.py): the word-level vocabulary and tokenizer, the Hub's three-file folder layout, the quiet legacy
``torch.onnx.export``, the decoder exported without and with past and If-merged as optimum's ``merge_decoders``
does, and :func:`cached_repo`, which builds a family's repository once per machine (tests/build_cache.py: keyed on
the builder's sources, its arguments and the exporting packages' versions), so a second run on the same machine
skips the exports and a fresh machine (CI) builds them.  The tests still compare against transformers' eager
model, which they build from the same seeded source.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import build_cache
import onnx
from onnx import helper

torch = __import__("pytest").importorskip("torch")
transformers = __import__("pytest").importorskip("transformers")

OPSET = 17
PAST = 2  # past positions in the with-past decoder's example inputs (the axis is dynamic)


def word_vocab(specials: list[str], words: list[str], size: int) -> dict[str, int]:
    """Specials first, then the words, then ``w<i>`` fillers up to ``size`` entries."""
    names = specials + words
    names += [f"w{i}" for i in range(size - len(names))]
    return {w: i for i, w in enumerate(names)}


def word_tokenizer(vocab: dict[str, int], unk: str, added: tuple[str, ...] = (), **special):
    """A whitespace-split word-level fast tokenizer; ``added`` are tokens of their own outside the vocabulary's
    pre-tokenization (PaliGemma's ``\\n``); ``special`` are the tokenizer's special-token arguments."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

    tk = Tokenizer(models.WordLevel(vocab, unk_token=unk))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if added:
        tk.add_tokens([AddedToken(t, normalized=False) for t in added])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tk, unk_token=unk, **special)


def export(module, args: tuple, path: Path, inputs: list[str], outputs: list[str], axes: dict) -> None:
    """The legacy (TorchScript) exporter at opset 17, its tracer warnings silenced."""
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            args,
            str(path),
            input_names=inputs,
            output_names=outputs,
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )


def start_repo(repo: Path, m, tokenizer, image_processor, **preprocessor) -> Path:
    """REPO/ with config.json, the tokenizer and preprocessor_config.json (``preprocessor`` entries added to the
    latter, as the Hub's files carry ``image_seq_length``); returns the empty REPO/onnx/."""
    import json

    repo = Path(repo)
    onnx_dir = repo / "onnx"
    onnx_dir.mkdir(parents=True, exist_ok=True)
    m.config.save_pretrained(str(repo))
    tokenizer.save_pretrained(str(repo))
    image_processor.save_pretrained(str(repo))
    if preprocessor:
        pre = json.loads((repo / "preprocessor_config.json").read_text())
        pre.update(preprocessor)
        (repo / "preprocessor_config.json").write_text(json.dumps(pre, indent=2))
    return onnx_dir


def export_vision(module, args: tuple, onnx_dir: Path, inputs: list[str], axes: dict) -> None:
    export(module, args, onnx_dir / "vision_encoder.onnx", inputs, ["image_features"], axes)


class Embed(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.e = m.get_input_embeddings()

    def forward(self, input_ids):
        return self.e(input_ids)


def export_embed(m, ids, onnx_dir: Path) -> None:
    """input_ids -> inputs_embeds, as the Hub's embed_tokens.onnx."""
    seq = {0: "batch", 1: "seq"}
    export(
        Embed(m),
        (ids,),
        onnx_dir / "embed_tokens.onnx",
        ["input_ids"],
        ["inputs_embeds"],
        {
            "input_ids": seq,
            "inputs_embeds": seq,
        },
    )


class CachedDecoder(torch.nn.Module):
    """inputs_embeds, attention_mask, position_ids, the ``extra`` inputs, past key/values -> logits, present
    key/values: ``lm`` run on a DynamicCache filled from the past (empty without one)."""

    def __init__(self, lm, head, config, layers: int, extra: tuple[str, ...] = ()):
        super().__init__()
        self.lm, self.head, self.config, self.layers, self.extra = lm, head, config, layers, extra

    def forward(self, inputs_embeds, attention_mask, position_ids, *rest):
        named, past = dict(zip(self.extra, rest)), rest[len(self.extra) :]
        cache = transformers.DynamicCache(config=self.config)
        for i in range(self.layers if past else 0):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.lm(
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
            **named,
        )
        present = []
        for layer in out.past_key_values.layers:
            present += [layer.keys, layer.values]
        return (self.head(out.last_hidden_state), *present)


def decoder_example(m, ids, with_past: bool):
    """The example inputs_embeds, attention_mask and position_ids [1, seq] (after PAST positions with past)."""
    emb = m.get_input_embeddings()(ids)
    total = emb.shape[1] + (PAST if with_past else 0)
    return emb, torch.ones(1, total, dtype=torch.int64), torch.arange(total - emb.shape[1], total)[None]


def export_decoder(module, path: Path, inputs: dict, with_past: bool, layers: int, kv: int, head_dim: int) -> None:
    """``inputs``: name -> (example, dynamic axes) in the decoder's argument order; past key/values (``layers``
    pairs of [batch, ``kv``, past, ``head_dim``]) follow when ``with_past``, present key/values and logits come out,
    named as optimum's decoder_model.onnx / decoder_with_past_model.onnx."""
    past_names = [f"past_key_values.{i}.{w}" for i in range(layers) for w in ("key", "value")] if with_past else []
    present_names = [f"present.{i}.{w}" for i in range(layers) for w in ("key", "value")]
    past = [torch.zeros(1, kv, PAST, head_dim) for _ in past_names]
    axes = {name: ax for name, (_, ax) in inputs.items()}
    axes["logits"] = {0: "batch", 1: "seq"}
    axes.update({n: {0: "batch", 2: "past"} for n in past_names})
    axes.update({n: {0: "batch", 2: "total"} for n in present_names})
    args = (*(x for x, _ in inputs.values()), *past)
    export(module, args, path, [*inputs, *past_names], ["logits", *present_names], axes)


def export_merged_decoder(export_one: Callable[[Path, bool], None], onnx_dir: Path) -> None:
    """``export_one(path, with_past)`` twice, If-merged into REPO/onnx/decoder_model_merged.onnx."""
    with tempfile.TemporaryDirectory() as tmp:
        no_past, with_past = Path(tmp) / "decoder_model.onnx", Path(tmp) / "decoder_with_past_model.onnx"
        export_one(no_past, False)
        export_one(with_past, True)
        merge_decoders(onnx.load(str(no_past)), onnx.load(str(with_past)), onnx_dir / "decoder_model_merged.onnx")


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


def cached_repo(save_repo: Callable[..., Path], dest: Path, **kwargs) -> Path:
    """``save_repo(dest, **kwargs)``, built once per machine (tests/build_cache.py): a copy of the cached repository
    at ``dest`` (a copy, so a test that writes into its folder cannot change what later runs read)."""
    module = sys.modules[save_repo.__module__]
    key = [save_repo.__qualname__, repr(sorted(kwargs.items())), *build_cache.sources(module)]
    name = "-".join(["vlm", module.__name__, *(f"{k}{v}" for k, v in sorted(kwargs.items()))])
    cached = build_cache.cached_folder(name, key, lambda out: save_repo(out / "repo", **kwargs))
    shutil.copytree(cached / "repo", dest)
    return Path(dest)


def random_image(path, h: int, w: int, seed: int) -> str:
    """A seeded random RGB picture of h x w saved at ``path`` (PNG): its path, as the CLI and processors take it."""
    import numpy as np
    from PIL import Image

    Image.fromarray((np.random.default_rng(seed).random((h, w, 3)) * 255).astype(np.uint8)).save(path)
    return str(path)


def two_random_images(folder) -> list[str]:
    """The two seeded pictures of the several-images tests, of different sizes (45 x 70 and 60 x 100): a.png, b.png."""
    from pathlib import Path

    return [random_image(Path(folder) / "a.png", 45, 70, 3), random_image(Path(folder) / "b.png", 60, 100, 4)]


def on_grid(labels, row, pattern: str):
    """``row``'s weights at the cells its keys' labels name (``pattern``: a regular expression whose two groups are
    the row and column), laid out by hand as the labels say; every cell must have a key."""
    import re

    import numpy as np

    cells = {(int(m[1]), int(m[2])): float(row[k]) for k, lab in enumerate(labels) if (m := re.fullmatch(pattern, lab))}
    out = np.full((1 + max(r for r, _ in cells), 1 + max(c for _, c in cells)), np.nan, np.float32)
    for (r, c), v in cells.items():
        out[r, c] = v
    assert not np.isnan(out).any(), "every cell of the image has a key"
    return out
