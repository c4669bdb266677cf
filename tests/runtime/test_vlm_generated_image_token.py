"""A generated image token on the re-run path (no KV cache): a running hypothesis that picks the image placeholder
(LLaVA's ``<image>``) is re-run with the prompt, and only the prompt's image tokens take the image's features --
the generated one is a word, embedded by the table, as the cached steps (and transformers' cached ``generate``,
which never feeds the prompt again) embed it.  It was refused: "the prompt holds 17 image tokens and the image
gives 16 features".  Forced here by giving the tiny LLaVA's ``<image>`` column of the LM head 1.05x the column of
the word greedy picks at its third step (in transformers and in the ONNX decoder alike): the same tokens as
transformers' cached generate (greedy and --beams 3, with their scores), and the re-run's maps the cached path's.
Idefics3: tests/runtime/test_vlm_idefics3_beams.py re-runs a search whose running beam takes its <image>."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
onnx = pytest.importorskip("onnx")

import vlm_models as vm  # noqa: E402
from PIL import Image  # noqa: E402
from test_beams import TOL, _hf_beams, _hf_hypotheses  # noqa: E402

from attnviz import AttnvizError  # noqa: E402
from attnviz.core.io import load_npz, save_npz  # noqa: E402
from attnviz.runtime import builders as bd  # noqa: E402
from attnviz.runtime import open_model  # noqa: E402
from attnviz.runtime.request import AnalyzeRequest  # noqa: E402
from attnviz.runtime.vlm import PROMPT as PROMPT_FEED  # noqa: E402

PROMPT = "<s> <image> a photo of the cat"
STEPS = 6
COPIED = 2  # the step whose greedy word's LM-head column the image token's copies (scaled up)


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    p = tmp_path_factory.mktemp("img") / "photo.png"
    Image.fromarray((np.random.default_rng(3).random((48, 40, 3)) * 255).astype(np.uint8)).save(p)
    return p


@pytest.fixture(scope="module")
def biased(llava_repo, image, tmp_path_factory):
    """(transformers' LLaVA, a copy of the repository) whose LM head scores <image> 1.05x the word greedy picks at
    step COPIED: that step picks <image> (a positive logit scaled up), a later step reads it back as a word."""
    hf = vm.build()
    m = open_model(llava_repo, provider="cpu")
    prep = bd.prepare(m, AnalyzeRequest(text=PROMPT, image=str(image)))
    ids = torch.as_tensor(np.asarray(prep.prompts, np.int64))
    kw = dict(input_ids=ids, pixel_values=torch.as_tensor(prep.feeds["pixel_values"]))
    with torch.no_grad():
        plain = hf.generate(**kw, max_new_tokens=STEPS, do_sample=False, use_cache=True, eos_token_id=None)
        word = int(plain[0, ids.shape[1] + COPIED])
        w = hf.lm_head.weight
        w[vm.IMAGE_TOKEN] = w[word] * 1.05
    repo = shutil.copytree(llava_repo, tmp_path_factory.mktemp("biased") / "tiny-llava")
    path = repo / "onnx" / "decoder_model_merged.onnx"
    model = onnx.load(path)
    head = w.detach().numpy().T  # the export's MatMul weight: [hidden, vocab]
    found = 0
    for t in model.graph.initializer:
        a = onnx.numpy_helper.to_array(t)
        if a.shape == head.shape and np.allclose(np.delete(a, vm.IMAGE_TOKEN, 1), np.delete(head, vm.IMAGE_TOKEN, 1)):
            t.CopyFrom(onnx.numpy_helper.from_array(head.astype(a.dtype), t.name))
            found += 1
    assert found == 1  # the one LM head (the merged file's branches share its initializer)
    onnx.save(model, path)
    return hf, repo, kw


def _open(repo):
    m = open_model(repo, provider="cpu")
    m.meta.setdefault("special", {}).pop("eos", None)
    return m


def test_greedy_rerun_with_a_generated_image_token_equals_transformers_and_the_cached_path(biased, image):
    hf, repo, kw = biased
    with torch.no_grad():
        seq = hf.generate(**kw, max_new_tokens=STEPS, do_sample=False, use_cache=True, eos_token_id=None)
    want = [int(t) for t in seq[0, kw["input_ids"].shape[1] :]]
    assert want[COPIED] == vm.IMAGE_TOKEN and COPIED < len(want) - 1  # generated, then fed back as a word
    cached = _open(repo).analyze(text=PROMPT, image=str(image), generate=STEPS)
    rerun = _open(repo).analyze(text=PROMPT, image=str(image), generate=STEPS, use_cache=False)
    assert (cached.info["generation"], rerun.info["generation"]) == ("kv-cache", "full re-run")
    for r in (cached, rerun):
        assert r.decoder_ids[0][kw["input_ids"].shape[1] :] == want[:-1]  # the last word is never fed
    assert len(cached.maps) == len(rerun.maps)
    for a, b in zip(cached.maps, rerun.maps):
        np.testing.assert_allclose(b.array(), a.array(), atol=TOL)


def test_beams_rerun_with_a_generated_image_token_equal_transformers_and_the_cached_path(biased, image):
    hf, repo, kw = biased
    k = 3
    o = _hf_beams(hf, k, STEPS, **kw, attention_mask=torch.ones_like(kw["input_ids"]), eos_token_id=None,
                  pad_token_id=0)  # fmt: skip
    want = _hf_hypotheses(o, kw["input_ids"].shape[1])
    assert any(vm.IMAGE_TOKEN in h[:-1] for h in want)  # a hypothesis re-run with a generated <image>
    got = {
        uc: _open(repo).analyze(text=PROMPT, image=str(image), generate=STEPS, beams=k, use_cache=uc)
        for uc in (True, False)
    }
    for r in got.values():
        assert [b["ids"] for b in r.info["beams"]] == want
        np.testing.assert_allclose([b["score"] for b in r.info["beams"]], o.sequences_scores.numpy(), atol=1e-5)
    for a, b in zip(got[True].maps, got[False].maps):
        np.testing.assert_allclose(b.array(), a.array(), atol=TOL)


def test_the_prompts_own_image_tokens_are_still_counted_and_a_bad_prompt_length_refused(llava_repo, image):
    """The prompt's image tokens still meet the features' count (a second <image> written in the prompt is refused
    in the splice's line), and a prompt_length outside the ids is refused in one line naming the fix."""
    m = _open(llava_repo)
    prep = bd.prepare(m, AnalyzeRequest(text=PROMPT, image=str(image)))
    ids = np.asarray(prep.prompts, np.int64)
    two = np.concatenate([ids, ids[:, 1:-5]], axis=1)  # the prompt's 16 image tokens twice
    feeds = {"pixel_values": prep.feeds["pixel_values"], "input_ids": two, PROMPT_FEED: np.int64(two.shape[1])}
    with pytest.raises(AttnvizError, match="the prompt holds 32 image tokens and the image gives 16 features"):
        m.run(feeds)
    for bad in (0, two.shape[1] + 1, 2.5, [3, 4]):
        with pytest.raises(AttnvizError, match=f"^{PROMPT_FEED} .*: give one integer from 1 to input_ids' length"):
            m.run(dict(feeds, **{PROMPT_FEED: np.asarray(bad)}))
    # the second run of image tokens past prompt_length: words, as generated ones are
    r = m.run(dict(feeds, **{PROMPT_FEED: np.int64(ids.shape[1])}))
    assert r.maps[-1].shape[-1] == two.shape[1]


def test_a_generated_image_token_is_labelled_as_the_word_it_is_on_both_paths(biased, image, tmp_path):
    """The generated <image> on the decoder's token axis (the window's, the figures', the .npz's labels) is the
    tokenizer's own token, read here from tokenizer.json by the tokenizers library, not an image patch
    ("img2(0,0)" before); the prompt's image tokens keep their patch names and their one grid."""
    tokenizers = pytest.importorskip("tokenizers")
    _, repo, kw = biased
    word = tokenizers.Tokenizer.from_file(str(repo / "tokenizer.json")).id_to_token(vm.IMAGE_TOKEN)
    n = kw["input_ids"].shape[1]
    for uc in (True, False):
        r = _open(repo).analyze(text=PROMPT, image=str(image), generate=STEPS, use_cache=uc)
        ids = r.decoder_ids[0]
        labels = _decoder_labels(r, len(ids))
        at = [k for k in range(n, len(ids)) if ids[k] == vm.IMAGE_TOKEN]
        assert at and all(labels[k] == word for k in at), [labels[k] for k in at]
        assert sum(lab == "(0,0)" for lab in labels) == 1  # the prompt's one image, named by its patches
        assert r.token_grid is not None and r.token_grid.end <= n
        path = tmp_path / f"r{int(uc)}.npz"
        save_npz(r, path)
        assert _decoder_labels(load_npz(path), len(ids)) == labels


def _decoder_labels(r, n: int) -> list[str]:
    """The decoder's token axis (the one of the row's prompt-and-generated length)."""
    return next(list(a.labels) for a in r.row_axes(0) if a is not None and len(a) == n)
