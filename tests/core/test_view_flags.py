"""core/view_flags.py: which view reads which flag, for ``figure``'s and ``open``'s note on flags a view ignores.

Two checks make the table trustworthy: every flag of both parsers is classified (a new view flag cannot be left
out), and every "does not read" in it is measured: the view drawn with the flag is the same PNG, byte for byte,
as drawn without it, on the bundled models (a text encoder-decoder for the token views, an image classifier for
the image view).  The note itself is checked as a user sees it, in one interpreter.
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import pytest
from cli_run import run_cli_each

from attnviz.cli import build_parser
from attnviz.core.view_flags import BY_DEST, GENERAL, VIEW_FLAGS, unread, unread_note
from attnviz.core.view_names import FIGURE_VIEWS

REPO = Path(__file__).resolve().parents[2]
MT = REPO / "models" / "translation.onnx"
VIT = REPO / "models" / "vit-classification.onnx"


def _parser(command: str) -> argparse.ArgumentParser:
    top = build_parser(command)
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


@pytest.mark.parametrize("command", ["figure", "open"])
def test_every_flag_is_classified(command):
    """Each flag of the parser is a view flag (with its views) or a general one: none is left to pass unread."""
    parser = _parser(command)
    dests = {a.dest for a in parser._actions if a.option_strings}
    assert dests, "the walk found no flags"
    loose = sorted(d for d in dests if d not in BY_DEST and d not in GENERAL)
    assert loose == [], f"classify these {command} flags in attnviz/core/view_flags.py: {loose}"
    assert not set(BY_DEST) & GENERAL


def test_view_flags_name_figure_flags():
    """Each view flag is figure's flag of that name and dest (the note names it as typed)."""
    parser = _parser("figure")
    by_dest = {a.dest: a for a in parser._actions if a.option_strings}
    for f in VIEW_FLAGS:
        assert f.dest in by_dest and f.flag in by_dest[f.dest].option_strings, f
        assert f.views and set(f.views) <= set(FIGURE_VIEWS), f


def test_open_view_flags_are_figures():
    """open's view flags are figure's (same dest, same spelling): one table for both."""
    parser = _parser("open")
    for a in parser._actions:
        if a.dest in BY_DEST:
            assert BY_DEST[a.dest].flag in a.option_strings, a.option_strings


def test_unread_and_note_words():
    assert [f.flag for f in unread("heatmap", ["image_base", "link_cut", "scale"])] == ["--image-base", "--link-cut"]
    assert unread_note("links", ["link_cut", "query"]) is None
    note = unread_note("links", ["scale", "log", "image_base"])
    assert note.startswith("the links view does not read --log, --scale, --image-base; drawn without them")
    assert "--log, --scale: heatmap, overview, alignment, image, strip; --image-base: image, strip" in note
    window = unread_note("heatmap", ["link_cut"], window=True)
    assert window == (
        "the Head map tab does not show --link-cut; set for the tabs that read it (--link-cut: Token links)"
    )


# a value other than the default for each view flag (FigureSpec's field of the same name)
VALUES = {
    "query": 1,
    "rows": "input",
    "hide_special": True,
    "keep": 0.5,
    "log": True,
    "scale": "shared",
    "vmax": 0.05,
    "cmap": "gray",
    "image_base": "none",
    "image_from": "tower",
    "link_cut": "row",
    "picture": 1,
}
# the views each bundled model draws (audio: no speech model is bundled; frame and span are refused, not unread,
# where they do not apply: FigureSpec and select check them)
DRAWN = {"mt": ("heatmap", "overview", "links", "alignment", "strip"), "vit": ("heatmap", "overview", "links", "image")}
NOT_READ = [
    (model, view, f.dest)
    for model, views in DRAWN.items()
    for view in views
    for f in VIEW_FLAGS
    if view not in f.views and f.dest in VALUES and not (f.dest == "picture" and model == "mt")
]


@pytest.fixture(scope="module")
def results():
    from attnviz.figures.sources import load_result
    from attnviz.runtime.sample import sample_for_path

    image = sample_for_path(str(VIT)).values["image"]
    return {
        "mt": load_result(model=MT, text="hello world and more", generate=4),
        "vit": load_result(model=VIT, image=image),
    }


def _png(result, **fields) -> str:
    import matplotlib.pyplot as plt

    from attnviz.figures.render import figure_bytes, render_spec
    from attnviz.figures.spec import FigureSpec

    if fields.get("view") == "image" and "scale" in fields:  # figure --scale sets the image view's own scale
        fields["image_scale"] = fields["scale"]
    fig = render_spec(result, FigureSpec(dpi=30, **fields))
    try:
        return hashlib.sha256(figure_bytes(fig, "png")).hexdigest()
    finally:
        plt.close(fig)


def test_not_read_is_measured():
    """The table's "does not read" pairs the bundled models can draw are many (the measurement below is no token)."""
    assert len(NOT_READ) >= 40


@pytest.fixture(scope="module")
def plain_png(results):
    """Each (model, view)'s figure without view flags, drawn once for the module (the same for every flag)."""
    drawn: dict[tuple[str, str], str] = {}

    def get(model: str, view: str) -> str:
        if (model, view) not in drawn:
            drawn[model, view] = _png(results[model], view=view)
        return drawn[model, view]

    return get


@pytest.mark.parametrize("model, view, dest", NOT_READ)
def test_not_read_draws_the_same_bytes(results, plain_png, model, view, dest):
    assert _png(results[model], view=view, **{dest: VALUES[dest]}) == plain_png(model, view)


@pytest.mark.parametrize(
    "model, view, dest",
    [("mt", "heatmap", "scale"), ("mt", "links", "keep"), ("mt", "alignment", "vmax"), ("vit", "image", "image_base"),
     ("mt", "strip", "log"), ("mt", "overview", "hide_special"), ("mt", "links", "link_cut")],
)  # fmt: skip
def test_read_changes_the_drawing(results, model, view, dest):
    """The measurement can fail: flags the table says a view reads do change its drawing."""
    res = results[model]
    assert _png(res, view=view, **{dest: VALUES[dest]}) != _png(res, view=view)


def test_figure_and_open_say_the_note(tmp_path):
    """As a user runs them: the note line (exit 0, the figure drawn as without the flags); none where every flag
    given is read; open --view's note with the screenshot's result."""
    base = ["figure", MT, "--text", "hello world", "--dpi", "40"]
    cases = [
        [*base, "--view", "heatmap", "--rows", "input", "--link-cut", "map", "--out", tmp_path / "a.png"],
        [*base, "--view", "heatmap", "--out", tmp_path / "b.png"],
        [*base, "--view", "links", "--scale", "shared", "--vmax", "0.5", "--log", "--out", tmp_path / "c.png"],
        [*base, "--view", "links", "--link-cut", "map", "--query", "1", "--out", tmp_path / "d.png"],
        ["open", MT, "--text", "hello world", "--view", "heatmap", "--link-cut", "map", "--size", "600x400",
         "--screenshot", tmp_path / "e.png"],
    ]  # fmt: skip
    got = run_cli_each(*cases, env={"QT_QPA_PLATFORM": "offscreen"})
    notes = [
        [ln for ln in err.splitlines() if "view does not read" in ln or "tab does not show" in ln] for _, err in got
    ]
    assert [rc for rc, _ in got] == [0] * 5, got
    assert notes[0] == [
        "attnviz: note: the heatmap view does not read --rows, --link-cut; drawn without them (read by "
        "--rows: alignment, strip; --link-cut: links)"
    ]
    assert notes[1] == [] and notes[3] == []
    assert len(notes[2]) == 1 and "the links view does not read --log, --scale, --vmax;" in notes[2][0]
    assert notes[4] == [
        "attnviz: note: the Head map tab does not show --link-cut; set for the tabs that read it (--link-cut: "
        "Token links)"
    ]
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()  # drawn as without them
    assert (tmp_path / "e.png").is_file()


SEQ = REPO / "models" / "sequence-classification.onnx"


def test_model_needs_name_flags_of_the_table():
    """Each flag a model may lack is a view flag (the refusal names it as typed)."""
    from attnviz.core.view_flags import MODEL_NEEDS

    assert set(MODEL_NEEDS) <= set(BY_DEST)


def test_meaningless_against_the_models(results):
    """--picture / --image-base / --image-from / --frame mean nothing for a model without an image, --rows for one
    without cross-attention; the same flags are the model's own where it has them (the note's case)."""
    from attnviz.core.view.selection import ViewError
    from attnviz.core.view_flags import check_model_reads, meaningless

    image_flags = ["picture", "image_base", "image_from", "frame"]
    assert [f.dest for f in meaningless(results["mt"], [*image_flags, "rows", "query", "scale"])] == [
        "image_base",
        "image_from",
        "picture",
        "frame",
    ]  # the table's order
    assert [f.dest for f in meaningless(results["vit"], [*image_flags, "rows", "link_cut"])] == ["rows"]
    check_model_reads(results["vit"], [*image_flags, "query", "vmax"])  # an image model: no refusal
    with pytest.raises(ViewError) as e:
        check_model_reads(results["vit"], ["rows", "scale"])
    assert str(e.value) == (
        "--rows: vit-classification.onnx has no cross-attention (an encoder-decoder's), so no view reads it; drop --rows"
    )


def test_figure_and_open_refuse_a_flag_the_model_cannot_read(tmp_path):
    """As a user runs them: --picture on a text-only model is one error line naming the flag and the fix, exit 2,
    no figure and no note; on an image model whose view does not read it, still the note (exit 0)."""
    cases = [
        ["figure", SEQ, "--picture", "1", "--out", tmp_path / "a.png"],
        ["figure", SEQ, "--view", "overview", "--image-base", "grey", "--frame", "2", "--out", tmp_path / "b.png"],
        ["figure", VIT, "--picture", "1", "--dpi", "40", "--out", tmp_path / "c.png"],
        ["open", SEQ, "--picture", "1", "--size", "600x400", "--screenshot", tmp_path / "d.png"],
        ["figure", SEQ, "--view", "image", "--picture", "1", "--out", tmp_path / "e.png"],  # the view's refusal first
    ]
    got = run_cli_each(*cases, env={"QT_QPA_PLATFORM": "offscreen"})
    assert [rc for rc, _ in got] == [2, 2, 0, 2, 2], got
    lines = [[ln for ln in err.splitlines() if "sample input" not in ln] for _, err in got]
    assert lines[0] == [
        "attnviz: error: --picture: sequence-classification.onnx takes no image, so no view reads it; drop --picture"
    ]
    assert lines[1] == [
        "attnviz: error: --image-base, --frame: sequence-classification.onnx takes no image, so no view reads them; "
        "drop --image-base, --frame"
    ]
    assert lines[2] == [
        "attnviz: note: the heatmap view does not read --picture; drawn without it (read by --picture: image)"
    ]
    assert lines[3] == lines[0]
    assert len(lines[4]) == 1 and lines[4][0].startswith("attnviz: error: the image view needs the input image")
    assert not any((tmp_path / n).exists() for n in ("a.png", "b.png", "d.png", "e.png"))
    assert (tmp_path / "c.png").is_file()
