"""Issue 22, Qwen2-VL: the three-file layout opens as one model; the image is processed as Qwen2VLImageProcessor
does (smart_resize, the flattened patches, image_grid_thw), the prompt expanded as Qwen2VLProcessor does; the
decoder is fed M-RoPE positions [3, B, T] computed in numpy as transformers' get_rope_index; every map (vision and
decoder) equals transformers' eager attention, and greedy tokens through the cache (positions continuing with the
rope delta) equal transformers' generate."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import qwen2vl_models as qm  # noqa: E402
from PIL import Image  # noqa: E402

from attnviz import AttnvizError  # noqa: E402
from attnviz.runtime import builders as bd  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402
from attnviz.runtime.request import AnalyzeRequest  # noqa: E402
from attnviz.runtime.vlm import VLMSet  # noqa: E402
from attnviz.runtime.vlm_families.qwen2vl import patchify, rope_index  # noqa: E402

PROMPT = "<|vision_start|><|image_pad|><|vision_end|>describe the cat"
TOL = 5e-4


@pytest.fixture(scope="module")
def repo(qwen2vl_repo):
    return qwen2vl_repo


@pytest.fixture(scope="module")
def torch_model():
    return qm.build()


def _image(path, h, w, seed=3):
    Image.fromarray((np.random.default_rng(seed).random((h, w, 3)) * 255).astype(np.uint8)).save(path)
    return path


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    return _image(tmp_path_factory.mktemp("img") / "photo.png", 45, 70)  # resized to 48 x 64: 3 x 4 image tokens


def _processed(path):
    """transformers' image processor on the image: pixel_values [patches, C·T·P·P] and image_grid_thw."""
    p = qm.image_processor()(images=Image.open(path).convert("RGB"), return_tensors="np")
    return p["pixel_values"], p["image_grid_thw"]


def _max_diff(maps, ref) -> float:
    assert len(maps) == len(ref)
    for got, want in zip(maps, ref):
        assert got.shape == want.shape
    return max(float(np.abs(got.array() - want).max()) for got, want in zip(maps, ref))


def test_opens_as_one_model_with_its_family(repo):
    m = open_model(repo, provider="cpu")
    assert isinstance(m, VLMSet) and m.name == "tiny-qwen2-vl"
    assert [(s.stack, s.layer) for s in m.sites] == [("encoder", 0), ("encoder", 1), ("decoder", 0), ("decoder", 1)]
    d = m.describe()
    assert d["image_tokens"]["family"] == "qwen2-vl" and d["image_tokens"]["merge"] == qm.MERGE
    assert m.inputs[0].shape == ["batch", 3, "height", "width"]


@pytest.mark.parametrize("size", [(45, 70), (10, 12), (120, 90)])  # as is, below min_pixels, above max_pixels
def test_image_and_prompt_as_the_processor_makes_them(repo, tmp_path, size):
    m = open_model(repo, provider="cpu")
    path = _image(tmp_path / "i.png", *size)
    prep = bd.prepare(m, AnalyzeRequest(text=PROMPT, image=str(path)))
    want, grid = _processed(path)
    flat, thw = patchify(prep.feeds["pixel_values"][0], qm.PATCH, qm.MERGE, qm.TEMPORAL)
    assert thw.tolist() == grid.tolist()
    assert flat.shape == want.shape and np.abs(flat - want).max() < 1e-4
    # Qwen2VLProcessor's expansion: <|image_pad|> once per merged token, tokenized whole
    ids = qm.tokenizer()(qm.expand(PROMPT, grid))["input_ids"]
    assert prep.prompts == [ids]
    # the shown image is the resized one the tokens cover
    assert prep.shown.shape[:2] == (grid[0, 1] * qm.PATCH, grid[0, 2] * qm.PATCH)
    # a prompt without the placeholder gets the image in front (the chat template's place)
    tok = m.tokenizers[1].for_image(prep.image_tiles)
    assert tok.encode("describe the cat").ids == ids


def _rope_cases():
    img = qm.IMAGE_TOKEN
    one = [3, *[img] * 12, 4, 17, 10, 11]
    return [
        (np.asarray([one]), None, [[1, 6, 8]]),
        # text, then two images of different grids, text between and after
        (np.asarray([[1, 9, 3, *[img] * 6, 4, 10, 3, *[img] * 4, 4, 11, 12]]), None, [[1, 4, 6], [1, 4, 4]]),
        # a batch: the second row left-padded (its padding gets position 0)
        (
            np.asarray([one + [9, 9], [0, 0, *one]]),
            np.asarray([[1] * 19, [0] * 2 + [1] * 17]),
            [[1, 6, 8], [1, 6, 8]],
        ),
    ]


def test_rope_index_equals_transformers_exactly(torch_model):
    for ids, mask, grids in _rope_cases():
        want_pos, want_delta = qm.rope_index(torch_model, ids, grids, mask)
        got_pos, got_delta = rope_index(
            ids, np.ones_like(ids) if mask is None else mask, qm.IMAGE_TOKEN, [tuple(g) for g in grids], qm.MERGE
        )
        assert got_pos.dtype == np.int64 and np.array_equal(got_pos, want_pos.numpy())
        assert np.array_equal(got_delta, want_delta.numpy())


def test_every_map_equals_transformers_eager(repo, image, torch_model):
    m = open_model(repo, provider="cpu")
    r = m.analyze(text=PROMPT, image=str(image))
    prep = bd.prepare(m, AnalyzeRequest(text=PROMPT, image=str(image)))
    px, grid = _processed(image)
    ids = np.asarray(prep.prompts, np.int64)
    vision = qm.record_vision_attention(torch_model, px, grid)
    _, decoder, logits = qm.reference(torch_model, px, grid, ids)
    assert _max_diff(r.maps[:2], vision) < TOL
    assert _max_diff(r.maps[2:], decoder) < TOL
    assert np.abs(r.outputs["logits"] - logits).max() < TOL


def test_wrong_positions_would_be_seen(repo, image, torch_model):
    """The M-RoPE positions matter: transformers with 1-D positions (0..T-1 on all axes) gives other maps than
    attnviz's, which are the model's (so the comparison above can fail)."""
    m = open_model(repo, provider="cpu")
    r = m.analyze(text=PROMPT, image=str(image))
    ids = torch.as_tensor(bd.prepare(m, AnalyzeRequest(text=PROMPT, image=str(image))).prompts)
    px, grid = _processed(image)
    with torch.no_grad():
        feats = torch.cat(
            torch_model.model.get_image_features(torch.as_tensor(px), torch.as_tensor(grid)).pooler_output
        )
        emb = torch_model.get_input_embeddings()(ids)
        emb[ids == qm.IMAGE_TOKEN] = feats
        flat = torch.arange(ids.shape[1])[None, None].expand(3, 1, -1)
        o = torch_model.model.language_model(inputs_embeds=emb, position_ids=flat, output_attentions=True)
    assert max(float(np.abs(a.array() - w.numpy()).max()) for a, w in zip(r.maps[2:], o.attentions)) > 1e-3


@pytest.mark.parametrize("use_cache", [True, False])
def test_generation_equals_transformers_greedy(repo, image, torch_model, use_cache):
    """--generate through the decoder's cache (each step's positions the count + the rope delta on all three axes)
    and by re-running: transformers' greedy tokens; the steps' maps are transformers' full run's."""
    m = open_model(repo, provider="cpu")
    r = m.analyze(text=PROMPT, image=str(image), generate=5, use_cache=use_cache)
    px, grid = _processed(image)
    ids = torch.as_tensor(bd.prepare(m, AnalyzeRequest(text=PROMPT, image=str(image))).prompts)
    out = qm.greedy(torch_model, ids, px, grid, 5)
    assert r.info["generated_ids"] == out[0, ids.shape[1] :].tolist()
    assert r.info["generation"] == ("kv-cache" if use_cache else "full re-run")
    _, decoder, _ = qm.reference(torch_model, px, grid, out[:, :-1])
    assert _max_diff(r.maps[2:], decoder) < TOL


@pytest.mark.parametrize("inprocess", [False, True])
def test_cached_generation_loops_beside_the_decoder_with_mrope_steps(repo, image, torch_model, monkeypatch, inprocess):
    """The cached steps run in the loop beside the decoder's session (no request per token: StepPlan writes each
    new token's M-RoPE positions [3, 1, 1], the count + the rope delta on all three axes), in the isolation child
    and in-process alike: transformers' greedy tokens, and each step's maps equal transformers' own cached
    generate's attentions for that step (its rope_deltas path), not only a full re-run's."""
    from attnviz.runtime import vlm
    from attnviz.runtime.model import AttentionModel

    if inprocess:
        monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
    n = 8
    px, grid = _processed(image)
    ids = torch.as_tensor(
        bd.prepare(open_model(repo, provider="cpu"), AnalyzeRequest(text=PROMPT, image=str(image))).prompts
    )
    torch_model.model.rope_deltas = None
    torch_model.config.use_cache = True
    try:
        with torch.no_grad():
            out = torch_model.generate(
                input_ids=ids,
                pixel_values=torch.as_tensor(px),
                image_grid_thw=torch.as_tensor(grid),
                mm_token_type_ids=qm.image_types(ids),
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
    want_ids = out.sequences[0, ids.shape[1] :].tolist()

    def no_step(self, tokens):
        raise AssertionError("a generated token took a request of its own")

    loops = []
    run_loop = AttentionModel.run_loop
    monkeypatch.setattr(AttentionModel, "run_loop", lambda self, *a, **k: loops.append(1) or run_loop(self, *a, **k))
    monkeypatch.setattr(vlm.VLMCache, "step", no_step)
    m = open_model(repo, provider="cpu")
    m.meta["special"] = {k: v for k, v in m.meta.get("special", {}).items() if k != "eos"}
    r = m.analyze(text=PROMPT, image=str(image), generate=n)
    assert r.info["generation"] == "kv-cache" and r.info["generated_ids"] == want_ids
    assert 1 <= len(loops) < n - 1  # chunks of steps (one here unless a chunk's time ran out), not one per token
    t = ids.shape[1]
    # transformers' step s (s = 0: the prompt) holds the rows of query t + s - 1 onwards over its keys so far
    assert len(out.attentions) == n
    worst = 0.0
    for layer, got in enumerate(r.maps[2:]):
        a = got.array()
        assert a.shape[-2:] == (t + n - 1, t + n - 1)
        for s, step in enumerate(out.attentions):
            want = step[layer].numpy()
            rows = slice(0, t) if s == 0 else slice(t + s - 1, t + s)
            worst = max(worst, float(np.abs(a[:, :, rows, : want.shape[-1]] - want).max()))
            assert not a[:, :, rows, want.shape[-1] :].any()  # keys a step could not see yet
    assert worst < TOL


def test_image_tokens_labelled_and_placed_on_the_merged_grid(repo, image):
    """Hand-built: an image bright in one 16 × 16 window changes, in transformers' processor's pixel_values, exactly
    the four patches the merger turns into one image token (rows 4k..4k+3 -> token k); attnviz labels that token
    with the window's row and column and its grid puts it there."""
    m = open_model(repo, provider="cpu")
    r = m.analyze(text=PROMPT, image=str(image))
    keys = r.blocks()[-1].key_axis.labels
    grid = r.token_grid
    assert (grid.rows, grid.cols, grid.offset) == (3, 4, 1)
    proc = qm.image_processor()
    base = np.zeros((48, 64, 3), np.uint8)
    want = proc(images=Image.fromarray(base), return_tensors="np")["pixel_values"]
    for row in range(3):
        for col in range(4):
            img = base.copy()
            img[row * qm.FACTOR : (row + 1) * qm.FACTOR, col * qm.FACTOR : (col + 1) * qm.FACTOR] = 255
            got = proc(images=Image.fromarray(img), return_tensors="np")["pixel_values"]
            changed = np.flatnonzero(np.abs(got - want).max(axis=1) > 0)
            token = int(changed[0]) // qm.MERGE**2
            assert changed.tolist() == list(range(4 * token, 4 * token + 4))
            assert keys[grid.offset + token] == f"({row},{col})" and grid.cell(grid.offset + token) == (row, col)
    assert keys[: grid.offset] == ["<|vision_start|>"] and keys[grid.end :] == [
        "<|vision_end|>",
        "describe",
        "the",
        "cat",
    ]


def test_vision_keys_labelled_with_transformers_rotary_positions(repo, image):
    """The vision block's keys are the patches merge window by merge window; each is labelled with the (row, col)
    transformers' vision tower rotates it by."""
    from transformers.vision_utils import get_vision_position_ids

    m = open_model(repo, provider="cpu")
    r = m.analyze(text=PROMPT, image=str(image))
    labels = r.blocks()[0].key_axis.labels
    _, grid = _processed(image)
    pos = get_vision_position_ids(torch.as_tensor(grid), qm.MERGE).tolist()
    assert labels == [f"({h},{w})" for h, w in pos]
    # the vision block over the image (Image regions): each patch's weight drawn where transformers puts it
    from attnviz.core import view as v

    ov = v.overlay_view(r, v.Selection(block=0, layer=1, head=2, query=5))
    row = r.maps[1].array()[0, 2, 5]
    want = np.zeros((grid[0, 1], grid[0, 2]))
    for k, (h, w) in enumerate(pos):
        want[h, w] = row[k]
    assert np.abs(ov.patch - want).max() == 0


def test_bad_input_is_one_line(repo, tmp_path):
    import json
    import shutil

    m = open_model(repo, provider="cpu")
    ids = np.asarray([[3, qm.IMAGE_TOKEN, 4]], np.int64)
    with pytest.raises(AttnvizError, match="one image"):
        m.analyze(feeds={"pixel_values": np.zeros((2, 3, 16, 16), np.float32), "input_ids": np.repeat(ids, 2, 0)})
    with pytest.raises(AttnvizError, match="multiples of 16"):
        m.analyze(feeds={"pixel_values": np.zeros((1, 3, 20, 16), np.float32), "input_ids": ids})
    copy = tmp_path / "repo"
    shutil.copytree(repo, copy)
    pre = json.loads((copy / "preprocessor_config.json").read_text())
    (copy / "preprocessor_config.json").write_text(json.dumps(pre | {"merge_size": 4}))
    with pytest.raises(AttnvizError, match="merge_size is 4.*do not belong together"):
        open_model(copy, provider="cpu")


def test_two_placeholders_are_one_line_naming_the_familys_own(repo, image):
    """Qwen2-VL's placeholder is <|image_pad|>, not <image>: the line that the prompt's image tokens and the
    image's features differ names it (and that the processor puts it in front when the prompt has none)."""
    m = open_model(repo, provider="cpu")
    with pytest.raises(AttnvizError, match="image tokens and the image gives") as e:
        m.analyze(text="<|vision_start|><|image_pad|><|image_pad|><|vision_end|>describe", image=str(image))
    assert "write <|image_pad|> once in the text" in str(e.value) and "<image>" not in str(e.value)
