"""A dual encoder's images and texts each run once (runtime/dual_towers.py): N images against M texts feed the graph
N images and M texts, one run, and the N·M rows are made after it as views of the towers' maps.

Checked against transformers' CLIPModel / SiglipModel on the same random-init weights (tests/hf_models.py), fed
each image and the tokenizer's padded texts once, and against attnviz's own run of the pairs as rows (each image
repeated once per text, as before): every map, score and output the same within 1e-6.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import hf_models  # noqa: E402
from test_dual_images import _reference, random_images  # noqa: E402
from test_dual_scores import ATOL, _folder  # noqa: E402

from attnviz import AttnvizError  # noqa: E402
from attnviz.cli import main  # noqa: E402
from attnviz.core.attention import DenseMap  # noqa: E402
from attnviz.core.io import load_npz  # noqa: E402
from attnviz.core.rows import RowsOf, pick_row  # noqa: E402
from attnviz.core.text_scores import TextScores  # noqa: E402
from attnviz.runtime import dual_towers, open_model  # noqa: E402
from attnviz.runtime.model import AttentionModel  # noqa: E402

TEXTS = ["the cat sat on mat", "a dog ran", "blue"]


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    paths, px = random_images(tmp_path_factory.mktemp("imgs"), 2, 20, "im")
    return [str(p) for p in paths], px


@pytest.fixture
def runs(monkeypatch):
    """Each run's fed batch per input (``AttentionModel.run`` watched)."""
    seen: list[dict] = []
    real = AttentionModel.run

    def run(self, feeds, mode="auto"):
        seen.append({k: np.shape(v)[0] for k, v in feeds.items()})
        return real(self, feeds, mode)

    monkeypatch.setattr(AttentionModel, "run", run)
    return seen


@pytest.mark.parametrize("arch", ["clip", "siglip"])
def test_each_image_and_each_text_runs_once(tmp_path, images, runs, arch):
    paths, px = images
    model = open_model(_folder(tmp_path, arch), provider="cpu")
    res = model.analyze(image=paths, text=TEXTS)
    # one run: the image tower on 2 images, the text tower on 3 texts (not 6 of each)
    assert runs == [{"pixel_values": 2, "input_ids": 3, "attention_mask": 3}]
    # each tower's maps held once: the images' 2 rows and the texts' 3, every pair's row a view of them (until
    # a reader takes a map whole)
    for site, m in zip(res.sites, res.maps):
        assert isinstance(m, DenseMap) and m.held.shape[0] == (2 if site.tower == "image" else 3)
        assert np.shares_memory(m.head(4, 1), m.held)
    o = _reference(arch, TEXTS, px)
    z = o.logits_per_image.double()
    want = (torch.softmax(z, -1) if arch == "clip" else torch.sigmoid(z)).numpy()
    scores = TextScores.from_info(res.info)
    assert scores is not None and res.batch_size == 6
    np.testing.assert_allclose(np.array(scores.table()), want, atol=1e-5)
    refs = {"image": o.vision_model_output.attentions, "text": o.text_model_output.attentions}
    seen = {"image": 0, "text": 0}
    for site, m in zip(res.sites, res.maps):
        if site.kind == "pooling":  # (SigLIP's head: transformers returns none; its rows below)
            continue
        ref = refs[site.tower][seen[site.tower]].numpy()
        seen[site.tower] += 1
        for r in range(6):  # row r: image r // 3, text r % 3
            k = r // 3 if site.tower == "image" else r % 3
            np.testing.assert_allclose(m.head(r, 0), ref[k, 0], atol=ATOL)
            np.testing.assert_allclose(m.array()[r], ref[k], atol=ATOL)
    assert seen == {"image": len(refs["image"]), "text": len(refs["text"])}


@pytest.mark.parametrize("arch", ["clip", "siglip"])
def test_the_same_bytes_as_the_pairs_run_as_rows(tmp_path, images, monkeypatch, runs, arch):
    """A graph that will not take the two batches apart runs the pairs as rows (each image repeated per text, as
    before this change): every map, score and output is what the towers run apart give, within 1e-6.  (Often to
    the byte; not always: onnxruntime's matrix products sum in an order that may follow the batch's rows, so SigLIP's
    pooling head and logits over one image and 3 texts came out 1 ulp apart, 7e-9 and 1.5e-7.)"""
    paths, _ = images
    model = open_model(_folder(tmp_path, arch), provider="cpu")
    for image, texts in ((paths, TEXTS), (paths[:1], TEXTS), (paths, TEXTS[:1])):
        apart = model.analyze(image=image, text=texts)
        with monkeypatch.context() as m:
            m.setattr(dual_towers, "fed_apart", lambda model: False)
            rows = model.analyze(image=image, text=texts)
        n = len(image) * len(texts)
        assert runs[-2:] == [
            {"pixel_values": len(image), "input_ids": len(texts), "attention_mask": len(texts)},
            {"pixel_values": n, "input_ids": n, "attention_mask": n},
        ]
        assert apart.batch_size == rows.batch_size == n
        for a, b in zip(apart.maps, rows.maps):
            assert a.shape == b.shape
            np.testing.assert_allclose(a.array(), b.array(), rtol=0, atol=1e-6)
        got, want = apart.info["text_scores"], rows.info["text_scores"]
        assert {k: v for k, v in got.items() if k != "scores"} == {k: v for k, v in want.items() if k != "scores"}
        np.testing.assert_allclose(got["scores"], want["scores"], rtol=0, atol=1e-6)
        assert apart.outputs.keys() == rows.outputs.keys()
        for k in apart.outputs:
            assert apart.outputs[k].shape == rows.outputs[k].shape
            np.testing.assert_allclose(apart.outputs[k], rows.outputs[k], rtol=0, atol=1e-6)
        assert [pick_row(apart, r).tokens for r in range(n)] == [pick_row(rows, r).tokens for r in range(n)]


def test_a_graph_that_refuses_the_two_batches_runs_the_rows(tmp_path, images, monkeypatch, runs):
    """A graph that ties the towers' batches (its run fails with an image batch unlike the text batch) is run
    again with the pairs as rows: the result is the rows' run's, said as any other."""
    paths, px = images
    real = AttentionModel.run

    def tied(self, feeds, mode="auto"):
        if feeds["pixel_values"].shape[0] != feeds["input_ids"].shape[0]:
            raise AttnvizError("the graph's batch axes are one")
        return real(self, feeds, mode)

    monkeypatch.setattr(AttentionModel, "run", tied)
    res = open_model(_folder(tmp_path, "clip"), provider="cpu").analyze(image=paths, text=TEXTS)
    # (the watch runs inside the tie: the towers' run was refused before it, the rows' run got through)
    assert runs == [{"pixel_values": 6, "input_ids": 6, "attention_mask": 6}]
    o = _reference("clip", TEXTS, px)
    scores = TextScores.from_info(res.info)
    assert scores is not None
    np.testing.assert_allclose(np.array(scores.table()), torch.softmax(o.logits_per_image.double(), -1), atol=1e-5)
    text = [m for s, m in zip(res.sites, res.maps) if s.tower == "text"]
    for got, ref in zip(text, o.text_model_output.attentions):
        np.testing.assert_allclose(got.array()[4], ref.numpy()[1], atol=ATOL)  # row 4: image 1, text 1


def test_extract_writes_each_tower_once_and_reads_back_every_row(tmp_path, images):
    """The .npz holds each tower's maps once and each row's index into them (attn_NNN_rows), read back as the
    same rows."""
    paths, _ = images
    folder = _folder(tmp_path, "siglip")
    out = tmp_path / "m.npz"
    argv = ["extract", str(folder), "--out", str(out)]
    for p in paths:
        argv += ["--image", p]
    for t in TEXTS:
        argv += ["--text", t]
    assert main(argv) == 0
    got = load_npz(out)
    res = open_model(folder, provider="cpu").analyze(image=paths, text=TEXTS)
    with np.load(out) as z:
        for i, site in enumerate(res.sites):
            assert z[f"attn_{i:03d}"].shape[0] == (2 if site.tower == "image" else 3)
            assert z[f"attn_{i:03d}_rows"].tolist() == (
                [0, 0, 0, 1, 1, 1] if site.tower == "image" else [0, 1, 2, 0, 1, 2]
            )
    for a, b in zip(got.maps, res.maps):
        assert a.array().tobytes() == b.array().tobytes()


def test_dense_rows_are_views_until_taken_whole():
    """``DenseMap(held, rows)``: row b's heads are views of held row rows[b]; the whole array is held[rows],
    taken when first asked; rows naming every row once in order are the array as held."""
    held = np.random.default_rng(0).random((3, 2, 4, 5), dtype=np.float32)
    rows = [2, 0, 2, 1]
    m = DenseMap(held, rows)
    assert m.shape == (4, 2, 4, 5) and m.nbytes == held.nbytes
    for b, r in enumerate(rows):
        assert np.shares_memory(m.head(b, 1), held) and np.array_equal(m.head(b, 1), held[r, 1])
    whole = m.array()
    assert np.array_equal(whole, np.stack([held[r] for r in rows])) and not whole.flags.writeable
    assert m.array() is whole
    same = DenseMap(held, [0, 1, 2])
    assert same.rows is None and same.array() is held


def test_rows_of_an_on_demand_map_asks_its_rows():
    """A map that is no dense array (an on-demand one) shown by rows: each row's heads asked of its source row."""
    held = np.random.default_rng(1).random((2, 3, 4, 4), dtype=np.float32)
    asked = []

    class OnDemand:
        shape = held.shape

        def head(self, b, h):
            asked.append((b, h))
            return held[b, h]

        def array(self):
            raise AssertionError("asked for every row")

    m = RowsOf(OnDemand(), [1, 1, 0])
    assert m.shape == (3, 3, 4, 4)
    assert np.array_equal(m.head(0, 2), held[1, 2]) and asked == [(1, 2)]
    assert np.array_equal(m.array(), held[[1, 1, 0]])


def test_on_demand_maps_follow_the_rows(tmp_path, images):
    """``--memory ondemand``: each tower's maps recomputed from its own run (its own batch), every pair's row asked
    of its image's or text's row, the same as the dense run's."""
    paths, _ = images
    model = open_model(_folder(tmp_path, "clip"), provider="cpu")
    dense = model.analyze(image=paths, text=TEXTS, mode="dense")
    lazy = model.analyze(image=paths, text=TEXTS, mode="ondemand")
    assert lazy.info["mode"] == "ondemand" and all(isinstance(m, RowsOf) for m in lazy.maps)
    row = pick_row(lazy, 5)  # image 1, text 2: one row's heads asked of its tower's row
    for i, (a, b) in enumerate(zip(dense.maps, lazy.maps)):
        assert a.shape == b.shape
        np.testing.assert_allclose(b.array(), a.array(), rtol=0, atol=1e-6)
        np.testing.assert_allclose(row.maps[i].array()[0], a.array()[5], rtol=0, atol=1e-6)


@pytest.mark.parametrize("arch", hf_models.DUALS)
def test_export_hf_runs_the_towers_apart(tmp_path, capsys, images, monkeypatch, runs, arch):
    """``attnviz export-hf``'s dual encoders (an output axis of images by texts) take the two batches too: one run
    of 2 images and 3 texts, every map and score within 1e-6 of the pairs run as rows."""
    paths, _ = images
    src = hf_models.save_hf_folder(arch, tmp_path / "hf")
    assert main(["export-hf", str(src), "--out", str(tmp_path / "onnx")]) == 0
    capsys.readouterr()
    runs.clear()  # (the export's own parity check ran it)
    model = open_model(tmp_path / "onnx" / "model.onnx", provider="cpu")
    apart = model.analyze(image=paths, text=TEXTS)
    assert [(r["pixel_values"], r["input_ids"]) for r in runs] == [(2, 3)]
    monkeypatch.setattr(dual_towers, "fed_apart", lambda model: False)
    rows = model.analyze(image=paths, text=TEXTS)
    assert [(r["pixel_values"], r["input_ids"]) for r in runs[1:]] == [(6, 6)]
    for a, b in zip(apart.maps, rows.maps):
        np.testing.assert_allclose(a.array(), b.array(), rtol=0, atol=1e-6)
    got, want = TextScores.from_info(apart.info), TextScores.from_info(rows.info)
    assert got is not None and want is not None and got.rule == want.rule
    np.testing.assert_allclose(got.scores, want.scores, rtol=0, atol=1e-6)
