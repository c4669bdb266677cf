"""Architectures researchers export with plain ``optimum-cli export onnx`` (the sweep is bench/optimum_zoo.py; these
hold what it found): BERT takes token_type_ids, OPT learned absolute positions (left padding), Llama has grouped-query attention and a GQA KV cache, Swin attends
within windows (placed back on each stage's patch grid).

Random-init tiny models (weights drawn wide, so heads differ by far more than the tolerance) are exported with
optimum-onnx in the second venv (tests/optimum_env.py); references are transformers' own eager
``output_attentions`` of the same saved weights on a batch of 2 with one row right-padded, and its greedy
``generate``.
"""

import json
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attnviz import AttnvizError  # noqa: E402
from attnviz.cli import main  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402

TOL = 5e-4
pytestmark = pytest.mark.slow


def _padded_batch():
    ids = torch.randint(3, 99, (2, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, -2:] = 0
    ids[mask == 0] = 0  # as a tokenizer pads
    return ids, mask


def _both(root, hf_class, ids, mask):
    """(the transformers model, its eager attentions, the attnviz model, its result) on the same padded batch."""
    hf = getattr(transformers, hf_class).from_pretrained(root / "hf", attn_implementation="eager").eval()
    with torch.no_grad():
        o = hf(input_ids=ids, attention_mask=mask, output_attentions=True)
    m = open_model(root / "onnx", provider="cpu")
    r = m.analyze(feeds={"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
    return hf, o, m, r


def _check_real(result, refs, mask, labels):
    """Every map equals transformers' on the real query and key positions (padded rows are not compared)."""
    assert [(s.stack, s.kind, s.layer) for s in result.sites] == labels
    real = mask.numpy().astype(bool)
    for got, want, s in zip(result.maps, refs, result.sites):
        a, w = got.array(), want.numpy()
        assert a.shape == w.shape, (s, a.shape)
        # heads differ far more than TOL: a map from another head or layer could not pass
        assert np.abs(w - w.mean(1, keepdims=True)).max() > 100 * TOL
        for b, keep in enumerate(real):
            np.testing.assert_allclose(
                a[b][:, keep][..., keep], w[b][:, keep][..., keep], atol=TOL, err_msg=f"{s} row {b}"
            )


def test_bert_raw_feeds_without_token_type_ids(optimum_export, tmp_path, capsys):
    """optimum's BERT export takes token_type_ids; feeds of input_ids + attention_mask alone (what most code saves)
    get transformers' default, one segment of zeros, instead of a refusal."""
    root = optimum_export("bert")
    ids, mask = _padded_batch()
    hf, o, m, r = _both(root, "BertModel", ids, mask)
    assert "token_type_ids" in [i.name for i in m.inputs]
    _check_real(r, o.attentions, mask, [("encoder", "self", 0), ("encoder", "self", 1)])
    # given token types still win: segment 1 changes the maps, exactly as in transformers
    tt = torch.ones_like(ids)
    with torch.no_grad():
        o1 = hf(input_ids=ids, attention_mask=mask, token_type_ids=tt, output_attentions=True)
    r1 = m.analyze(feeds={"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "token_type_ids": tt.numpy()})
    _check_real(r1, o1.attentions, mask, [("encoder", "self", 0), ("encoder", "self", 1)])
    assert np.abs(r1.maps[1].array() - r.maps[1].array()).max() > 100 * TOL
    npz = tmp_path / "feeds.npz"
    np.savez(npz, input_ids=ids.numpy(), attention_mask=mask.numpy())
    assert main(["extract", str(root / "onnx"), "--inputs", str(npz), "--out", str(tmp_path / "maps.npz")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "maps.npz")["attn_001"][0], o.attentions[1][0].numpy(), atol=TOL)


def test_llama_gqa_maps_and_generation_through_its_cache(optimum_export):
    """4 query heads over 2 KV heads: 4 maps per layer, each its own query head's; the GQA cache (2 heads) gives
    transformers' greedy tokens."""
    root = optimum_export("llama")
    ids, mask = _padded_batch()
    hf, o, m, r = _both(root, "LlamaForCausalLM", ids, mask)
    assert hf.config.num_key_value_heads == 2
    _check_real(r, o.attentions, mask, [("decoder", "self", 0), ("decoder", "self", 1)])
    assert [s.heads for s in r.sites] == [4, 4]
    prompt = ids[:1]
    with torch.no_grad():
        want = hf.generate(
            input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6, do_sample=False, num_beams=1
        )[0].tolist()
    g = m.analyze(feeds={"input_ids": prompt.numpy(), "attention_mask": np.ones_like(prompt.numpy())}, generate=6)
    assert g.info["generation"] == "kv-cache"
    got = prompt[0].tolist() + g.info["generated_ids"]
    assert len(got) > prompt.shape[1] and got == want[: len(got)]


def test_opt_left_padded_row_has_its_own_maps(optimum_export):
    """OPT's export takes position_ids for its learned absolute positions.  Filled 0..T-1, a left-padded row's real
    tokens sat at shifted positions (maps off by up to 0.98); counted over real tokens, as transformers' OPT and
    optimum's own ORTModel count them, the row's maps are transformers' and those of the row alone."""
    root = optimum_export("opt")
    ids, _ = _padded_batch()
    mask = torch.ones_like(ids)
    mask[1, :2] = 0  # row 1 padded on the left, as batched generation pads
    ids[mask == 0] = 0
    _, o, m, r = _both(root, "OPTForCausalLM", ids, mask)
    assert "position_ids" in [i.name for i in m.inputs]
    _check_real(r, o.attentions, mask, [("decoder", "self", 0), ("decoder", "self", 1)])
    alone = m.analyze(feeds={"input_ids": ids[1:, 2:].numpy(), "attention_mask": mask[1:, 2:].numpy()})
    for a, b in zip(r.maps, alone.maps):
        np.testing.assert_allclose(a.array()[1][:, 2:, 2:], b.array()[0], atol=TOL)


def _swin_block_weights(hf, px):
    """transformers' windowed probabilities of every Swin block, ``[B·nW, H, N, N]`` each: ``output_attentions``
    keeps only each stage's last block, so they are read from each block's attention module."""
    got = []
    hooks = [
        blk.attention.register_forward_hook(lambda mod, args, out: got.append(out[1].detach().numpy()))
        for stage in hf.encoder.layers
        for blk in stage.blocks
    ]
    try:
        with torch.no_grad():
            o = hf(pixel_values=px, output_attentions=True)
    finally:
        for h in hooks:
            h.remove()
    last = [got[sum(hf.config.depths[: i + 1]) - 1] for i in range(len(hf.config.depths))]
    for a, b in zip(o.attentions, last):  # the hooks saw what output_attentions returns
        np.testing.assert_array_equal(a.numpy(), b)
    return got


def _swin_expected(windows, batch, side, window, shift):
    """The full ``[B, H, T, T]`` map over a ``side x side`` grid, written out plainly: the grid of positions
    rolled as torch.roll(x, -shift) rolls the patches, cut into windows row-major, and every window's weights
    put at the positions its patches came from."""
    rolled = np.roll(np.arange(side * side).reshape(side, side), (-shift, -shift), axis=(0, 1))
    per_row = side // window
    heads = windows.shape[1]
    out = np.zeros((batch, heads, side * side, side * side), np.float32)
    for b in range(batch):
        for w in range(per_row * per_row):
            wr, wc = divmod(w, per_row)
            pos = rolled[wr * window : (wr + 1) * window, wc * window : (wc + 1) * window].ravel()
            for i in range(window * window):
                for j in range(window * window):
                    out[b, :, pos[i], pos[j]] = windows[b * per_row * per_row + w, :, i, j]
    return out


@pytest.mark.parametrize("arch", ["swin", "swin-stages"])
def test_swin_maps_on_the_patch_grid_equal_transformers_windows(optimum_export, arch):
    """Every Swin block's map is its windows placed on its stage's patch grid, the cyclic shift undone: equal to
    transformers' windowed probabilities laid out by hand, on a batch of 2 images.  "swin": one stage, 8x8
    patches in four 4x4 windows; "swin-stages": 16x16, 8x8 and 4x4 grids (16, 4 and 1 windows)."""
    root = optimum_export(arch)
    hf = transformers.SwinModel.from_pretrained(root / "hf", attn_implementation="eager").eval()
    size = hf.config.image_size
    px = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(0))
    windows = _swin_block_weights(hf, px)
    r = open_model(root / "onnx", provider="cpu").analyze(feeds={"pixel_values": px.numpy()})
    depths = hf.config.depths
    stages = [s + 1 for s, d in enumerate(depths) for _ in range(d)]
    assert [(s.layer, s.stage) for s in r.sites] == list(enumerate(stages))
    assert [b.name for b in r.blocks()] == [f"encoder self-attention stage {s}" for s in range(1, len(depths) + 1)]
    side0 = size // hf.config.patch_size
    assert (r.patch_grid.rows, r.patch_grid.cols, r.patch_grid.offset) == (side0, side0, 0)
    shifted = 0
    for k, (m, w, stage) in enumerate(zip(r.maps, windows, stages)):
        side = side0 >> (stage - 1)
        window = min(hf.config.window_size, side)
        first = sum(depths[: stage - 1])
        shift = hf.config.window_size // 2 if (k - first) % 2 and side > hf.config.window_size else 0
        shifted += bool(shift)
        want = _swin_expected(w, 2, side, window, shift)
        got = m.array()
        assert got.shape == want.shape == (2, w.shape[1], side * side, side * side)
        np.testing.assert_allclose(got, want, atol=1e-5, err_msg=f"block {k} (stage {stage}, shift {shift})")
        np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-5)  # every patch is a real query: rows sum to 1
        np.testing.assert_array_equal(m.head(1, 0), got[1, 0])  # one head on demand = the whole map's
    assert shifted == (1 if arch == "swin" else 2)  # the shift was exercised


def test_swin_query_rows_stay_inside_their_windows(optimum_export):
    """A query patch attends only within its window on the image: on an unshifted block patch (5, 5) of the 16x16
    grid sees rows/cols 4..7; on a shifted block (the grid rolled by 2, cut, masked) it sees 2..5, and corner
    patch (0, 0), whose shifted window wraps around the image, sees only its true neighbours (0..1, 0..1).
    The image-regions overlay of that query shows the same window."""
    root = optimum_export("swin-stages")
    px = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    r = open_model(root / "onnx", provider="cpu").analyze(feeds={"pixel_values": px.numpy()})

    def support(layer, y, x):
        row = r.maps[layer].array()[0, :, y * 16 + x].reshape(-1, 16, 16)
        return {(int(a), int(b)) for a, b in zip(*np.nonzero((row > 1e-6).any(0)))}

    def square(lo, hi):
        return {(a, b) for a in range(lo, hi + 1) for b in range(lo, hi + 1)}

    assert support(0, 5, 5) == square(4, 7)
    assert support(1, 5, 5) == square(2, 5)
    assert support(1, 0, 0) == square(0, 1)
    assert support(0, 0, 0) == square(0, 3)
    from attnviz.core import view as vm

    sel = vm.Selection(block=0, layer=1, head=0, mode="head", query=5 * 16 + 5)
    ov = vm.overlay_view(r, sel, (64, 64))
    assert (ov.grid.rows, ov.grid.cols) == (16, 16)
    assert {(int(a), int(b)) for a, b in zip(*np.nonzero(ov.patch > 1e-6))} == square(2, 5)
    blocks = r.blocks()  # stage 2's overlay lies on its own 8x8 grid
    ov2 = vm.overlay_view(r, sel.with_(block=1, layer=0, query=0), (64, 64), blocks)
    assert (ov2.grid.rows, ov2.grid.cols) == (8, 8)
    assert {(int(a), int(b)) for a, b in zip(*np.nonzero(ov2.patch > 1e-6))} == square(0, 3)


def test_swin_extract_and_image_figure_from_the_cli(optimum_export, tmp_path, capsys):
    """``extract`` writes each block's map over its stage's whole grid and labels the stages; the image figure
    draws a stage's overlay."""
    root = optimum_export("swin-stages")
    img = tmp_path / "x.png"
    pixels = np.random.default_rng(0).integers(0, 255, (64, 64, 3)).astype(np.uint8)
    pytest.importorskip("PIL.Image").fromarray(pixels).save(img)
    assert main(["extract", str(root / "onnx"), "--image", str(img), "--out", str(tmp_path / "m.npz")]) == 0
    with np.load(tmp_path / "m.npz") as z:
        shapes = [z[f"attn_{i:03d}"].shape for i in range(6)]
        sites = json.loads(str(z["sites"]))
    assert shapes == [(1, 2, 256, 256)] * 2 + [(1, 4, 64, 64)] * 2 + [(1, 4, 16, 16)] * 2
    assert [s["stage"] for s in sites] == [1, 1, 2, 2, 3, 3]
    from attnviz.core.io import load_npz

    assert [b.name for b in load_npz(tmp_path / "m.npz").blocks()][1] == "encoder self-attention stage 2"
    for block in ("0", "encoder self stage 2"):
        out = tmp_path / f"fig{block[-1]}.png"
        argv = ["figure", str(root / "onnx"), "--image", str(img), "--view", "image", "--block", block]
        assert main([*argv, "--query", "5", "--out", str(out)]) == 0, capsys.readouterr().err
        assert out.stat().st_size > 1000
    capsys.readouterr()
    assert (
        main(
            [
                "figure",
                str(root / "onnx"),
                "--image",
                str(img),
                "--view",
                "image",
                "--block",
                "encoder self",
                "--out",
                str(tmp_path / "f.png"),
            ]
        )
        == 2
    )  # three stages: the name is ambiguous, said in one line
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "encoder self stage 3" in err
    # corpus statistics assume one token axis per stack: refused in one line, no results folder left behind
    out = tmp_path / "corpus"
    assert main(["corpus", str(root / "onnx"), "--images", str(tmp_path), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "windowed (Swin) attention are not supported yet" in err
    assert not out.exists()


def _tampered_swin(root, tmp_path, **config):
    """A copy of the one-stage Swin export folder whose config.json says ``config`` (None: key removed)."""
    import shutil

    d = tmp_path / "swin"
    shutil.copytree(root / "onnx", d)
    cfg = json.loads((d / "config.json").read_text())
    for k, v in config.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.mark.parametrize(
    "config, message",
    [
        ({"model_type": "vit"}, r"attends within windows \(4 windows of 16 patches per image.*no window layout"),
        ({"depths": [3]}, r"window layout has 3 blocks \(depths \[3\]\) but the graph has 2 attention sites"),
        ({"window_size": 2}, r"its map is \[4, 4, 16, 16\] where stage 1 predicts \[16, heads, 4, 4\]"),
        ({"window_size": 3}, r"8x8 patch grid is not a whole number of 3x3 windows"),
    ],
)
def test_swin_without_a_matching_window_layout_is_refused_in_one_line(
    optimum_export, tmp_path, capsys, config, message
):
    """Windows are placed only where the folder's config.json describes them and every map has the shape that
    layout predicts: a layout missing (not a Swin config) or wrong is refused in one line, never shown as
    windows on a batch axis nor as a wrong map."""
    folder = _tampered_swin(optimum_export("swin"), tmp_path, **config)
    px = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with pytest.raises(AttnvizError, match=message):
        open_model(folder, provider="cpu").analyze(feeds={"pixel_values": px.numpy()})
    img = tmp_path / "x.png"
    pytest.importorskip("PIL.Image").fromarray(np.zeros((32, 32, 3), np.uint8)).save(img)
    capsys.readouterr()
    assert main(["extract", str(folder), "--image", str(img), "--out", str(tmp_path / "m.npz")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(message, err)
    assert not (tmp_path / "m.npz").exists()
    # a corpus run over images meets it at its first batch (a Swin layout, right or wrong, is refused before: corpus
    # statistics do not take stages yet): one line, and no results folder left behind
    out = tmp_path / "corpus"
    args = ["corpus", str(folder), "--images", str(tmp_path), "--out", str(out), "--no-progress"]
    assert main([*args, "--workers", "1"]) == 2
    err = capsys.readouterr().err
    corpus_message = message if config.get("model_type") else r"windowed \(Swin\) attention are not supported yet"
    assert len(err.strip().splitlines()) == 1 and re.search(corpus_message, err)
    assert not out.exists()
