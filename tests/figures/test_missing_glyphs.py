"""A character no installed font has (a CJK token where no CJK font is installed) prints as an empty box: the
figure command says so in one note naming the characters and the fix, instead of matplotlib's warning a glyph
naming its own source line.  Checked against matplotlib's own per-glyph warnings."""

from __future__ import annotations

import re
import warnings

import pytest
from cli_run import run_cli
from figure_data import text_result

from attnviz.cli import main
from attnviz.core.io import save_npz
from attnviz.figures import FigureSpec, figure_bytes, render_spec
from attnviz.figures.glyphs import missing_glyphs
from attnviz.figures.render import RC

# U+0378 and U+0379 are unassigned: no font has them, whatever is installed; 'é' and Arabic are in DejaVu Sans
TOKENS = ["[CLS]", "caf\u00e9", "\u0378x", "\u0627\u0644\u0627\u0646\u062a\u0628\u0627\u0647", "y\u0379", "[SEP]"]


def test_the_missing_characters_are_those_matplotlib_draws_as_boxes():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # (render.py ignores this warning: the note says it instead)
        fig = render_spec(text_result(n_layers=1, heads=1, tokens=TOKENS), FigureSpec(dpi=72))
        figure_bytes(fig, "pdf")
    boxed = {chr(int(m.group(1))) for w in caught if (m := re.match(r"Glyph (\d+) .*missing", str(w.message)))}
    ours = missing_glyphs(fig, tuple(RC["font.sans-serif"]))
    assert {"\u0378", "\u0379"} <= boxed
    assert set(ours) == boxed
    assert ours[:2] == ["\u0378", "\u0379"]  # in the order the text uses them


def test_the_figure_command_says_it_once(tmp_path, capsys):
    """As a user runs it (a fresh interpreter: pytest would show matplotlib's warnings its own way)."""
    npz = save_npz(text_result(n_layers=1, heads=1, tokens=TOKENS), tmp_path / "m.npz")
    code, err = run_cli("figure", "--maps", npz, "--out", tmp_path / "f.svg", "--dpi", "40")
    assert code == 0, err
    lines = [x for x in err.splitlines() if "font" in x]
    assert lines == [
        "attnviz: note: 2 characters of the figure's text (\u0378 \u0379) are in no installed font and print as "
        "empty boxes; install a font that has them (Chinese, Japanese, Korean: Noto Sans CJK, Debian/Ubuntu "
        "package fonts-noto-cjk) and draw the figure again"
    ], err
    assert "Warning" not in err and "Glyph" not in err
    # every character in a font: no note (in this process)
    clean = save_npz(text_result(n_layers=1, heads=1, tokens=TOKENS[:2] + TOKENS[3:4]), tmp_path / "c.npz")
    assert main(["figure", "--maps", str(clean), "--out", str(tmp_path / "g.svg"), "--dpi", "40"]) == 0
    assert "font" not in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore:Glyph")  # (pytest shows warnings its own way; the status line is the subject)
def test_the_window_export_says_it_in_the_status_bar(tmp_path):
    """File ▸ Export view writes through app/export_recipe.py: its status line carries the same note."""
    from attnviz.app.export_recipe import RunSources, save_with_recipe
    from attnviz.core.view import default_selection
    from attnviz.figures import FigureStyle

    result = text_result(n_layers=1, heads=1, tokens=TOKENS)
    done = save_with_recipe(
        result, "heatmap", default_selection(result), tmp_path / "w.pdf", FigureStyle(dpi=40), RunSources()
    )
    assert (tmp_path / "w.pdf").read_bytes().startswith(b"%PDF")
    assert done.status().endswith(
        ". Note: 2 characters of the figure's text (\u0378 \u0379) are in no installed font and print as empty boxes; "
        "install a font that has them (Chinese, Japanese, Korean: Noto Sans CJK, Debian/Ubuntu package "
        "fonts-noto-cjk) and draw the figure again"
    ), done.status()
