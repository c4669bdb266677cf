"""``attnviz figure MODEL --text ...`` through the runtime on a tiny hand-built ONNX model, and its recipe."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("onnxruntime")
onnx_builders = pytest.importorskip("onnx_builders")

from _pdftext import pdf_text, svg_texts  # noqa: E402

from attnviz.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return onnx_builders.tiny_text_model(tmp_path_factory.mktemp("m") / "tiny.onnx", layers=2, heads=2)


def fig(*argv):
    return main(["figure", *map(str, argv)])


def test_model_text_to_pdf_has_the_tokens_as_text(model, tmp_path):
    out = tmp_path / "h.pdf"
    assert fig(model, "--text", "the cat sat on the mat", "--head", 1, "--out", out) == 0
    texts = pdf_text(out.read_bytes())
    for w in ("the", "cat", "sat", "mat"):
        assert w in texts, texts
    assert any(t.startswith("tiny · encoder self") for t in texts), texts
    r = json.loads((tmp_path / "h.pdf.recipe.json").read_text())
    assert r["inputs"]["text"] == "the cat sat on the mat"
    assert r["source"]["model"]["abs_path"] == str(model.resolve())
    assert r["source"]["model"]["path"] == f"../{model.parent.name}/tiny.onnx"


def test_model_recipe_regenerates_identical_png_and_detects_a_changed_model(model, tmp_path, capsys):
    out = tmp_path / "h.png"
    assert fig(model, "--text", "a dog ran home", "--view", "links", "--width-in", 3, "--dpi", 100, "--out", out) == 0
    assert Image.open(out).size[0] == 300
    again = tmp_path / "again.png"
    assert fig("--recipe", f"{out}.recipe.json", "--out", again) == 0
    assert again.read_bytes() == out.read_bytes()
    # a different model under the same name: refuse, rather than silently draw something else
    onnx_builders.tiny_text_model(model, layers=2, heads=2, seed=7)
    try:
        assert fig("--recipe", f"{out}.recipe.json", "--out", tmp_path / "x.png") == 2
        assert "has changed since the recipe was written" in capsys.readouterr().err
    finally:
        onnx_builders.tiny_text_model(model, layers=2, heads=2)


def test_model_feeds_input_and_all_heads(model, tmp_path):
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, input_ids=np.array([[1, 3, 4, 5, 2]], np.int64))
    out = tmp_path / "heads"
    assert fig(model, "--inputs", feeds, "--all-heads", "--out", out, "--dpi", 40) == 0
    assert len(list(out.glob("*.png"))) == 4
    r = json.loads(next(out.glob("*.recipe.json")).read_text())
    assert len(r["inputs"]["feeds"]["sha256"]) == 64


ROOT = Path(__file__).resolve().parents[2]
DEMOS = {  # demo model -> (input arguments, view, words that must be searchable text)
    "vit-classification": (["--image", "resources/samples/vit-classification.png"], "image", ["[CLS]"]),
    "translation": (["--text", "Ἀσὰφ δὲ ἐγέννησεν τὸν Ἰωσαφάτ", "--generate", "6"], "alignment", ["source"]),
    "captioning": (["--image", "resources/samples/captioning.png", "--generate", "8"], "strip", ["(input)"]),
}


@pytest.mark.parametrize("name", list(DEMOS))
def test_demo_models_render(name, tmp_path):
    model = ROOT / "models" / f"{name}.onnx"
    args, view, words = DEMOS[name]
    if not model.exists() or ("--image" in args and not (ROOT / args[1]).exists()):
        pytest.skip(f"demo model {name} not built")
    args = [str(ROOT / a) if a.startswith("resources/") else a for a in args]
    out = tmp_path / f"{name}.svg"
    assert fig(model, *args, "--view", view, "--width", "single", "--out", out) == 0
    texts = "\n".join(svg_texts(out.read_bytes()))
    assert all(w in texts for w in words), texts
