"""``--beams K`` on a vision-language model through the decoder's KV cache (``VLMCache.reorder``), against
transformers' ``LlavaForConditionalGeneration.generate(num_beams=K)`` on the same image and prompt: the same
hypotheses, order and scores; every hypothesis' decoder maps are transformers' attentions of each step gathered
through ``beam_indices`` (the image's rows and columns included), its vision maps the tower's one run; and the
search took the cache (the prompt and image run once, then one batch-K step a token), not K re-runs a step.
Qwen2-VL (M-RoPE [3, K, 1] steps after the rope delta) and PaliGemma (positions from 1, suffix token types) too.
The tower's maps of the one image are held once, every beam's row a read-only view of them."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import vlm_models as vm  # noqa: E402
from PIL import Image  # noqa: E402
from test_beams import TOL, _hf_beams, _hf_hypotheses, _rows_through_beam_indices  # noqa: E402

from attnviz.runtime import builders as bd  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402
from attnviz.runtime.request import AnalyzeRequest  # noqa: E402
from attnviz.runtime.vlm import VLMCache  # noqa: E402

PROMPT = "<s> <image> a photo of the cat"


def _tower_held_once(r, k: int) -> None:
    """The tower's maps (one image every beam shares): one row held, each of the K rows a read-only view of it."""
    from attnviz.core.attention import DenseMap

    tower = [m for m, s in zip(r.maps, r.sites) if s.stack == "encoder"]
    assert tower
    for m in tower:
        assert isinstance(m, DenseMap) and m.rows == [0] * k and m.nbytes * k == m.array().size * 4
        assert all(np.shares_memory(m.array()[j], m.held) for j in range(k)) and not m.array().flags.writeable


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    p = tmp_path_factory.mktemp("img") / "photo.png"
    Image.fromarray((np.random.default_rng(3).random((48, 40, 3)) * 255).astype(np.uint8)).save(p)
    return p


@pytest.mark.parametrize("repo", ["llava_repo", "llava_with_past_repo"])
def test_llava_beams_through_the_cache_equal_transformers(request, repo, image, monkeypatch):
    """Both Hub forms of the decoder (optimum's If-merged file, whose use_cache_branch the batch-K steps switch
    on; a with-past file alone).  An EOS one beam meets early (set on both sides) exercises the finishing rule."""
    root = request.getfixturevalue(repo)
    hf = vm.build()
    m = open_model(root, provider="cpu")
    prep = bd.prepare(m, AnalyzeRequest(text=PROMPT, image=str(image)))
    ids = torch.as_tensor(np.asarray(prep.prompts, np.int64))
    pixels = prep.feeds["pixel_values"]
    k, n, eos = 3, 6, 31
    o = _hf_beams(
        hf, k, n, input_ids=ids, pixel_values=torch.as_tensor(pixels), attention_mask=torch.ones_like(ids),
        eos_token_id=eos, pad_token_id=0,
    )  # fmt: skip
    want = _hf_hypotheses(o, ids.shape[1])
    assert any(h[-1] == eos and len(h) < n for h in want)  # a hypothesis finished early: padded rows are checked
    assert len({tuple(h) for h in want}) == k
    m.meta.setdefault("special", {})["eos"] = eos
    reordered = []
    reorder = VLMCache.reorder
    monkeypatch.setattr(VLMCache, "reorder", lambda self, rows: reordered.append(list(rows)) or reorder(self, rows))
    r = m.analyze(text=PROMPT, image=str(image), generate=n, beams=k)
    assert r.info["generation"] == "kv-cache" and r.batch_size == k
    assert len(reordered) == r.info["beam_steps"] - 1  # every step after the prompt's: the cache taken by parents
    assert [b["ids"] for b in r.info["beams"]] == want
    np.testing.assert_allclose([b["score"] for b in r.info["beams"]], o.sequences_scores.numpy(), atol=1e-5)
    _tower_held_once(r, k)
    vision, _, _ = vm.reference(hf, pixels, ids.numpy())
    n_vis = len(r.maps) - vm.LAYERS  # the tower's layers up to the one whose states the projector takes
    assert n_vis >= 1
    for j, bi in enumerate(o.beam_indices):
        for layer in range(n_vis):
            np.testing.assert_allclose(r.maps[layer].array()[j], vision[layer][0], atol=TOL)
        for layer in range(vm.LAYERS):
            w = _rows_through_beam_indices(o.attentions, layer, bi, ids.shape[1])
            got = r.maps[n_vis + layer].array()[j]
            np.testing.assert_allclose(got[:, : w.shape[1], : w.shape[2]], w, atol=TOL, err_msg=f"beam {j}")
            assert not got[:, w.shape[1] :].any()  # a shorter hypothesis' rows past its end: padding


@pytest.fixture(scope="module")
def qwen_hf():
    """The tiny Qwen2-VL in transformers with its cache on (built once: both Qwen2-VL tests search with it)."""
    import qwen2vl_models as qm

    hf = qm.build()
    hf.config.use_cache = True
    return hf


def test_qwen2vl_beams_through_the_cache_continue_each_rows_mrope_positions(
    qwen2vl_repo, qwen_hf, tmp_path, monkeypatch
):
    """Qwen2-VL: the batch-K steps' positions are [3, K, 1], each beam's count plus the rope delta its cache row
    came with (taken by the parents with the cache); transformers' own cached beam search (its rope_deltas path)
    gives the same hypotheses, scores and gathered decoder attentions."""
    import qwen2vl_models as qm

    path = tmp_path / "q.png"
    Image.fromarray((np.random.default_rng(3).random((45, 70, 3)) * 255).astype(np.uint8)).save(path)
    prompt = "<|vision_start|><|image_pad|><|vision_end|>describe the cat"
    m = open_model(qwen2vl_repo, provider="cpu")
    hf = qwen_hf
    hf.model.rope_deltas = None  # another search's deltas would shift this one's positions
    p = qm.image_processor()(images=Image.open(path).convert("RGB"), return_tensors="np")
    ids = torch.as_tensor(bd.prepare(m, AnalyzeRequest(text=prompt, image=str(path))).prompts)
    k, n, eos = 3, 6, 45
    o = _hf_beams(
        hf, k, n, input_ids=ids, pixel_values=torch.as_tensor(p["pixel_values"]),
        image_grid_thw=torch.as_tensor(p["image_grid_thw"]), mm_token_type_ids=qm.image_types(ids),
        attention_mask=torch.ones_like(ids), use_cache=True, eos_token_id=eos, pad_token_id=0,
    )  # fmt: skip
    want = _hf_hypotheses(o, ids.shape[1])
    assert any(h[-1] == eos and len(h) < n for h in want) and len({tuple(h) for h in want}) == k
    m.meta.setdefault("special", {})["eos"] = eos
    reordered = []
    reorder = VLMCache.reorder
    monkeypatch.setattr(VLMCache, "reorder", lambda self, rows: reordered.append(list(rows)) or reorder(self, rows))
    r = m.analyze(text=prompt, image=str(path), generate=n, beams=k)
    assert r.info["generation"] == "kv-cache" and len(reordered) == r.info["beam_steps"] - 1
    _tower_held_once(r, k)
    assert [b["ids"] for b in r.info["beams"]] == want
    np.testing.assert_allclose([b["score"] for b in r.info["beams"]], o.sequences_scores.numpy(), atol=1e-5)
    dec = r.maps[len(r.maps) - len(o.attentions[0]) :]
    for j, bi in enumerate(o.beam_indices):
        for layer, got in enumerate(dec):
            w = _rows_through_beam_indices(o.attentions, layer, bi, ids.shape[1])
            a = got.array()[j]
            np.testing.assert_allclose(a[:, : w.shape[1], : w.shape[2]], w, atol=TOL, err_msg=f"beam {j}")
            assert not a[:, w.shape[1] :].any()


def test_paligemma_beams_through_the_cache_count_positions_from_one_and_type_tokens_suffix(paligemma_repo, image):
    """PaliGemma: each batch-K step's positions counted from 1 and its tokens typed suffix (token_type_ids [K, 1]),
    against transformers' beam search on the processor's inputs."""
    import paligemma_models as pm

    prompt = "<image>a photo of the cat"
    hf = pm.build()
    inputs = pm.processor(paligemma_repo)(text=prompt, images=Image.open(image).convert("RGB"), return_tensors="pt")
    k, n = 3, 5
    o = _hf_beams(hf, k, n, **inputs, eos_token_id=None, pad_token_id=0)
    t = inputs["input_ids"].shape[1]
    want = _hf_hypotheses(o, t)
    assert len({tuple(h) for h in want}) == k
    m = open_model(paligemma_repo, provider="cpu")
    m.meta.setdefault("special", {}).pop("eos", None)
    r = m.analyze(text=prompt, image=str(image), generate=n, beams=k)
    assert r.info["generation"] == "kv-cache"
    _tower_held_once(r, k)
    assert [b["ids"] for b in r.info["beams"]] == want
    np.testing.assert_allclose([b["score"] for b in r.info["beams"]], o.sequences_scores.numpy(), atol=1e-5)
    dec = r.maps[len(r.maps) - len(o.attentions[0]) :]
    for j, bi in enumerate(o.beam_indices):
        for layer, got in enumerate(dec):
            w = _rows_through_beam_indices(o.attentions, layer, bi, t)
            np.testing.assert_allclose(got.array()[j], w, atol=TOL, err_msg=f"beam {j}")


def test_qwen2vl_two_images_of_two_sizes_beams_share_the_towers_frames(qwen2vl_repo, qwen_hf, tmp_path):
    """Two images of their own sizes (the tower's maps frames of 48 and 60 patches, a run each): the beams equal
    transformers', every beam's decoder maps transformers' gathered through beam_indices, and the tower's frames
    one set every beam row shows (it refused them, as Idefics3's tiles, before)."""
    import qwen2vl_models as qm
    import vlm_build as vb

    from attnviz.core.frames import FramesMap

    two = [vb.random_image(tmp_path / "a.png", 45, 70, 3), vb.random_image(tmp_path / "b.png", 60, 100, 5)]
    prompt = "<|vision_start|><|image_pad|><|vision_end|>dog<|vision_start|><|image_pad|><|vision_end|>where the cat"
    hf = qwen_hf
    hf.model.rope_deltas = None  # another search's deltas would shift this one's positions
    p = qm.image_processor()(images=[Image.open(x).convert("RGB") for x in two], return_tensors="np")
    assert p["image_grid_thw"].tolist() == [[1, 6, 8], [1, 6, 10]]
    m = open_model(qwen2vl_repo, provider="cpu")
    ids = torch.as_tensor(bd.prepare(m, AnalyzeRequest(text=prompt, image=two)).prompts)
    k, n = 3, 4
    o = _hf_beams(
        hf, k, n, input_ids=ids, pixel_values=torch.as_tensor(p["pixel_values"]),
        image_grid_thw=torch.as_tensor(p["image_grid_thw"]), mm_token_type_ids=qm.image_types(ids),
        attention_mask=torch.ones_like(ids), use_cache=True, eos_token_id=None, pad_token_id=0,
    )  # fmt: skip
    want = _hf_hypotheses(o, ids.shape[1])
    assert len({tuple(h) for h in want}) == k
    m.meta.setdefault("special", {}).pop("eos", None)
    r = m.analyze(text=prompt, image=two, generate=n, beams=k)
    assert r.info["generation"] == "kv-cache" and [b["ids"] for b in r.info["beams"]] == want
    np.testing.assert_allclose([b["score"] for b in r.info["beams"]], o.sequences_scores.numpy(), atol=1e-5)
    seen = qm.record_vision_attention(hf, p["pixel_values"], p["image_grid_thw"])
    dec = r.maps[len(r.maps) - len(o.attentions[0]) :]
    tower = r.maps[: len(r.maps) - len(dec)]
    for layer, fm in enumerate(tower):
        assert isinstance(fm, FramesMap) and fm.sizes == [48, 60] and fm.rows == [0] * k
        for j in range(k):
            for f, got in enumerate(fm.frames(j)):
                assert np.shares_memory(got, fm.blocks)
                np.testing.assert_allclose(got, seen[2 * layer + f][0], atol=TOL)
    for j, bi in enumerate(o.beam_indices):
        for layer, got in enumerate(dec):
            w = _rows_through_beam_indices(o.attentions, layer, bi, ids.shape[1])
            np.testing.assert_allclose(got.array()[j], w, atol=TOL, err_msg=f"beam {j}")
