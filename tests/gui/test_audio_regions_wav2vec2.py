"""Audio regions and the Head map on an encoder alone on raw samples: the tests' tiny wav2vec2 CTC export
(tests/optimum_env.py SPEECH_SCRIPT) in the real window.  No words: the strip is hidden and the view opens on the
encoder's self-attention of a frame; a click on the sound makes that frame the query; the Head map draws each
frame's loudness above its column; the screen draws what File ▸ Export view draws."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("onnxruntime")
sf = pytest.importorskip("soundfile")

from gui_helpers import open_and_wait  # noqa: E402
from PySide6.QtCore import QPointF, Qt  # noqa: E402
from PySide6.QtGui import QPainter, QPicture  # noqa: E402
from PySide6.QtTest import QTest  # noqa: E402
from screen_figure import check_map, figure  # noqa: E402
from test_audio_regions import check_screen_is_figure, chirp  # noqa: E402

pytestmark = pytest.mark.slow  # the wav2vec2 export (cached per machine under ~/.cache/attnviz-tests)


def test_an_encoder_alone_shows_where_a_clicked_frame_listens(qtbot, real_window, optimum_export, tmp_path):
    w = real_window
    sound = chirp(tmp_path / "chirp.wav")
    open_and_wait(qtbot, w, optimum_export("wav2vec2") / "onnx", timeout=120000, audio=str(sound))
    r = w.session.result
    n = r.maps[0].shape[-1]
    assert n == (int(2.2 * 16000) - 400) // 320 + 1  # 20 ms frames, each hearing 25 ms
    w.select_view("audio")
    v = w.audio_regions
    qtbot.waitUntil(lambda: v.view is not None)
    assert v.view.query_kind == "frame" and v.view.words == [] and not v.word_bar.isVisible()
    assert w.session.block.stack == "encoder"
    w.session.select(mode="head", layer=1, head=2)
    scene = v.spec_plot.vb.mapViewToScene(QPointF(1.507, 40.0))
    QTest.mouseClick(v.glw.viewport(), Qt.MouseButton.LeftButton, pos=v.glw.mapFromScene(scene))
    qtbot.waitUntil(lambda: v.view is not None and v.view.query == 75)
    np.testing.assert_array_equal(v.curve_item.getData()[1], r.maps[1].array()[0, 2, 75, :n])
    assert [m.getRegion() for _, m in v.marks] == [pytest.approx((1.5, 1.52))] * 2
    check_screen_is_figure(w, v)
    # the weight axis's top label is drawn (wider than the band of 48 px, pyqtgraph left it out: no scale)
    top = f"{v.view.vmax:.3g}"
    assert [t for _, _, t in drawn_ticks(v.curve_plot.getAxis("left"))] == ["0", top] and len(top) > 4
    # the Head map: the frames' loudness above their columns (the pause at 0.9-1.2 s at the floor)
    w.select_view("head")
    hm = w.head_map.heatmap
    qtbot.waitUntil(lambda: hm.series.isVisible())
    x, y = hm.series_curve.getData()
    assert len(y) == n and y[50] == -80.0 and y[10] > -20.0
    assert hm.series_curve.opts["symbol"] == "o"  # 110 values: a dot on each
    assert hm.series.getPlotItem().getAxis("left").labelText == "loudness (dBFS)"  # the levels' unit, not "value"
    # every query row the axis picks (an even stride) has its label drawn, the wider "1.20 s </s>" (a CTC letter)
    # too: the band beside the series was fixed at the narrower labels' width and pyqtgraph left those out
    ticks, texts = drawn_ticks(hm.y_axis, with_ticks=True)
    assert len(ticks) > 10 and len(texts) == len(ticks)
    assert any(len(t.split()) == 3 for _, _, t in texts)  # a letter's row among them
    check_map(hm, figure(w, w.head_map))  # the figure: the same map and the same series on its columns


def drawn_ticks(axis, with_ticks=False):
    """The labels (rect, flags, text) an axis draws as it stands (pyqtgraph leaves out those its band cannot
    hold), and with ``with_ticks`` its tick marks first."""
    pic = QPicture()
    painter = QPainter(pic)
    _, ticks, texts = axis.generateDrawSpecs(painter)
    painter.end()
    return (ticks, texts) if with_ticks else texts


def test_a_30_s_clips_small_weights_keep_their_scale(qtbot, real_window, optimum_export, tmp_path):
    """30 s on the wav2vec2 (1,499 frames): a frame's weights are small, and the weight axis's top label
    ("0.00xyz", wider than the panels' 48 px band) is drawn, the panels' bands kept equal (time axes line up)."""
    w = real_window
    sound = tmp_path / "long.wav"
    sf.write(sound, np.tile(sf.read(chirp(tmp_path / "chirp.wav"))[0], 14)[: 30 * 16000], 16000)
    open_and_wait(qtbot, w, optimum_export("wav2vec2") / "onnx", timeout=120000, audio=str(sound))
    w.select_view("audio")
    v = w.audio_regions
    qtbot.waitUntil(lambda: v.view is not None)
    top = f"{v.view.vmax:.3g}"
    assert len(top) >= 6  # e.g. 0.0042
    assert [t for _, _, t in drawn_ticks(v.curve_plot.getAxis("left"))] == ["0", top]
    assert len({p.getAxis("left").width() for p in v.plots}) == 1
    # the Head map's loudness above 1,499 columns: the line alone (their dots ran together into a band), and the
    # figure draws it so too
    w.select_view("head")
    hm = w.head_map.heatmap
    qtbot.waitUntil(lambda: hm.series.isVisible())
    assert len(hm.series_curve.getData()[1]) == 1499 and hm.series_curve.opts["symbol"] is None
    fig = figure(w, w.head_map)
    assert next(a for a in fig.axes if a.lines).lines[0].get_marker() in ("None", None, "")


def test_open_takes_the_max_seconds_a_long_clips_refusal_names(qtbot, real_window, optimum_export, tmp_path, capsys):
    """A 31 s clip is refused naming --max-seconds; `attnviz open` takes that flag (it had none: the message named a
    flag the window's command refused), and the window's runs keep the first S seconds."""
    from attnviz.cli import main

    folder = optimum_export("wav2vec2") / "onnx"
    sound = tmp_path / "long.wav"
    sf.write(sound, np.tile(sf.read(chirp(tmp_path / "chirp.wav"))[0], 15)[: 31 * 16000], 16000)
    capsys.readouterr()
    assert main(["open", str(folder), "--audio", str(sound), "--max-seconds", "0"]) == 2  # checked before Qt
    assert "max seconds 0: give a positive number of seconds" in capsys.readouterr().err  # as typed
    w = real_window
    w.inputs.set_values(max_seconds=2.0)  # what `attnviz open --max-seconds 2` sets: the max seconds field
    open_and_wait(qtbot, w, folder, timeout=120000, audio=str(sound))
    assert w.session.result.maps[0].shape[-1] == (2 * 16000 - 400) // 320 + 1
    # the window's run notes the cut by the field that made it (the command line's by its flag)
    assert any("31.00 s cut to the first 2 s (max seconds 2)" in n for n in w.session.result.info["notes"])
