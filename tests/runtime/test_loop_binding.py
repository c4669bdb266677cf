"""The generation loop's cache kept where onnxruntime wrote it (issue 26: IO binding, ``steps.DeviceRun``).

On CUDA the loop binds the ``present.*`` outputs to device memory and feeds them back as OrtValues; the same code
runs on the CPU with ``ATTNVIZ_LOOP_BINDING=on`` (cpu OrtValues), which is how these tests reach it without a GPU.
The reference is the numpy-fed loop (``off``, the CPU default), which earlier tests hold to transformers: every
token and every step's map rows must be equal bit for bit, for a decoder-only with-past file and a merged one, an
encoder–decoder folder (Marian, Whisper: the one-request chain) and a merged encoder–decoder file alone (whose
encoder half of the cache comes back as an empty placeholder), and a VLM whose tokens go through an embedding
session beside the decoder; in the crash-isolation child with one step a chunk (the cache held in the child
between requests) and in-process.  A generation that ends, fails or is replaced leaves no cache behind.
"""

from __future__ import annotations

import gc
import pickle
import shutil
import weakref

import numpy as np
import onnxruntime as ort
import pytest
from one_request import count_calls, open_without_eos, same_generation
from test_host_slots import _cache_step_model, cache_step_plan

from attnviz import AttnvizError
from attnviz.runtime import model_loop as model_module  # where the generation loop reads CHUNK_S and Loop
from attnviz.runtime.isolation import INLINE_BYTES, SlotFeed
from attnviz.runtime.steps import BINDING_ENV, DeviceRun, Loop, advance, loop_device
from attnviz.runtime.worker import Server

# gc.collect() here frees what each test made; not a traversal of the whole suite's heap (conftest.py)
pytestmark = pytest.mark.usefixtures("young_gc")

STEPS = 10


def test_cuda_binds_by_default_and_the_switch_reaches_both_providers(monkeypatch):
    monkeypatch.delenv(BINDING_ENV, raising=False)
    assert loop_device("CUDAExecutionProvider") == "cuda"
    assert loop_device("CPUExecutionProvider") == ""  # numpy feeds on CPU, as a plain loop
    monkeypatch.setenv(BINDING_ENV, "on")
    assert loop_device("CPUExecutionProvider") == "cpu" and loop_device("CUDAExecutionProvider") == "cuda"
    monkeypatch.setenv(BINDING_ENV, "off")
    assert loop_device("CUDAExecutionProvider") == ""
    monkeypatch.setenv(BINDING_ENV, "gpu")
    with pytest.raises(AttnvizError, match=r"^ATTNVIZ_LOOP_BINDING='gpu' is not a loop binding; use one of auto, on"):
        loop_device("CPUExecutionProvider")


# --------------------------------------------------------------------------- the child's loop, request by request
def _server(tmp_path):
    path = _cache_step_model(tmp_path / "step.onnx")
    srv = Server(None, str(tmp_path))
    sent: list[bytes] = []
    srv.send = sent.append
    srv.handle("create", (1, path.read_bytes(), {"provider": "cpu"}))
    return srv, sent, path


def _chunk(srv, sent, start, token, n, release=()):
    """One ``steps`` request with a budget of 0 s (one step a chunk): (status, ids, the generation's probs rows,
    None before its last chunk)."""
    srv.handle("steps", (1, start, token, n, None, 0.0, list(release)))
    status, reply = pickle.loads(sent[-1])
    if status != "ok":
        return status, reply, None
    ids, _, names, items, *_ = reply
    if "probs" not in names:
        return status, ids, None
    item = items[names.index("probs")]
    rows = srv.pool.slots[item[1]].array(np.dtype(item[2]), item[3]).copy() if item[0] == "slot" else item[1]
    return status, ids, rows


def test_the_childs_device_cache_lives_between_chunks_and_equals_the_numpy_loop(tmp_path):
    """Bound to cpu OrtValues: between requests the child's loop holds the cache as an OrtValue it never copied
    out, the encoder's half (a slot lent to the parent, handed back and written over after the first chunk) is
    the child's own copy; ids and every row equal the numpy loop's."""
    srv, sent, path = _server(tmp_path)
    rng = np.random.default_rng(4)
    memory = rng.standard_normal((1, 1, 300, 64)).astype(np.float32)
    past = rng.standard_normal((1, 1, 2, 64)).astype(np.float32)
    assert memory.nbytes > INLINE_BYTES
    local = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = advance(Loop(cache_step_plan(), {"past": past, "memory": memory.copy()}, 2), 7, STEPS, None, local.run, 60)
    assert len(set(want.ids)) > 1  # the tokens move: a cache read wrongly would show

    slot = srv.pool.take(memory.nbytes)
    assert slot is not None
    slot.array(memory.dtype, memory.shape)[...] = memory
    feeds = {"input_ids": np.array([[7]]), "past": past, "memory": SlotFeed(slot.id, "<f4", memory.shape)}
    start = (cache_step_plan(device="cpu"), feeds, 2, None)
    ids: list[int] = []
    release: list[int] = []
    while len(ids) < STEPS:
        status, got, rows = _chunk(srv, sent, start, ids[-1] if ids else 7, STEPS - len(ids), release)
        assert status == "ok", got
        ids += got
        assert (rows is None) == (len(ids) < STEPS)  # the rows go out once, with the last chunk
        start = None
        if len(ids) < STEPS:
            cache = srv.loops[1].feeds
            assert isinstance(cache["past"], ort.OrtValue) and cache["past"].shape() == [1, 1, 2 + len(ids), 64]
            assert isinstance(cache["memory"], np.ndarray)  # no step replaces it: the child's copy, read in place
        if release != [slot.id]:  # the parent drops the presents: the slot goes back, and a run writes over it
            release = [slot.id]
            slot.array(memory.dtype, memory.shape)[...] = -1.0
    assert ids == want.ids
    np.testing.assert_array_equal(rows, want.maps["probs"])  # every step's row, as the one-chunk loop stacked them
    assert 1 not in srv.loops  # the generation ended: its cache went with it


def test_a_new_or_failed_generation_leaves_no_earlier_cache_behind(tmp_path):
    """A generation left after one chunk (a caller cancelled between chunks) is dropped when the next one starts;
    a step that fails (a token the embedding table has no row for) drops the loop and its cache."""
    srv, sent, _ = _server(tmp_path)
    rng = np.random.default_rng(5)
    feeds = {
        "input_ids": np.array([[3]]),
        "past": rng.standard_normal((1, 1, 2, 64)).astype(np.float32),
        "memory": rng.standard_normal((1, 1, 40, 64)).astype(np.float32),
    }
    plan = cache_step_plan(device="cpu")

    def first_chunk():
        status, got, _ = _chunk(srv, sent, (plan, feeds, 2, None), 3, STEPS)
        assert status == "ok" and len(got) == 1
        return weakref.ref(srv.loops[1].feeds["past"])

    held = first_chunk()
    again = first_chunk()  # a second generation from the same start
    gc.collect()
    assert held() is None and again() is srv.loops[1].feeds["past"]
    status, reply, _ = _chunk(srv, sent, None, 999, STEPS - 1)  # Gather out of bounds in onnxruntime
    assert status != "ok" and "999" in str(reply)
    gc.collect()
    assert again() is None and 1 not in srv.loops


def test_the_bound_run_computes_only_what_the_loop_reads(tmp_path):
    """An output the plan fetches but the loop never reads is not bound (None); the carried present comes back as
    an OrtValue, the logits and the map as arrays equal to the numpy run's."""
    path = _cache_step_model(tmp_path / "step.onnx")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(6)
    feeds = {
        "input_ids": np.array([[4]]),
        "past": rng.standard_normal((1, 1, 3, 64)).astype(np.float32),
        "memory": rng.standard_normal((1, 1, 9, 64)).astype(np.float32),
    }
    names = ["probs", "logits", "present"]
    plan = cache_step_plan(device="cpu", maps=())
    got = DeviceRun(sess, plan)(names, dict(feeds))
    want = sess.run(names, feeds)
    assert got[0] is None  # probs: not a map of this plan
    assert isinstance(got[2], ort.OrtValue)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[2].numpy(), want[2])


# --------------------------------------------------------------------------- whole generations, per architecture
def _merged_encoder_decoder_alone(root, tmp_path):
    """Marian's decoder_model_merged.onnx opened alone (its encoder beside it): the with-past branch returns the
    encoder half of the cache as an empty placeholder, which the loop must keep as it was."""
    dst = tmp_path / "marian-merged"
    shutil.copytree(root / "onnx", dst)
    for name in ("decoder_model.onnx", "decoder_with_past_model.onnx"):
        (dst / name).unlink()
    return dst / "decoder_model_merged.onnx"


def _gpt2_merged(root, tmp_path):
    from test_optimum_files_alone import _merged_decoder_only

    for name in ("config.json", "tokenizer.json"):
        shutil.copy(root / "onnx" / name, tmp_path / name)
    return _merged_decoder_only(root / "onnx" / "model.onnx", tmp_path / "decoder_model_merged.onnx")


def _chirp(seconds=2.5, f0=100.0, f1=4000.0, rate=16000):
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * (f0 * t + (f1 - f0) / (2 * seconds) * t**2))).astype(np.float32)


def _case(name, request, tmp_path):
    """(model path, analyze's keyword arguments) of one architecture."""
    export = request.getfixturevalue("optimum_export")
    prompt = np.array([[5, 17, 42, 8]])
    text = {"feeds": {"input_ids": prompt, "attention_mask": np.ones_like(prompt)}}
    if name == "gpt2":
        return export("gpt2") / "onnx", text
    if name == "gpt2-merged":
        return _gpt2_merged(export("gpt2"), tmp_path), text
    if name == "marian":
        return export("marian") / "onnx", {"text": "w5 w9 w13 w2 w40"}
    if name == "marian-merged-alone":
        return _merged_encoder_decoder_alone(export("marian"), tmp_path), {"text": "w5 w9 w13 w2 w40"}
    if name == "whisper":
        return export("whisper") / "onnx", {"audio": _chirp()}
    pytest.importorskip("torch")
    from PIL import Image

    img = tmp_path / "photo.png"
    Image.fromarray((np.random.default_rng(3).random((45, 70, 3)) * 255).astype(np.uint8)).save(img)
    return request.getfixturevalue("llava_repo"), {"text": "<s> <image> a photo of the cat", "image": str(img)}


@pytest.mark.slow
@pytest.mark.parametrize("inprocess", [False, True], ids=["isolated-chunked", "in-process"])
@pytest.mark.parametrize("name", ["gpt2", "gpt2-merged", "marian", "marian-merged-alone", "whisper", "llava"])
def test_a_bound_generation_equals_the_numpy_one_bit_for_bit(name, inprocess, request, tmp_path, monkeypatch):
    """Per binding, the model's first generation (the prompt's run and the loop: separate requests, the shapes
    learned) and a second one (the one-request path where the model has one); with crash isolation one step a
    chunk, so the bound cache lives in the child between requests.  (Some of these tiny models repeat one token:
    each step's map rows still read the whole cache, so a cache fed wrongly shows in the maps.)"""
    path, kw = _case(name, request, tmp_path)
    if inprocess:
        monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
    else:
        monkeypatch.setattr(model_module, "CHUNK_S", 0.0)
    bound = count_calls(monkeypatch, DeviceRun, "__call__")
    made: list[weakref.ref] = []  # every in-process loop (its cache), weakly
    real_loop = model_module.Loop

    def recording(*args, **kwargs):
        loop = real_loop(*args, **kwargs)
        made.append(weakref.ref(loop))
        return loop

    monkeypatch.setattr(model_module, "Loop", recording)
    runs = {}
    for mode in ("off", "on"):
        monkeypatch.setenv(BINDING_ENV, mode)
        m = open_without_eos(path)
        runs[mode] = [m.analyze(**kw, generate=STEPS) for _ in range(2)]
        for r in runs[mode]:
            assert r.info["generation"] == "kv-cache" and len(r.info["generated_ids"]) == STEPS
            assert r.info["loop_cache"] == {"off": "numpy", "on": "cpu"}[mode]
        assert bound[0] == (0 if mode == "off" or not inprocess else 2 * (STEPS - 1))  # counted here in-process
        gc.collect()
        assert len(made) == (2 if inprocess else 0) and all(r() is None for r in made)  # the ended loops' caches
        made.clear()
    off, on = runs["off"], runs["on"]
    for a, b in zip(off, on):
        same_generation(b, a)


def test_feeds_no_step_rewrites_go_to_the_device_once(tmp_path):
    """The lines only CUDA reaches by default (``DeviceRun.move``), run on the CPU: the prompt's cache and the
    encoder's half become OrtValues in the loop's own feeds at the first step and are bound as they are after;
    the token stays an array each step writes.  Ids and rows equal the numpy loop's."""
    path = _cache_step_model(tmp_path / "step.onnx")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    feeds = {
        "past": rng.standard_normal((1, 1, 2, 64)).astype(np.float32),
        "memory": rng.standard_normal((1, 1, 30, 64)).astype(np.float32),
    }
    want = advance(Loop(cache_step_plan(), dict(feeds), 2), 7, STEPS, None, sess.run, 60.0)
    plan = cache_step_plan(device="cpu")
    run = DeviceRun(sess, plan, move=True)
    loop = Loop(plan, dict(feeds), 2)
    got = advance(loop, 7, 1, None, run, 60.0)
    memory = loop.feeds["memory"]
    assert isinstance(memory, ort.OrtValue) and isinstance(loop.feeds["input_ids"], np.ndarray)
    got2 = advance(loop, got.ids[-1], STEPS - 1, None, run, 60.0)
    assert loop.feeds["memory"] is memory  # moved once
    assert got.ids + got2.ids == want.ids
    np.testing.assert_array_equal(np.concatenate([got.maps["probs"], got2.maps["probs"]], axis=-2), want.maps["probs"])
