"""ux28: a refusal names what the user wrote, where they wrote it (the flag as typed, the recipe's key), and a top
set by hand below the floor every automatic top stops at (``VMAX_MIN``) is refused, so no surface draws it its
own way (the window clamped it to 1e-6 while a figure drew the exact number).

Independent checks: the words the user typed (``--vmax 0``, ``--text-file``, ``view.vmax``, ``options``) are in
the one line; exit code 2; no traceback."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("matplotlib")

from figure_data import text_result

from attnviz.cli import main
from attnviz.core import view as vm
from attnviz.core.io import save_npz


@pytest.fixture
def maps(tmp_path):
    return save_npz(text_result(), tmp_path / "text.npz")


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


@pytest.mark.parametrize("typed", ["0", "-0.5", "-3", "nan", "0.0000001", "1E-9", "00.000", "-0"])
def test_figure_vmax_names_the_flag_and_the_number_as_typed(maps, tmp_path, capsys, typed):
    assert main(["figure", "--maps", str(maps), "--vmax", typed, "--out", str(tmp_path / "x.png")]) == 2
    err = _one_line(capsys)
    # the number as typed, not as Python writes the float argparse read ('0.0000001' is 1e-07 there, '00.000' 0.0);
    # the floor too in the digits a user types
    assert err.startswith(f"attnviz: error: --vmax {typed}: the colour scale's top must be a number > 0 "), err
    assert "at least 0.000001;" in err and "e-0" not in err.replace(typed, "")
    assert not (tmp_path / "x.png").exists()


def test_open_and_the_box_show_the_top_as_typed(maps, tmp_path, capsys):
    """open's --vmax (its refusal, before any window) and the window's colour-top box (its text) alike."""
    assert main(["open", str(maps), "--vmax", "0.0000001", "--screenshot", str(tmp_path / "s.png")]) == 2
    assert _one_line(capsys).startswith("attnviz: error: --vmax 0.0000001: ")
    with pytest.raises(vm.ViewError, match=r"^colour top '0\.0000001': .*at least 0\.000001;"):
        vm.check_vmax("0.0000001", "colour top")


def test_open_vmax_names_the_flag_as_typed(maps, capsys):
    from attnviz.gui.command import focus_from_args

    args = type("A", (), dict.fromkeys(("block", "layer", "head", "mode", "image_base", "image_from", "log",
                                        "link_cut", "padding", "scale", "frame", "picture"), None))()  # fmt: skip
    args.vmax = 0.0  # argparse's float for '--vmax 0'
    with pytest.raises(vm.ViewError, match=r"^--vmax 0: "):
        focus_from_args(args)


def test_a_top_below_the_floor_is_refused_and_the_floor_itself_is_drawn_exactly():
    with pytest.raises(vm.ViewError, match="at least 0.000001;"):
        vm.check_vmax(vm.VMAX_MIN / 2)
    assert float(vm.VMAX_MIN_TEXT) == vm.VMAX_MIN  # the floor's words are its number
    assert vm.check_vmax(vm.VMAX_MIN) == vm.VMAX_MIN
    # the window's levels (gui.style.display_levels: colour_range of the top as its largest value) and a figure's
    # (colour_range with the top given) agree at the smallest top a user can set: nothing is clamped differently
    assert vm.colour_range(vm.VMAX_MIN, False) == vm.colour_range(vm.VMAX_MIN, False, vm.VMAX_MIN)
    assert vm.colour_range(vm.VMAX_MIN, True) == vm.colour_range(vm.VMAX_MIN, True, vm.VMAX_MIN)


def test_a_recipes_vmax_is_named_by_its_key(maps, tmp_path, capsys):
    out = tmp_path / "a.png"
    assert main(["figure", "--maps", str(maps), "--out", str(out)]) == 0
    recipe = tmp_path / "a.png.recipe.json"
    r = json.loads(recipe.read_text())
    r["view"]["vmax"] = 0
    recipe.write_text(json.dumps(r))
    capsys.readouterr()
    assert main(["figure", "--recipe", str(recipe), "--out", str(tmp_path / "b.png")]) == 2
    err = _one_line(capsys)
    assert err.startswith("attnviz: error: a.png.recipe.json: view.vmax 0: the colour scale's top"), err


@pytest.mark.parametrize("written", ["0.0000001", "1E-9", "-0.50"])
def test_a_recipes_vmax_is_shown_as_the_file_writes_it(maps, tmp_path, capsys, written):
    """The number as the file holds it (json reads 0.0000001 as 1e-07), in the refusal's own line (it came out as
    "malformed recipe (ViewError: …", cut at 100 characters)."""
    out = tmp_path / "a.png"
    assert main(["figure", "--maps", str(maps), "--out", str(out)]) == 0
    recipe = tmp_path / "a.png.recipe.json"
    r = json.loads(recipe.read_text())
    r["view"]["vmax"] = "TOP"
    recipe.write_text(json.dumps(r, indent=1).replace('"TOP"', written))
    capsys.readouterr()
    assert main(["figure", "--recipe", str(recipe), "--out", str(tmp_path / "b.png")]) == 2
    assert _one_line(capsys) == (
        f"attnviz: error: a.png.recipe.json: view.vmax {written}: the colour scale's top must be a number > 0 (at "
        "least 0.000001; e.g. 0.5), or none for the scale's own top"
    )


@pytest.mark.parametrize("section", ["options", "inputs", "view", "source"])
@pytest.mark.parametrize("value", [[1, 2], "fast", 3])
def test_a_recipe_section_that_is_not_an_object_is_one_line_naming_it(maps, tmp_path, capsys, section, value):
    out = tmp_path / "a.png"
    assert main(["figure", "--maps", str(maps), "--out", str(out)]) == 0
    recipe = tmp_path / "a.png.recipe.json"
    r = json.loads(recipe.read_text())
    r[section] = value
    recipe.write_text(json.dumps(r))
    capsys.readouterr()
    assert main(["figure", "--recipe", str(recipe), "--out", str(tmp_path / "b.png")]) == 2
    err = _one_line(capsys)
    assert f"a.png.recipe.json: {section} is {json.dumps(value)}; give an object" in err
    assert "malformed" not in err and "TypeError" not in err


def test_figure_maps_with_a_text_file_names_text_file(maps, tmp_path, capsys):
    words = tmp_path / "words.txt"
    words.write_text("hello there")
    argv = ["figure", "--maps", str(maps), "--text-file", str(words), "--out", str(tmp_path / "x.png")]
    assert main(argv) == 2
    err = _one_line(capsys)
    assert "drop --text-file" in err and "--text/" not in err and "--image" not in err
    assert (
        main(["figure", "--maps", str(maps), "--text", "hi", "--generate", "2", "--out", str(tmp_path / "x.png")]) == 2
    )
    assert "drop --text, --generate" in _one_line(capsys)
