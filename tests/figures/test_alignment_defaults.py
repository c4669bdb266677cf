"""``attnviz figure --view alignment`` opens on what the window opens on: the model's declared alignment head and
row convention (``attnviz.alignment``) unless the command names others, and says so in one line.  Checked on the
translation demo (it declares decoder layer 2 head 0 with "input" rows) against its raw cross-attention maps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from attnviz.cli import main
from attnviz.core.view import alignment_map
from attnviz.figures import FigureSpec
from attnviz.figures.select import resolve
from attnviz.runtime import open_model

TRANSLATION = Path(__file__).resolve().parents[2] / "models" / "translation.onnx"
SRC, TGT = "ἐν ἀρχῇ ἦν ὁ λόγος", "in the beginning was the word"


def fig(*argv):
    return main(["figure", *map(str, argv)])


@pytest.fixture(scope="module")
def run():
    return open_model(TRANSLATION, provider="cpu").analyze(text=SRC, text_pair=TGT)


def _cross(result, layer):
    site = next(i for i, s in enumerate(result.sites) if (s.stack, s.kind, s.layer) == ("decoder", "cross", layer))
    return result.dense()[site][0]  # [heads, decoder rows, source]


def _view(tmp_path, name):
    return json.loads((tmp_path / f"{name}.recipe.json").read_text())["view"]


def test_no_head_given_draws_the_declared_head_and_rows_and_says_so(run, tmp_path, capsys):
    assert run.info["alignment"] == {"heads": [[2, 0]], "convention": "input"}
    out = tmp_path / "a.pdf"
    assert fig(TRANSLATION, "--text", SRC, "--text-pair", TGT, "--view", "alignment", "--out", out) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "declared alignment head (decoder layer 2 head 0)" in err[0] and "(input)" in err[0]
    v = _view(tmp_path, "a.pdf")
    assert (v["layer"], v["head"], v["agg"], v["rows"]) == (2, 0, None, "input")
    # what that recipe draws: each target word on the decoder row that reads it (rows 1..n of layer 2 head 0)
    mv = alignment_map(run, resolve(run, FigureSpec(**v)))
    assert mv.q_labels == TGT.split()
    np.testing.assert_allclose(mv.matrix, _cross(run, 2)[0][1:], rtol=1e-6)


def test_what_the_command_names_wins_and_only_the_rest_is_filled_in(run, tmp_path, capsys):
    base = [TRANSLATION, "--text", SRC, "--text-pair", TGT, "--view", "alignment"]
    assert fig(*base, "--agg", "mean", "--out", tmp_path / "m.pdf") == 0
    err = capsys.readouterr().err
    assert "row convention (input)" in err and "alignment head" not in err
    v = _view(tmp_path, "m.pdf")
    assert (v["head"], v["agg"], v["rows"]) == (None, "mean", "input")
    assert fig(*base, "--layer", 1, "--head", 3, "--rows", "predict", "--out", tmp_path / "p.pdf") == 0
    assert "declared" not in capsys.readouterr().err
    v = _view(tmp_path, "p.pdf")
    assert (v["layer"], v["head"], v["rows"]) == (1, 3, "predict")
    mv = alignment_map(run, resolve(run, FigureSpec(**v)))
    assert mv.q_labels == TGT.split()
    np.testing.assert_allclose(mv.matrix, _cross(run, 1)[3][:-1], rtol=1e-6)  # rows 0..n-1 predict the words


def test_maps_saved_by_extract_keep_the_declaration(run, tmp_path, capsys):
    maps = tmp_path / "mt.npz"
    assert main(["extract", str(TRANSLATION), "--text", SRC, "--text-pair", TGT, "--out", str(maps)]) == 0
    capsys.readouterr()
    assert fig("--maps", maps, "--view", "alignment", "--out", tmp_path / "x.pdf") == 0
    assert "decoder layer 2 head 0" in capsys.readouterr().err
    v = _view(tmp_path, "x.pdf")
    assert (v["layer"], v["head"], v["rows"]) == (2, 0, "input")
    # and a recipe is drawn as it says, with no defaults applied again
    assert fig("--recipe", tmp_path / "x.pdf.recipe.json", "--out", tmp_path / "y.pdf") == 0
    assert "declared" not in capsys.readouterr().err
    assert (tmp_path / "y.pdf").read_bytes() == (tmp_path / "x.pdf").read_bytes()


def test_a_refused_view_is_its_one_error_line_without_the_note(tmp_path, capsys):
    """`--view image` of the text demo: the note on the declared head used to come first, about a figure that was
    never drawn (session 20, running the README's commands); the refusal is now the one line on stderr."""
    out = tmp_path / "i.pdf"
    assert fig(TRANSLATION, "--text", SRC, "--view", "image", "--out", out) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("attnviz: error: the image view needs the input image"), err
    assert not out.exists()


def test_the_overview_draws_every_layer_of_the_declared_heads_block(run, tmp_path, capsys):
    """`figure --view overview` with no selection flags: the declared head's block, every layer of it, as the window's
    overview shows them.  It drew layer 2 alone ("layer 2, all heads"; a layer given to the overview means that
    layer's heads only) while its note said "drawn as the window opens it" (audit25).  Checked against the same
    figure with that block named by hand, and against layer 2 alone, which must differ."""
    from matplotlib.image import imread

    maps = tmp_path / "mt.npz"
    assert main(["extract", str(TRANSLATION), "--text", SRC, "--text-pair", TGT, "--out", str(maps)]) == 0
    capsys.readouterr()
    base = ["--maps", maps, "--view", "overview", "--dpi", 60]
    assert fig(*base, "--out", tmp_path / "d.png") == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "decoder cross-attention, the block of the model's declared alignment head" in err[0]
    v = _view(tmp_path, "d.png")
    assert (run.blocks()[v["block"]].name, v["layer"], v["head"]) == ("decoder cross-attention", None, None)
    assert fig(*base, "--block", "decoder cross", "--out", tmp_path / "b.png") == 0
    assert fig(*base, "--block", "decoder cross", "--layer", 2, "--out", tmp_path / "l2.png") == 0
    drawn, by_hand, one_layer = (imread(tmp_path / f"{n}.png") for n in ("d", "b", "l2"))
    assert drawn.shape == by_hand.shape and np.array_equal(drawn, by_hand)
    assert drawn.shape != one_layer.shape or not np.array_equal(drawn, one_layer)


@pytest.mark.parametrize("heads", [["--head", "0,1,2"], ["--head", "1"], ["--layer", "0"], ["--agg", "max"]])
def test_heads_without_a_block_are_drawn_on_the_block_the_window_opens_on(run, tmp_path, capsys, heads):
    """Without --block the heatmap is the declared head's block whether or not heads are named (figaudit26: with
    --head 0,1,2 it was the encoder's self-attention, without it the decoder's cross-attention)."""
    out = tmp_path / "h.png"
    assert fig(TRANSLATION, "--text", SRC, "--text-pair", TGT, "--view", "heatmap", *heads, "--out", out) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert "decoder cross-attention, the block of the model's declared alignment head" in err[0]
    # (several heads on the heatmap: a second note says it drew the first, ux29)
    assert err[1:] == (
        [
            "attnviz: note: --head 0,1,2: the heatmap view draws one head, head 0 (several heads are "
            "overlaid in the links view, side by side in the image view)"
        ]
        if heads[1] == "0,1,2"
        else []
    )
    v = _view(tmp_path, "h.png")
    blocks = run.blocks()
    drawn = blocks[resolve(run, FigureSpec(**v)).block]
    assert (drawn.stack, drawn.kind) == ("decoder", "cross")
    # the same bytes as naming the block by hand
    named = tmp_path / "named.png"
    argv = [TRANSLATION, "--text", SRC, "--text-pair", TGT, "--view", "heatmap", *heads, "--block", "decoder cross"]
    assert fig(*argv, "--out", named) == 0
    assert named.read_bytes() == out.read_bytes()


@pytest.mark.parametrize("view", ["alignment", "strip"])
def test_maps_extracted_without_generating_name_extract_again(tmp_path, capsys, view):
    """ux29: maps of a verse extracted with no generation (``--generate 0``: extract generates as the window does
    since gen30) hold the start token's row alone, and `figure MAPS.npz --view alignment` said "... or generate
    (see --generate)": a flag `figure --maps` cannot take.  The line names the maps file and how to extract them
    again; extract's default maps then draw."""
    maps, out = tmp_path / "maps.npz", tmp_path / f"{view}.pdf"
    assert main(["extract", str(TRANSLATION), "--text", SRC, "--generate", "0", "--out", str(maps)]) == 0
    capsys.readouterr()
    assert fig(maps, "--view", view, "--out", out) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"attnviz: error: the {view} view needs ")
    assert err[0].endswith(
        "; maps.npz holds no generated words: run 'attnviz extract' again without --generate 0 (it generates by "
        "default, as the window)"
    )
    assert "(see --generate)" not in err[0] and not out.exists()
    assert main(["extract", str(TRANSLATION), "--text", SRC, "--out", str(maps)]) == 0
    assert fig(maps, "--view", view, "--out", out) == 0 and out.is_file()
    assert fig(TRANSLATION, "--text", SRC, "--view", "strip", "--generate", "0", "--out", tmp_path / "m.pdf") == 2
    assert capsys.readouterr().err.strip().endswith("(see --generate)")  # a model run: the flag is figure's own
