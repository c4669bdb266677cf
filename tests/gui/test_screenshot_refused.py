"""`attnviz open MODEL --screenshot X.png` refused (exit 2) saves nothing, whether the window refuses the run itself
(an image that is not there) or the result is drawn first and the flags are refused on it (`--layer 7` on a
two-layer model, `--view alignment` of an encoder, which saved the view's "Alignment needs cross-attention" with
exit 0 where `figure --view alignment` refuses): one line, exit 2, and a PNG already at X is left as it was.  It saved the window "for the record",
overwriting a good earlier shot with one whose only sign of the error was the status bar (audit25)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import run_cli

pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
EARLIER = b"\x89PNG\r\n\x1a\n an earlier run's screenshot"


@pytest.mark.parametrize(
    ("model", "flags", "said"),
    [
        ("vit-classification.onnx", ("--image", "no-such.png"), "no-such.png: no such file"),
        ("sequence-classification.onnx", ("--text", "1 2 3", "--layer", "7"), "layer 7 is out of range"),
        # a view with nothing to show for the result: the window's reason, where `figure --view` refuses too
        (
            "sequence-classification.onnx",
            ("--text", "1 2 3", "--view", "alignment"),
            "--view alignment: Alignment needs",
        ),
        ("sequence-classification.onnx", ("--text", "1 2 3", "--view", "image"), "--view image: Image regions need"),
    ],
    ids=["run refused", "flags refused on the drawn result", "no alignment", "no image"],
)
def test_a_refused_screenshot_writes_nothing(tmp_path, model, flags, said):
    if not (MODELS / model).exists():
        pytest.skip(f"the {model} demo is not in this checkout")
    shot = tmp_path / "x.png"
    shot.write_bytes(EARLIER)
    code, err = run_cli(
        "open", MODELS / model, *flags, "--screenshot", shot, cwd=tmp_path, env={"QT_QPA_PLATFORM": "offscreen"}
    )
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("attnviz: error: ") and said in lines[0], err[-2000:]
    assert shot.read_bytes() == EARLIER
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.png"]  # no temporary file left beside it either


def test_an_image_alone_says_how_to_give_a_model_too(tmp_path):
    """`attnviz open cat.png` (the help listed an image among what `open` takes): the window's "open a vision or
    captioning model first, then the image" has no first step on the command line; the line says how to give both."""
    image = ROOT / "resources" / "samples" / "captioning.png"
    shot = tmp_path / "x.png"
    code, err = run_cli("open", image, "--screenshot", shot, env={"QT_QPA_PLATFORM": "offscreen"})
    assert code == 2 and err.strip().splitlines() == [
        "attnviz: error: an image is opened by a vision or captioning model: attnviz open MODEL.onnx --image "
        "captioning.png"
    ]
    assert not shot.exists()


def test_figure_refuses_the_same_views(tmp_path, capsys):
    """The window's refusals above match the figure command's: neither draws a view the result cannot show."""
    from attnviz.cli import main

    model = MODELS / "sequence-classification.onnx"
    if not model.exists():
        pytest.skip("the sequence-classification demo is not in this checkout")
    for view in ("alignment", "image"):
        out = tmp_path / f"{view}.png"
        assert main(["figure", str(model), "--text", "1 2 3", "--view", view, "--out", str(out)]) == 2
        assert f"the {view} view needs" in capsys.readouterr().err and not out.exists()


def test_a_shown_result_is_still_saved(tmp_path):
    """The other side: a layer that is there, a view that has something to show (the translation demo's alignment):
    a PNG of the window, exit 0."""
    model = MODELS / "translation.onnx"
    if not model.exists():
        pytest.skip("the translation demo is not in this checkout")
    shot = tmp_path / "x.png"
    flags = ("--text", "μακάριοι οἱ πτωχοὶ", "--generate", "4", "--view", "alignment", "--layer", "1")
    code, err = run_cli("open", model, *flags, "--screenshot", shot, env={"QT_QPA_PLATFORM": "offscreen"})
    assert code == 0, err[-2000:]
    assert shot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and len(shot.read_bytes()) > 10_000


def test_a_missing_file_names_what_open_takes_and_a_recipe_names_figure(tmp_path, capsys):
    """ux29: `attnviz open gone.onnx` said "give an .onnx model, an image, an .npz file or corpus results", and an
    image given so is then refused (the test above); `figure --help` said `open` reads a recipe .json "alike", and
    `open R.json` was refused naming only what it opens.  The lines name what `open` takes, and the command that
    draws a recipe."""
    code, err = run_cli("open", "gone.onnx", "--screenshot", tmp_path / "x.png", cwd=tmp_path)
    assert code == 2 and err.strip().splitlines() == [
        "attnviz: error: gone.onnx: no such file; give an .onnx model or an export folder, an .npz file from "
        "'attnviz extract', or an 'attnviz corpus' results folder"
    ]
    recipe = tmp_path / "fig.pdf.recipe.json"
    recipe.write_text("{}")
    code, err = run_cli("open", recipe, "--screenshot", tmp_path / "x.png", env={"QT_QPA_PLATFORM": "offscreen"})
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err[-2000:]
    assert lines[0].endswith(f"; a figure recipe is drawn again by: attnviz figure --recipe {recipe}")
    assert not (tmp_path / "x.png").exists()
    from attnviz.cli import main

    with pytest.raises(SystemExit):
        main(["figure", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "a .npz is taken as --maps (as attnviz open takes it), a .json as --recipe" in said
    assert "reads them alike" not in said
