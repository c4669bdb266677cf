"""Issue 22 (time): a vision–language model's teacher-forced run is one request to the crash-isolation child --
vision encoder, embeddings, the features spliced into the image tokens' rows and the decoder run there
(attnviz/runtime/chain.py) -- with the maps of the same run in-process, and a repeated run reuses the child's
shared-memory slots instead of making them anew."""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pytest
from onnx import TensorProto, helper

pytest.importorskip("torch")
pytest.importorskip("transformers")

import vlm_models as vm
from one_request import count_ops, nan_llava_copy
from onnx_builders import tiny_text_model
from PIL import Image

from attnviz import AttnvizError
from attnviz.runtime import host, open_model
from attnviz.runtime.analyze import all_finite
from attnviz.runtime.graph.index import Graph
from attnviz.runtime.isolation import Spliced
from attnviz.runtime.model import run_stages
from attnviz.runtime.session import make_session
from attnviz.runtime.worker import KEEP_RUNS

gi = importlib.import_module("attnviz.runtime.graph.instrument")  # the module (the package exports its function)
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
    return count_ops(monkeypatch)


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
    # enough runs that a free slot an earlier test left in the shared child ages out before the snapshot
    for _ in range(KEEP_RUNS + 1):
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


@pytest.mark.parametrize(
    "a",
    [
        np.random.default_rng(0).random((1, 4, 9, 9), dtype=np.float32),
        np.full((1, 1, 4, 4), 3e38, np.float32),  # finite, but their squares overflow: decided exactly
        np.zeros((1, 1, 0, 0), np.float32),
        np.random.default_rng(1).random((1, 2, 8, 8), dtype=np.float32)[:, :, ::2],  # not contiguous
        np.random.default_rng(2).random((1, 2, 5, 5)).astype(np.float16),
        np.random.default_rng(3).random((1, 2, 5, 5)),  # float64 (a double-precision model's)
        np.full((1, 1, 4, 4), 1e300),  # float64 whose squares overflow: decided exactly
    ],
)
@pytest.mark.parametrize("bad", [None, np.nan, np.inf, -np.inf])
def test_the_maps_finiteness_check_is_numpys(a, bad):
    a = a.copy()
    if bad is not None and a.size:
        a.flat[a.size // 2] = bad
    assert all_finite(a) == bool(np.isfinite(a).all())


@pytest.mark.parametrize("isolated", [True, False])
def test_nan_decoder_attention_is_refused_in_one_line(llava_with_past_repo, image, tmp_path, monkeypatch, isolated):
    """A NaN weight in the decoder's first layer makes its attention NaN (the vision tower's features stay finite,
    so the splice passes): the teacher-forced run is refused in analyze's one line, with the isolation child and
    in-process; generating, the prompt's NaN cache is refused in one line before the first cached step."""
    if not isolated:
        monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
    repo = nan_llava_copy(llava_with_past_repo, tmp_path / "nan-llava")
    m = open_model(repo, provider="cpu")
    with pytest.raises(AttnvizError) as e:
        m.analyze(text=PROMPT, image=str(image))
    assert "\n" not in str(e.value)
    assert str(e.value).startswith("the model produced NaN/Inf attention at decoder")
    assert str(e.value).endswith("check the model's weights and inputs")
    with pytest.raises(AttnvizError, match="^input 'past_key_values.0.key' contains NaN values") as e:
        m.analyze(text=PROMPT, image=str(image), generate=3)
    assert "\n" not in str(e.value)


def test_an_identity_cast_before_the_maps_is_folded_with_the_same_maps(llava_with_past_repo, image, monkeypatch):
    """Eager attention casts its probabilities to the type they have (softmax(dtype=float32).to(float32)): an
    exposed map is the Softmax's own output, no Cast copying it (onnxruntime drops such a Cast from the plain graph
    but must keep one whose output is a graph output), and the maps are the unfolded graph's bit for bit."""
    m = open_model(llava_with_past_repo, provider="cpu").decoder
    folded, exposed = gi.instrument(m.graph, m._sites, "dense")
    by_output = {o: n for n in folded.graph.node for o in n.output}
    assert [by_output[name].op_type for name in exposed.outputs] == ["Softmax"] * len(exposed.outputs)
    # the original graph: each exposed tensor made by a Cast to float32 of a float32 tensor
    assert {m.graph.nodes[m.graph.producer[name]].op_type for name in exposed.outputs} == {"Cast"}
    monkeypatch.setattr(gi, "_fold_identity_casts", lambda *a: None)
    kept, _ = gi.instrument(m.graph, m._sites, "dense")
    assert len(kept.graph.node) == len(folded.graph.node) + 2 * len(exposed.outputs)  # Llama casts twice
    t = 9
    feeds = {
        "inputs_embeds": np.random.default_rng(0).standard_normal((1, t, 32)).astype(np.float32),
        "attention_mask": np.ones((1, t), np.int64),
        "position_ids": np.arange(t, dtype=np.int64)[None],
    }
    for i in m.inputs:
        if m.roles[i.name] == "past":
            feeds[i.name] = np.zeros((1, int(i.shape[1]), 0, int(i.shape[3])), np.float32)
    got = [
        make_session(p.SerializeToString(), "cpu", 1, external_dir=m.external_dir)[0].run(exposed.outputs, feeds)
        for p in (folded, kept)
    ]
    for a, b in zip(*got):
        assert np.isfinite(a).all() and a.shape == (1, 4, t, t)
        np.testing.assert_array_equal(a, b)


def test_a_cast_that_converts_is_not_folded():
    """A Cast to another type (an fp16 graph's probabilities cast to float32) is a real conversion: it stays."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 2, 3, 3])
    nodes = [helper.make_node("Softmax", ["x"], ["p"], axis=-1), helper.make_node("Cast", ["p"], ["q"], to=1)]
    g = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("q", TensorProto.FLOAT, None)])
    model = helper.make_model(g)
    idx = Graph(model)
    assert gi._identity_cast_input(model.graph.node[1], idx, set()) is None
    nodes[1] = helper.make_node("Cast", ["p"], ["q"], to=TensorProto.FLOAT16)
    same = Graph(helper.make_model(helper.make_graph(nodes, "g", [x], [])))
    assert gi._identity_cast_input(same.proto.node[1], same, set()) == "p"
    assert gi._identity_cast_input(same.proto.node[1], same, {"p"}) is None  # an input, output or exposed tensor
