"""A tower corpus example's patches (app/corpus_patches.py) over ``attnviz corpus vision_encoder.onnx --images``:
each example's query and key named as Image regions names that key of ``attnviz open``'s tower view, and boxed
where transformers' Idefics3 processor took the patch's pixels from (a tile's patch: the very pixels; the global
image's: the region whose resize it is, on a smooth picture); names only, with one line, where the model or the
image is gone or the image no longer splits as the run named it."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import idefics3_models as im
from PIL import Image

from attnviz.app.corpus_patches import example_image, label_name
from attnviz.cli import main
from attnviz.core import view as v
from attnviz.corpus.output import read
from attnviz.runtime import open_model

SHAPES = {"wide": (40, 100), "square": (70, 64), "tall": (90, 30)}  # 1 x 2, 2 x 2, 2 x 1 tiles


def smooth(h: int, w: int) -> np.ndarray:
    """A picture whose colour follows the position (red across, green down): a resized region's mean is the
    mean of the region it came from."""
    y, x = np.mgrid[0:h, 0:w]
    return np.dstack([x * 255 / max(1, w - 1), y * 255 / max(1, h - 1), np.full((h, w), 128.0)]).astype(np.uint8)


@pytest.fixture(scope="module")
def run(idefics3_repo, tmp_path_factory):
    d = tmp_path_factory.mktemp("patch_imgs")
    for name, (h, w) in SHAPES.items():
        Image.fromarray(smooth(h, w)).save(d / f"{name}.png")
    out = tmp_path_factory.mktemp("patch_out") / "o"
    tower = idefics3_repo / "onnx" / "vision_encoder.onnx"
    args = ["corpus", str(tower), "--images", str(d), "--out", str(out), "--top-k", "3", "--workers", "1"]
    assert main([*args, "--provider", "cpu", "--no-progress"]) == 0
    return read(out), tower, d


def distinct(examples: list[dict]) -> list[dict]:
    seen, out = set(), []
    for e in examples:
        key = (e["image"], e["row"], e["col"])
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


def frames_rgb(repo, path) -> np.ndarray:
    """transformers' processor's frames of the image, back to 0..255 (``[frames, M, M, 3]``)."""
    pre = im.processor(repo).image_processor
    px = pre(images=[[Image.open(path).convert("RGB")]], return_tensors="np")["pixel_values"][0]
    mean, std = np.asarray(pre.image_mean)[:, None, None], np.asarray(pre.image_std)[:, None, None]
    return ((px * std + mean) * 255).transpose(0, 2, 3, 1)


def test_patches_are_named_as_the_view_names_them_and_boxed_where_the_processor_took_them(run, idefics3_repo):
    results, tower, _ = run
    model = open_model(tower, provider="cpu")
    views = {}
    checked = {"tile": 0, "global": 0}
    for e in distinct(results.examples):
        ex = example_image(e, results.run["model"])
        assert ex.shown is not None and ex.note == "", ex.note
        if e["image"] not in views:
            r = model.analyze(image=e["image"])
            views[e["image"]] = v.image_source(r, r.blocks(), attention="tower")[1]
        grid = views[e["image"]]
        frames = frames_rgb(idefics3_repo, e["image"])
        assert e["frames"] == len(frames)  # its tiles and its global image, as the processor made them
        per, p = 36, im.PATCH
        for region, pos, label in ((ex.query, e["row"], e["row_patch"]), (ex.key, e["col"], e["col_patch"])):
            assert region.label == label and region.name == v.patch_label(grid, pos)  # Image regions' name
            assert region.name == label_name(label, e["frames"])  # the same from the label and the frames alone
            frame, (r, c) = pos // per, divmod(pos % per, 6)
            want = frames[frame, r * p : (r + 1) * p, c * p : (c + 1) * p]
            t, left, b, right = (round(x) for x in region.box)
            got = ex.shown[t:b, left:right].astype(np.float64)
            if label.startswith("tile "):  # a tile: the patch's very pixels
                assert got.shape == want.shape and np.abs(got - want).max() <= 1.0
                checked["tile"] += 1
            else:  # the global image, the whole picture resized: the region its patch was resized from
                assert np.abs(got.mean((0, 1)) - want.mean((0, 1))).max() < 3.0
                checked["global"] += 1
    assert checked["tile"] and checked["global"]


def test_results_written_before_session_19_read_the_same(run):
    """examples.parquet of before session 19 named a tile's patch ``t1(0,4)``: named and boxed as today's
    ``tile 1·(0,4)`` is (the image still splits into the frames the labels name)."""
    import re

    results, _, _ = run
    e = next(x for x in distinct(results.examples) if x["row_patch"].startswith("tile "))
    old = {k: re.sub(r"^tile (\d+)·", r"t\1", e[k]) for k in ("row_patch", "col_patch")}
    assert old["row_patch"].startswith("t") and old["row_patch"] != e["row_patch"]
    then, now = example_image({**e, **old}, results.run["model"]), example_image(e, results.run["model"])
    assert then.note == "" and then.shown is not None
    assert (then.query.name, then.query.box, then.key.box) == (now.query.name, now.query.box, now.key.box)
    assert label_name(old["row_patch"], e["frames"]) == label_name(e["row_patch"], e["frames"]) == now.query.name


def test_names_only_where_the_model_or_image_is_gone(run, tmp_path):
    results, _, _ = run
    e = results.examples[0]
    gone = example_image(e, str(tmp_path / "vision_encoder.onnx"))
    assert gone.shown is None and "is gone; its patches are named, not drawn" in gone.note
    assert (gone.query.name, gone.key.name) == (
        label_name(e["row_patch"], e["frames"]),
        label_name(e["col_patch"], e["frames"]),
    )
    no_image = example_image({**e, "image": str(tmp_path / "x.png")}, results.run["model"])
    assert no_image.shown is None and "x.png is gone" in no_image.note


def test_an_image_that_splits_otherwise_now_keeps_the_names(run, tmp_path):
    """An example of a 2 x 2 image past its first two tiles, its file replaced by a 1 x 2 one: the global image's
    patches come after 2 tiles now, not 4; the names stay, the boxes would be a guess."""
    results, _, images = run
    e = next(
        x
        for x in results.examples
        if x["image"].endswith("square.png") and not x["row_patch"].startswith(("tile 0·", "tile 1·"))
    )
    moved = tmp_path / "square.png"
    shutil.copy(images / "wide.png", moved)
    ex = example_image({**e, "image": str(moved)}, results.run["model"])
    assert ex.shown is None and ex.query.label == e["row_patch"]
    assert "square.png now splits into 1 x 2 tiles and a global image" in ex.note


@pytest.fixture(scope="module")
def unsplit(idefics3_repo, tmp_path_factory):
    """The same tower whose processor does not split images (``do_image_splitting`` off: each image one frame, its
    picture alone), and a corpus over two images through it."""
    repo = tmp_path_factory.mktemp("unsplit_repo")
    (repo / "onnx").mkdir()
    shutil.copy(idefics3_repo / "onnx" / "vision_encoder.onnx", repo / "onnx" / "vision_encoder.onnx")
    for name in ("config.json", "processor_config.json"):
        shutil.copy(idefics3_repo / name, repo / name)
    pre = json.loads((idefics3_repo / "preprocessor_config.json").read_text()) | {"do_image_splitting": False}
    (repo / "preprocessor_config.json").write_text(json.dumps(pre))
    d = tmp_path_factory.mktemp("unsplit_imgs")
    for name, (h, w) in list(SHAPES.items())[:2]:
        Image.fromarray(smooth(h, w)).save(d / f"{name}.png")
    out = tmp_path_factory.mktemp("unsplit_out") / "o"
    tower = repo / "onnx" / "vision_encoder.onnx"
    args = ["corpus", str(tower), "--images", str(d), "--out", str(out), "--top-k", "2", "--workers", "1"]
    assert main([*args, "--provider", "cpu", "--no-progress"]) == 0
    return read(out), tower


def test_an_unsplit_images_patches_are_named_as_the_drawn_view_names_them(unsplit):
    """One frame, no tiles: "patch (r, c)" as the window's Image regions names the patch (not a "global image"
    beside tiles there are none of), from the image at hand, from the label and frames alone, and with the model
    gone."""
    results, tower = unsplit
    model = open_model(tower, provider="cpu")
    views = {}
    for e in distinct(results.examples):
        assert e["frames"] == 1 and not e["row_patch"].startswith("tile ")
        if e["image"] not in views:
            r = model.analyze(image=e["image"])
            views[e["image"]] = v.image_source(r, r.blocks(), attention="tower")[1]
        ex = example_image(e, results.run["model"])
        gone = example_image(e, "")
        for region, alone, pos, label in (
            (ex.query, gone.query, e["row"], e["row_patch"]),
            (ex.key, gone.key, e["col"], e["col_patch"]),
        ):
            drawn = v.patch_label(views[e["image"]], pos)
            assert drawn.startswith("patch (") and region.name == drawn
            assert label_name(label, e["frames"]) == alone.name == drawn
