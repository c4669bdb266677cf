"""The overview of an on-demand result whose Q and Kᵀ stay where onnxruntime wrote them (runtime/kept.py; on the
CPU with ATTNVIZ_QK_DEVICE=on, the code CUDA runs by default): every head of a site max-pooled beside Q and Kᵀ by
the head model's pooling twin, one request a site (not one a head, each a whole [T, T] head brought back), and every
head of a site (``array()``, a block's layer) in one request too.  The thumbnails must be the host recompute's
(RecomputeMap, pooled on the host), the kept heads' own pooled on the host (the very maxima), and transformers' maps
pooled; each request is counted where the map makes it (model.LazySession.run_kept)."""

import dataclasses

import numpy as np
import onnx
import pytest
from onnx_builders import tiny_text_model

from attnviz.core import view as vm
from attnviz.core.attention import DenseMap, TokenAxis
from attnviz.core.rows import pick_row
from attnviz.core.view.overview import downsample
from attnviz.runtime import model as rm
from attnviz.runtime.graph import headmodel
from attnviz.runtime.sitemaps import KeptMap

SAME = 1e-6  # the head model's Q·Kᵀ against numpy's (test_ondemand_kept.py); max-pooling keeps the bound
TOL = 5e-4  # against transformers' own maps (test_parity's tolerance), pooled: a max moves no more than its values


def _runs(path, feeds, monkeypatch):
    monkeypatch.delenv("ATTNVIZ_QK_DEVICE", raising=False)
    host_maps = rm.open_model(path, provider="cpu").run(feeds, mode="ondemand")
    monkeypatch.setenv("ATTNVIZ_QK_DEVICE", "on")
    kept = rm.open_model(path, provider="cpu").run(feeds, mode="ondemand")
    return host_maps, kept


def _kept_sites(result) -> int:
    return sum(isinstance(m, KeptMap) for m in result.maps)


@pytest.mark.parametrize(
    "arch",
    [
        "bert",  # a padded batch: the attention mask, the epilogue's side input, sliced per batch row
        "bart",  # encoder, causal decoder and cross-attention blocks
        "gpt2",  # causal, the mask built in the graph
        "llama",  # grouped KV heads, rotary positions
    ],
)
def test_kept_thumbnails_take_one_request_a_site_and_equal_the_host_and_transformers(
    hf_export, arch, placement, kept_requests, monkeypatch
):
    path, feeds, ref, _ = hf_export(arch, "legacy", "eager", 17)
    host_r, kept_r = _runs(path, feeds, monkeypatch)
    sites = _kept_sites(kept_r)
    assert sites > 0
    ref_r = dataclasses.replace(kept_r, maps=[DenseMap(np.asarray(w, np.float32)) for w in ref])
    for b in range(kept_r.batch_size):
        sel = vm.Selection(batch=b)
        before = len(kept_requests)
        got = vm.thumbnails(kept_r, sel)
        assert len(kept_requests) - before == sites  # one request a site and batch row, whatever its head count
        kept_maps = [m for m in kept_r.maps if isinstance(m, KeptMap)]
        # only the thumbnails come back (the pooling twins'), but where a padded row's padding is dropped first
        pad = kept_r.blocks(b)[0].query_axis.pad
        padded = pad is not None and bool(np.any(pad))
        went = {m.sess if padded else m.pool for m in kept_maps}
        assert set(kept_requests[before:]) == went and None not in went
        want = vm.thumbnails(host_r, sel)
        theirs = vm.thumbnails(ref_r, sel)
        assert got.keys() == want.keys() == theirs.keys() and len(got) > sites
        for key, g in got.items():
            assert g.dtype == np.float32 and g.shape == want[key].shape
            np.testing.assert_allclose(g, want[key], atol=SAME, rtol=0, err_msg=str(key))
            np.testing.assert_allclose(g, theirs[key], atol=TOL, rtol=0, err_msg=str(key))
        for blk in kept_r.blocks(b):
            for layer in range(blk.n_layers):
                src = kept_r.maps[blk.sites[layer]]
                if not isinstance(src, KeptMap):
                    continue
                before = len(kept_requests)
                heads = blk.layer(layer)  # a layer's every head: one request too
                assert len(kept_requests) - before == 1
                assert heads.shape == (src.shape[1], *src.shape[2:])
                for h in range(src.shape[1]):
                    # the same numbers as the head drawn alone (one request for it), pooled here
                    np.testing.assert_array_equal(heads[h], src.head(b, h))
                    if not padded:  # the thumbnail is the device's pooling of these very values
                        np.testing.assert_array_equal(
                            got[(kept_r.blocks(b).index(blk), layer, h)], downsample(heads[h])
                        )
        one = pick_row(kept_r, b)  # the row alone (a figure of it, token counts): its maps pool as the row's
        before = len(kept_requests)
        alone = vm.thumbnails(one, vm.Selection())
        assert len(kept_requests) - before == sites and set(kept_requests[before:]) == went
        assert alone.keys() == got.keys()
        for key, g in alone.items():
            np.testing.assert_array_equal(g, got[key])


def test_kept_array_is_one_request_a_site(hf_export, kept_requests, monkeypatch):
    path, feeds, ref, _ = hf_export("bart", "legacy", "eager", 17)
    host_r, kept_r = _runs(path, feeds, monkeypatch)
    for i, (k, h, want) in enumerate(zip(kept_r.maps, host_r.maps, ref)):
        if not isinstance(k, KeptMap):
            continue
        before = len(kept_requests)
        got = k.array()
        assert len(kept_requests) - before == k.shape[0]  # one a batch row
        assert got.shape == k.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, h.array(), atol=SAME, rtol=0, err_msg=f"site {i}")
        np.testing.assert_allclose(got, want.astype(np.float64), atol=TOL, err_msg=f"site {i}")


def _tiny(tmp_path, tokens=150):
    path = tiny_text_model(tmp_path / "lm.onnx", causal=True, classifier=False, heads=4, d=16)  # opset 18
    return path, {"input_ids": np.random.default_rng(0).integers(3, 12, (1, tokens))}


@pytest.mark.parametrize(
    ("site_elems", "per_site"),
    [
        (None, 1),  # every head at once
        (150 * 150 * 2, 2),  # two heads a request
        (150 * 150 * 3, 2),  # three, then one
        (150 * 45, 4 * 4),  # a head a request in row blocks of whole runs (3 rows: 45 rows a block, 4 blocks)
    ],
)
def test_kept_thumbnails_in_fewer_heads_or_row_blocks_a_request(
    tmp_path, site_elems, per_site, kept_requests, monkeypatch
):
    """When a site's every head would not fit a request (SITE_ELEMS), a few heads a request, or one head in row blocks
    of whole pooling runs; a step's first rows and keys, and sides that do not divide the tokens, as the host pools."""
    path, feeds = _tiny(tmp_path)
    host_r, kept_r = _runs(path, feeds, monkeypatch)
    if site_elems is not None:
        monkeypatch.setattr(KeptMap, "SITE_ELEMS", site_elems)
    for i, (k, h) in enumerate(zip(kept_r.maps, host_r.maps)):
        assert isinstance(k, KeptMap) and k.shape == (1, 4, 150, 150)
        heads = [k.head(0, hd) for hd in range(4)]
        for n, side in ((150, 64), (150, 7), (97, 64), (40, 64)):
            before = len(kept_requests)
            got = k.pooled(0, n, n, side)
            assert got is not None
            if (n, side) == (150, 64):
                assert len(kept_requests) - before == per_site
            want = np.stack([downsample(x[:n, :n], side) for x in heads])
            assert got.shape == want.shape and want.shape[0] == 4
            # row blocks run other MatMul shapes than the whole head's: the last float32 bits may move
            np.testing.assert_allclose(got, want, atol=0 if site_elems is None else SAME, rtol=0)
            hosts = np.stack([downsample(h.head(0, hd)[:n, :n], side) for hd in range(4)])
            np.testing.assert_allclose(got, hosts, atol=SAME, rtol=0, err_msg=f"site {i}, {n} rows, side {side}")


def test_filters_that_change_the_numbers_pool_on_the_host_from_one_request(tmp_path, kept_requests, monkeypatch):
    """Hidden special tokens (rows renormalised) and kept mass change each head before pooling: the heads come in one
    request a site and are pooled here, as the host recompute's are.  A model whose opset the pooling twin does not
    cover (below headmodel.POOL_OPSET) pools on the host too."""
    path, feeds = _tiny(tmp_path, tokens=120)
    host_r, kept_r = _runs(path, feeds, monkeypatch)
    for r in (host_r, kept_r):  # [CLS] ... [SEP]: two special tokens to hide
        r.tokens = TokenAxis([f"t{i}" for i in range(120)], [True] + [False] * 118 + [True])
    assert vm.thumbnails(host_r, vm.Selection(hide_special=True))[(0, 0, 0)].shape == (59, 59)  # 118 kept
    for sel in (vm.Selection(hide_special=True), vm.Selection(keep=0.6), vm.Selection(hide_special=True, keep=0.8)):
        before = len(kept_requests)
        got = vm.thumbnails(kept_r, sel)
        assert len(kept_requests) - before == 2  # two sites
        want = vm.thumbnails(host_r, sel)
        assert got.keys() == want.keys()
        for key in got:
            np.testing.assert_allclose(got[key], want[key], atol=SAME, rtol=0)
    monkeypatch.setattr(headmodel, "POOL_OPSET", 99)
    old_r = rm.open_model(path, provider="cpu").run(feeds, mode="ondemand")
    old_r.tokens = kept_r.tokens
    assert all(isinstance(m, KeptMap) and m.pool is None for m in old_r.maps)
    before = len(kept_requests)
    got = vm.thumbnails(old_r, vm.Selection())
    assert len(kept_requests) - before == 2
    want = vm.thumbnails(host_r, vm.Selection())
    for key in got:
        np.testing.assert_allclose(got[key], want[key], atol=SAME, rtol=0)


def test_float16_thumbnails_are_the_kept_heads_pooled(tmp_path, kept_requests, monkeypatch):
    """A float16 graph (onnxruntime's converter, float32 at its edges, as the Hub's ``_fp16`` files): the twin pools
    float16 probabilities, so its thumbnails are the kept heads' (float16 numbers shown as float32) pooled here
    exactly.  The host recompute's heads round their float16 scores elsewhere (numpy's MatMul, not onnxruntime's:
    up to 0.02 apart at 130 tokens, before this pooling too); a max moves no more than the numbers it is of."""
    float16 = pytest.importorskip("onnxruntime.transformers.float16")
    path, feeds = _tiny(tmp_path, tokens=130)
    half = tmp_path / "lm_fp16.onnx"
    onnx.save(float16.convert_float_to_float16(onnx.load(str(path)), keep_io_types=True), str(half))
    host_r, kept_r = _runs(half, feeds, monkeypatch)
    assert kept_r.info["map_dtype"] == "float16" and all(isinstance(k, KeptMap) for k in kept_r.maps)
    before = len(kept_requests)
    got = vm.thumbnails(kept_r, vm.Selection())
    assert len(kept_requests) - before == 2
    want = vm.thumbnails(host_r, vm.Selection())
    for (bi, layer, h), g in got.items():
        site = kept_r.blocks(0)[bi].sites[layer]
        mine, theirs = kept_r.maps[site].head(0, h), host_r.maps[site].head(0, h)
        np.testing.assert_array_equal(g, downsample(mine))
        assert np.abs(g - want[(bi, layer, h)]).max() <= np.abs(mine - theirs).max()
