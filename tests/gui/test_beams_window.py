"""A beam search in the window: the batch row box becomes the "beam" box, each beam its own words and rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gui_helpers import open_and_wait, run_and_wait

DEMO = Path(__file__).resolve().parents[2] / "models" / "translation.onnx"


def test_beams_switch_in_the_beam_box(qtbot, real_window):
    w = real_window
    open_and_wait(qtbot, w, DEMO, generate=6, beams=3)
    r = w.session.result
    beams = r.info["beams"]
    assert r.batch_size == 3 and w.controls.labels["batch row"].text() == "beam"
    assert w.controls.batch.isEnabled() and w.controls.batch.maximum() == 2
    assert w.inputs.beams.value() == 3
    # the status line names whose words it quotes: it stays while the beam box shows another beam
    best = " ".join(beams[0]["generated"])
    assert f"generated “{best}” (the best of 3 beams" in w.statusBar().currentMessage()
    w.select_view("alignment")
    w.session.select(rows="predict")  # each row the word it chose: every generated word has its row
    shown = {}
    for b in (2, 0):
        w.controls.batch.setValue(b)
        assert w.session.sel.batch == b
        shown[b] = list(w.alignment.mv.q_labels)
        assert shown[b] == beams[b]["generated"]  # that beam's own words on its own rows
        assert f"“{beams[b]['generated'][-1]}”" in w.alignment.step_label.text()
    assert shown[2] != shown[0]
    from attnviz.gui import restore

    restore.save(w)  # the next plain `attnviz` searches with the same beams
    assert restore.load(w.settings)["inputs"]["beams"] == 3
    run_and_wait(qtbot, w, generate=6, beams=1)  # greedy again: one row, the box is a batch row box again
    assert w.session.result.batch_size == 1 and w.controls.labels["batch row"].text() == "batch row"


def test_a_shorter_beam_shows_its_own_steps_and_no_padding_row(qtbot, real_window):
    """Hypotheses of unequal lengths are padded to the longest: a shorter beam's slider ends at its own last word,
    and its padding is no row (its last word, never fed back, has no reading row: as in a greedy run)."""
    w = real_window
    open_and_wait(qtbot, w, DEMO, generate=20, beams=4)
    beams = w.session.result.info["beams"]
    lengths = [len(b["generated"]) for b in beams]
    assert len(set(lengths)) > 1, lengths  # the demo's default text ends its hypotheses at different steps
    w.select_view("alignment")
    for b in range(4):
        w.controls.batch.setValue(b)
        own = beams[b]["generated"]
        assert w.controls.step.maximum() == len(own)
        assert w.controls.step_label.text() == f"step {len(own)}/{len(own)}"
        w.session.select(rows="input")  # Shift-Att: word k on the row that reads it
        assert list(w.alignment.mv.q_labels) == own[:-1]
        w.session.select(rows="predict")
        assert list(w.alignment.mv.q_labels) == own


def test_exported_view_of_a_beam_names_that_beam_as_the_command_line_figure_does(qtbot, real_window, tmp_path):
    """File ▸ Export view of beam 3 is beam 3's figure: its title names the beam and its score, as `attnviz
    figure --batch-index 3` does (an unnamed map of a lesser hypothesis passes for the output's own)."""
    w = real_window
    open_and_wait(qtbot, w, DEMO, generate=8, beams=4)
    beams = w.session.result.info["beams"]
    w.controls.batch.setValue(3)
    svgs = {}
    for view in ("heatmap", "links", "overview"):
        w.select_view(view)
        out = tmp_path / f"{view}.svg"
        with qtbot.waitSignal(w.workers.returned, timeout=60000):
            w.export_view(out)
        qtbot.waitUntil(out.exists, timeout=10000)
        svg = svgs[view] = out.read_text()
        assert f"beam 3 (score {beams[3]['score']:.3f})" in svg, view
        assert "beam 0" not in svg
    # and the map is beam 3's: the words it alone chose label rows (the SVG keeps text as text)
    own = set(beams[3]["generated"][:-1]) - set(beams[0]["generated"])
    assert own and all(word in svgs["heatmap"] for word in own), own


def test_image_regions_query_words_follow_the_beam(qtbot, real_window):
    """The captioning demo's beams: Image regions' word buttons and thumbnails are the shown beam's own words
    (they kept the first beam's while the maps and the step were the new beam's: "left" drawn under "a")."""
    w = real_window
    open_and_wait(qtbot, w, DEMO.with_name("captioning.onnx"), generate=10, beams=4)
    beams = w.session.result.info["beams"]
    assert len({tuple(b["generated"]) for b in beams}) == 4  # the sample image's four captions differ
    w.select_view("image")
    ir = w.image_regions
    for b in (0, 1, 3, 2):
        w.controls.batch.setValue(b)
        own = beams[b]["generated"]
        assert [label for label, _ in ir.queries] == own, b
        # a word the beam writes twice reads with its place on its button and its thumbnail (words24)
        named = [f"{x} ({k + 1})" if own.count(x) > 1 else x for k, x in enumerate(own)]
        assert [t.text() for t in ir.strip] == named
        # the word checked is the word whose map is drawn (the map the view model draws for that beam's row)
        label, _ = ir.queries[ir.query]
        assert ir.info.text().startswith(f"query “{label}”")
        assert [x.text() for x in ir.query_bar.buttons] == named
        assert [x.text() for x in ir.query_bar.buttons if x.isChecked()] == [named[ir.query]]


def test_head_stats_follow_the_beam(qtbot, real_window):
    """Head stats of beam 3 are beam 3's (the table kept the first beam's numbers when the beam box changed)."""
    from attnviz.core.rows import pick_row
    from attnviz.core.stats import head_stats

    w = real_window
    open_and_wait(qtbot, w, DEMO, generate=12, beams=4)
    w.select_view("stats")
    n = 12  # decoder cross-attention: 3 layers x 4 heads

    def table() -> list[float]:
        qtbot.waitUntil(lambda: w.stats._pending is None and w.stats.table.rowCount() == n, timeout=20000)
        t = w.stats.table
        rows = sorted(range(n), key=lambda r: (t.item(r, 0).value, t.item(r, 1).value))
        return [t.item(r, w.stats.columns.index("entropy")).value for r in rows]

    first = table()
    w.controls.batch.setValue(3)
    shown = table()
    # beam 3 alone, as `figure --batch-index 3` takes it: its cross-attention heads' entropy from its own maps
    row = pick_row(w.session.result, 3)
    blk = next(b for b in row.blocks(0) if b.kind == "cross")
    want = [head_stats(blk.head(layer, h))["entropy"] for layer in range(blk.n_layers) for h in range(4)]
    np.testing.assert_allclose(shown, want, rtol=1e-9)
    assert not np.allclose(first, want)


def test_a_tiled_images_beams_show_their_own_words_beside_the_one_towers_tiles(qtbot, real_window, idefics3_repo):
    """SmolVLM's architecture (tiny Idefics3, the image split into tiles): each beam's Head map of the tower is
    the tower's one run (every beam the same tiles' maps, the frame box naming the tiles), and Image regions'
    words are that beam's own, each drawn from that beam's decoder row over the tiles."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from attnviz.core import view as v

    w = real_window
    sample = DEMO.parents[1] / "resources" / "samples" / "captioning.png"
    open_and_wait(
        qtbot, w, idefics3_repo, text="<s> <image> a photo of the cat", image=str(sample), generate=4, beams=3
    )
    r, s = w.session.result, w.session
    beams = r.info["beams"]
    assert r.batch_size == 3 and w.controls.labels["batch row"].text() == "beam"
    tower = next(i for i, b in enumerate(s.blocks) if b.stack == "encoder")
    dec = next(i for i, b in enumerate(s.blocks) if b.stack == "decoder")
    for b in (2, 0, 1):
        w.controls.batch.setValue(b)
        w.select_view("heatmap")
        s.select(block=tower, mode="head", layer=1, head=2, frame=3)
        names = [w.head_map.frame_box.itemText(i) for i in range(w.head_map.frame_box.count())]
        assert len(names) == 5 and names[-1] == "global image" and w.head_map.frame_row.isVisibleTo(w)
        frames = r.maps[s.blocks[tower].sites[1]]
        np.testing.assert_array_equal(w.head_map.heatmap.mv.matrix, frames.frames(b)[3][2])
        np.testing.assert_array_equal(frames.frames(b)[3], frames.frames(0)[3])  # one tower run for every beam
        w.select_view("image")
        s.select(block=dec, mode="head", layer=1, head=0)
        ir = w.image_regions
        own = beams[b]["generated"]
        # each row after the image named by the word it produced (words24): the prompt's next tokens, then the
        # beam's own words, its last one too (chosen by the last row, never fed back)
        assert [label for label, _ in ir.queries] == "photo of the cat".split() + own, b
        ir.query_bar.buttons[-1].click()  # the beam's last row (its own word), as a user picks it
        label, row = ir.queries[ir.query]
        assert label == own[-1] and ir.info.text().startswith(f"query “{label}”")
        want = v.overlay_view(r, v.Selection(batch=b, block=dec, mode="head", layer=1, head=0, query=row))
        np.testing.assert_array_equal(ir.patch_map, want.patch)
        grid = r.token_grid_of(b)  # that row's weights on the tiles' image tokens, each at its cell
        beam_row = r.maps[s.blocks[dec].sites[1]].array()[b, 0, row]
        by_hand = np.array([[beam_row[grid.key(y, x)] for x in range(grid.cols)] for y in range(grid.rows)])
        np.testing.assert_allclose(ir.patch_map, by_hand, rtol=1e-6)
