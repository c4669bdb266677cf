"""``--beams K`` on Idefics3 / SmolVLM (an image split into tiles, the vision tower's maps per tile), against
transformers' ``Idefics3ForConditionalGeneration.generate(num_beams=K)`` on the processor's inputs: the same
hypotheses, order and scores, through the cache and by re-running; each hypothesis' decoder maps transformers' eager
attention of a teacher-forced run of its own ids (a shorter one's rows past its end padding); the tower's tile maps
transformers' per tile, held once for all K rows (the image every beam shares), in memory and in the .npz."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import idefics3_models as im  # noqa: E402
from PIL import Image  # noqa: E402
from test_beams import TOL, _hf_beams, _hf_hypotheses  # noqa: E402

from attnviz.core import io  # noqa: E402
from attnviz.core.frames import FramesMap  # noqa: E402
from attnviz.core.rows import pick_row  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402
from attnviz.runtime.beams import BeamSearch  # noqa: E402
from attnviz.runtime.vlm import VLMCache  # noqa: E402

PROMPT = "<s> <image> a photo of the cat"
K, STEPS = 3, 6
# EOS 20 ends two of transformers' three hypotheses early (after 5 and 2 tokens); on the way a running beam takes
# the tiny model's <image> token, which the re-run embeds as a word (only the prompt's image tokens take the
# image's features), as the cached steps do: it was refused as one image token more than the features (the re-run
# ran with EOS 53 until session 23)
EOS = 20


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    p = tmp_path_factory.mktemp("img") / "wide.png"  # 1 x 2 tiles and the global image: 3 tower runs
    Image.fromarray((np.random.default_rng(3).random((40, 100, 3)) * 255).astype(np.uint8)).save(p)
    return p


@pytest.fixture(scope="module")
def hf():
    m = im.build()
    m.config.use_cache = True  # transformers' cached beam search (its steps: one token a beam)
    return m


def reference(hf, repo, image, eos: int):
    """transformers' beam search and, per hypothesis, its teacher-forced eager maps."""
    enc = im.processor(repo)(text=[PROMPT], images=[[Image.open(image).convert("RGB")]], return_tensors="np")
    pt = {k: torch.as_tensor(v) for k, v in enc.items()}
    o = _hf_beams(hf, K, STEPS, **pt, eos_token_id=eos, pad_token_id=0, use_cache=True)
    n = enc["input_ids"].shape[1]
    hyps = _hf_hypotheses(o, n)
    teacher = []
    for h in hyps:  # the prompt and the hypothesis but its last token (never fed back)
        ids = np.concatenate([enc["input_ids"], np.asarray([h[:-1]], np.int64)], axis=1)
        full = dict(enc, input_ids=ids, attention_mask=np.ones_like(ids))
        vision, decoder, _ = im.reference(hf, full)
        teacher.append(decoder)
    return hyps, o.sequences_scores.numpy(), vision, teacher


@pytest.mark.parametrize("use_cache", [True, False])
def test_idefics3_beams_equal_transformers_and_share_the_towers_tile_maps(
    idefics3_repo, image, hf, use_cache, monkeypatch
):
    eos = EOS
    hyps, scores, vision, teacher = reference(hf, idefics3_repo, image, eos)
    assert len({tuple(h) for h in hyps}) == K
    assert any(h[-1] == eos and len(h) < STEPS for h in hyps)  # a shorter hypothesis: padded rows checked
    m = open_model(idefics3_repo, provider="cpu")
    m.meta.setdefault("special", {})["eos"] = eos
    reordered = []
    reorder = VLMCache.reorder
    monkeypatch.setattr(VLMCache, "reorder", lambda self, rows: reordered.append(list(rows)) or reorder(self, rows))
    running = []  # every step's running beams' ids
    advance = BeamSearch.advance
    monkeypatch.setattr(BeamSearch, "advance", lambda self, x: advance(self, x) or running.extend(self.ids))
    r = m.analyze(text=PROMPT, image=str(image), generate=STEPS, beams=K, use_cache=use_cache)
    assert any(im.IMAGE_TOKEN in ids[:-1] for ids in running)  # a beam ran on after taking <image>
    assert r.info["generation"] == ("kv-cache" if use_cache else "full re-run") and r.batch_size == K
    assert len(reordered) == (r.info["beam_steps"] - 1 if use_cache else 0)  # the cache taken by the beams' parents
    assert [b["ids"] for b in r.info["beams"]] == hyps
    np.testing.assert_allclose([b["score"] for b in r.info["beams"]], scores, atol=1e-5)
    tower = [i for i, s in enumerate(r.sites) if s.stack == "encoder"]
    assert len(tower) == im.LAYERS and len(vision[0]) == 3  # 2 tiles + the global image, a tower run each
    for layer, i in enumerate(tower):
        fm = r.maps[i]
        assert isinstance(fm, FramesMap) and fm.shape[0] == K
        # one set: the one image's 3 frames' maps, every row a view of them (not K copies)
        assert fm.blocks.shape[0] == 3 and fm.nbytes == vision[layer].nbytes and fm.rows == [0] * K
        for j in range(K):
            assert np.shares_memory(fm.frames(j), fm.blocks)
            np.testing.assert_allclose(fm.frames(j), vision[layer], atol=TOL)
    dec = [i for i, s in enumerate(r.sites) if s.stack == "decoder"]
    for j, want in enumerate(teacher):
        for layer, i in enumerate(dec):
            got, w = r.maps[i].array()[j], want[layer][0]
            np.testing.assert_allclose(got[:, : w.shape[1], : w.shape[2]], w, atol=TOL, err_msg=f"beam {j}")
            assert not got[:, w.shape[1] :].any() and not got[:, :, w.shape[2] :].any()  # a shorter beam: padding


def test_the_npz_holds_the_tile_maps_once_and_each_beam_reads_back_its_own(idefics3_repo, image, tmp_path):
    """Written and read back, the tower's frames are one image's (attn_NNN_rows names each beam's: the one set) and
    every beam's row is the same result's row: its own decoder maps beside the shared tile maps; `figure
    --batch-index 2` draws beam 2's words over the tiles and the tower's tile map, each titled beam 2's."""
    import zipfile

    from attnviz.cli import main

    m = open_model(idefics3_repo, provider="cpu")
    r = m.analyze(text=PROMPT, image=str(image), generate=4, beams=K)
    path = io.save_npz(r, tmp_path / "beams.npz")
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
    assert {"attn_000_rows.npy", "attn_001_rows.npy"} <= names and "attn_002_rows.npy" not in names
    back = io.load_npz(path)
    assert [np.load(path)[f"attn_00{i}"].shape[0] for i in (0, 1)] == [3, 3]  # 3 frames, not 3 x K
    for b in range(K):
        want, got = pick_row(r, b), pick_row(back, b)
        assert got.generated == r.info["beams"][b]["generated"] == want.generated
        for a, c in zip(want.maps, got.maps):
            np.testing.assert_array_equal(a.array(), c.array())
    score = f"beam 2 (score {r.info['beams'][2]['score']:.3f})"
    for view, block in (("image", "decoder self"), ("heatmap", "0")):
        out = tmp_path / f"{view}.svg"
        args = ["figure", str(path), "--batch-index", "2", "--view", view, "--block", block, "--out", str(out)]
        assert main(args) == 0
        svg = out.read_text()
        assert score in svg and "beam 0" not in svg
    assert "tiles · " in (tmp_path / "image.svg").read_text()  # the decoder's row over the tiles, beside the global
    assert "tile 0 (row 0, col 0)" in svg  # the tower's first tile's map
