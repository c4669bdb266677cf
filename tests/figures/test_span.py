"""``attnviz figure --span LO-HI`` (and ``--key-span``): a window of a long map's positions, every token of it
labelled.  A 2,048-token head map printed whole is cells thinner than a line with one label in sixteen; the
window's cells are the map's own numbers at the positions asked for (positions as ``--query`` counts them, so
hiding special tokens does not move the window), checked against numpy slices of the maps written to the file."""

from __future__ import annotations

import json

import numpy as np
import pytest
from figure_data import _axis, encdec_result, softmax_maps

from attnviz.cli import main
from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo
from attnviz.core.io import load_npz, save_npz
from attnviz.figures import FigureSpec, render_spec

N = 700


def _long_result() -> AttentionResult:
    words = ["[CLS]"] + [f"w{i}" for i in range(1, N - 1)] + ["[SEP]"]
    words[150] = "[SEP]"  # a special token inside the window
    m = softmax_maps(np.random.default_rng(26), 2, N, N)
    return AttentionResult([DenseMap(m)], [SiteInfo("encoder", "self", 0, 2, "s0", "softmax")], tokens=_axis(words))


def _drawn(fig) -> tuple[np.ndarray, list[str], list[str]]:
    ax = fig.axes[0]
    rows = [t.get_text() for t in ax.get_yticklabels()]
    cols = [t.get_text() for t in ax.get_xticklabels()]
    return np.asarray(ax.images[0].get_array()), rows, cols


def test_a_window_of_a_self_attention_map_is_its_cells_and_every_label():
    r = _long_result()
    m = r.maps[0].head(0, 1)
    fig = render_spec(r, FigureSpec(view="heatmap", layer=0, head=1, span=[120, 183]))
    cells, rows, cols = _drawn(fig)
    np.testing.assert_array_equal(cells, m[120:184, 120:184])  # the keys take the rows' window
    want = r.tokens.labels[120:184]
    assert rows == want and cols == want  # every token of the window labelled
    assert "positions 120–183" in fig.axes[0].get_title()


def test_a_window_past_the_end_is_titled_with_the_positions_drawn():
    """``--span 680-99999`` of a 700-token map draws positions 680-699 and says so (hostile_sweep27: the title
    claimed 'positions 680–99999'); a key window past the end likewise."""
    r = _long_result()
    m = r.maps[0].head(0, 1)
    fig = render_spec(r, FigureSpec(view="heatmap", layer=0, head=1, span=[680, 99999]))
    cells, rows, _ = _drawn(fig)
    np.testing.assert_array_equal(cells, m[680:, 680:])
    assert len(rows) == N - 680
    title = fig.axes[0].get_title()
    assert f"positions 680–{N - 1}" in title and "99999" not in title
    fig = render_spec(r, FigureSpec(view="heatmap", layer=0, head=1, span=[0, 9], key_span=[690, 10**6]))
    np.testing.assert_array_equal(_drawn(fig)[0], m[:10, 690:])
    title = fig.axes[0].get_title()
    assert f"690–{N - 1}" in title and str(10**6) not in title


def test_the_window_is_of_positions_with_special_tokens_hidden():
    r = _long_result()
    m = r.maps[0].head(0, 0).astype(np.float64)
    fig = render_spec(r, FigureSpec(view="heatmap", layer=0, head=0, span=[140, 160], hide_special=True))
    cells, rows, _ = _drawn(fig)
    special = np.array(r.tokens.special)
    kept = m[~special][:, ~special]
    kept /= kept.sum(-1, keepdims=True)  # rows renormalised over the tokens shown
    pos = np.nonzero(~special)[0]
    inside = (pos >= 140) & (pos <= 160)
    np.testing.assert_allclose(cells, kept[inside][:, inside], rtol=1e-5)
    assert len(rows) == 20 and "[SEP]" not in rows  # 21 positions, one of them the hidden [SEP]


def test_a_cross_attention_window_keeps_every_source_token_unless_asked():
    r = encdec_result()
    fig = render_spec(r, FigureSpec(view="heatmap", block="decoder cross", layer=1, head=0, span=[2, 4]))
    cells, rows, cols = _drawn(fig)
    m = r.maps[5].head(0, 0)
    np.testing.assert_array_equal(cells, m[2:5])
    assert cols == r.tokens.labels
    fig = render_spec(
        r, FigureSpec(view="heatmap", block="decoder cross", layer=1, head=0, span=[2, 4], key_span=[1, 3])
    )
    cells, _, cols = _drawn(fig)
    np.testing.assert_array_equal(cells, m[2:5, 1:4])
    assert cols == r.tokens.labels[1:4]


def test_the_command_records_the_window_and_a_recipe_draws_it_again(tmp_path):
    maps = save_npz(_long_result(), tmp_path / "long.npz")
    out = tmp_path / "w.pdf"
    assert main(["figure", "--maps", str(maps), "--head", "1", "--span", "300-331", "--out", str(out)]) == 0
    recipe = json.loads(out.with_name("w.pdf.recipe.json").read_text())
    assert recipe["view"]["span"] == [300, 331] and "key_span" not in recipe["view"]
    again = tmp_path / "again.pdf"
    assert main(["figure", "--recipe", f"{out}.recipe.json", "--out", str(again)]) == 0
    assert again.read_bytes() == out.read_bytes()
    whole = tmp_path / "whole.pdf"
    assert main(["figure", "--maps", str(maps), "--head", "1", "--out", str(whole)]) == 0
    assert "span" not in json.loads(whole.with_name("whole.pdf.recipe.json").read_text())["view"]
    assert load_npz(maps).maps[0].shape[-1] == N


BAD = [
    (["--span", "40-30"], "--span 40-30: give positions LO-HI, 0 <= LO <= HI"),
    (["--span", "a-b"], "positions must look like 300-399"),
    (["--span", "800-900"], "--span 800-900 holds none of the map's query positions (0-699)"),
    (["--span", "1-5", "--view", "overview"], "the overview view has none to cut"),
    (["--key-span", "1-5", "--view", "strip"], "the strip view has none to cut"),
    (
        ["--span", "300-331", "--query", "10", "--view", "links"],
        "--query 10 lies outside the positions drawn (300-331)",
    ),
    (["--key-span", "800-900", "--view", "links"], "--key-span 800-900 holds none of the map's key positions"),
]


@pytest.mark.parametrize("extra,msg", BAD)
def test_a_bad_window_is_one_line(tmp_path, capsys, extra, msg):
    maps = save_npz(_long_result(), tmp_path / "long.npz")
    out = tmp_path / "f.png"
    try:
        rc = main(["figure", "--maps", str(maps), *extra, "--out", str(out), "--dpi", "40"])
    except SystemExit as e:  # argparse
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2 and msg in err and "Traceback" not in err
    assert not out.exists()
