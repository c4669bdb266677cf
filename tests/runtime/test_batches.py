"""Padded batches: every family keeps every row, and each row equals transformers' eager attention.

Models are exported with a dynamic batch axis on every input (tests/hf_models.py's builders, random init);
row 1 is padded (attention_mask 0 on its last two positions) so padded keys must get zero weight, as in
transformers.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import hf_models  # noqa: E402

from attnviz import AttnvizError  # noqa: E402
from attnviz.cli import main  # noqa: E402
from attnviz.core.rows import pick_row  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402

FAMILIES = ["bert", "gpt2", "llama", "bart", "t5", "vit", "vision-decoder"]


def padded_batch(kw: dict) -> dict:
    """The builder's example inputs as a batch of 2 whose second row is padded."""
    kw = dict(kw)
    if "input_ids" in kw:
        ids = hf_models._ids(2, kw["input_ids"].shape[1], 99, 5)
        mask = torch.ones_like(ids)
        mask[1, -2:] = 0
        kw["input_ids"], kw["attention_mask"] = ids, mask
    if "pixel_values" in kw:
        kw["pixel_values"] = torch.randn(2, *kw["pixel_values"].shape[1:], generator=torch.Generator().manual_seed(1))
    if "decoder_input_ids" in kw:
        kw["decoder_input_ids"] = hf_models._ids(2, kw["decoder_input_ids"].shape[1], 99, 3)
    return kw


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("batches")
    cache = {}

    def get(arch):
        if arch not in cache:
            m, kw, out, _, _ = hf_models.build(arch)
            names = list(kw)
            path = folder / f"{arch}.onnx"
            dyn = {n: ({0: "batch", 1: f"seq_{n}"} if kw[n].ndim == 2 else {0: "batch"}) for n in names}
            torch.onnx.export(
                hf_models.Wrap(m, names, out).eval(),
                tuple(kw[n] for n in names),
                str(path),
                input_names=names,
                output_names=[out],
                opset_version=17,
                dynamic_axes=dyn,
                dynamo=False,
            )
            kw2 = padded_batch(kw)
            with torch.no_grad():
                o = m(**kw2, output_attentions=True)
            if arch in ("bart", "t5", "vision-decoder"):
                ref, labels = hf_models._canon(o.encoder_attentions, o.decoder_attentions, o.cross_attentions)
            elif arch in ("gpt2", "llama"):
                ref, labels = hf_models._canon(dec_self=o.attentions)
            else:
                ref, labels = hf_models._canon(enc=o.attentions)
            cache[arch] = path, {n: kw2[n].numpy() for n in names}, ref, labels
        return cache[arch]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("arch", FAMILIES)
def test_padded_batch_of_two_matches_transformers(exported, arch):
    path, feeds, ref, labels = exported(arch)
    r = open_model(path, provider="cpu").analyze(feeds=feeds)
    assert [(s.stack, s.kind, s.layer) for s in r.sites] == labels
    assert r.batch_size == 2 and r.info["batch"] == 2
    for got, want, s in zip(r.maps, ref, r.sites):
        a = got.array()
        assert a.shape == want.shape, (s, a.shape, want.shape)
        np.testing.assert_allclose(a, want, atol=5e-4, err_msg=str(s))
    mask = feeds.get("attention_mask")
    if mask is not None:  # keys padded away in row 1 get no weight in every site that reads them
        for got, s in zip(r.maps, r.sites):
            if got.shape[-1] == mask.shape[1] and (
                s.stack == "encoder" or s.kind == "cross" or arch in ("gpt2", "llama")
            ):
                assert np.abs(got.array()[1][..., mask[1] == 0]).max() < 1e-6


def test_padded_positions_are_special_per_row(exported):
    path, feeds, _, _ = exported("bert")
    r = open_model(path, provider="cpu").analyze(feeds=feeds)
    row0, row1 = r.blocks(0)[0], r.blocks(1)[0]
    assert row0.key_axis.labels == [str(int(i)) for i in feeds["input_ids"][0]]
    assert row1.key_axis.labels == [str(int(i)) for i in feeds["input_ids"][1]]
    assert row1.key_axis.special[-2:] == [True, True] and not any(row1.key_axis.special[:-2])
    one = pick_row(r, 1)
    assert one.batch_size == 1 and one.tokens.labels == row1.key_axis.labels
    np.testing.assert_array_equal(one.maps[0].array()[0], r.maps[0].array()[1])
    with pytest.raises(IndexError):
        pick_row(r, 2)


def test_decoder_only_batch_keeps_both_rows_and_refuses_batched_generation(exported):
    path, feeds, ref, _ = exported("gpt2")
    m = open_model(path, provider="cpu")
    r = m.analyze(feeds=feeds)
    assert r.batch_size == 2 and r.blocks(1)[0].query_axis.special[-2:] == [True, True]
    with pytest.raises(AttnvizError, match="batch of 2 rows"):
        m.analyze(feeds=feeds, generate=2)


def test_extract_and_figure_pick_a_batch_row(exported, tmp_path, capsys):
    path, feeds, ref, _ = exported("bart")
    npz = tmp_path / "feeds.npz"
    np.savez(npz, **feeds)
    out = tmp_path / "maps.npz"
    assert main(["extract", str(path), "--inputs", str(npz), "--out", str(out)]) == 0
    z = np.load(out)
    np.testing.assert_allclose(z["attn_003"], ref[3], atol=5e-4)  # decoder cross L0, both rows
    fig = tmp_path / "row1.png"
    assert (
        main(
            [
                "figure",
                "--maps",
                str(out),
                "--block",
                "decoder cross",
                "--layer",
                "0",
                "--head",
                "2",
                "--batch-index",
                "1",
                "--out",
                str(fig),
                "--dpi",
                "50",
            ]
        )
        == 0
    )
    assert fig.stat().st_size > 0
    assert main(["figure", "--maps", str(out), "--batch-index", "5", "--out", str(tmp_path / "x.png")]) == 2
    assert "--batch-index 5" in capsys.readouterr().err


def _feeds_padded_on(feeds: dict, side: str) -> dict:
    """The batch's feeds with row 1's two pads on ``side`` (the mask is the truth the views must follow)."""
    feeds = dict(feeds)
    mask = np.ones_like(feeds["attention_mask"])
    if side == "right":
        mask[1, -2:] = 0
    else:
        mask[1, :2] = 0
    feeds["attention_mask"] = mask
    return feeds


def _offered(r, b: int) -> dict:
    """What each view offers for batch row ``b``: the heatmap's rows and columns, token links' and the overview's."""
    from attnviz.core import view as v

    sel = v.Selection(batch=b)
    mv = v.compute_map(r, sel)
    return {
        "thumb": v.thumbnails(r, sel, max_side=64, use_cache=False)[(0, 0, 0)].shape,
        "map_rows": mv.q_pos.tolist(),
        "map_cols": mv.k_pos.tolist(),
        "links": len(v.links_view(r, sel).q_labels),
        "hidden_cols": v.compute_map(r, sel.with_(hide_special=True)).k_pos.tolist(),
    }


@pytest.mark.parametrize("side", ["right", "left"])
def test_a_padded_row_offers_only_its_own_tokens(exported, side, tmp_path):
    """A decoder-only padded batch: each row's real tokens are its attention mask's 1s; the heatmap's, token links'
    and the overview's rows and columns are exactly those (no pad as a query, label or key), row by row,
    for a row taken out (its figure) and after the .npz round trip; an older file without the record still loads
    and offers every position, as before."""
    from attnviz.core import io

    path, feeds, _, _ = exported("gpt2")
    feeds = _feeds_padded_on(feeds, side)
    r = open_model(path, provider="cpu").analyze(feeds=feeds)
    n = feeds["attention_mask"].shape[1]
    for b in range(2):
        real = np.flatnonzero(feeds["attention_mask"][b]).tolist()
        assert r.blocks(b)[0].query_axis.real == real
        got = _offered(r, b)
        assert got["map_rows"] == got["map_cols"] == real
        assert got["links"] == len(real) and got["thumb"] == (len(real), len(real))
        assert got["hidden_cols"] == real  # hiding special tokens: pads are gone either way (no other special here)
        assert _offered(pick_row(r, b), 0) == got
    io.save_npz(r, tmp_path / "padded.npz")
    back = io.load_npz(tmp_path / "padded.npz")
    assert [_offered(back, b) for b in range(2)] == [_offered(r, b) for b in range(2)]
    # a file from before the padding was recorded: no pad entries, no "pad" in the rows' record
    with np.load(tmp_path / "padded.npz") as z:
        old = {k: z[k] for k in z.files if not k.endswith("_pad")}
    info = __import__("json").loads(str(old["info"]))
    for row in info["rows"]:
        for ax in row.values():
            if ax:
                ax.pop("pad", None)
    old["info"] = np.array(__import__("json").dumps(info))
    np.savez(tmp_path / "old.npz", **old)
    before = io.load_npz(tmp_path / "old.npz")
    assert all(before.blocks(b)[0].query_axis.pad is None for b in range(2))
    assert _offered(before, 1)["map_rows"] == list(range(n))  # unpadded as far as it knows: every position
