"""``attnviz figure --view links --link-cut row|map``: each query token's strongest links (row, the default, as the
window opens) or those of at least 5 % of the map's top weight (map).  The recipe records the cut; a recipe
written before there was a choice (no ``link_cut``) was drawn against the map's top and draws the same bytes."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from attnviz import AttnvizError
from attnviz.cli import main
from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
from attnviz.core.io import save_npz
from attnviz.core.view import link_alpha
from attnviz.figures import FigureSpec, render_spec

T = 200


def _causal_result() -> AttentionResult:
    """A random-init language model's causal maps: row i near 1/(i + 1) on each of its keys."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 2, T, T)) * 0.3
    x[..., np.triu(np.ones((T, T), bool), 1)] = -np.inf
    m = np.exp(x - x.max(-1, keepdims=True))
    m = (m / m.sum(-1, keepdims=True)).astype(np.float32)
    sites = [SiteInfo("decoder", "self", 0, 2, "softmax_0", "softmax")]
    return AttentionResult([DenseMap(m)], sites, tokens=TokenAxis([f"w{i}" for i in range(T)]))


def _lines(fig) -> list[tuple[int, int, float]]:
    from matplotlib.collections import LineCollection

    return sorted(
        (int(round(seg[0][1])), int(round(seg[1][1])), float(colour[3]))
        for coll in fig.axes[0].collections
        if isinstance(coll, LineCollection)
        for seg, colour in zip(coll.get_segments(), coll.get_colors())
    )


def _by_hand(m: np.ndarray, cut: str) -> list[tuple[int, int, float]]:
    m = m.astype(np.float64)
    out = []
    for i, row in enumerate(m):
        ref, shade = (row.max(), row.sum()) if cut == "row" else (m.max(), m.max())
        for j in sorted(np.argsort(-row, kind="stable")[:12].tolist()):
            if row[j] / ref >= 0.05:
                out.append((i, j, link_alpha(min(row[j] / shade, 1.0))))
    return out


@pytest.mark.parametrize("cut", ["row", "map"])
def test_the_figures_lines_are_each_cuts_links(cut):
    result = _causal_result()
    fig = render_spec(result, FigureSpec(view="links", layer=0, head=1, link_cut=cut, dpi=20))
    want = _by_hand(result.maps[0].array()[0, 1], cut)
    drawn = _lines(fig)
    assert [lk[:2] for lk in drawn] == [lk[:2] for lk in want]  # (pytest 9.2's approx takes no nested tuples)
    np.testing.assert_allclose([lk[2] for lk in drawn], [lk[2] for lk in want], atol=1e-6)
    rows = {i for i, _, _ in want}
    assert rows == set(range(T)) if cut == "row" else max(rows) < 64
    key = " ".join(t.get_text() for t in fig.texts).replace("\n", " ")
    assert ("share of its query token's attention" in key) == (cut == "row")


def test_the_cli_records_the_cut_and_an_old_recipe_draws_against_the_maps_top(tmp_path, capsys):
    maps = save_npz(_causal_result(), tmp_path / "long.npz")
    common = ["figure", "--maps", str(maps), "--view", "links", "--head", "0", "--dpi", "20"]
    assert main([*common, "--out", str(tmp_path / "row.png")]) == 0
    assert json.loads((tmp_path / "row.png.recipe.json").read_text())["view"]["link_cut"] == "row"  # the default
    assert main([*common, "--link-cut", "map", "--out", str(tmp_path / "map.png")]) == 0
    old = json.loads((tmp_path / "map.png.recipe.json").read_text())
    assert old["view"].pop("link_cut") == "map"  # as every recipe written before the choice
    (tmp_path / "old.recipe.json").write_text(json.dumps(old))
    assert main(["figure", "--recipe", str(tmp_path / "old.recipe.json"), "--out", str(tmp_path / "old.png")]) == 0
    assert (tmp_path / "old.png").read_bytes() == (tmp_path / "map.png").read_bytes()
    assert (tmp_path / "row.png").read_bytes() != (tmp_path / "map.png").read_bytes()
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main([*common, "--link-cut", "rows", "--out", str(tmp_path / "x.png")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and "--link-cut" in err and "'row'" in err
    with pytest.raises(AttnvizError, match="unknown link cut 'rows'; use one of row, map"):
        FigureSpec(view="links", link_cut="rows")
