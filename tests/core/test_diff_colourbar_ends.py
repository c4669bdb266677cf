"""A − B's colour bar (±max |A − B|, diverging about 0) says both of its ends.

Seen on all-MiniLM-L6-v2 against its quantize_dynamic copy (cmpaudit26): the difference bar of encoder self 4:9
read 0.247 at its top and -0.2 near its bottom, so a symmetric scale looked lopsided and the most negative
difference went unsaid.  Reference: the scale's own limits (the figure's norm) and the mirror of its top half.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from onnx_builders import tiny_text_model

from attnviz.core.view import scale_ticks


@pytest.mark.parametrize("top", [0.247, 0.0209, 1.0, 0.73, 3e-5])
def test_a_symmetric_signed_scale_is_labelled_as_its_mirror(top):
    ticks = scale_ticks(-top, top, False)
    values = [t for t, _ in ticks]
    assert values[0] == -top and values[-1] == top and 0.0 in values
    assert values == sorted(values) and [-v for v in reversed(values)] == values
    labels = dict(ticks)
    for t, text in ticks:
        if t > 0:
            assert labels[-t] == f"-{text}"  # the bottom says −max as the top says max


def test_an_unsigned_scale_is_unchanged():
    assert scale_ticks(0.0, 0.43, False) == [(0.0, "0"), (0.2, "0.2"), (0.43, "0.43")]
    assert scale_ticks(-0.2, 0.43, False)[0] == (-0.2, "-0.2")  # not symmetric: no mirror, no invented end


def test_the_compare_figure_labels_both_ends_of_its_difference_bar(tmp_path):
    pytest.importorskip("matplotlib")
    from attnviz.core.view import Selection
    from attnviz.figures import render_compare_figure
    from attnviz.runtime import open_model

    a = tiny_text_model(tmp_path / "a.onnx", layers=1, heads=2, d=8, seed=5)
    m = onnx.load(a)
    w = next(i for i in m.graph.initializer if i.name == "Wq0")
    arr = numpy_helper.to_array(w).copy()
    arr[:, 0:4] *= 3.0  # head 0 moves
    w.CopyFrom(numpy_helper.from_array(arr, "Wq0"))
    b = tmp_path / "b.onnx"
    onnx.save(m, b)
    text = "the cat sat on a mat"
    ra = open_model(a, provider="cpu").analyze(text=text)
    rb = open_model(b, provider="cpu").analyze(text=text)
    fig = render_compare_figure(ra, rb, Selection(block=0, layer=0, head=0, mode="head"))
    diff = fig.axes[2].images[0]
    lo, hi = diff.norm.vmin, diff.norm.vmax
    top = float(np.abs(ra.maps[0].array()[0, 0] - rb.maps[0].array()[0, 0]).max())
    assert hi == pytest.approx(top, rel=1e-6) and lo == -hi
    cb = diff.colorbar.ax
    shown = {
        round(float(t), 9): x.get_text().replace("\u2212", "-") for t, x in zip(cb.get_yticks(), cb.get_yticklabels())
    }
    assert shown[round(hi, 9)] == f"{hi:.3g}" and shown[round(lo, 9)] == f"-{hi:.3g}"


def test_a_difference_that_is_zero_everywhere_says_so_on_its_bar(tmp_path):
    """A model against itself: A − B is 0 everywhere, drawn on the ±1e-6 floor scale, whose bar said
    "(±max |A − B|)" over ticks of 1e-06 — a difference that is not there.  Its words say 0 everywhere instead."""
    from attnviz.core.view import Selection, compute_diff_map, map_label
    from attnviz.runtime import open_model

    a = tiny_text_model(tmp_path / "a.onnx", layers=1, heads=2, d=8, seed=5)
    r = open_model(a, provider="cpu").analyze(text="the cat sat")
    same = compute_diff_map(r, r, Selection(block=0, layer=0, head=0, mode="head"))
    assert not np.any(same.matrix) and map_label(same, False).endswith("(0 everywhere: A and B agree)")
    r2 = open_model(a, provider="cpu").analyze(text="the cat sat")
    r2.maps[0].array()[0, 0, 0, :] = [0.5, 0.25, 0.25, 0.0, 0.0][: r2.maps[0].array().shape[-1]]
    moved = compute_diff_map(r, r2, Selection(block=0, layer=0, head=0, mode="head"))
    assert np.any(moved.matrix) and map_label(moved, False).endswith("(±max; red: A > B)")


def test_the_bar_words_name_the_end_the_colours_give_a_positive_difference():
    """'red: A > B' is true of both paintings of A − B: matplotlib's DIFF_CMAP (figures) and the screen's colours
    (vm.DIFF_COLOURS, pyqtgraph) put +max at a red colour and −max at a blue one."""
    import matplotlib
    from matplotlib.colors import to_rgb

    from attnviz.core.view import DIFF_CMAP, DIFF_COLOURS

    for top, bottom in ((matplotlib.colormaps[DIFF_CMAP](1.0)[:3], matplotlib.colormaps[DIFF_CMAP](0.0)[:3]),
                        (to_rgb(DIFF_COLOURS[-1]), to_rgb(DIFF_COLOURS[0]))):  # fmt: skip
        assert top[0] > 2 * top[2] and bottom[2] > 2 * bottom[0], (top, bottom)  # (dark red, dark blue)
