"""The window's decisions, Qt-free (attnviz.app.rules, gold, corpus_entry): what a path opens as, what a
drop opens, a freshly opened model's first input, the refusals, and head stepping."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from attnviz import AttnvizError
from attnviz.app import corpus_entry, gold, rules

MODELS = Path(__file__).resolve().parents[2] / "models"


def test_file_kind_by_extension_and_folder(tmp_path):
    for name, kind in (("m.onnx", "model"), ("IMG.PNG", "image"), ("a.jpeg", "image"), ("maps.npz", "maps")):
        (tmp_path / name).write_bytes(b"x")
        assert rules.file_kind(tmp_path / name) == kind
    assert rules.file_kind(tmp_path) == "model"  # an export folder
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(AttnvizError, match=r"^cannot open notes.txt: attnviz opens ONNX models") as e:
        rules.file_kind(tmp_path / "notes.txt")
    assert "\n" not in str(e.value)
    (tmp_path / "f.pdf.recipe.json").write_text("{}")  # ux29: a recipe dropped on the window names its command
    with pytest.raises(AttnvizError, match=r"^cannot open f.pdf.recipe.json: attnviz opens ONNX models") as e:
        rules.file_kind(tmp_path / "f.pdf.recipe.json")
    assert str(e.value).endswith(
        f"; a figure recipe is drawn again by: attnviz figure --recipe {tmp_path / 'f.pdf.recipe.json'}"
    )
    with pytest.raises(AttnvizError, match="no such file"):
        rules.file_kind(tmp_path / "gone.onnx")


def test_a_drop_opens_the_model_with_the_image_beside_it():
    assert rules.dropped(["/d/cat.png", "/d/vit.onnx", "/d/dog.jpg"]) == ("/d/vit.onnx", "/d/cat.png")
    assert rules.dropped(["/d/cat.png", "/d/dog.jpg"]) == ("/d/cat.png", None)
    assert rules.dropped(["/d/vit.onnx", "/d/notes.txt"]) == ("/d/vit.onnx", None)
    assert rules.dropped([]) is None


def _model(kind, meta=None, path="m.onnx", sites=(1,)):
    return SimpleNamespace(kind=kind, meta=meta or {}, path=path, sites=list(sites), name=Path(path).name)


def test_first_input_is_the_sample_then_the_chosen_image_then_what_was_given():
    from attnviz.runtime import open_model

    cap = open_model(MODELS / "captioning.onnx")
    v = rules.first_input(cap, {})
    assert Path(v["image"]).name == "captioning.png" and Path(v["image"]).is_file()
    assert v["generate"] == 32  # captioning and translation generate by default, stopping at EOS
    enc = open_model(MODELS / "sequence-classification.onnx")
    assert rules.first_input(enc, {}) == {"text": "7 2 9 5 1 8 6 3", "generate": 0}
    assert rules.first_input(enc, {"text": "1 2", "generate": 3}) == {"text": "1 2", "generate": 3}
    # a vision model without a sample image keeps the image the user already chose; a text model does not
    assert rules.first_input(_model("vision"), {}, "/x/cat.png") == {"image": "/x/cat.png", "generate": 0}
    assert rules.first_input(_model("encoder"), {}, "/x/cat.png") == {"generate": 0}


def test_a_given_target_is_teacher_forced_as_extract_does_not_continued():
    """`attnviz open translation.onnx --text SRC --text-pair TGT` (no --generate) reads TGT as `extract` and
    `figure` do: [BOS] + TGT forced into the decoder. It generated 32 more steps, so the Alignment view showed
    only the continuation ("." and [EOS]) and the target's own rows were nowhere."""
    from attnviz.app.jobs import analyze
    from attnviz.runtime import open_model
    from attnviz.runtime.request import AnalyzeRequest

    tr = open_model(MODELS / "translation.onnx")
    src, tgt = "ἐν ἀρχῇ ἦν ὁ λόγος", "in the beginning was the word"
    v = rules.first_input(tr, {"text": src, "text_pair": tgt})
    assert v["generate"] == 0
    result = analyze(tr, AnalyzeRequest(**v))
    assert result.generated == [] and result.key_tokens.labels == ["[BOS]", *tgt.split()]
    assert rules.first_input(tr, {"text": src})["generate"] == 32  # a source alone is translated
    assert rules.first_input(tr, {"text": src, "text_pair": tgt, "generate": 3})["generate"] == 3
    cap = open_model(MODELS / "captioning.onnx")
    assert rules.first_input(cap, {"text": "a red circle"})["generate"] == 0  # the caption is the target
    assert rules.first_input(cap, {})["generate"] == 32


def test_refusals_are_one_line_naming_what_to_do():
    with pytest.raises(AttnvizError, match="no model open: use File ▸ Open model"):
        rules.check_runnable(None)
    mlp = _model("encoder", path="mlp.onnx", sites=())
    mlp.no_attention_reason = "the graph has no Softmax"
    with pytest.raises(AttnvizError, match="^mlp.onnx: no attention to show — the graph has no Softmax$"):
        rules.check_runnable(mlp)
    rules.check_runnable(_model("encoder"))
    from attnviz.app.fields import WINDOW

    with pytest.raises(AttnvizError, match="open a vision or captioning model first, then the image cat.png") as e:
        rules.check_image_model(None, "/x/cat.png", WINDOW)
    assert e.value.param == "image"
    # the command line has no model to open first (`attnviz open cat.png`): it says how to give both
    with pytest.raises(AttnvizError, match=r"vision or captioning model: attnviz open MODEL.onnx --image cat.png$"):
        rules.check_image_model(None, "/x/cat.png")
    with pytest.raises(AttnvizError, match="bert.onnx takes text, not images"):
        rules.check_image_model(_model("encoder", path="bert.onnx"), "/x/cat.png")
    rules.check_image_model(_model("vision-decoder"), "/x/cat.png")
    for m in (None, _model("decoder"), _model("vision-decoder")):
        with pytest.raises(AttnvizError, match="open an encoder-decoder text model first"):
            gold.check_gold_model(m)
    gold.check_gold_model(_model("encoder-decoder"))


def test_neighbour_head_wraps_between_layers():
    heads = [4, 2, 4]
    nb = lambda layer, head, d: rules.neighbour_head(3, heads.__getitem__, layer, head, d)
    assert nb(0, 3, 1) == (1, 0)
    assert nb(1, 1, 1) == (2, 0)  # layer 1 has 2 heads
    assert nb(2, 0, -1) == (1, 1)
    assert nb(0, 1, 1) == (0, 2)
    assert nb(0, 0, -1) == (0, -1)  # off the block's start: the session clamps it
    assert nb(2, 3, 1) == (2, 4)


def test_gold_summary_line():
    table = {"name": "nt", "n_sentences": 528, "best_head": {"layer": 2, "head": 0, "aer": 0.34712}}
    assert gold.summary(table) == "gold nt: best head decoder layer 2 head 0, AER 0.347 (528 pairs)"


def test_corpus_example_opens_its_item_with_its_head(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    tok = tmp_path / "tokenizer.json"
    tok.write_text("{}")
    ex = {"stack": "encoder", "kind": "self", "layer": 1, "head": 3, "text": "a b", "pair": "c", "image": None}
    todo = corpus_entry.example_open(ex, str(model), str(tok))
    # a pair is fed as the corpus fed it (sentence B, or a teacher-forced target): nothing generated on top
    assert (todo.model, todo.values, todo.tokenizer) == (model, {"text": "a b", "text_pair": "c", "generate": 0}, tok)
    gen = corpus_entry.example_open({**ex, "pair": None, "generated": "x y </s>", "generate": 3}, str(model))
    assert gen.values == {"text": "a b", "text_pair": None, "generate": 3}  # the corpus generated: generate again
    assert (todo.stack, todo.kind, todo.layer, todo.head) == ("encoder", "self", 1, 3)
    img = corpus_entry.example_open({**ex, "image": "/x/cat.png", "text": None}, str(model), str(tmp_path / "no.json"))
    assert img.values == {"image": "/x/cat.png"} and img.tokenizer is None
    with pytest.raises(AttnvizError, match="the model .*gone.onnx is gone; re-run 'attnviz corpus'"):
        corpus_entry.example_open(ex, str(tmp_path / "gone.onnx"))


def test_moving_to_a_cross_block_turns_rollout_into_the_mean():
    from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
    from attnviz.core.view import Selection

    rng = np.random.default_rng(0)
    enc = DenseMap(rng.random((1, 2, 3, 3), dtype=np.float32))
    cross = DenseMap(rng.random((1, 2, 4, 3), dtype=np.float32))
    sites = [SiteInfo("encoder", "self", 0, 2, "/e", "softmax"), SiteInfo("decoder", "cross", 0, 2, "/c", "softmax")]
    blocks = AttentionResult([enc, cross], sites, tokens=TokenAxis(["a", "b", "c"])).blocks(0)
    sel = Selection(block=0, mode="rollout")
    assert [b.kind for b in blocks] == ["self", "cross"]
    moved = rules.on_block(sel, blocks, 1, query=2)
    assert (moved.block, moved.mode, moved.query) == (1, "mean", 2)
    assert rules.on_block(sel, blocks, 0).mode == "rollout"  # self-attention keeps it
    assert rules.on_block(Selection(block=0, mode="max"), blocks, 1).mode == "max"
