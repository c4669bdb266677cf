"""File ▸ Compare with…: a second model (B) beside the open one (A) in the window.

References: ``attnviz.corpus.compare.compare_results`` on a run of B made here, outside the window (the Head stats
columns must equal its rows exactly); the maps themselves (A − B is A's matrix minus B's, element by element); a
model compared with itself (every divergence 0, A − B all zeros); and a B that tokenises differently or cannot run
the next input (one message, no comparison)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fakes import FakeModel, make_opener
from gui_helpers import FAKE_MODELS, open_and_wait, run_and_wait
from PySide6.QtCore import Qt

from attnviz import AttnvizError

MODELS = Path(__file__).resolve().parents[2] / "models"
DEMO = MODELS / "sequence-classification.onnx"
TEXT = "3 1 4 1 5 9 2 6"


def compare_and_wait(qtbot, w, path, timeout=60000):
    with qtbot.waitSignal(w.session.comparison_changed, timeout=timeout):
        w.compare.compare_with(path)
    return w.session.comparison


def stats_rows(qtbot, w) -> list[dict]:
    """The Head stats table as shown: one dict per row, by column name."""
    w.select_view("stats")
    st = w.stats
    qtbot.waitUntil(lambda: "js_divergence" in st.columns and st.table.rowCount() > 0, timeout=30000)
    t = st.table
    return [{c: t.item(r, i).value for i, c in enumerate(st.columns)} for r in range(t.rowCount())]


def test_compare_with_a_quantized_copy_fills_head_stats_with_compare_results_rows(qtbot, real_window, quantized):
    from attnviz.corpus.compare import compare_results
    from attnviz.runtime import open_model

    w = real_window
    open_and_wait(qtbot, w, DEMO, text=TEXT)
    held = compare_and_wait(qtbot, w, quantized)
    assert held is not None and held.result_a is w.session.result
    assert "compare: A vs B = sequence-classification-int8" in w.compare.indicator.text()
    # B run here, outside the window, on the same text: compare_results' rows are what Head stats shows
    rb = open_model(quantized, provider="cpu").analyze_request(w.last_request)
    want = compare_results(w.session.result, rb).heads
    assert held.comparison.heads == want
    blk = w.session.block
    shown = stats_rows(qtbot, w)
    assert len(shown) == sum(blk.heads_in(i) for i in range(blk.n_layers))
    by_key = {(r["layer"], r["head"]): r for r in want}
    for row in shown:
        ref = by_key[(w.session.result.sites[blk.sites[int(row["layer"])]].layer, int(row["head"]))]
        for c in ("js_divergence", "max_abs_diff", "top1_agreement"):
            assert row[c] == ref[c]  # exactly: the same numbers, not recomputed
    assert any(r["js_divergence"] > 0 for r in want)  # quantizing moved something: real numbers were compared
    # ranked as the command prints them: the most changed head of the block first (its row from compare_results)
    first = max((r for r in want if (r["stack"], r["kind"]) == (blk.stack, blk.kind)), key=lambda r: r["js_divergence"])
    assert (shown[0]["head"], shown[0]["js_divergence"]) == (first["head"], first["js_divergence"])
    assert [r["js_divergence"] for r in shown] == sorted((r["js_divergence"] for r in shown), reverse=True)
    assert "Ranked by JS divergence from B = sequence-classification-int8" in w.stats.info.text()
    # sortable: a click on the layer header sorts the rows by it
    c = w.stats.columns.index("layer")
    w.stats.table.sortByColumn(c, Qt.SortOrder.AscendingOrder)
    layers = w.stats.column_values("layer")
    assert layers == sorted(layers) and layers != [r["layer"] for r in shown]
    # a new input: B runs it too, and the comparison is measured on the new result
    run_and_wait(qtbot, w, text="2 7 1 8 2 8")
    qtbot.waitUntil(lambda: w.session.comparison is not None, timeout=60000)
    again = w.session.comparison
    assert again.result_a is w.session.result and again.request.text == "2 7 1 8 2 8"
    rb2 = open_model(quantized, provider="cpu").analyze(text="2 7 1 8 2 8")
    assert again.comparison.heads == compare_results(w.session.result, rb2).heads


def test_compare_with_itself_is_zero_everywhere(qtbot, real_window):
    w = real_window
    open_and_wait(qtbot, w, DEMO, text=TEXT)
    held = compare_and_wait(qtbot, w, DEMO)
    assert held is not None
    for r in held.comparison.heads:
        assert r["js_divergence"] == 0.0 and r["max_abs_diff"] == 0.0 and r["top1_agreement"] == 1.0
    assert all(r["js_divergence"] == 0.0 for r in stats_rows(qtbot, w))
    w.compare.stop()
    assert w.session.comparison is None and not w.compare.indicator.isVisible()
    qtbot.waitUntil(lambda: "js_divergence" not in w.stats.columns and w.stats.table.rowCount() > 0, timeout=30000)


class Retokenised(FakeModel):
    """Model B whose tokenizer splits a word A keeps whole (a tokenizer other than A's)."""

    def analyze(self, text=None, **kw):
        r = super().analyze(text=text, **kw)
        labels = list(r.tokens.labels)
        labels[2] = labels[2] + "##x"
        r.tokens = type(r.tokens)(labels, list(r.tokens.special))
        return r


class FailsOnDog(FakeModel):
    """Model B that cannot run an input mentioning a dog."""

    def analyze(self, text=None, **kw):
        if text and "dog" in text:
            raise AttnvizError(f"{self.name}: cannot run this input (a stand-in refusal)")
        return super().analyze(text=text, **kw)


def opener_with(extra: dict):
    base = make_opener(FAKE_MODELS)

    def opener(path, **kw):
        cls = extra.get(Path(path).name)
        return cls(path, kind="encoder", layers=6, heads=12) if cls is not None else base(path, **kw)

    return opener


@pytest.fixture
def compare_window(qtbot, settings, files, tmp_path):
    from attnviz.gui.main_window import MainWindow

    for name in ("retok.onnx", "dogless.onnx"):
        (tmp_path / name).write_bytes(b"fake")
    w = MainWindow(opener=opener_with({"retok.onnx": Retokenised, "dogless.onnx": FailsOnDog}), settings=settings)
    qtbot.addWidget(w)
    w.show()
    yield w
    w.workers.cancel()
    assert w.workers.wait(10000)
    assert w.stats.workers.wait(10000)
    if w.error_box is not None:
        w.error_box.close()


def test_a_b_that_tokenises_differently_is_one_message_and_no_comparison(qtbot, compare_window, files, tmp_path):
    w = compare_window
    open_and_wait(qtbot, w, files["text.onnx"], text="the cat sat on the mat")
    with qtbot.waitSignal(w.error_shown, timeout=30000) as sig:
        w.compare.compare_with(tmp_path / "retok.onnx")
    (text,) = sig.args
    assert "tokenise the input differently: token 2" in text and "\n" not in text
    assert text.endswith("compare models that share a tokenizer")  # no command-line flag in the window's words
    assert w.session.comparison is None and not w.compare.indicator.isVisible()
    # a file that is no model: the opener's one line, and still no comparison
    with qtbot.waitSignal(w.error_shown, timeout=30000) as sig:
        w.compare.compare_with(files["garbage"])
    assert "garbage.onnx" in sig.args[0] and w.session.comparison is None


def test_a_b_that_cannot_run_the_next_input_is_dropped_with_a_status_line(qtbot, compare_window, files, tmp_path):
    w = compare_window
    open_and_wait(qtbot, w, files["text.onnx"], text="the cat sat on the mat")
    assert compare_and_wait(qtbot, w, tmp_path / "dogless.onnx") is not None
    run_and_wait(qtbot, w, text="the dog sat on the mat")
    assert "(running…)" in w.compare.indicator.text() or "dropped" in w.statusBar().currentMessage()
    qtbot.waitUntil(lambda: "dropped" in w.statusBar().currentMessage(), timeout=30000)
    msg = w.statusBar().currentMessage()
    assert msg.startswith("Comparison with dogless dropped: dogless: cannot run this input")
    assert w.session.comparison is None and w.compare.model_b is None and not w.compare.indicator.isVisible()
    # and no comparison comes back for later inputs
    run_and_wait(qtbot, w, text="the cat sat")
    assert w.session.comparison is None


def test_comparing_loaded_maps_says_there_is_no_input_to_run(qtbot, compare_window, files, tmp_path):
    from attnviz.core.io import save_npz

    w = compare_window
    open_and_wait(qtbot, w, files["text.onnx"], text="the cat sat on the mat")
    npz = tmp_path / "maps.npz"
    save_npz(w.session.result, npz)
    w.open_npz(npz)
    assert w.last_request is None
    with qtbot.waitSignal(w.error_shown, timeout=30000) as sig:
        w.compare.compare_with(files["text.onnx"])
    assert "loaded from a file, not run" in sig.args[0]
    assert w.session.comparison is None


def show(qtbot, w, which: str):
    w.select_view("head")
    hm = w.head_map
    assert hm.show_row.isVisible()
    hm.show_box.setCurrentIndex(hm.show_box.findData(which))
    return hm.heatmap


def test_head_map_shows_a_b_and_a_minus_b_and_the_figure_draws_the_same(qtbot, real_window, quantized, tmp_path):
    from screen_figure import check_compared

    from attnviz.runtime import open_model

    w = real_window
    open_and_wait(qtbot, w, DEMO, text=TEXT)
    w.select_view("head")
    assert not w.head_map.show_row.isVisible()  # no comparison: no A / B box
    assert compare_and_wait(qtbot, w, quantized) is not None
    rb = open_model(quantized, provider="cpu").analyze(text=TEXT)
    s = w.session
    for layer, head in ((0, 0), (1, 3), (1, 1)):
        s.select(mode="head", layer=layer, head=head)
        site = s.blocks[s.sel.block].sites[layer]
        a = s.result.maps[site].array()[0, head]
        b = rb.maps[site].array()[0, head]  # B's map from a run outside the window
        hm = show(qtbot, w, "A")
        np.testing.assert_array_equal(hm.mv.matrix, a)
        hm = show(qtbot, w, "B")
        np.testing.assert_array_equal(hm.mv.matrix, b)
        check_compared(w, "B")
        hm = show(qtbot, w, "diff")
        np.testing.assert_array_equal(hm.mv.matrix, a - b)
        top = float(np.abs(a - b).max())
        assert top > 0 and hm.colorbar.levels() == pytest.approx((-top, top))  # symmetric about 0
        assert hm.mv.title.endswith("A − B") and "A − B" in hm.colorbar.axis.labelText
        fig = check_compared(w, "diff")  # the same matrix, the same symmetric limits, the same words and ticks
        assert next(a for a in fig.axes if a.images).images[0].get_cmap().name == "RdBu_r"
    # File ▸ Export view writes what Head map shows: the difference
    out = tmp_path / "diff.svg"
    w.export_view(out)
    qtbot.waitUntil(lambda: w.last_export == out, timeout=30000)
    assert "A − B" in out.read_text()
    # at a paper's column width too (File ▸ Export width), as the figures of the window's own model
    (single,) = [a for a in w.export_width_menu.actions() if a.data() == "single"]
    single.trigger()
    out = tmp_path / "diff-single.pdf"
    w.export_view(out)
    qtbot.waitUntil(lambda: w.last_export == out, timeout=30000)
    assert b"/MediaBox [ 0 0 252 " in out.read_bytes()  # 3.5 in
    # the log scale never applies to a signed map; an aggregate's difference is the aggregates' difference
    s.select(mode="mean", layer_lo=0, layer_hi=-1, log=True)
    hm = w.head_map.heatmap
    blk = s.blocks[s.sel.block]
    want_a = np.concatenate([blk.layer(i) for i in range(blk.n_layers)]).mean(0)
    bb = rb.blocks(0)[0]
    want_b = np.concatenate([bb.layer(i) for i in range(bb.n_layers)]).mean(0)
    assert "mean over heads" in hm.mv.title, (hm.mv.title, s.sel)
    np.testing.assert_allclose(hm.mv.matrix, want_a - want_b, atol=1e-6)
    assert not hm.log and hm.colorbar.levels()[0] == -hm.colorbar.levels()[1]


def test_a_model_against_itself_draws_a_zero_difference(qtbot, real_window):
    w = real_window
    open_and_wait(qtbot, w, DEMO, text=TEXT)
    compare_and_wait(qtbot, w, DEMO)
    w.session.select(mode="head", layer=1, head=2)
    hm = show(qtbot, w, "diff")
    assert hm.mv.matrix.shape == w.session.current_map().matrix.shape
    assert not hm.mv.matrix.any()  # all zeros
    lo, hi = hm.colorbar.levels()
    assert lo == -hi and hi > 0  # a small symmetric scale: every cell at its white centre


def test_the_screen_paints_a_difference_in_matplotlibs_rdbu_r():
    from matplotlib import colormaps

    from attnviz.core.view import DIFF_CMAP
    from attnviz.gui import style

    cmap = colormaps[DIFF_CMAP]  # a table of N colours, entry i at i / (N - 1) along the map
    screen = style.diff_colormap().map(np.arange(cmap.N) / (cmap.N - 1), mode="float")[:, :3]
    np.testing.assert_allclose(screen, cmap(np.arange(cmap.N))[:, :3], atol=1.5 / 255)


def test_the_overview_frames_each_head_by_its_divergence(qtbot, real_window, quantized):
    from matplotlib.colors import to_rgb

    from attnviz.core.view import DIFF_COLOURS

    w = real_window
    open_and_wait(qtbot, w, DEMO, text=TEXT)
    w.select_view("overview")
    assert not w.overview.frames
    held = compare_and_wait(qtbot, w, quantized)
    ov = w.overview
    blk = w.session.block
    js = {(0, int(r["layer"]), int(r["head"])): r["js_divergence"] for r in held.comparison.heads}
    assert set(ov.frames) == {k for k, v in js.items() if v > 0} and ov.frames
    top = max(js, key=js.get)
    assert ov.frame_colours[top] == DIFF_COLOURS[-1]  # the most divergent head: the darkest red
    # darker (less luminous) the more a head diverges
    lum = {k: sum(to_rgb(c)) for k, c in ov.frame_colours.items()}
    order = sorted(lum, key=lambda k: js[k])
    assert [lum[k] for k in order] == sorted(lum.values(), reverse=True)
    assert all(ov.frames[k].rect().contains(ov.cells[k]) for k in ov.frames)
    assert blk.n_layers == len({k[1] for k in js})
    w.compare.stop()
    assert not ov.frames


def test_the_exported_overview_frames_the_heads_as_the_screen_does(qtbot, real_window, quantized, tmp_path):
    """File ▸ Export view on the Overview while comparing: each head's panel is framed in the colour the screen
    frames it (its divergence from B), the unframed heads keep thin black edges, and the title says what the frames
    mean."""
    from matplotlib.colors import to_hex

    from attnviz.figures import render_figure

    w = real_window
    open_and_wait(qtbot, w, DEMO, text=TEXT)
    w.select_view("overview")
    held = compare_and_wait(qtbot, w, quantized)
    ov, s = w.overview, w.session
    screen = {(li, h): c for (bi, li, h), c in ov.frame_colours.items() if bi == s.sel.block}
    assert screen
    name, sel = w.figure_selection(ov)
    fig = render_figure(s.result, name, sel, held.overview_style(s.blocks, sel.block))
    panels = [ax for ax in fig.axes if ax.images and ax.get_xticks().size == 0 and ax.get_position().width < 0.5]
    panels = [ax for ax in panels if ax.get_images()[0].get_array().ndim == 2 and ax.get_ylabel() == ""]
    rows = sorted({round(ax.get_position().y0, 6) for ax in panels}, reverse=True)  # a row per layer, 0 on top
    cols = sorted({round(ax.get_position().x0, 6) for ax in panels})  # a column per head
    drawn = {}
    for ax in panels:
        li, h = rows.index(round(ax.get_position().y0, 6)), cols.index(round(ax.get_position().x0, 6))
        if ax.spines["top"].get_linewidth() > 1:
            drawn[(li, h)] = to_hex(ax.spines["top"].get_edgecolor())
    assert drawn == screen
    assert any(f"divergence from {held.name_b}" in t.get_text() for t in fig.texts)  # the title says so
    out = tmp_path / "overview.svg"
    w.export_view(out)
    qtbot.waitUntil(lambda: w.last_export == out, timeout=30000)
    text = out.read_text()
    assert all(c in text for c in screen.values())  # the frames' colours are in the exported file
