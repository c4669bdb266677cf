"""Issue 22 (time): a vision–language model's teacher-forced run is one request to the crash-isolation child --
vision encoder, embeddings, the features spliced into the image tokens' rows and the decoder run there
(attnviz/runtime/chain.py) -- with the maps of the same run in-process, and a repeated run reuses the child's
shared-memory slots instead of making them anew."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import vlm_models as vm
from onnx_builders import tiny_text_model
from PIL import Image

from attnviz import AttnvizError
from attnviz.runtime import host, open_model
from attnviz.runtime.isolation import Spliced
from attnviz.runtime.model import run_stages

PROMPT = "<s> <image> a photo of the cat"
# 77 tokens: the decoder's maps ([1, 4, 77, 77] float32) are over isolation.INLINE_BYTES, so they come back in slots
LONG = "<s> <image> " + " ".join(vm.WORDS * 4)


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    p = tmp_path_factory.mktemp("img") / "photo.png"
    Image.fromarray((np.random.default_rng(3).random((48, 40, 3)) * 255).astype(np.uint8)).save(p)
    return p


@pytest.fixture
def requests(monkeypatch):
    """The ops the parent sends its child, in order."""
    sent: list[str] = []
    call = host._Host.call

    def counting(self, op, *args, **kw):
        sent.append(op)
        return call(self, op, *args, **kw)

    monkeypatch.setattr(host._Host, "call", counting)
    return sent


def test_teacher_forced_maps_are_one_request_and_equal_in_process(llava_repo, image, requests, monkeypatch):
    m = open_model(llava_repo, provider="cpu")
    m.analyze(text=PROMPT, image=str(image))  # sessions created, shapes learned
    requests.clear()
    r = m.analyze(text=PROMPT, image=str(image))
    assert requests == ["chain"]  # not vision, embeddings and decoder one by one
    assert r.info["run_s"] > 0
    monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
    here = open_model(llava_repo, provider="cpu").analyze(text=PROMPT, image=str(image))
    assert requests == ["chain"]  # the in-process run asked the child for nothing
    assert [s.label for s in here.sites] == [s.label for s in r.sites]
    for a, b in zip(r.maps, here.maps):
        np.testing.assert_array_equal(a.array(), b.array())
    np.testing.assert_array_equal(r.outputs["logits"], here.outputs["logits"])


def test_a_repeated_run_reuses_the_childs_slots(llava_repo, image):
    m = open_model(llava_repo, provider="cpu")
    for _ in range(2):
        m.analyze(text=LONG, image=str(image))
    h = host._current_host()
    before = set(h.maps)
    assert before  # the maps came back in slots
    for _ in range(3):
        r = m.analyze(text=LONG, image=str(image))
        del r
    # three sessions ran per call: with one request per session each run's slots aged out before the same
    # session ran again, and every call made (and the parent mapped) them anew
    assert set(h.maps) == before


def test_a_refused_splice_gives_its_slots_back(llava_repo, image):
    m = open_model(llava_repo, provider="cpu")
    want = [x.array().copy() for x in m.analyze(text=LONG, image=str(image)).maps]  # the result's slots go back
    h = host._current_host()
    before = set(h.maps)
    assert before
    # the vision encoder and the embeddings ran in the child; the splice there refuses the prompt in one line
    with pytest.raises(AttnvizError, match="0 image tokens and the image gives .* features; write <image> once"):
        m.analyze(text=LONG.replace("<image>", "cat"), image=str(image))
    r = m.analyze(text=LONG, image=str(image))
    for a, b in zip(r.maps, want):
        np.testing.assert_array_equal(a.array(), b)
    assert set(h.maps) <= before  # the refused run's slots were free again for this one


def test_embeddings_of_unknown_width_take_a_second_request(llava_repo, image, requests, monkeypatch):
    """Where no file's shapes give the embeddings' width (the memory check needs the decoder's input shape before
    the run), vision and embeddings run as one request and the decoder as another, with the same maps."""
    m = open_model(llava_repo, provider="cpu")
    want = m.analyze(text=PROMPT, image=str(image))
    spliced = m._spliced
    monkeypatch.setattr(m, "_spliced", lambda ids, width=None: spliced(ids, width) if width else None)
    requests.clear()
    r = m.analyze(text=PROMPT, image=str(image))
    assert requests == ["chain", "run"]
    for a, b in zip(r.maps, want.maps):
        np.testing.assert_array_equal(a.array(), b.array())


def test_a_chain_refused_midway_gives_the_earlier_stages_slots_back(tmp_path):
    """A stage's outputs stay in the child's slots while later stages run; a later stage refused there (its splice)
    frees them again, so the next chain reuses them rather than leaking them."""
    path = tiny_text_model(tmp_path / "tiny.onnx", d=16, heads=2)
    m = open_model(path, provider="cpu")
    ids = np.array([[1] + [3, 4, 5, 6, 7] * 40 + [2]], np.int64)  # 202 tokens: its maps come back in slots
    p = m.prepare({"input_ids": ids}, "dense")
    for _ in range(2):
        run_stages([p, p])  # two stages of one session: shapes learned, slots made
    h = host._current_host()
    before = set(h.maps)
    assert len(before) >= 2
    # stage 1 fed stage 0's logits with no rows to take them: refused where the chain runs, after stage 0 ran
    bad = Spliced("input_ids", (0, "logits"), (0, "logits"), np.zeros(ids.shape, bool), ids.shape, "int64")
    with pytest.raises(AttnvizError, match="holds 0 image tokens and the image gives"):
        run_stages([p, dataclasses.replace(p, feeds={"input_ids": bad})])
    for _ in range(2):
        run_stages([p, p])
    assert set(h.maps) == before
