"""``attnviz figure`` end to end on maps files; recipes regenerate identical bytes; bad input gives one-line errors."""

from __future__ import annotations

import json
import os
import stat

import pytest
from figure_data import encdec_result, text_result, vision_result
from PIL import Image

from attnviz import AttnvizError
from attnviz.cli import main
from attnviz.core.io import save_npz
from attnviz.figures import FigureSpec, render_spec, save_figure
from attnviz.figures.recipe import load_recipe


@pytest.fixture
def maps(tmp_path):
    paths = {}
    for name, r in (("text", text_result()), ("mt", encdec_result()), ("cap", vision_result(decoder=True))):
        paths[name] = save_npz(r, tmp_path / f"{name}.npz")
    return paths


def fig(*argv):
    return main(["figure", *map(str, argv)])


def test_figure_writes_file_and_recipe_and_recipe_regenerates_identical_png(maps, tmp_path, capsys):
    out = tmp_path / "a" / "heat.png"
    out.parent.mkdir()
    assert (
        fig(
            "--maps",
            maps["text"],
            "--view",
            "heatmap",
            "--layer",
            1,
            "--head",
            2,
            "--width",
            "single",
            "--dpi",
            120,
            "--out",
            out,
        )
        == 0
    )
    recipe = out.with_name("heat.png.recipe.json")
    r = json.loads(recipe.read_text())
    assert r["view"]["layer"] == 1 and r["view"]["head"] == 2 and r["view"]["width"] == "single"
    assert r["source"]["maps"]["path"] == "../text.npz" and len(r["source"]["maps"]["sha256"]) == 64
    assert r["attnviz_version"] and r["output"]["path"] == "heat.png"
    assert Image.open(out).size[0] == 420
    again = tmp_path / "again.png"
    assert fig("--recipe", recipe, "--out", again) == 0
    assert again.read_bytes() == out.read_bytes()
    # and without --out it rewrites the recorded output with the same bytes
    before = out.read_bytes()
    out.unlink()
    assert fig("--recipe", recipe) == 0
    assert out.read_bytes() == before
    assert json.loads(recipe.read_text()) == r


@pytest.mark.parametrize("fmt", ["pdf", "svg"])
def test_vector_recipes_also_regenerate_identical_bytes(maps, tmp_path, fmt):
    out = tmp_path / f"mt.{fmt}"
    assert fig("--maps", maps["mt"], "--view", "alignment", "--agg", "max", "--out", out) == 0
    again = tmp_path / f"again.{fmt}"
    assert fig("--recipe", f"{out}.recipe.json", "--out", again) == 0
    assert again.read_bytes() == out.read_bytes()


def test_recipe_moves_with_its_folder_and_detects_changed_inputs(maps, tmp_path):
    out = tmp_path / "h.png"
    assert fig("--maps", maps["text"], "--out", out, "--dpi", 50) == 0
    moved = tmp_path / "moved"
    moved.mkdir()
    for p in (maps["text"], out, tmp_path / "h.png.recipe.json"):
        os.replace(p, moved / p.name)
    r = load_recipe(moved / "h.png.recipe.json")
    assert r["source"]["maps"]["path"] == str(moved / "text.npz")
    save_npz(encdec_result(), moved / "text.npz")  # different content under the same name
    with pytest.raises(AttnvizError, match="has changed since the recipe was written"):
        load_recipe(moved / "h.png.recipe.json")


def test_recipe_options_can_be_overridden(maps, tmp_path):
    out = tmp_path / "h.png"
    assert fig("--maps", maps["text"], "--head", 1, "--out", out, "--dpi", 50) == 0
    out2 = tmp_path / "h2.png"
    assert fig("--recipe", f"{out}.recipe.json", "--agg", "max", "--dpi", 60, "--out", out2) == 0
    r = json.loads((tmp_path / "h2.png.recipe.json").read_text())
    assert r["view"]["agg"] == "max" and r["view"]["head"] is None and r["view"]["dpi"] == 60


def test_all_heads_writes_one_file_per_layer_and_head_with_progress(maps, tmp_path, capsys):
    out = tmp_path / "heads"
    assert fig("--maps", maps["text"], "--all-heads", "--out", out, "--format", "svg", "--dpi", 50) == 0
    names = sorted(p.name for p in out.glob("*.svg"))
    assert names == [f"heatmap_encoder-self_L{l:02d}_H{h:02d}.svg" for l in range(2) for h in range(3)]
    assert len(list(out.glob("*.recipe.json"))) == 6
    err = capsys.readouterr().err
    assert "6/6" in err and "#" in err
    # a name pattern and one layer
    assert (
        fig(
            "--maps",
            maps["mt"],
            "--block",
            "decoder cross",
            "--view",
            "links",
            "--layer",
            0,
            "--all-heads",
            "--no-recipe",
            "--out",
            tmp_path / "x" / "cross.pdf",
            "--dpi",
            50,
        )
        == 0
    )
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["cross_L00_H00.pdf", "cross_L00_H01.pdf"]


def test_output_files_get_normal_permissions(maps, tmp_path):
    out = tmp_path / "p.png"
    old = os.umask(0o022)
    try:
        assert fig("--maps", maps["text"], "--out", out, "--dpi", 40) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644


# ---- bad input: one line, exit code 2, the valid range or the fix named ------------------------

BAD = [
    (["--view", "bogus"], "invalid choice"),  # argparse
    (["--layer", "5"], "layer 5 is out of range; encoder self-attention has layers 0..1 (see --layer)"),
    # a range names the flag that gave it (it said "see --layer", a flag not on the command line)
    (["--layers", "0-5"], "layer 5 is out of range; encoder self-attention has layers 0..1 (see --layers)"),
    (["--layers", "1-0"], "must run low to high (see --layers)"),
    (["--head", "3"], "head 3 is out of range; encoder self-attention layer 1 has heads 0..2"),
    (["--head", "0", "--agg", "max"], "not both"),
    (["--query", "40", "--view", "links"], "query 40 is out of range; encoder self-attention has query positions 0..8"),
    (["--block", "decoder cross"], "no block 'decoder cross'; this model has blocks 0 (encoder self)"),
    (["--block", "3"], "block 3 is out of range"),
    (["--view", "alignment"], "needs cross-attention"),
    (["--view", "image"], "needs the input image"),
    (["--view", "strip"], "the strip view needs generated words"),
    (["--cmap", "nope"], "unknown colormap 'nope'"),
    (["--width-in", "0.1"], "out of range; use 0.5..50 inches"),
    (["--view", "overview", "--all-heads"], "does not apply to the overview"),
]


@pytest.mark.parametrize("extra,msg", BAD)
def test_bad_input_gives_one_clear_line(maps, tmp_path, capsys, extra, msg):
    out = tmp_path / "f.png"
    with_out = [] if "--all-heads" in extra else ["--out", out]
    try:
        rc = fig("--maps", maps["text"], *extra, *with_out, "--dpi", 40)
    except SystemExit as e:  # argparse
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2
    assert msg in err
    assert "Traceback" not in err
    if "invalid choice" not in msg:
        assert len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_a_layer_the_default_block_lacks_names_the_blocks_that_have_it(tmp_path, capsys):
    """A vision–language model's first block is its vision tower, often one layer: ``figure --maps M --layer 1``
    named only the tower's range, not that --block chooses the decoder, whose layer 1 it is (an audit on LLaVA).
    The line names every block's layers, and the block it names then draws."""
    import numpy as np
    from figure_data import _axis, softmax_maps

    from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo

    rng = np.random.default_rng(3)
    words = ["<s>", "a", "red", "cat"]
    maps = [DenseMap(softmax_maps(rng, 2, 4, 4))]  # the tower's one layer
    sites = [SiteInfo("encoder", "self", 0, 2, "tower0", "softmax")]
    for i in range(2):
        maps.append(DenseMap(softmax_maps(rng, 2, 4, 4, causal=True)))
        sites.append(SiteInfo("decoder", "self", i, 2, f"dec{i}", "softmax"))
    npz = save_npz(AttentionResult(maps, sites, tokens=_axis(words)), tmp_path / "two.npz")
    out = tmp_path / "f.png"
    assert fig("--maps", npz, "--layer", "1", "--out", out, "--dpi", 40) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and not out.exists()
    assert "layer 1 is out of range; encoder self-attention has layers 0..0 (block 0, drawn when --block" in err
    assert "0 (encoder self, layers 0..0), 1 (decoder self, layers 0..1)" in err
    assert fig("--maps", npz, "--block", "1", "--layer", "1", "--out", out, "--dpi", 40) == 0


@pytest.mark.parametrize(
    "out,msg",
    [
        ("fig.jpg", "cannot tell the figure format of fig.jpg"),
        ("fig", "end the file name in .pdf, .svg or .png"),
        ("missing/dir/fig.png", "folder"),
    ],
)
def test_bad_output_paths(maps, tmp_path, capsys, out, msg):
    rc = fig("--maps", maps["text"], "--out", tmp_path / out)
    assert rc == 2 and msg in capsys.readouterr().err


def test_unwritable_folder_leaves_no_file(maps, tmp_path, capsys):
    # a "folder" that is a regular file cannot be written into, even by root (CI runs as root)
    blocker = tmp_path / "not_a_folder"
    blocker.write_bytes(b"user data")
    rc = fig("--maps", maps["text"], "--out", blocker / "f.png")
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("attnviz: error:") and err.count("\n") == 1
    assert blocker.read_bytes() == b"user data"
    if os.geteuid() != 0:  # a read-only folder as well, where permissions apply
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        try:
            rc = fig("--maps", maps["text"], "--out", ro / "f.png")
        finally:
            ro.chmod(0o700)
        assert rc == 2 and "cannot write" in capsys.readouterr().err and not list(ro.iterdir())


def test_permission_denied_is_a_clear_error(tmp_path, monkeypatch):
    import attnviz.core.writes as writes  # the one atomic-write helper

    def denied(**kw):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(writes.tempfile, "mkstemp", denied)
    with pytest.raises(AttnvizError, match=r"cannot write .*f.png: Permission denied; choose a writable --out"):
        save_figure(render_spec(text_result(), FigureSpec(dpi=40)), tmp_path / "f.png")


def test_failed_save_keeps_existing_file(tmp_path, monkeypatch):
    target = tmp_path / "keep.png"
    target.write_bytes(b"old figure")
    f = render_spec(text_result(), FigureSpec(dpi=40))
    import attnviz.core.writes as writes

    def boom(path, fmt_path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writes.os, "replace", boom)
    with pytest.raises(AttnvizError, match="No space left on device"):
        save_figure(f, target)
    assert target.read_bytes() == b"old figure"
    assert [p.name for p in tmp_path.iterdir()] == ["keep.png"]  # no temp file left behind


def test_recipe_errors(tmp_path, capsys):
    bad = tmp_path / "r.json"
    bad.write_text("{not json")
    assert fig("--recipe", bad) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert fig("--recipe", tmp_path / "none.json") == 2
    assert "no such recipe file" in capsys.readouterr().err
    bad.write_text(
        json.dumps(
            {"attnviz_recipe": 1, "source": {"maps": {"path": "gone.npz", "sha256": "0"}}, "inputs": {}, "view": {}}
        )
    )
    assert fig("--recipe", bad, "--out", tmp_path / "x.png") == 2
    assert "maps file gone.npz is missing" in capsys.readouterr().err


def test_source_errors(maps, tmp_path, capsys):
    assert fig("--out", tmp_path / "x.png") == 2
    assert "give a model file, --maps" in capsys.readouterr().err
    assert fig("--maps", maps["text"], "--text", "hi", "--out", tmp_path / "x.png") == 2
    assert "drop --text" in capsys.readouterr().err
    assert fig("--maps", tmp_path / "nope.npz", "--out", tmp_path / "x.png") == 2
    assert "no such file" in capsys.readouterr().err


def test_spec_validation_messages():
    with pytest.raises(
        AttnvizError, match="unknown view 'pie'; use one of heatmap, overview, links, alignment, image, audio, strip"
    ):
        FigureSpec(view="pie")
    with pytest.raises(AttnvizError, match="unknown width preset"):
        FigureSpec(width="triple")
    with pytest.raises(AttnvizError, match="unknown figure option"):
        FigureSpec.from_dict({"view": "heatmap", "colour": "red"})
    with pytest.raises(AttnvizError, match="rollout needs self-attention over one sequence"):
        render_spec(encdec_result(), FigureSpec(block="decoder cross", agg="rollout"))


def test_bytes_do_not_depend_on_the_process(maps, tmp_path):
    """A fresh interpreter with another hash seed writes the same PDF (set/dict order never leaks into files)."""
    import subprocess
    import sys

    a = tmp_path / "a.pdf"
    assert fig("--maps", maps["mt"], "--view", "strip", "--out", a, "--no-recipe") == 0
    b = tmp_path / "b.pdf"
    env = dict(os.environ, PYTHONHASHSEED="12345")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "attnviz",
            "figure",
            "--maps",
            str(maps["mt"]),
            "--view",
            "strip",
            "--out",
            str(b),
            "--no-recipe",
        ],
        check=True,
        env=env,
        cwd=root,
        capture_output=True,
    )
    assert a.read_bytes() == b.read_bytes()


def test_export_figure_writes_figure_and_recipe_for_the_gui(maps, tmp_path):
    from attnviz.figures import export_figure

    out = export_figure(
        text_result(), tmp_path / "g.svg", FigureSpec(view="links", dpi=50), recipe_sources={"maps": maps["text"]}
    )
    assert out.read_bytes().startswith(b"<?xml")
    r = json.loads((tmp_path / "g.svg.recipe.json").read_text())
    assert r["view"]["view"] == "links" and r["source"]["maps"]["sha256"]
    with pytest.raises(AttnvizError, match="cannot tell the figure format"):
        export_figure(text_result(), tmp_path / "g.bmp", FigureSpec())


@pytest.mark.parametrize(("name", "said"), [("forecasting", "numeric series"), ("sequence-classification", "text")])
def test_the_sample_is_named_by_what_it_is(tmp_path, capsys, name, said):
    """The forecasting demo keeps its sample series under "text": the line names it a series all the same."""
    from pathlib import Path

    model = Path(__file__).resolve().parents[2] / "models" / f"{name}.onnx"
    out = tmp_path / "fc.png"
    assert main(["figure", str(model), "--view", "overview", "--out", str(out)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"attnviz: note: no input given; using the model's sample input ({said})"] and out.is_file()


def test_figure_without_input_uses_the_models_sample(tmp_path, capsys):
    from pathlib import Path

    from PIL import Image

    root = Path(__file__).resolve().parents[2]
    model = root / "models" / "vit-classification.onnx"
    if not model.exists():
        pytest.skip("demo models not built")
    from attnviz.cli import main as cli

    assert cli(["figure", str(model), "--view", "image", "--out", str(tmp_path / "a.png")]) == 0
    assert "using the model's sample input (image)" in capsys.readouterr().err
    sample = root / "resources" / "samples" / "vit-classification.png"
    assert cli(["figure", str(model), "--image", str(sample), "--view", "image", "--out", str(tmp_path / "b.png")]) == 0
    assert Image.open(tmp_path / "a.png").tobytes() == Image.open(tmp_path / "b.png").tobytes()
    # the recipe says how the image was normalised (the demo's metadata: the 0.5 preset at 32x32)
    r = load_recipe(tmp_path / "a.png.recipe.json")
    assert r["run"]["image_preprocessing"] == "0.5 (mean 0.5/0.5/0.5, std 0.5/0.5/0.5), 32×32, from metadata"


def test_the_colour_scale_is_the_windows_default_named_on_the_bar_and_old_recipes_keep_theirs(maps, tmp_path):
    """Without --scale a figure is on fixed 0–1, as the window opens, and its colour bar says so; the recipe
    records it.  A recipe written before there was a choice (no "scale") was drawn stretched to each map and
    regenerates exactly that figure."""
    import numpy as np
    from _pdftext import svg_texts

    out = tmp_path / "fixed.svg"
    assert fig("--maps", maps["text"], "--layer", 1, "--head", 0, "--out", out) == 0
    r = json.loads((tmp_path / "fixed.svg.recipe.json").read_text())
    assert r["view"]["scale"] == "fixed"
    assert "attention weight (fixed 0–1)" in " ".join(svg_texts(out.read_bytes())).replace("\n", " ")
    stretched = tmp_path / "map.png"
    assert fig("--maps", maps["text"], "--layer", 1, "--head", 0, "--scale", "map", "--out", stretched) == 0
    old = json.loads((tmp_path / "map.png.recipe.json").read_text())
    del old["view"]["scale"]  # as every recipe written before scales
    (tmp_path / "old.recipe.json").write_text(json.dumps(old))
    again = tmp_path / "again.png"
    assert fig("--recipe", tmp_path / "old.recipe.json", "--out", again) == 0
    assert again.read_bytes() == stretched.read_bytes()
    # what the three scales put at the top of the bar, against the map itself
    result = text_result()
    top = float(result.blocks()[0].head(1, 0).max())
    every = max(float(result.blocks()[0].layer(i).max()) for i in range(2))
    for scale, want in (("fixed", 1.0), ("map", top), ("shared", every)):
        im = render_spec(result, FigureSpec(layer=1, head=0, scale=scale, dpi=40)).axes[0].images[0]
        assert im.norm.vmax == pytest.approx(want) and np.asarray(im.get_array()).max() == pytest.approx(top)


def test_a_recipe_of_an_export_folder_regenerates_the_same_bytes(tmp_path):
    """A figure of an optimum-style export folder (encoder + decoder files) writes a recipe whose model is the folder;
    the recipe replays to the same PNG (it refused the folder as 'missing')."""
    from pathlib import Path

    from onnx_builders import split_export

    repo = Path(__file__).resolve().parents[2]
    folder = split_export(repo / "models" / "translation.onnx", tmp_path / "mt")
    import numpy as np

    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, input_ids=np.array([[5, 9, 7, 3]]), decoder_input_ids=np.array([[2, 8, 6]]))
    out = tmp_path / "align.png"
    assert fig(folder, "--inputs", feeds, "--view", "heatmap", "--dpi", 60, "--out", out) == 0
    recipe = out.with_name("align.png.recipe.json")
    assert json.loads(recipe.read_text())["source"]["model"]["path"] == "mt"
    again = tmp_path / "again.png"
    assert fig("--recipe", recipe, "--out", again) == 0
    assert again.read_bytes() == out.read_bytes()


def test_a_picture_past_a_single_image_names_the_flag_to_drop(maps, tmp_path, capsys):
    """One image in the prompt: "choose one of them" (of one) told nothing; the line names --picture."""
    assert fig("--maps", maps["cap"], "--view", "image", "--picture", 2, "--out", tmp_path / "f.png") == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "attnviz: error: image 2 is not in this result; its prompt holds one image "
        "(leave out --picture, or give --picture 1)"
    )
    assert not (tmp_path / "f.png").exists()


def test_all_heads_of_a_model_that_declares_its_alignment_head_draws_every_layer(tmp_path, capsys):
    """--all-heads on the translation demo (which declares decoder layer 2 head 0) drew layer 2's four heads only:
    the declared head chose a layer as well as the block.  Every head of every layer of that block is drawn."""
    from pathlib import Path

    from attnviz.runtime import open_model

    model = Path(__file__).resolve().parents[2] / "models" / "translation.onnx"
    opened = open_model(model, provider="cpu")
    assert opened.probe()  # head counts are read from one run
    cross = [s for s in opened.sites if s.kind == "cross"]
    out = tmp_path / "heads"
    argv = ["--text", "μακάριοι οἱ πτωχοὶ", "--all-heads", "--out", out, "--format", "svg", "--no-recipe"]
    assert fig(model, *argv) == 0
    drawn = sorted(p.name for p in out.iterdir())
    assert drawn == sorted(f"heatmap_decoder-cross_L{s.layer:02d}_H{h:02d}.svg" for s in cross for h in range(s.heads))
    assert len(drawn) == 12


def test_a_maps_file_or_recipe_given_as_the_positional_file(maps, tmp_path):
    """``attnviz figure MAPS.npz`` draws the maps as ``--maps`` does (the same PNG bytes, the same recipe source),
    and ``attnviz figure R.json`` regenerates as ``--recipe`` does; before, a .npz was refused as "not an ONNX
    model"."""
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    assert fig("--maps", maps["text"], "--head", 1, "--out", a, "--dpi", 50) == 0
    assert fig(maps["text"], "--head", 1, "--out", b, "--dpi", 50) == 0
    assert a.read_bytes() == b.read_bytes()
    ra, rb = (load_recipe(str(p) + ".recipe.json") for p in (a, b))
    assert ra["inputs"] == rb["inputs"] and ra["view"] == rb["view"]
    c = tmp_path / "c.png"
    assert fig(str(b) + ".recipe.json", "--out", c) == 0
    assert c.read_bytes() == b.read_bytes()
