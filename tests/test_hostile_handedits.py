"""Audit 17: hand-edited figure recipes.  A recipe is a JSON file a user may edit; a value of the wrong JSON type
(``"layer": "2"``, ``"head": [1]``, ``"text": 5``, ``"tokenizer": "tok.json"``) used to reach the code that uses it
as an internal error (exit 1), and ``"log": "no"`` drew the figure on a *log* scale (a non-empty string is true).
Each is one line naming the file, the key and the type it takes, exit 2, nothing written, the recipe unchanged."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from onnx_builders import tiny_text_model

from attnviz.cli import main
from attnviz.core.json_types import describe, fits


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    return rc, capsys.readouterr().err.strip()


def one_line(err, *words):
    assert err.startswith("attnviz: error:") and "\n" not in err and "Traceback" not in err, err
    for w in words:
        assert w.lower() in err.lower(), (w, err)


@pytest.fixture(scope="module")
def recipe_dir(tmp_path_factory):
    """A folder holding a model and a figure's recipe written by `attnviz figure` (the recipe names the model by a
    path relative to it)."""
    work = tmp_path_factory.mktemp("recipes")
    tiny_text_model(work / "model.onnx")
    rc = main(["figure", str(work / "model.onnx"), "--text", "the cat", "--dpi", "40", "--out", str(work / "fig.png")])
    assert rc == 0
    return work


def edited(work: Path, name: str, section: str, key: str, value) -> Path:
    r = json.loads((work / "fig.png.recipe.json").read_text())
    r[section][key] = value
    r["output"]["path"] = f"{name}.png"
    p = work / f"{name}.json"
    p.write_text(json.dumps(r))
    return p


# (section, key, value written by hand, words the one line must hold)
HAND_EDITS = [
    ("view", "layer", "x", ["view.layer", '"x"', "whole number"]),  # was: internal error (ValueError)
    ("view", "layer", 1.5, ["view.layer", "1.5"]),  # was: drawn, the layer silently int(1.5)
    ("view", "head", [1], ["view.head", "[1]"]),  # was: internal error (TypeError)
    ("view", "dpi", "300", ["view.dpi", '"300"']),  # was: internal error (TypeError)
    ("view", "cmap", 3, ["view.cmap", "string"]),  # was: internal error (AttributeError)
    ("view", "title", 5, ["view.title", "string"]),  # was: internal error (AttributeError)
    ("view", "log", "no", ["view.log", "true or false"]),  # was: drawn on a LOG scale
    ("view", "hide_special", "yes", ["view.hide_special", "true or false"]),  # was: drawn, truthy
    ("view", "vmax", "1", ["view.vmax", "number"]),  # was: drawn
    ("view", "heads", "0,1", ["view.heads", "list of whole numbers"]),  # was: malformed (int(','))
    ("inputs", "text", 5, ["inputs.text", "string"]),  # was: internal error (AttributeError)
    ("inputs", "text", ["the"], ["inputs.text"]),  # was: internal error (AttributeError)
    ("inputs", "generate", "3", ["inputs.generate", "whole number"]),  # was: a message about generation
    ("inputs", "tokenizer", "tokenizer.json", ["inputs.tokenizer", '"path"']),  # was: "string indices must be..."
    ("options", "max_tokens", "5", ["options.max_tokens"]),  # was: drawn
    ("options", "image_mean", "x", ["options.image_mean", "list of numbers"]),  # was: drawn
]


@pytest.mark.parametrize("section, key, value, words", HAND_EDITS, ids=[f"{s}.{k}={v!r}" for s, k, v, _ in HAND_EDITS])
def test_a_hand_edited_value_of_the_wrong_type_is_one_line(recipe_dir, capsys, section, key, value, words):
    name = f"{section}-{key}-{hashlib.sha256(json.dumps(value).encode()).hexdigest()[:8]}"
    p = edited(recipe_dir, name, section, key, value)
    before = sha(p)
    rc, err = run(capsys, "figure", "--recipe", p)
    assert rc == 2, err
    one_line(err, p.name, *words)
    assert not (recipe_dir / f"{name}.png").exists() and sha(p) == before


def test_inputs_written_as_null_are_no_inputs(recipe_dir, capsys):
    """``"inputs": null`` was an internal error (AttributeError); it reads as a recipe without inputs."""
    r = json.loads((recipe_dir / "fig.png.recipe.json").read_text())
    r["inputs"], r["output"]["path"] = None, "null-inputs.png"
    p = recipe_dir / "null-inputs.json"
    p.write_text(json.dumps(r))
    rc, err = run(capsys, "figure", "--recipe", p)
    assert rc == 2 and "internal error" not in err  # (the model needs a text: refused as the CLI refuses none)
    one_line(err)


def test_values_of_the_right_type_still_draw(recipe_dir, capsys):
    """The check refuses types, not values: an int where a number is taken (keep 1), an explicit false/null."""
    r = json.loads((recipe_dir / "fig.png.recipe.json").read_text())
    r["view"].update(keep=1, log=False, layer=0, head=None, cmap="magma", vmax=0.5)
    r["output"]["path"] = "typed.png"
    p = recipe_dir / "typed.json"
    p.write_text(json.dumps(r))
    rc, err = run(capsys, "figure", "--recipe", p)
    assert rc == 0, err
    assert (recipe_dir / "typed.png").read_bytes()[:4] == b"\x89PNG"


def test_figure_max_tokens_zero_is_refused_as_extract_refuses_it(recipe_dir, capsys):
    """``figure --max-tokens 0`` drew every token (``if max_tokens`` read 0 as "not given") where extract refuses."""
    out = recipe_dir / "zero.png"
    rc, err = run(capsys, "figure", recipe_dir / "model.onnx", "--text", "the cat", "--max-tokens", "0", "--out", out)
    assert rc == 2
    one_line(err, "max tokens 0", "--max-tokens")
    assert not out.exists()
    npz = recipe_dir / "zero.npz"
    rc, err2 = run(capsys, "extract", recipe_dir / "model.onnx", "--text", "the cat", "--max-tokens", "0", "--out", npz)
    assert rc == 2 and err2 == err and not npz.exists()


@pytest.mark.parametrize(
    "value, tp, ok",
    [
        (True, int, False),  # JSON's true is no number
        (1, float, True),
        (float("nan"), float, False),
        (float("inf"), float | None, False),
        ([1, 2], list[int] | None, True),
        ([1, "2"], list[int], False),
        ("x", int | str | None, True),
        (None, int | None, True),
    ],
)
def test_fits(value, tp, ok):
    assert fits(value, tp) is ok


def test_describe():
    assert describe(int | None) == "a whole number or null"
    assert describe(list[float] | None) == "a list of numbers or null"


def test_figure_out_naming_a_folder_says_so(recipe_dir, capsys):
    """``--out FOLDER`` said "cannot tell the figure format of FOLDER (no suffix)"; the fix is a file in it."""
    folder = recipe_dir / "figs"
    folder.mkdir()
    rc, err = run(capsys, "figure", recipe_dir / "model.onnx", "--text", "the cat", "--out", folder)
    assert rc == 2
    one_line(err, "is a folder", "--all-heads", str(folder / "figure.pdf"))
    assert list(folder.iterdir()) == []
