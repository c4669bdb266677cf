"""The view model's rules, against hand computations (core/view/: numpy only)."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.core import view as vm
from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis


def test_all_labels_when_they_fit():
    assert vm.tick_indices(8, 8) == list(range(8))
    assert vm.tick_indices(0, 5) == []


@pytest.mark.parametrize("n,fit", [(40, 10), (200, 12), (512, 30), (38, 7)])
def test_first_last_and_an_even_stride_when_they_do_not(n, fit):
    idx = vm.tick_indices(n, fit)
    assert idx[0] == 0 and idx[-1] == n - 1
    gaps = [b - a for a, b in zip(idx, idx[1:])]
    assert len(set(gaps[:-1])) == 1  # one stride; only the gap before the last label may be shorter
    assert gaps[0] <= gaps[-1] < 2 * gaps[0]  # a label less than a stride from the last one makes way for it
    assert len(idx) <= fit + 1


def test_the_focused_token_is_always_labelled_and_crowds_out_its_neighbours():
    idx = vm.tick_indices(200, 11, focus=123)
    assert 123 in idx and 0 in idx and 199 in idx
    stride = idx[1] - idx[0]
    assert all(abs(i - 123) >= stride for i in idx if i != 123)


def test_colour_bar_ticks_are_few_and_round():
    assert vm.nice_ticks(0.0, 0.43) == [0.0, 0.2, 0.4]
    assert vm.nice_ticks(0.0, 1.0) == [0.0, 0.25, 0.5, 0.75, 1.0]
    for hi in (0.0371, 0.2, 0.93, 1.0, 17.0):
        assert 2 <= len(vm.nice_ticks(0.0, hi)) <= 6
    assert vm.log_ticks(0.8) == [0.001, 0.01, 0.1]
    assert vm.colour_range(0.8, log=True) == pytest.approx((0.0008, 0.8))


def test_clean_label():
    assert [vm.clean_label(t) for t in ["Ġthe", "▁cat", "Ċ", " ", "a" * 30]] == ["the", "cat", "↵", "␣", "a" * 17 + "…"]


def test_a_label_is_cut_by_its_width_a_wide_character_counting_two():
    """18 columns as a terminal counts them: a Chinese character is as wide as two Latin letters, so a 13-character
    Chinese token (26 columns) keeps 8 characters and the ellipsis (17 columns), as 'a' * 30 keeps 17 letters."""
    zh = "注意力机制是变换器的核心。"  # 13 characters, each East Asian Wide
    assert vm.clean_label(zh) == "注意力机制是变换…"
    assert vm.clean_label(zh[:9]) == zh[:9]  # 18 columns: whole
    assert vm.clean_label("ab" + zh) == "ab注意力机制是变…"  # 2 + 14 columns, then the ellipsis
    assert vm.clean_label("ＡＢＣＤＥＦＧＨＩＪ") == "ＡＢＣＤＥＦＧＨ…"  # fullwidth Latin: two columns each
    assert vm.clean_label("café naïve résumé!") == "café naïve résumé!"  # 18 narrow characters: whole


def _encdec(prompt_len: int):
    """Source of 5 tokens; 3 generated words, the decoder fed ``<s>`` + all but the last."""
    rng = np.random.default_rng(0)

    def soft(*shape):
        m = rng.random((1, 2, *shape)).astype(np.float32)
        return m / m.sum(-1, keepdims=True)

    cross = soft(3, 5)
    maps = [DenseMap(soft(5, 5)), DenseMap(soft(3, 3)), DenseMap(cross)]
    sites = [
        SiteInfo("encoder", "self", 0, 2, "e", "softmax"),
        SiteInfo("decoder", "self", 0, 2, "d", "softmax"),
        SiteInfo("decoder", "cross", 0, 2, "c", "softmax"),
    ]
    src = TokenAxis(["<s>", "a", "b", "c", "</s>"], [True, False, False, False, True])
    dec = TokenAxis(["<s>", "x", "y"], [True, False, False])
    r = AttentionResult(maps, sites, tokens=src, key_tokens=dec, generated=["x", "y", "</s>"], prompt_len=prompt_len)
    return r, cross[0]


@pytest.mark.parametrize("prompt_len", [0, 1])
def test_alignment_rows_are_the_words_each_row_chose_with_or_without_a_prompt_length(prompt_len):
    r, m = _encdec(prompt_len)
    mv = vm.alignment_map(r, vm.Selection(mode="head", head=1))
    # row k (position k of the decoder) chose generated word k; the last word is never fed back
    assert mv.q_labels == ["x", "y", "</s>"] and list(mv.q_pos) == [0, 1, 2]
    assert mv.q_special == [False, False, True]
    np.testing.assert_array_equal(mv.matrix, m[1][[0, 1, 2]])
    assert vm.row_story(r, mv.block, 0) == "“<s>” → “x”"


def test_hide_special_on_a_cross_block_drops_special_keys_even_when_the_query_side_is_all_special():
    r, m = _encdec(1)
    cross = vm.compute_map(r, vm.Selection(block=2, mode="head", head=0, hide_special=True, step=0))
    # step 0: one decoder row (<s>, special): it stays (all special); the special keys <s>, </s> go
    assert cross.q_labels == ["<s>"] and cross.k_labels == ["a", "b", "c"]
    want = m[0][0, 1:4] / m[0][0, 1:4].sum()
    np.testing.assert_allclose(cross.matrix[0], want, rtol=1e-6)


def test_overview_max_pools_so_a_512_token_diagonal_survives():
    eye = np.eye(512, dtype=np.float32)[None, None]
    r = AttentionResult(
        [DenseMap(eye)],
        [SiteInfo("encoder", "self", 0, 1, "s", "softmax")],
        tokens=TokenAxis([f"t{i}" for i in range(512)]),
    )
    small = vm.thumbnails(r, vm.Selection(), 64)[(0, 0, 0)]
    assert small.shape == (64, 64)
    np.testing.assert_array_equal(small, np.eye(64, dtype=np.float32))  # block means would give 1/8


def test_the_top_of_a_colour_scale_is_labelled_with_its_value():
    assert vm.scale_ticks(0.0, 1.0, False) == [(0.0, "0"), (0.25, "0.25"), (0.5, "0.5"), (0.75, "0.75"), (1.0, "1")]
    # stretched to a map whose largest weight is 0.43: 0.4 would crowd it and gives way
    assert vm.scale_ticks(0.0, 0.43, False) == [(0.0, "0"), (0.2, "0.2"), (0.43, "0.43")]
    assert vm.scale_ticks(0.0, 0.87, False)[-2:] == [(0.75, "0.75"), (0.87, "0.87")]
    assert vm.scale_ticks(0.00087, 0.87, True) == [(0.001, "0.001"), (0.01, "0.01"), (0.1, "0.1"), (0.87, "0.87")]


def test_upsampled_overlay_is_round_around_a_hot_cell():
    """No "+" streaks: around a lone hot cell the heat hardly depends on the direction.  Bilinear interpolation
    (written out here) has star-shaped contours, brighter along the axes than along the diagonals."""
    patch = np.zeros((5, 5), np.float32)
    patch[2, 2] = 1.0
    up = vm.upsample(patch, (50, 50))  # 10 pixels a cell, the hot cell's centre between pixels 24 and 25
    pos = np.clip((np.arange(50) + 0.5) / 10 - 0.5, 0, 4)
    tent = np.maximum(0.0, 1.0 - np.abs(pos - 2.0))
    bilinear = np.outer(tent, tent)
    yy, xx = np.mgrid[:50, :50]
    r = np.hypot(yy - 24.5, xx - 24.5)

    def spread(m, lo, hi):  # relative spread of the heat on a ring around the cell
        ring = (r > lo) & (r < hi)
        return float(m[ring].std() / m[ring].mean())

    assert spread(bilinear, 9, 10) > 0.3  # the streaks
    for lo, hi in ((3, 4), (6, 7), (9, 10)):
        assert spread(up, lo, hi) < 0.1, (lo, hi)
    assert 0.0 <= up.min() and up.max() <= 1.0


def test_upsampled_overlay_keeps_the_peak_where_it_was():
    patch = np.zeros((4, 4), np.float32)
    patch[1, 2] = 1.0
    up = vm.upsample(patch, (32, 32))
    y, x = np.unravel_index(int(np.argmax(up)), up.shape)
    assert 8 <= y < 16 and 16 <= x < 24 and up.min() >= 0.0


@pytest.mark.parametrize(
    "rows, want_rows, want_labels, want_special",
    [
        ("predict", [0, 1, 2], ["x", "y", "</s>"], [False, False, True]),  # row t predicts token t + 1
        ("input", [1, 2, 3], ["x", "y", "</s>"], [False, False, True]),  # row t reads token t (Shift-Att)
    ],
)
def test_a_teacher_forced_target_gets_one_row_per_target_token_in_either_convention(
    rows, want_rows, want_labels, want_special
):
    """No generation: the decoder read ``<s> x y </s>`` as given.  The start token is no target word; each other
    token is on the row that predicts it or the row that reads it (core.align.row_words' rule, as align)."""
    r, _ = _encdec(1)
    rng = np.random.default_rng(1)
    cross = rng.random((1, 2, 4, 5)).astype(np.float32)
    r.maps[2] = DenseMap(cross / cross.sum(-1, keepdims=True))
    r.maps[1] = DenseMap(np.tril(np.ones((1, 2, 4, 4), np.float32)) / np.arange(1, 5, dtype=np.float32)[:, None])
    r.generated, r.prompt_len = [], None
    r.key_tokens = TokenAxis(["<s>", "x", "y", "</s>"], [True, False, False, True])
    mv = vm.alignment_map(r, vm.Selection(mode="head", head=1, rows=rows))
    assert list(mv.q_pos) == want_rows and mv.q_labels == want_labels and mv.q_special == want_special
    np.testing.assert_array_equal(mv.matrix, r.maps[2].array()[0, 1][want_rows])
    assert mv.y_title == "target"


def test_alignment_of_a_start_token_alone_names_what_is_missing():
    r, _ = _encdec(1)
    cross = np.full((1, 2, 1, 5), 0.2, np.float32)
    r.maps[2], r.maps[1] = DenseMap(cross), DenseMap(np.ones((1, 2, 1, 1), np.float32))
    r.generated, r.prompt_len, r.key_tokens = [], None, TokenAxis(["<s>"], [True])
    with pytest.raises(vm.ViewError, match="needs target words"):
        vm.alignment_map(r, vm.Selection(mode="head", head=0))


def test_the_patch_under_a_pixel_is_the_query_row_of_that_patch():
    from attnviz.core.attention import PatchGrid

    g = PatchGrid(4, 8, 1)  # 4 rows x 8 columns of patches after one CLS, over a 64 x 128 image
    assert vm.patch_query(g, 0, 0, 128, 64) == ("patch (0, 0)", 1)
    assert vm.patch_query(g, 127.9, 63.9, 128, 64) == ("patch (3, 7)", 1 + 3 * 8 + 7)
    assert vm.patch_query(g, 16.0, 15.99, 128, 64) == ("patch (0, 1)", 2)  # x 16 starts column 1; y < 16 is row 0
    assert vm.patch_query(g, 16.0, 16.0, 128, 64) == ("patch (1, 1)", 1 + 8 + 1)
    assert vm.patch_query(g, -0.1, 3, 128, 64) is None and vm.patch_query(g, 3, 64, 128, 64) is None
    # the row it names is the one to_image puts at (r, c): a one-hot row lands on that cell
    for x, y in ((5, 50), (100, 20), (127, 0)):
        _, row = vm.patch_query(g, x, y, 128, 64)
        hot = np.zeros(1 + g.n)
        hot[row] = 1
        r, c = np.argwhere(g.to_image(hot) == 1)[0]
        assert (r, c) == (int(y * 4 / 64), int(x * 8 / 128))


def _near_uniform_and_peaked():
    """Head 0 near-uniform over 10 keys (about 0.1 each, a random-init BERT); head 1 puts 0.9 on one key."""
    rng = np.random.default_rng(3)
    uniform = np.full((10, 10), 0.1) + rng.uniform(-0.005, 0.005, (10, 10))
    uniform /= uniform.sum(-1, keepdims=True)
    peaked = np.full((10, 10), 0.1 / 9)
    np.fill_diagonal(peaked, 0.9)
    maps = np.stack([uniform, peaked])[None].astype(np.float32)  # [1, 2, 10, 10]
    toks = TokenAxis([f"t{i}" for i in range(10)])
    return AttentionResult([DenseMap(maps)], [SiteInfo("encoder", "self", 0, 2, "sm", "softmax")], tokens=toks)


def test_the_default_colour_scale_does_not_make_near_uniform_attention_look_saturated():
    r = _near_uniform_and_peaked()
    assert vm.Selection().scale == vm.DEFAULT_SCALE == "fixed"
    flat = vm.compute_map(r, vm.Selection(head=0))
    assert flat.vmax == 1.0 and flat.matrix.max() < 0.11  # on 0–1 it stays faint, as it is
    stretched = vm.compute_map(r, vm.Selection(head=0, scale="map"))
    assert stretched.vmax == pytest.approx(float(r.maps[0].array()[0, 0].max()))  # its own maximum: bright
    shared = vm.compute_map(r, vm.Selection(head=0, scale="shared"))
    assert shared.vmax == pytest.approx(0.9)  # the block's heads compare: head 1's peak sets the top
    assert vm.notes_label(flat.notes, False, flat.scale) == "attention weight (fixed 0–1)"
    assert (
        vm.notes_label(stretched.notes, True, stretched.scale) == "attention weight (log scale, stretched to this map)"
    )
    with pytest.raises(vm.ViewError, match="unknown colour scale 'auto'"):
        vm.compute_map(r, vm.Selection(scale="auto"))


def test_a_time_series_rides_on_its_axis_to_the_map_and_through_npz(tmp_path):
    """A forecaster's key axis carries the series' values; the map view keeps the values of the columns it draws
    (a generation step cuts them as it cuts the columns), and an .npz round trip keeps them."""
    from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
    from attnviz.core.io import load_npz, save_npz

    vals = [0.5, -1.0, 2.25, 0.0]
    m = np.tril(np.ones((4, 4), np.float32))
    m /= m.sum(-1, keepdims=True)
    axis = TokenAxis([f"t{i}" for i in range(4)], values=vals)
    result = AttentionResult(
        [DenseMap(m[None, None])], [SiteInfo("decoder", "self", 0, 1, "n", "softmax")], tokens=axis
    )
    mv = vm.compute_map(result, vm.Selection())
    assert mv.k_values == vals and mv.k_labels == ["t0", "t1", "t2", "t3"]
    back = load_npz(save_npz(result, tmp_path / "r.npz"))
    assert back.tokens.values == vals
    assert vm.compute_map(back, vm.Selection()).k_values == vals
    with pytest.raises(ValueError, match="series values"):
        TokenAxis(["t0", "t1"], values=[1.0])
    plain = AttentionResult([DenseMap(m[None, None])], result.sites, tokens=TokenAxis(["a", "b", "c", "d"]))
    assert vm.compute_map(plain, vm.Selection()).k_values is None
    assert mv.k_values_title == "value"


def test_a_sounds_loudness_series_is_titled_in_dbfs_through_npz(tmp_path):
    """A speech encoder's frames carry each frame's loudness (dBFS): the series' title says so, not "value", on a
    fresh result and on its .npz (which keeps the clip)."""
    from attnviz.core.attention import AttentionResult, AudioTrack, DenseMap, SiteInfo, TokenAxis
    from attnviz.core.io import load_npz, save_npz

    m = np.full((1, 1, 3, 3), 1 / 3, np.float32)
    axis = TokenAxis(["0.00 s", "0.02 s", "0.04 s"], values=[-80.0, -12.5, -3.0])
    track = AudioTrack([np.zeros(1040, np.float32)], np.zeros((1, 1, 3), np.float32), 16000, 320, 0.02)
    result = AttentionResult([DenseMap(m)], [SiteInfo("encoder", "self", 0, 1, "n", "softmax")], tokens=axis)
    result.audio = track
    assert vm.compute_map(result, vm.Selection()).k_values_title == "loudness (dBFS)"
    back = load_npz(save_npz(result, tmp_path / "r.npz"))
    assert back.audio is not None and vm.compute_map(back, vm.Selection()).k_values_title == "loudness (dBFS)"


def test_a_padded_captioning_row_offers_its_own_words_and_the_first_row_all_of_its():
    """A captioning batch of two typed captions, row 1's right-padded (its decoder mask: 1 1 1 0 0) while row 0's
    last word is an EOS (special, not padding): the strip, Image regions and the alignment of row 1 offer its
    two words and no pad; row 0 keeps its EOS; the padding travels with the row taken out and through .npz."""
    import tempfile
    from pathlib import Path

    from attnviz.core import io
    from attnviz.core.attention import PatchGrid
    from attnviz.core.rows import RowAxes, pick_row, set_row_axes

    rng = np.random.default_rng(1)
    cross = rng.random((2, 1, 5, 4)).astype(np.float32)
    cross /= cross.sum(-1, keepdims=True)
    enc = np.full((2, 1, 4, 4), 0.25, np.float32)
    sites = [SiteInfo("encoder", "self", 0, 1, "e", "softmax"), SiteInfo("decoder", "cross", 0, 1, "c", "softmax")]
    r = AttentionResult([DenseMap(enc), DenseMap(cross)], sites, prompt_len=5)
    r.image = np.zeros((8, 8, 3), np.uint8)
    r.patch_grid = PatchGrid(2, 2, 0)
    patches = TokenAxis([f"p{i}" for i in range(4)])
    mask = [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]  # the decoder's attention mask: the truth
    ids = [["<s>", "a", "cat", "sat", "</s>"], ["<s>", "red", "dog", "<pad>", "<pad>"]]
    rows = [
        RowAxes(patches, TokenAxis(w, [t.startswith("<") for t in w], pad=[not k for k in m]))
        for w, m in zip(ids, mask)
    ]
    set_row_axes(r, rows)

    def offered(res, b):
        sel = vm.Selection(batch=b)
        blocks = res.blocks(b)
        grid = vm.image_source(res, blocks)[1]
        return (
            [p.word for p in vm.strip_view(res, sel).panels],
            [w for w, _ in vm.image_queries(res, blocks[1], grid)],
            vm.alignment_map(res, sel).q_labels,
        )

    # a word k is shown at the row that chose it (row k - 1): row 1 chose "red" and "dog"; row 0 its EOS too
    want = [(["a", "cat", "sat", "</s>"],) * 3, (["red", "dog"],) * 3]
    for b in range(2):
        assert offered(r, b) == want[b]
        assert offered(pick_row(r, b), 0) == offered(r, b)
    with tempfile.TemporaryDirectory() as d:
        io.save_npz(r, Path(d) / "m.npz")
        back = io.load_npz(Path(d) / "m.npz")
    assert [offered(back, b) for b in range(2)] == [offered(r, b) for b in range(2)]
    assert back.key_tokens.pad is None and back.row_axes(1)[1].pad == [False, False, False, True, True]


@pytest.mark.parametrize("block", [0, 1, 2])
@pytest.mark.parametrize("step,keep,hide", [(-1, 1.0, False), (1, 1.0, True), (0, 0.5, False), (2, 0.7, True)])
def test_the_notes_without_the_map_are_the_maps_notes_less_hidden_tokens(block, step, keep, hide):
    """The overview figure's notes (map_notes: a tower's frames are never laid out for them) are the mean map's
    own, the step and the kept mass among them, less "hidden special tokens"."""
    r, _ = _encdec(1)
    sel = vm.Selection(block=block, step=step, keep=keep, hide_special=hide)
    want = [n for n in vm.compute_map(r, sel.with_(mode="mean")).notes if n != vm.HIDDEN_NOTE]
    assert vm.map_notes(r, sel) == want
    assert any(n.startswith("step") for n in want) == (step >= 0 and block > 0)  # the encoder has no steps
