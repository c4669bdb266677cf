"""Finding 2: outputs never replace inputs or a file the user did not name; every write is atomic."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from onnx_builders import tiny_text_model

from attnviz import AttnvizError
from attnviz.cli import main
from attnviz.core import writes


def sha_all(*paths):
    return {str(p): hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths}


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    return rc, err


def one_line(err, *words):
    assert err.startswith("attnviz: error:") and "\n" not in err and "Traceback" not in err, err
    for w in words:
        assert w.lower() in err.lower(), (w, err)


@pytest.fixture()
def tiny(tmp_path):
    return tiny_text_model(tmp_path / "model.onnx")


def test_figure_recipe_out_onto_the_model_is_refused(tiny, tmp_path, capsys):
    before = sha_all(tiny)
    rc, err = run(
        capsys,
        "figure",
        tiny,
        "--text",
        "the cat",
        "--view",
        "heatmap",
        "--out",
        tmp_path / "f.png",
        "--recipe-out",
        tiny,
    )
    assert rc == 2
    one_line(err, "--recipe-out", "the model", "destroy")
    assert sha_all(tiny) == before
    assert not (tmp_path / "f.png").exists()  # refused before anything was written


def test_figure_recipe_out_that_is_not_json_is_refused_before_the_run(tiny, tmp_path, capsys):
    """--recipe-out on a user's corpus (a slip of tab completion onto texts.jsonl) replaced its lines with a recipe:
    a recipe is a .json file, and any other name is refused before anything runs or is written."""
    corpus = tmp_path / "texts.jsonl"
    corpus.write_text('{"text": "the cat"}\n{"text": "the dog"}\n')
    before = sha_all(corpus, tiny)
    argv = ["figure", tiny, "--text", "the cat", "--view", "heatmap", "--out", tmp_path / "f.png"]
    rc, err = run(capsys, *argv, "--recipe-out", corpus)
    assert rc == 2
    one_line(err, "--recipe-out", "texts.jsonl", ".json")
    assert sha_all(corpus, tiny) == before and not (tmp_path / "f.png").exists()
    rc, err = run(capsys, *argv, "--recipe-out", tmp_path / "r.JSON")  # the suffix in any case
    assert rc == 0 and json.loads((tmp_path / "r.JSON").read_text())["attnviz_recipe"] == 1


def test_figure_out_onto_an_input_is_refused(tiny, tmp_path, capsys):
    img = tmp_path / "in.png"
    from PIL import Image

    Image.new("RGB", (4, 4)).save(img)
    before = sha_all(tiny, img)
    rc, err = run(capsys, "figure", tiny, "--text", "the cat", "--out", tmp_path / "." / "model.onnx")
    assert rc == 2  # (also a bad suffix; the input check names it either way)
    rc, err = run(capsys, "figure", tiny, "--text", "the cat", "--image", img, "--out", img)
    assert rc == 2
    one_line(err, "the image")
    assert sha_all(tiny, img) == before


def test_extract_out_onto_its_feeds_is_refused(tiny, tmp_path, capsys):
    feeds = tmp_path / "f.npz"
    np.savez(feeds, input_ids=np.array([[1, 3, 4, 2]], np.int64))
    before = sha_all(tiny, feeds)
    rc, err = run(capsys, "extract", tiny, "--inputs", feeds, "--out", feeds)
    assert rc == 2
    one_line(err, "--out", "--inputs")
    link = tmp_path / "alias.npz"
    link.symlink_to(feeds)  # another name for the same file
    rc, err = run(capsys, "extract", tiny, "--inputs", feeds, "--out", link)
    assert rc == 2
    assert sha_all(tiny, feeds) == before


def test_recipe_output_paths_outside_the_recipe_folder_are_refused(tiny, tmp_path, capsys):
    work = tmp_path / "work"
    work.mkdir()
    rc, _ = run(
        capsys, "figure", tiny, "--text", "the cat", "--view", "heatmap", "--dpi", "40", "--out", work / "fig.png"
    )
    assert rc == 0
    recipe = work / "fig.png.recipe.json"
    victim = tmp_path / "victim.png"
    victim.write_bytes(b"precious")
    absolute = tmp_path / "abs.png"
    absolute.write_bytes(b"also precious")
    for target, name in (("../victim.png", "victim.png"), (str(absolute), "abs.png")):
        r = json.loads(recipe.read_text())
        r["output"]["path"] = target
        hostile = work / f"hostile-{name}.json"
        hostile.write_text(json.dumps(r))
        before = sorted(p.name for p in work.iterdir())
        rc, err = run(capsys, "figure", "--recipe", hostile)
        assert rc == 2  # refused: neither written there nor, silently, somewhere the recipe does not say
        one_line(err, "outside the recipe's folder", "--out")
        assert sorted(p.name for p in work.iterdir()) == before
    assert victim.read_bytes() == b"precious" and absolute.read_bytes() == b"also precious"
    # an explicit --out on the command line is honoured
    rc, _ = run(capsys, "figure", "--recipe", work / "hostile-victim.png.json", "--out", victim)
    assert rc == 0 and victim.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[]",
        '{"attnviz_recipe": "x"}',
        '{"attnviz_recipe": 1, "source": 3}',
        '{"attnviz_recipe": 1, "source": {"model": {"nopath": 1}}}',
    ],
)
def test_malformed_recipes_are_one_line(tmp_path, capsys, text):
    r = tmp_path / "r.json"
    r.write_text(text)
    before = sha_all(r)
    rc, err = run(capsys, "figure", "--recipe", r)
    assert rc == 2
    one_line(err, "recipe")
    assert sha_all(r) == before


def test_train_out_into_a_foreign_folder_is_refused(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    out.mkdir()
    (out / "model.onnx").write_bytes(b"someone else's model")
    (out / "notes.txt").write_text("mine")
    before = sha_all(out / "model.onnx", out / "notes.txt")
    rc, err = run(capsys, "train", "toy-reverse", "--preset", "tiny", "--steps", "2", "--quiet", "--out", out)
    assert rc == 2
    one_line(err, "not empty", "--overwrite")
    assert sha_all(*before) == before and sorted(p.name for p in out.iterdir()) == ["model.onnx", "notes.txt"]


def test_checkpoint_holding_null_is_an_error_not_a_retrain(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    rc, _ = run(capsys, "train", "toy-reverse", "--preset", "tiny", "--steps", "2", "--quiet", "--out", out)
    assert rc == 0
    (out / "checkpoint.json").write_text("null")
    before = sha_all(*sorted(p for p in out.iterdir()))
    rc, err = run(capsys, "train", "toy-reverse", "--preset", "tiny", "--steps", "4", "--quiet", "--out", out)
    assert rc == 2
    one_line(err, "checkpoint", "corrupt")
    assert sha_all(*before) == before


def test_atomic_write_failure_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "keep.bin"
    target.write_bytes(b"old")

    def boom(*a):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writes.os, "replace", boom)
    with pytest.raises(AttnvizError, match="No space left"):
        writes.atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["keep.bin"]


def test_one_atomic_write_helper():
    """Issue 10: the five copies are gone; every writer goes through attnviz.core.writes."""
    root = Path(__file__).resolve().parents[1] / "attnviz"
    offenders = [
        str(p.relative_to(root)) for p in root.rglob("*.py") if p.name != "writes.py" and "os.replace(" in p.read_text()
    ]
    assert offenders == []
