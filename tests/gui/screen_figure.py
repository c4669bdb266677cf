"""Shared by the screen-equals-figure tests: read back what the GUI drew and what the exported figure drew for
the current view, and assert they are the same numbers, labels, ticks, colours and overlay."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.core.view_names import tab_title, view_key
from attnviz.figures import FigureStyle, render_figure

# (name, selection changes): heads and aggregates, layer ranges, steps, filters, log scale
SETTINGS = [
    ("head", dict(mode="head", layer=1, head=2)),
    ("mean+log", dict(mode="mean", layer_lo=0, layer_hi=1, log=True)),
    ("max+hide", dict(mode="max", layer_lo=1, layer_hi=1, hide_special=True)),
    ("rollout+keep", dict(mode="rollout", keep=0.6)),
    # each row over its own maximum (an image overlay, one row: stretched to its peak), at a generation step
    ("row+step", dict(mode="head", layer=0, head=1, step=1, scale="row", image_scale="row")),
    ("hide+keep+log+step", dict(mode="head", layer=1, head=0, hide_special=True, keep=0.8, log=True, step=0)),
    # the colour scale (fixed 0–1 is the default of the grid): the block's heads, or stretched to the map
    ("shared+hide", dict(mode="head", layer=1, head=1, scale="shared", image_scale="shared", hide_special=True)),
    ("map+log", dict(mode="mean", layer_lo=0, layer_hi=1, scale="map", image_scale="map", log=True)),
    # the top set by hand (the colour-top box, figure --vmax), over the stretched and the shared scales, linear and log
    ("vmax", dict(mode="head", layer=1, head=2, scale="map", image_scale="map", vmax=0.3)),
    ("vmax+log", dict(mode="mean", layer_lo=0, layer_hi=1, scale="shared", image_scale="shared", log=True, vmax=0.05)),
]
VIEWS = ("overview", "head", "links", "alignment", "image")


def unescape(s: str) -> str:
    return s.replace("\\$", "$")


def figure(w, view):
    what = w.figure_selection(view)
    assert what is not None
    return render_figure(w.session.result, *what, FigureStyle(dpi=40))


def check_map(hm, fig, top: float | None | bool = False):
    """A heatmap widget and a heatmap figure: same matrix, colour range, axis titles and tick labels (``top``: the
    session's top set by hand, checked where given)."""
    ax = next(a for a in fig.axes if a.images)  # the map (a time series' plot may stand above it)
    mv = hm.mv
    cells = mv.matrix  # the weights; on the row scale each row over its largest (by hand here)
    if mv.scale == "row" and not (mv.by_hand or mv.diverging):
        tops = mv.matrix.max(axis=1, keepdims=True)
        cells = np.where(tops > 0, mv.matrix / np.where(tops > 0, tops, 1), 0).astype(np.float32)
        assert hm.colorbar.levels()[1] == (0.0 if hm.log else 1.0)
    exact = 0.0 if cells is mv.matrix else 1e-6  # (the weights themselves: bit for bit)
    np.testing.assert_allclose(np.asarray(ax.images[0].get_array()), cells, rtol=exact)
    norm = ax.images[0].norm
    lo, hi = hm.colorbar.levels()
    if hm.log:
        np.testing.assert_allclose([np.log10(norm.vmin), np.log10(norm.vmax)], [lo, hi], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(hm.image.image, np.log10(np.maximum(cells, norm.vmin)), rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_allclose([norm.vmin, norm.vmax], [lo, hi], rtol=1e-6)
        np.testing.assert_allclose(hm.image.image, cells, rtol=exact)
    if top is not False and not mv.diverging:
        _check_top(top, norm.vmax, hm.colorbar.axis.labelText)
    # the same title words: the figure's is the model's name, then the screen's title
    title = next(a for a in fig.axes if a.get_title()).get_title()  # above the series when there is one
    assert unescape(title.replace("\n", " · ")).endswith(mv.title)
    assert hm.full_title == mv.title
    # the title as drawn: whole on one line or two (broken between its parts), or a line cut with '…' to the view
    lines = hm.plot.getPlotItem().titleLabel.text.split("<br>")
    assert len(lines) <= 2 and all(line.removesuffix("…") in mv.title for line in lines)
    assert " · ".join(lines) == mv.title or any(line.endswith("…") for line in lines)
    cbar = next(
        a for a in fig.axes if a is not ax and a.get_visible() and not a.lines
    )  # the colour bar's words ("special tokens removed" when they were)
    assert cbar.get_ylabel().replace("\n", " ") == hm.colorbar.axis.labelText
    # a time series plotted above its map: the same values on the same columns
    if mv.k_values is not None:
        line = next(a for a in fig.axes if a.lines).lines[0]
        gx, gy = hm.series_curve.getData()
        np.testing.assert_allclose(line.get_ydata(), mv.k_values)
        np.testing.assert_allclose(gy, mv.k_values)
        np.testing.assert_allclose(gx - 0.5, line.get_xdata())  # screen cells span [i, i+1), figure's [i-½, i+½)
        assert next(a for a in fig.axes if a.lines).get_ylabel() == mv.k_values_title
        assert hm.series.getPlotItem().getAxis("left").labelText == mv.k_values_title
        assert hm.series.isVisible() or not hm.isVisible()
    else:
        assert not hm.series.isVisible()
    # the same colour-bar ticks, the top of the scale labelled with its value on both
    fig_ticks = [unescape(t.get_text()) for t in cbar.get_yticklabels() if t.get_text()]
    gui_ticks = [text for _, text in hm.colorbar.axis._tickLevels[0]]
    assert fig_ticks == gui_ticks and fig_ticks[-1] == f"{(10.0**hi if hm.log else hi):.3g}".rstrip(".")
    assert ax.get_xlabel() == mv.x_title == hm.plot.getPlotItem().getAxis("bottom").labelText
    assert ax.get_ylabel() == mv.y_title == hm.plot.getPlotItem().getAxis("left").labelText
    for axis, screen in ((ax.xaxis, hm.x_axis), (ax.yaxis, hm.y_axis)):
        labels = screen.labels
        ticks = [int(round(t)) for t in axis.get_majorticklocs()]
        texts = [unescape(t.get_text()) for t in axis.get_majorticklabels()]
        # the screen's words for the figure's picks: each token, a thinned axis's with its position ("the ·1023")
        assert texts == screen.texts(ticks, len(labels))
        assert ticks[0] == 0 and ticks[-1] == len(labels) - 1  # first and last always labelled


def check_compared(w, shown: str):
    """Head map showing model B's map or A − B (File ▸ Compare with…): the figure Export view writes for it
    draws the same matrix, limits (symmetric about 0 for A − B), words and ticks."""
    from attnviz.app.compare import compared_figure

    w.select_view("head")
    s = w.session
    fig = compared_figure(s.comparison, shown, s.sel, s.blocks, FigureStyle(dpi=40))
    check_map(w.head_map.heatmap, fig)
    return fig


def check_overview(w, fig):
    ov = w.overview
    bi = w.session.sel.block
    blk = w.session.blocks[bi]
    drawn = ov.thumbnail_maps()
    panels = [a for a in fig.axes if a.images]
    want = [drawn[(bi, li, h)] for li in range(blk.n_layers) for h in range(blk.heads_in(li))]
    assert len(panels) == len(want)
    norm = panels[0].images[0].norm
    for a, m in zip(panels, want):
        np.testing.assert_array_equal(np.asarray(a.images[0].get_array()), m)
    lo, hi = ov.levels
    top = np.log10(norm.vmax) if w.session.sel.log else norm.vmax
    assert top == pytest.approx(hi, rel=1e-5)
    _check_top(w.session.sel.vmax, norm.vmax, ov.colorbar.axis.labelText)
    assert fig.axes[-1].get_ylabel().replace("\n", " ") == ov.colorbar.axis.labelText  # the scale, in words
    for key, img in ov.thumbs.items():
        if key[0] == bi:
            np.testing.assert_allclose(img.image, ov.thumbs[key].image)


def check_links(w, fig):
    from matplotlib.collections import LineCollection

    cv = w.links.canvas
    colls = [c for c in fig.axes[0].collections if isinstance(c, LineCollection)]
    fig_alpha = sorted(round(float(c[3]), 6) for coll in colls for c in coll.get_colors())
    from attnviz.core.view import link_alpha

    gui_alpha = sorted(round(link_alpha(wt), 6) for _, _, _, wt in cv.links)
    assert fig_alpha == pytest.approx(gui_alpha, abs=1e-6)
    texts = {unescape(t.get_text()) for t in fig.axes[0].texts}
    assert set(cv.titles) <= texts  # the column titles: the screen drew "query"/"key" above a cross block's
    assert cv.titles == (("target", "source") if w.session.block.kind == "cross" else ("query", "key"))
    assert cv.q_labels[0] in texts and cv.q_labels[-1] in texts and cv.k_labels[-1] in texts
    assert {t for t in texts if t in set(cv.q_labels + cv.k_labels)} <= set(cv.q_labels + cv.k_labels)
    fig_colours = sorted({tuple(np.round(c[:3], 4)) for coll in colls for c in coll.get_colors()})
    from matplotlib.colors import to_rgb

    gui_colours = sorted(
        {
            tuple(np.round(to_rgb(colour), 4))
            for li, (colour, _) in enumerate(cv.layers)
            if any(lk[0] == li for lk in cv.links)
        }
    )
    assert fig_colours == gui_colours


def check_image(w, fig):
    """The picture(s) the screen drew and the figure's: the tiles (or the one image), and a tiled VLM image's
    global image beside them, each the same base, heat and colours; the same captions above them."""
    v = w.image_regions
    drawn = [a for a in fig.axes if len(a.images) == 2]  # the pictures, left to right
    screen = [(v.image_item, v.overlay_item)] + ([(v.g_image_item, v.g_overlay_item)] if v._two else [])
    assert len(drawn) == len(screen)
    for (image_item, overlay_item), ax in zip(screen, drawn):
        _check_picture(w, fig, image_item, overlay_item, ax)
    captions = [c.textItem.toPlainText() for c in v.captions] if v._two else []
    assert [ax.get_title() for ax in drawn] == (captions or [""])
    # the same colour scale (the selection's: fixed, shared by the block's heads or stretched; linear or log): the
    # bar's limits, words and ticks, the screen's in log10 units on the log scale
    sel = w.session.sel
    cax = fig.axes[-1]
    lo, hi = v.colorbar.levels()
    fig_lo, fig_hi = cax.get_ylim()
    if sel.log:
        np.testing.assert_allclose([np.log10(fig_lo), np.log10(fig_hi)], [lo, hi], rtol=1e-6, atol=1e-9)
    else:
        np.testing.assert_allclose([fig_lo, fig_hi], [lo, hi], rtol=1e-6)
    if sel.image_scale == "fixed" and not sel.vmax:
        assert hi == (0.0 if sel.log else 1.0)
    _check_top(sel.vmax, fig_hi, v.colorbar.axis.labelText)
    assert cax.get_ylabel().replace("\n", " ") == v.colorbar.axis.labelText
    assert [unescape(t.get_text()) for t in cax.get_yticklabels() if t.get_text()] == [
        text for _, text in v.colorbar.axis._tickLevels[0]
    ]
    assert f"query “{v.queries[v.query][0]}”" in " ".join(t.get_text().replace("\n", " ") for t in fig.texts)


def _check_picture(w, fig, image_item, overlay_item, ax):
    from matplotlib import colormaps

    v = w.image_regions
    gui = overlay_item.image  # [H*k, W*k, 4] uint8
    rgba = np.asarray(ax.images[1].get_array())  # [H, W, 4] float
    h, w_ = rgba.shape[:2]
    k = gui.shape[0] // h
    # the same image base under the heat (grey, colour or none), in the image's own pixels
    assert fig.attnviz_selection.image_base == w.session.sel.image_base == v.base_box.currentData()
    np.testing.assert_allclose(image_item.image / 255.0, np.asarray(ax.images[0].get_array()), atol=0.5 / 255)
    # the screen computes the heat k times finer; block means of a bilinear surface are its centre values
    gui_alpha = gui[..., 3].astype(np.float32).reshape(h, k, w_, k).mean(axis=(1, 3)) / 255.0
    np.testing.assert_allclose(gui_alpha, rgba[..., 3], atol=0.03)
    cmap = colormaps[fig.attnviz_style.colormap(fig.attnviz_view)]
    if w.session.sel.image_base == "none":  # heat only: opaque, so the colours say the heat; compare them
        gui_rgb = gui[..., :3].astype(np.float32).reshape(h, k, w_, k, 3).mean(axis=(1, 3))
        np.testing.assert_allclose(gui_rgb, rgba[..., :3] * 255, atol=12)
    else:  # the same colour map: the screen's colour at a pixel is matplotlib's colour for that heat
        heat = (gui[..., 3].astype(np.float32) / 255.0 - 0.2) / 0.7
        want = cmap(np.clip(heat, 0, 1))[..., :3] * 255
        np.testing.assert_allclose(gui[..., :3].astype(np.float32), want, atol=6)


def _check_top(top: float | None, fig_top: float, screen_label: str) -> None:
    """A top set by hand (the session's, as the colour-top box sets it): the figure's scale ends there and the
    screen's bar says so; none: the screen's bar does not say "set by hand"."""
    if top:
        assert fig_top == pytest.approx(top, rel=1e-9)
        assert f"top {top:.3g} set by hand" in screen_label
    else:
        assert "set by hand" not in screen_label


def views_for(w):
    return [v for v in VIEWS if not w.views[tab_title(view_key(v))].reason()]


CHECKS = {
    "head": lambda w, fig: check_map(w.head_map.heatmap, fig, w.session.sel.vmax),
    "alignment": lambda w, fig: check_map(w.alignment.heatmap, fig, w.session.sel.vmax),
    "overview": check_overview,
    "links": check_links,
    "image": check_image,
}


def check_grid(w, result, settings=None) -> int:
    """Show ``result`` and, for every block x setting x view the result has, compare screen and figure.
    Returns how many (block, setting, view) combinations were compared."""
    w._show_result(result)
    views = views_for(w)
    checked = 0
    # the figure each (figure view, export selection) draws, drawn once: the Alignment and Image views export a
    # block of their own (MainWindow.figure_selection puts it in the selection), so with every other block
    # selected they export the same selection again, and render_figure draws from (result, view, selection,
    # style) alone; each cell still reads its screen and compares it with that figure
    drawn: dict[tuple[str, str], object] = {}
    for bi, blk in enumerate(w.session.blocks):
        for _name, changes in settings or SETTINGS:
            if changes.get("step", -1) >= 0 and not result.generated:
                continue
            base = dict(
                layer_lo=0,
                layer_hi=-1,
                step=-1,
                keep=1.0,
                log=False,
                hide_special=False,
                scale="fixed",
                image_scale="fixed",
                vmax=None,
            )
            w.session.select(block=bi, **{**base, **changes})
            for view in views:
                w.select_view(view)
                widget = w.current_view()
                if widget.message:  # the view says why this combination is undefined (rollout on cross)
                    assert changes["mode"] == "rollout" and (blk.kind == "cross" or view == "alignment"), widget.message
                    continue
                what = w.figure_selection(widget)
                key = (what[0], repr(what[1])) if what is not None else None
                fig = drawn[key] if key in drawn else figure(w, widget)
                drawn[key] = fig
                CHECKS[view](w, fig)
                checked += 1
    return checked
