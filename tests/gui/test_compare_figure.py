"""``attnviz compare A B ... --figure OUT``: the A | B | A − B figure is what the window's Head map shows.

A demo and its ``quantize_dynamic`` copy are compared on the command line (``--figure``) and in the real window
(File ▸ Compare with…, the same head picked).  References: the window's Head map read back as it shows "A", "B" and
"A − B" (each panel of the figure must hold the same matrix, colour range, axis titles, tick labels and colour-bar
words), and the PNG the window's own results draw (byte-identical to the command line's)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pyarrow.parquet as pq
import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("onnxruntime")

from gui_helpers import open_and_wait
from screen_figure import unescape

from attnviz.cli import main

MODELS = Path(__file__).resolve().parents[2] / "models"
DEMO = MODELS / "sequence-classification.onnx"
TEXT = "3 1 4 1 5 9 2 6"


def _show(qtbot, w, which):
    w.select_view("head")
    hm = w.head_map
    hm.show_box.setCurrentIndex(hm.show_box.findData(which))
    qtbot.waitUntil(lambda: hm.heatmap.mv is not None, timeout=5000)
    return hm.heatmap


def _check_panel(hm, ax, first: bool):
    """One panel of the figure against Head map as it shows that panel (check_map's checks, per axes)."""
    mv = hm.mv
    im = ax.images[0]
    np.testing.assert_array_equal(np.asarray(im.get_array()), mv.matrix)
    lo, hi = hm.colorbar.levels()
    np.testing.assert_allclose([im.norm.vmin, im.norm.vmax], [lo, hi], rtol=1e-6)
    np.testing.assert_array_equal(hm.image.image, mv.matrix)
    assert im.colorbar.ax.get_ylabel().replace("\n", " ") == hm.colorbar.axis.labelText
    fig_ticks = [unescape(t.get_text()) for t in im.colorbar.ax.get_yticklabels() if t.get_text()]
    assert fig_ticks == [text for _, text in hm.colorbar.axis._tickLevels[0]]
    assert ax.get_xlabel() == mv.x_title == hm.plot.getPlotItem().getAxis("bottom").labelText
    axes = [(ax.xaxis, hm.x_axis.labels)]
    if first:  # the panels share their rows: the first one labels them
        assert ax.get_ylabel() == mv.y_title == hm.plot.getPlotItem().getAxis("left").labelText
        axes.append((ax.yaxis, hm.y_axis.labels))
    for axis, labels in axes:
        ticks = [int(round(t)) for t in axis.get_majorticklocs()]
        texts = [unescape(t.get_text()) for t in axis.get_majorticklabels()]
        assert texts == [labels[i] for i in ticks] and ticks[0] == 0 and ticks[-1] == len(labels) - 1


def test_compare_figure_panels_are_head_map_a_b_and_a_minus_b(qtbot, real_window, quantized, tmp_path, capsys):
    from attnviz.figures import figure_bytes, render_compare_figure

    out, png = tmp_path / "cmp", tmp_path / "cmp.png"
    argv = ["compare", str(DEMO), str(quantized), "--text", TEXT, "--out", str(out), "--provider", "cpu"]
    assert main([*argv, "--figure", str(png), "--figure-head", "encoder self 1:2"]) == 0
    said = capsys.readouterr().out
    assert f"wrote {png}: A | B | A − B of encoder self 1:2" in said
    rows = pq.read_table(out / "heads.parquet").to_pylist()
    assert json.loads((out / "run.json").read_text())["heads"] == len(rows)

    w = real_window
    open_and_wait(qtbot, w, DEMO, text=TEXT)
    with qtbot.waitSignal(w.session.comparison_changed, timeout=60000):
        w.compare.compare_with(quantized)
    held = w.session.comparison
    w.session.select(block=0, layer=1, head=2, mode="head")  # the Overview cell of encoder self 1:2
    fig = render_compare_figure(w.session.result, held.result_b, w.session.sel)
    assert figure_bytes(fig, "png") == png.read_bytes()  # the command line draws what the window holds
    panels = [a for a in fig.axes if a.images]
    assert [a.get_title() for a in panels] == ["A", "B", "A − B"]
    for i, (which, ax) in enumerate(zip(("A", "B", "diff"), panels)):
        _check_panel(_show(qtbot, w, which), ax, first=i == 0)
    diff = panels[2].images[0]
    assert diff.get_cmap().name == "RdBu_r" and diff.norm.vmax == -diff.norm.vmin > 0  # quantizing moved weights


def test_default_head_is_the_largest_divergence_and_bad_flags_are_one_line(quantized, tmp_path, capsys):
    out = tmp_path / "cmp"
    argv = ["compare", str(DEMO), str(quantized), "--text", TEXT, "--out", str(out), "--provider", "cpu"]
    pdf = tmp_path / "cmp.pdf"
    assert main([*argv, "--figure", str(pdf)]) == 0
    meta = {p.key: p.value for p in onnx.load(str(DEMO), load_external_data=False).metadata_props}
    n = json.loads(meta["attnviz.config"])["model"]["n_heads"]  # the demo's heads per layer, as trained
    top = max(pq.read_table(out / "heads.parquet").to_pylist(), key=lambda r: r["js_divergence"])
    said = capsys.readouterr().out
    assert f"A | B | A − B of {top['stack']} {top['kind']} {top['layer']}:{top['head']}" in said
    assert pdf.read_bytes().startswith(b"%PDF")
    for extra, words in (
        (["--figure", str(tmp_path / "x.bmp")], "cannot tell the figure format"),
        (["--figure-head", "encoder self 0:1"], "--figure-head names the head --figure draws"),
        (
            ["--figure", str(tmp_path / "y.png"), "--figure-head", "encoder self 7:0"],
            f"no such compared head; the compared sites: encoder self 0 (heads 0 to {n - 1}), encoder self 1 "
            f"(heads 0 to {n - 1})",
        ),
        # a head counted from 1: the last head + 1, named with the range counted from 0
        (
            ["--figure", str(tmp_path / "y.png"), "--figure-head", f"encoder self 1:{n}"],
            f"--figure-head 'encoder self 1:{n}': encoder self 1 has {n} heads, counted from 0 (0 to {n - 1})",
        ),
        (["--figure", str(tmp_path / "no_folder" / "z.png")], "choose another --figure"),  # the flag that named it
    ):
        assert main([*argv, *extra]) == 2
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "y.png").exists() and not (tmp_path / "x.bmp").exists()
    # --figure aimed at model B (a model file named like a figure) is refused before anything runs
    b = tmp_path / "b.png"
    b.write_bytes(quantized.read_bytes())
    argv = ["compare", str(DEMO), str(b), "--text", TEXT, "--out", str(tmp_path / "cmp2"), "--figure", str(b)]
    assert main(argv) == 2
    assert "model B" in capsys.readouterr().err and b.read_bytes() == quantized.read_bytes()
    assert not (tmp_path / "cmp2").exists()
