"""The Head map of an Idefics3 / SmolVLM tower's frames (the processor's tiles and the global image, each a tower run
of its own: :class:`~attnviz.core.frames.FramesMap`) in the real window: one frame's patch-to-patch map at a time,
picked in the frame box whose entries name each tile by its place in the split and the global image; the values
drawn are the dense block-diagonal map's diagonal block (laid out here by the runtime's own ``block_diagonal``, as
the dense path made it, and reduced by hand); the whole ``[F·P, F·P]`` is never laid out (the FramesMap's layout
methods raise, as in tests/runtime/test_vlm_tower_frames.py); File ▸ Export draws the same map.  A result without a
tower's frames is drawn as before, with no frame box."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gui_helpers import open_and_wait
from screen_figure import check_map, figure

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("matplotlib")

SAMPLE = Path(__file__).resolve().parents[2] / "resources" / "samples" / "captioning.png"
P = 36  # a 48-pixel tile's 6 x 6 patches
NAMES = ["tile 0 (row 0, col 0)", "tile 1 (row 0, col 1)", "tile 2 (row 1, col 0)", "tile 3 (row 1, col 1)"]
NAMES += ["global image"]


def _dense(r, layers):
    """Each layer's dense block-diagonal ``[H, F·P, F·P]``, as the dense path made it."""
    from attnviz.runtime.vlm_families import block_diagonal

    return [block_diagonal(r.maps[i].blocks, r.maps[i].per_row)[0].astype(np.float64) for i in layers]


def _rollout(layers):
    """Rollout by hand over the dense layers: each layer's mean over heads, half the identity added, rows
    renormalised, multiplied from the first layer on."""
    out = None
    for a in layers:
        m = a.mean(axis=0)
        m = 0.5 * m + 0.5 * np.eye(m.shape[0])
        m = m / m.sum(axis=-1, keepdims=True)
        out = m if out is None else m @ out
    return out


def test_a_towers_head_map_is_one_frame_at_a_time(qtbot, real_window, idefics3_repo, never_laid_out):
    w = real_window
    open_and_wait(qtbot, w, idefics3_repo / "onnx" / "vision_encoder.onnx", image=str(SAMPLE))
    s, hm, r = w.session, w.head_map, w.session.result
    w.select_view("head")
    assert s.blocks[s.sel.block].stack == "encoder" and r.maps[0].per_row == [5]
    box = hm.frame_box
    assert hm.frame_row.isVisible() and [box.itemText(i) for i in range(box.count())] == NAMES
    labels = list(s.blocks[s.sel.block].key_axis.labels)
    dense = _dense(r, [0, 1])
    for f, name in enumerate(NAMES):
        box.setCurrentIndex(f)
        assert s.sel.frame == f
        cut = slice(f * P, (f + 1) * P)
        for sel, want in (
            (dict(mode="head", layer=1, head=2), dense[1][2]),
            (dict(mode="mean", layer_lo=0, layer_hi=1), np.concatenate(dense).mean(axis=0)),
            (dict(mode="max", layer_lo=1, layer_hi=1), dense[1].max(axis=0)),
            (dict(mode="rollout", layer_lo=0, layer_hi=1), _rollout(dense)),
        ):
            s.select(**sel)
            mv = hm.heatmap.mv
            assert mv.matrix.shape == (P, P)  # one frame, never [F·P, F·P]
            np.testing.assert_allclose(hm.heatmap.image.image, want[cut, cut], rtol=1e-5, atol=1e-7)
            assert hm.heatmap.x_axis.labels == labels[cut] == hm.heatmap.y_axis.labels
            assert name in mv.title and mv.x_title == f"key ({name.split(' (')[0]})"
        check_map(hm.heatmap, figure(w, hm))  # File ▸ Export: the same frame's map, labels and title
    assert labels[P + 4] == "tile 1·(0,4)" and labels[4 * P] == "(0,0)"  # the keys the frames' names say
    # Token links of the tower: the Head map's frame alone (the frame box's choice), each head's its block
    box.setCurrentIndex(2)
    s.select(mode="head", layer=1, head=0)
    w.select_view("links")
    lv = w.links.lv
    cut = slice(2 * P, 3 * P)
    assert lv.q_labels == labels[cut] and "tile 2 (row 1, col 0)" in lv.title
    for name, _colour, m in lv.items:
        np.testing.assert_allclose(m, dense[1][int(name.split()[-1])][cut, cut], rtol=1e-5, atol=1e-7)
    w.select_view("head")
    # keep mass: each row's top weights of its own frame (the dense row's, its other keys zero)
    box.setCurrentIndex(1)
    s.select(mode="head", layer=0, head=1, keep=0.5)
    row = dense[0][1][P : 2 * P, P : 2 * P]
    got = hm.heatmap.mv.matrix
    for q in range(P):
        order = np.argsort(-row[q])
        kept = order[(np.cumsum(row[q][order]) - row[q][order]) < 0.5 * row[q].sum()]
        np.testing.assert_allclose(got[q][kept], row[q][kept], rtol=1e-6)
        assert not np.delete(got[q], kept).any()


def test_a_result_without_a_towers_frames_is_drawn_as_before(qtbot, window, files):
    """No frame box; the map is compute_map's, whatever frame the selection names."""
    from attnviz.core import view as vm

    w = window
    open_and_wait(qtbot, w, files["text.onnx"], text="the cat sat")
    w.select_view("head")
    s, hm = w.session, w.head_map
    for sel in (dict(mode="head", layer=1, head=0), dict(mode="mean", frame=3)):
        s.select(**sel)
        assert not hm.frame_row.isVisible()
        want = vm.compute_map(s.result, s.sel, s.blocks)
        np.testing.assert_array_equal(hm.heatmap.mv.matrix, want.matrix)
        assert hm.heatmap.mv.title == want.title and hm.heatmap.mv.k_labels == want.k_labels


def test_figure_frame_draws_that_frame_and_names_what_it_cannot(idefics3_repo, tmp_path, capsys):
    """``attnviz figure --view heatmap --frame N``: frame N's map (the recipe keeps it); a frame the tower has not,
    a query of another frame and a block that is no tower's frames are one line each."""
    from attnviz.cli import main
    from attnviz.core import io
    from attnviz.figures import FigureSpec, render_spec

    maps = tmp_path / "t.npz"
    enc = idefics3_repo / "onnx" / "vision_encoder.onnx"
    assert main(["extract", str(enc), "--image", str(SAMPLE), "--out", str(maps)]) == 0
    out = tmp_path / "f.png"
    assert main(["figure", "--maps", str(maps), "--view", "heatmap", "--frame", "5", "--out", str(out)]) == 0
    assert '"frame": 5' in (tmp_path / "f.png.recipe.json").read_text()
    r = io.load_npz(maps)
    fig = render_spec(r, FigureSpec(view="heatmap", frame=5, head=1, layer=0, dpi=40))
    drawn = next(a for a in fig.axes if a.images).images[0].get_array()
    np.testing.assert_array_equal(drawn, _dense(r, [0])[0][1][4 * P :, 4 * P :].astype(np.float32))
    assert "global image" in next(a for a in fig.axes if a.get_title()).get_title()
    capsys.readouterr()
    for extra, line in (
        (["--frame", "9"], "--frame 9: vision self-attention has frames 1–5 (tile 0 (row 0, col 0) … global image)"),
        (["--frame", "2", "--query", "150"], "--frame 2 and --query 150: that query is a patch of frame 5"),
        (["--frame", "0"], "frame 0: frames count from 1; give --frame N"),
    ):
        assert main(["figure", "--maps", str(maps), "--view", "heatmap", *extra, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and line in err[0], err


def test_a_frame_of_a_block_without_frames_is_one_line(qtbot, window, files):
    from attnviz.core import view as vm

    open_and_wait(qtbot, window, files["text.onnx"], text="the cat sat")
    s = window.session
    with pytest.raises(vm.ViewError, match="--frame 2: .* is not a vision tower's frames") as e:
        vm.check_frame(s.result, s.sel.with_(frame=1), s.blocks)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("frame,code,line", [("5", 0, "saved"), ("6", 2, "attnviz: error: --frame 6: vision")])
def test_open_frame_shows_that_frame_or_names_the_frames(idefics3_repo, tmp_path, frame, code, line):
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    shot = tmp_path / "s.png"
    args = ["open", str(idefics3_repo / "onnx" / "vision_encoder.onnx"), "--image", str(SAMPLE), "--view", "heatmap"]
    args += ["--frame", frame, "--screenshot", str(shot)]
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(root), ATTNVIZ_SETTINGS=str(tmp_path / "s.ini"))
    p = subprocess.run([sys.executable, "-m", "attnviz", *args], capture_output=True, text=True, env=env, timeout=180)
    assert p.returncode == code, p.stderr[-2000:]
    out = (p.stderr if code else p.stdout).strip().splitlines()
    assert out[-1].startswith(line) and "Traceback" not in p.stderr


def test_a_towers_head_stats_are_each_frames(qtbot, real_window, idefics3_repo):
    """The Head stats tab of a tower: "first" is the mass on each frame's top-left patch (no [CLS]) and says so,
    its numbers each frame's by hand from the laid-out heads (tests/core/test_frames_map.py)."""
    from frames_by_hand import per_frame_first_prev

    w = real_window
    open_and_wait(qtbot, w, idefics3_repo / "onnx" / "vision_encoder.onnx", image=str(SAMPLE))
    r = w.session.result
    w.select_view("stats")
    n = sum(s.heads for s in r.sites)
    qtbot.waitUntil(lambda: w.stats.table.rowCount() == n and w.stats._pending is None, timeout=30000)
    t = w.stats.table
    col = {t.horizontalHeaderItem(i).text().replace("\n", " "): i for i in range(t.columnCount())}
    assert "each frame's first patch" in t.horizontalHeaderItem(col["first token"]).toolTip()
    dense = _dense(r, range(len(r.sites)))
    for row in range(t.rowCount()):
        layer, head = int(t.item(row, 0).text()), int(t.item(row, 1).text())
        first, _ = per_frame_first_prev(dense[layer][head], [P] * len(NAMES))
        assert float(t.item(row, col["first token"]).text()) == pytest.approx(first, abs=6e-3)


def test_the_whole_models_frame_box_names_the_frames_as_the_tower_alones(qtbot, real_window, idefics3_repo):
    """The whole model (its prompt's <row_r_col_c> markers) and its vision file alone (the processor's split) name
    the same image's frames alike in the frame box, each tile by its place (tests/runtime/test_vlm_frame_names.py
    checks the places against transformers' processor)."""
    w = real_window
    boxes = []
    for path, values in (
        (idefics3_repo, dict(text="<s> <image> a photo of the cat", image=str(SAMPLE))),
        (idefics3_repo / "onnx" / "vision_encoder.onnx", dict(image=str(SAMPLE))),
    ):
        open_and_wait(qtbot, w, path, **values)
        w.select_view("head")
        s, box = w.session, w.head_map.frame_box
        s.select(block=next(i for i, b in enumerate(s.blocks) if b.name == "vision self-attention"))
        assert w.head_map.frame_row.isVisible()
        boxes.append([box.itemText(i) for i in range(box.count())])
        box.setCurrentIndex(2)
        assert boxes[-1][2] in w.head_map.heatmap.mv.title
    assert boxes[0] == boxes[1] == NAMES
