"""Issue 22, Qwen2.5-VL: the three-file layout opens as one model (Qwen2-VL's processor, expansion and M-RoPE
decoder); its vision tower attends within windows in every block but ``fullatt_block_indexes``, over the patches
reordered window by window.  Every map -- the windowed vision blocks, the full one, the decoder's -- equals
transformers' eager attention; the windowed blocks say so in their label; each vision key is placed where
transformers' rotary embedding puts it; greedy generation through the cache equals transformers'."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import qwen2vl_models as q2  # noqa: E402
import qwen25vl_models as q5  # noqa: E402
import vlm_build as vb  # noqa: E402
from PIL import Image  # noqa: E402

from attnviz.core.attention import SiteInfo  # noqa: E402
from attnviz.runtime import builders as bd  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402
from attnviz.runtime.request import AnalyzeRequest  # noqa: E402
from attnviz.runtime.vlm import VLMSet  # noqa: E402
from attnviz.runtime.vlm_families.qwen25vl import window_order  # noqa: E402

PROMPT = "<|vision_start|><|image_pad|><|vision_end|>describe the cat"
TOL = 5e-4


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return vb.cached_repo(q5.save_repo, tmp_path_factory.mktemp("qwen25vl") / "tiny-qwen2.5-vl")


@pytest.fixture(scope="module")
def torch_model():
    return q5.build()


def _image(path, h, w, seed=3):
    Image.fromarray((np.random.default_rng(seed).random((h, w, 3)) * 255).astype(np.uint8)).save(path)
    return path


def _processed(path):
    p = q2.image_processor()(images=Image.open(path).convert("RGB"), return_tensors="np")
    return p["pixel_values"], p["image_grid_thw"]


def test_opens_with_its_windowed_blocks_labelled(repo):
    m = open_model(repo, provider="cpu")
    assert isinstance(m, VLMSet) and m.describe()["image_tokens"]["family"] == "qwen2.5-vl"
    labels = [s.label for s in m.sites]
    assert labels == [
        "encoder self L0 [32-px windows]",
        "encoder self L1",  # fullatt_block_indexes: the whole image
        "encoder self L2 [32-px windows]",
        "decoder self L0",
        "decoder self L1",
    ]
    assert m.describe()["image_tokens"]["vision_windows"] == {"pixels": q5.WINDOW, "full_attention_blocks": q5.FULL}
    assert [s.to_dict().get("window") for s in m.sites] == ["32-px windows", None, "32-px windows", None, None]
    assert [SiteInfo.from_dict(s.to_dict()) for s in m.sites] == m.sites  # a saved result keeps the labels
    assert ["window" in s.to_dict() for s in m.sites] == [True, False, True, False, False]  # no new key elsewhere


def test_inspect_says_which_blocks_attend_within_windows(repo, capsys):
    from attnviz.cli import main

    assert main(["inspect", str(repo)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.strip().startswith(("0 ", "1 ", "2 "))]
    assert len(rows) == 3
    assert [line.endswith("(within 32-px windows)") for line in rows] == [True, False, True]


def test_window_order_equals_transformers():
    from transformers.vision_utils import get_vision_window_index

    for h, w in [(6, 8), (8, 8), (4, 12), (2, 2), (10, 6)]:
        want, _ = get_vision_window_index(torch.tensor([[1, h, w]]), q5.MERGE, q5.WINDOW, q5.PATCH)
        assert window_order(h // q5.MERGE, w // q5.MERGE, q5.UNITS).tolist() == want.tolist()


# 48 x 64 (windows of 2 x 2, 2 x 2, 1 x 2, 1 x 2 merge units), 64 x 64 (four whole windows), 32 x 96 (three)
@pytest.mark.parametrize("size", [(45, 70), (64, 64), (30, 90)])
def test_every_map_equals_transformers_eager(repo, torch_model, tmp_path, size):
    m = open_model(repo, provider="cpu")
    path = _image(tmp_path / "i.png", *size)
    r = m.analyze(text=PROMPT, image=str(path))
    px, grid = _processed(path)
    ids = np.asarray(bd.prepare(m, AnalyzeRequest(text=PROMPT, image=str(path))).prompts, np.int64)
    assert ids[0].tolist() == q2.tokenizer()(q2.expand(PROMPT, grid))["input_ids"]
    vision, _ = q5.vision_reference(torch_model, px, grid)
    _, decoder, logits = q2.reference(torch_model, px, grid, ids)
    got = [a.array() for a in r.maps]
    assert [g.shape for g in got] == [w.shape for w in vision + decoder]
    assert max(float(np.abs(g - w).max()) for g, w in zip(got, vision + decoder)) < TOL
    assert np.abs(r.outputs["logits"] - logits).max() < TOL
    # the windowed blocks do attend within windows (so the comparison above could tell them from the full one)
    assert (got[0] == 0).mean() > 0.3 and (got[1] == 0).mean() == 0


def test_vision_keys_placed_where_transformers_rotates_them(repo, tmp_path):
    """Each vision key is a patch in the window order; its label and its cell on the patch grid are the (row,
    column) transformers' vision tower rotates that key by (its position ids, permuted as its blocks see them)."""
    from transformers.vision_utils import get_vision_position_ids, get_vision_window_index

    from attnviz.core import view as v

    m = open_model(repo, provider="cpu")
    path = _image(tmp_path / "i.png", 45, 70)
    r = m.analyze(text=PROMPT, image=str(path))
    _, grid = _processed(path)
    unit = q5.MERGE**2
    pos = get_vision_position_ids(torch.as_tensor(grid), q5.MERGE)
    index, _ = get_vision_window_index(torch.as_tensor(grid), q5.MERGE, q5.WINDOW, q5.PATCH)
    pos = pos.reshape(-1, unit, 2)[index].reshape(-1, 2).tolist()
    assert r.blocks()[0].key_axis.labels == [f"({h},{w})" for h, w in pos]
    ov = v.overlay_view(r, v.Selection(block=0, layer=1, head=2, query=5))
    row = r.maps[1].array()[0, 2, 5]
    want = np.zeros((grid[0, 1], grid[0, 2]))
    for k, (h, w) in enumerate(pos):
        want[h, w] = row[k]
    assert np.abs(ov.patch - want).max() == 0


def test_generation_equals_transformers_greedy_in_the_loop(repo, torch_model, tmp_path, monkeypatch):
    """Greedy through the cache in the loop beside the decoder (M-RoPE steps, no request per token): transformers'
    cached generate's tokens and every step's attentions."""
    from attnviz.runtime import vlm

    n = 6
    path = _image(tmp_path / "i.png", 45, 70)
    px, grid = _processed(path)
    m = open_model(repo, provider="cpu")
    m.meta["special"] = {}
    ids = torch.as_tensor(bd.prepare(m, AnalyzeRequest(text=PROMPT, image=str(path))).prompts)
    torch_model.model.rope_deltas = None
    torch_model.config.use_cache = True
    try:
        with torch.no_grad():
            out = torch_model.generate(
                input_ids=ids,
                pixel_values=torch.as_tensor(px),
                image_grid_thw=torch.as_tensor(grid),
                mm_token_type_ids=q2.image_types(ids),
                attention_mask=torch.ones(ids.shape, dtype=torch.int64),
                max_new_tokens=n,
                do_sample=False,
                eos_token_id=None,
                use_cache=True,
                output_attentions=True,
                return_dict_in_generate=True,
            )
    finally:
        torch_model.config.use_cache = False

    def no_step(self, tokens):
        raise AssertionError("a generated token took a request of its own")

    monkeypatch.setattr(vlm.VLMCache, "step", no_step)
    r = m.analyze(text=PROMPT, image=str(path), generate=n)
    assert r.info["generation"] == "kv-cache"
    assert r.info["generated_ids"] == out.sequences[0, ids.shape[1] :].tolist()
    t = ids.shape[1]
    for layer, got in enumerate(r.maps[q5.DEPTH :]):
        a = got.array()
        for s, step in enumerate(out.attentions):
            want = step[layer].numpy()
            rows = slice(0, t) if s == 0 else slice(t + s - 1, t + s)
            assert np.abs(a[:, :, rows, : want.shape[-1]] - want).max() < TOL
