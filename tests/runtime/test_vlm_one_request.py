"""A vision–language model's cached generation as one request (issue 22's time target): the vision file, the
embeddings, the decoder on the spliced prompt, the first token and the first chunk of cached steps run where the
sessions live (``VLMCache.start_steps`` on speech110's ``chain_steps``), the prompt's presents handed to the loop
there as ``Taken`` feeds.  The set's first generation of a shape runs as before (the prompt's chain, then the
loop: two requests) and learns the presents' shapes; every later one must give the same ids and the same maps,
bit for bit, in the crash-isolation child and in-process, for each family's positions (LLaVA's count, Qwen2-VL's
M-RoPE continuing with the rope delta, PaliGemma's from 1 with its token types, Idefics3's tiles put together
per row).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from one_request import count_calls, count_ops, nan_llava_copy, open_without_eos, same_generation
from PIL import Image

from attnviz.runtime import model_loop as model_module  # where the generation loop reads CHUNK_S and Loop
from attnviz.runtime.vlm import VLMCache

STEPS = 8
PROMPTS = {
    "llava": "<s> <image> a photo of the cat",
    "idefics3": "<s> <image> a photo of the cat",
    "qwen2vl": "<|vision_start|><|image_pad|><|vision_end|>describe the cat",
    "paligemma": "<image>a photo of the cat",
}


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    p = tmp_path_factory.mktemp("img") / "photo.png"
    Image.fromarray((np.random.default_rng(3).random((45, 70, 3)) * 255).astype(np.uint8)).save(p)
    return p


@pytest.fixture
def requests(monkeypatch):
    """The ops sent to the crash-isolation child, in order."""
    return count_ops(monkeypatch)


@pytest.fixture
def starts(monkeypatch):
    """How many generations started through the two-request path (VLMCache.start, the real one)."""
    return count_calls(monkeypatch, VLMCache, "start")


@pytest.mark.parametrize(
    "family, fixture, inprocess",
    [
        ("llava", "llava_repo", False),
        ("llava", "llava_repo", True),
        ("llava", "llava_with_past_repo", False),
        ("qwen2vl", "qwen2vl_repo", False),
        ("qwen2vl", "qwen2vl_repo", True),
        ("idefics3", "idefics3_repo", False),
        ("paligemma", "paligemma_repo", False),
    ],
    ids=["llava", "llava-in-process", "llava-with-past", "qwen2vl", "qwen2vl-in-process", "idefics3", "paligemma"],
)
def test_one_request_generation_equals_the_two_request_one_bit_for_bit(
    request, family, fixture, inprocess, image, monkeypatch, starts
):
    if inprocess:
        monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
    m = open_without_eos(request.getfixturevalue(fixture))
    prompt = PROMPTS[family]
    first = m.analyze(text=prompt, image=str(image), generate=STEPS)  # two requests: the presents' shapes learned
    # (the tiny PaliGemma repeats one token: its steps' maps, which a wrong position or cache changes, still differ)
    assert starts[0] == 1 and len(first.info["generated_ids"]) == STEPS
    again = m.analyze(text=prompt, image=str(image), generate=STEPS)
    assert starts[0] == 1  # the one-request path ran
    assert again.info["generation"] == "kv-cache" and len(again.info["generated_ids"]) == STEPS
    same_generation(again, first)
    for n in (1, 2):  # the first token alone, and one step after it
        short = m.analyze(text=prompt, image=str(image), generate=n)
        assert starts[0] == 1 and short.info["generated_ids"] == first.info["generated_ids"][:n]
        for x, y in zip(short.maps, first.maps):  # the vision maps whole, the decoder's rows so far
            x, y = x.array(), y.array()
            np.testing.assert_array_equal(x, y[..., : x.shape[2], : x.shape[3]])


def test_the_isolated_generation_is_one_request(llava_repo, image, requests):
    m = open_without_eos(llava_repo)
    m.analyze(text=PROMPTS["llava"], image=str(image), generate=STEPS)
    del requests[:]
    m.analyze(text=PROMPTS["llava"], image=str(image), generate=STEPS)
    assert requests == ["chain_steps"]


def test_a_new_prompt_length_learns_again_and_the_loop_goes_on_past_the_first_chunk(
    llava_repo, image, monkeypatch, requests, starts
):
    """A prompt of another length has presents of another shape: its first generation runs the two-request way
    again.  Chunks of one step (the loop held in the child between requests, reading its own copy of the prompt's
    presents, whose slots went back after the first chunk) give the same ids and maps."""
    m = open_without_eos(llava_repo)
    longer = PROMPTS["llava"] + " on the mat"
    want = m.analyze(text=longer, image=str(image), generate=STEPS)
    m.analyze(text=PROMPTS["llava"], image=str(image), generate=STEPS)
    assert starts[0] == 2
    monkeypatch.setattr(model_module, "CHUNK_S", 0.0)
    del requests[:]
    chunked = m.analyze(text=longer, image=str(image), generate=STEPS)
    assert starts[0] == 2
    assert requests[0] == "chain_steps" and requests.count("steps") == STEPS - 2  # the first token, 1 step a chunk
    same_generation(chunked, want)


@pytest.fixture
def parent_checks(monkeypatch):
    """The maps the parent reads for its NaN/Inf check (analyze's all_finite, the real one, counted)."""
    from attnviz.runtime import analyze

    shapes: list[tuple] = []
    check = analyze.all_finite

    def counting(a):
        shapes.append(a.shape)
        return check(a)

    monkeypatch.setattr(analyze, "all_finite", counting)
    return shapes


def test_the_maps_are_checked_for_nan_in_the_child_not_read_again(llava_repo, image, parent_checks, monkeypatch):
    """With crash isolation the child checks each map for NaN/Inf where it was just written and says so in its
    reply: a caption's and a generation's maps (the assembled ones too) are not read again by the parent.
    In-process the parent checks every map, as before."""
    m = open_without_eos(llava_repo)
    for _ in range(2):  # the second generation is one request (its first learns the shapes)
        cap = m.analyze(text=PROMPTS["llava"], image=str(image))
        gen = m.analyze(text=PROMPTS["llava"], image=str(image), generate=STEPS)
    assert len(cap.maps) == len(gen.maps) == 3 and parent_checks == []
    monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
    here = open_without_eos(llava_repo)
    here.analyze(text=PROMPTS["llava"], image=str(image), generate=STEPS)
    assert parent_checks == [tuple(a.shape) for a in gen.maps]


def test_nan_attention_is_refused_from_the_childs_verdict_in_the_same_line(
    llava_with_past_repo, image, tmp_path, parent_checks, monkeypatch
):
    """NaN weights in the decoder's first layer make its attention NaN (the vision tower's features stay finite, so
    the splice passes): refused in analyze's one line from the child's verdict (the parent reads no map), and
    in-process from the parent's own check, in the same words."""

    from attnviz import AttnvizError

    repo = nan_llava_copy(llava_with_past_repo, tmp_path / "nan-llava")
    lines = []
    for inprocess in (False, True):
        if inprocess:
            monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
        with pytest.raises(AttnvizError) as e:
            open_without_eos(repo).analyze(text=PROMPTS["llava"], image=str(image))
        lines.append(str(e.value))
        assert (parent_checks == []) != inprocess
    assert lines[0] == lines[1] and "\n" not in lines[0]
    assert lines[0].startswith("the model produced NaN/Inf attention at decoder")
    assert lines[0].endswith("check the model's weights and inputs")
