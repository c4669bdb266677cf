"""A bring-your-own export is named after its source, not after its file (export-hf and optimum both write
``model.onnx``): the metadata carries the name, and the window's title, the sidebar and figure titles say it."""

from __future__ import annotations

import json
import shutil

import pytest

from attnviz.core import metadata

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

import hf_models  # noqa: E402

from attnviz.cli import main  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny BERT downloaded (as it were) into a folder named after it, exported once."""
    root = tmp_path_factory.mktemp("byo")
    src = hf_models.save_hf_folder("bert", root / "tiny-bert-uncased")
    assert main(["export-hf", str(src), "--out", str(root / "export")]) == 0
    return src, root / "export" / "model.onnx"


def test_source_name_rules():
    cfg = {"_name_or_path": "prajjwal1/bert-tiny", "architectures": ["BertModel"]}
    assert metadata.source_name("all-MiniLM-L6-v2", cfg) == "all-MiniLM-L6-v2"  # the folder the user named
    assert metadata.source_name("model", cfg) == "prajjwal1/bert-tiny"  # a hub id, as it is
    assert metadata.source_name("onnx", {**cfg, "_name_or_path": "/data/runs/my-bert/"}) == "my-bert"  # a local path
    assert metadata.source_name("onnx", {**cfg, "_name_or_path": "/tmp/x/hf"}) == "BertModel"  # says nothing
    assert metadata.source_name("hf", {}) is None


def test_export_names_the_model_after_its_source(exported):
    src, path = exported
    assert path.name == "model.onnx"
    model = open_model(path, provider="cpu")
    assert model.meta["name"] == "tiny-bert-uncased" == model.name
    r = model.analyze(text="the dog ran")
    assert r.info["model"] == "tiny-bert-uncased"
    from matplotlib.text import Text

    from attnviz.figures import FigureSpec, render_spec

    fig = render_spec(r, FigureSpec(view="heatmap", dpi=30))
    # a title wraps at its " · " separators to fit the figure
    titles = [t for t in fig.findobj(Text) if t.get_text().replace("\n", " · ").startswith("tiny-bert-uncased · ")]
    assert titles, [t.get_text() for t in fig.findobj(Text)][:5]


def test_a_model_onnx_without_a_name_is_named_from_its_folder(exported, tmp_path):
    """An optimum-style folder: model.onnx (no attnviz.name) in ``onnx/`` beside the source's config.json."""
    import onnx

    src, path = exported
    m = onnx.load(str(path))
    keep = [(p.key, p.value) for p in m.metadata_props if p.key != "attnviz.name"]
    del m.metadata_props[:]
    for k, v in keep:
        p = m.metadata_props.add()
        p.key, p.value = k, v
    folder = tmp_path / "onnx"
    folder.mkdir()
    onnx.save(m, str(folder / "model.onnx"))
    cfg = json.loads((src / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "_name_or_path": "org/tiny-bert"}))
    assert open_model(folder / "model.onnx", provider="cpu").name == "org/tiny-bert"
    (folder / "config.json").write_text(json.dumps({**cfg, "_name_or_path": ""}))
    assert open_model(folder / "model.onnx", provider="cpu").name == cfg["architectures"][0] == "BertModel"
    named = tmp_path / "bert_onnx"
    shutil.copytree(folder, named)
    assert open_model(named / "model.onnx", provider="cpu").name == "bert_onnx"  # the folder the user named
    (named / "model.onnx").rename(named / "tiny.onnx")
    assert open_model(named / "tiny.onnx", provider="cpu").name == "tiny"  # any other file: its stem


def test_window_title_and_sidebar_say_the_source_name(qtbot, real_window, exported):
    from gui_helpers import open_and_wait

    _, path = exported
    w = real_window
    open_and_wait(qtbot, w, path, text="the dog ran")
    assert w.windowTitle() == "attnviz — tiny-bert-uncased"
    assert w.sidebar.values("Model")["name"] == "tiny-bert-uncased"


def test_a_metadata_name_is_one_short_line(tmp_path):
    from attnviz.runtime.naming import NAME_MAX_CHARS, model_name

    got = model_name(tmp_path / "model.onnx", {"name": "evil\nname\x1b " + "x" * 500})
    assert "\n" not in got and got.startswith("evil name") and len(got) == NAME_MAX_CHARS
