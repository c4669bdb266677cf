"""A Whisper folder's generation as one request (issue 23's time target): the encoder, the decoder on the prompt,
the first token and the first chunk of cached steps run where the sessions live (``FolderCache.start_steps``,
``worker.Server.chain_steps``), the states and the prompt's presents handed on there as ``Taken`` feeds.  The
folder's first generation of a shape runs as before (encoder, prompt, loop: three requests) and learns the shapes
the one-request path names before they exist; every later one must give the same ids and the same maps, bit for
bit, in the crash-isolation child and in-process, and refuse what the three requests refused, in the same line.
"""

import numpy as np
import pytest
from one_request import count_calls, count_ops, open_without_eos, same_generation

from attnviz import AttnvizError
from attnviz.runtime import model_loop as model_module  # where the generation loop reads CHUNK_S and Loop
from attnviz.runtime.folder import FolderCache

pytestmark = pytest.mark.slow
RATE = 16000
STEPS = 20


@pytest.fixture(scope="module")
def folder(optimum_export):
    return optimum_export("whisper") / "onnx"


def chirp(seconds=2.5, f0=100.0, f1=4000.0):
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.5 * np.sin(2 * np.pi * (f0 * t + (f1 - f0) / (2 * seconds) * t**2))).astype(np.float32)


@pytest.fixture
def requests(monkeypatch):
    """The ops sent to the crash-isolation child, in order."""
    return count_ops(monkeypatch)


@pytest.fixture
def starts(monkeypatch):
    """How many generations started through the three-request path (FolderCache.start, the real one)."""
    return count_calls(monkeypatch, FolderCache, "start")


@pytest.mark.parametrize("inprocess", [False, True], ids=["isolated", "in-process"])
def test_one_request_generation_equals_the_three_request_one_bit_for_bit(folder, monkeypatch, starts, inprocess):
    if inprocess:
        monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
    m = open_without_eos(folder)
    clip = chirp()
    first = m.analyze(audio=clip, generate=STEPS)  # three requests: the shapes learned
    assert starts[0] == 1 and len(set(first.info["generated_ids"])) > 2
    m._enc_cache = None  # the encoder runs again, as the chain's first stage
    again = m.analyze(audio=clip, generate=STEPS)
    assert starts[0] == 1  # the one-request path ran
    assert again.info["generation"] == "kv-cache" and len(again.info["generated_ids"]) == STEPS
    same_generation(again, first)
    for n in (1, 2):  # the first token alone, and one step after it
        short = m.analyze(audio=clip, generate=n)
        assert starts[0] == 1 and short.info["generated_ids"] == first.info["generated_ids"][:n]
        for x, y in zip(short.maps, first.maps):  # the decoder's rows so far
            x, y = x.array(), y.array()
            np.testing.assert_array_equal(x, y[..., : x.shape[2], : x.shape[3]])


def test_the_isolated_generation_is_one_request(folder, requests):
    m = open_without_eos(folder)
    clip = chirp()
    m.analyze(audio=clip, generate=STEPS)
    m._enc_cache = None
    del requests[:]
    m.analyze(audio=clip, generate=STEPS)
    assert requests == ["chain_steps"]


def test_the_loop_goes_on_past_the_first_chunk_and_after_a_kept_encoder_run(folder, monkeypatch, requests):
    """Chunks of one step (the loop held in the child between requests, reading its copy of the chain's outputs)
    and a generation whose encoder run was kept from an analysis of the same clip (the chain then is the decoder
    alone): the same ids and maps as the three-request path."""
    m = open_without_eos(folder)
    clip = chirp(1.9, 300.0, 2000.0)
    want = m.analyze(audio=clip, generate=STEPS)
    monkeypatch.setattr(model_module, "CHUNK_S", 0.0)
    m._enc_cache = None
    del requests[:]
    chunked = m.analyze(audio=clip, generate=STEPS)
    assert requests[0] == "chain_steps" and requests.count("steps") == STEPS - 2  # the first token, 1 step a chunk
    same_generation(chunked, want)
    m.analyze(audio=clip, mode="dense")  # the encoder's run is kept for this clip
    del requests[:]
    kept = m.analyze(audio=clip, generate=STEPS)
    assert "run" not in requests and requests[0] == "chain_steps"
    same_generation(kept, want)


@pytest.mark.parametrize("inprocess", [False, True], ids=["isolated", "in-process"])
def test_states_gone_nan_are_refused_in_the_same_line_and_the_next_run_is_whole(folder, monkeypatch, starts, inprocess):
    """An infinite feature makes the encoder's states NaN: the three-request path refused the decoder's feed in one
    line; the chain checks its Taken feed where it is made and says the same.  Nothing is left behind: the next
    generation equals the first."""
    if inprocess:
        monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
    m = open_without_eos(folder)
    feats = np.zeros((1, 80, 500), np.float32)
    prompt = np.array([[int(t) for t in m.meta["speech_prompt"]["ids"]]])
    bad = feats.copy()
    bad[0, 3, 7] = np.inf
    lines = []
    good = []
    for _ in range(2):  # first through the three requests (no shapes learned yet), then through the one
        m._enc_cache = None
        with pytest.raises(AttnvizError) as e:
            m.analyze(feeds={"input_features": bad, "decoder_input_ids": prompt}, generate=STEPS)
        lines.append(str(e.value))
        m._enc_cache = None
        good.append(m.analyze(feeds={"input_features": feats, "decoder_input_ids": prompt}, generate=STEPS))
    assert starts[0] == 2  # the first refusal and the first good run started the three-request way
    refusal = "input 'encoder_hidden_states' contains NaN values; every map would be NaN — fix the inputs"
    assert lines[0] == lines[1] == refusal
    same_generation(good[1], good[0])


def test_a_loop_step_runs_the_inner_session_to_the_same_outputs(folder):
    """``loop_run``: a generation step skips ``InferenceSession.run``'s Python feed-name checks (the loop feeds the
    model's own inputs) and calls the same C++ run: every output equal to the public run's, bit for bit; a feed the
    model does not take is still refused by onnxruntime."""
    import onnxruntime as ort

    from attnviz.runtime.isolation import loop_run

    sess = ort.InferenceSession(str(folder / "decoder_with_past_model.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    feeds = {}
    for i in sess.get_inputs():
        dims = {"batch_size": 1, "decoder_sequence_length": 1, "past_decoder_sequence_length": 5}
        shape = [d if isinstance(d, int) else dims.get(d, 250) for d in i.shape]  # encoder_sequence_length: 250
        feeds[i.name] = (
            rng.integers(0, 60, shape).astype(np.int64) if "int" in i.type else rng.standard_normal(shape, np.float32)
        )
    names = [o.name for o in sess.get_outputs()]
    run = loop_run(sess)
    assert run != sess.run  # the inner session's run, where this onnxruntime has one
    for a, b in zip(run(names, feeds), sess.run(names, feeds)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(Exception, match="input"):
        run(names, {**feeds, "not_an_input": np.zeros(1, np.float32)})


def _stage_model(path, d=64, vocab=50):
    """A chain's first stage: ``memory`` (an encoder's states, over INLINE_BYTES) and ``first`` (the prompt's
    logits) handed on as they are."""
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["memory"]), helper.make_node("Identity", ["l"], ["first"])],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, "m", d]),
            helper.make_tensor_value_info("l", TensorProto.FLOAT, [1, 1, vocab]),
        ],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("memory", "first")],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    return path


def test_an_output_held_for_the_loop_is_copied_before_its_slot_goes_back(tmp_path):
    """``chain_steps`` with an output held in the child (the prompt's presents, which only the loop reads): its
    item comes back empty and its slot is free again after the first chunk, so the loop, going on in later
    chunks, must read its own copy.  Every free slot is written over between chunks: ids and maps equal the same
    loop run in this process on plain arrays."""
    import pickle

    import onnxruntime as ort
    from test_host_slots import _cache_step_model, cache_step_plan

    from attnviz.runtime.isolation import INLINE_BYTES, Taken
    from attnviz.runtime.steps import Loop, advance
    from attnviz.runtime.worker import Server

    stage, step = _stage_model(tmp_path / "stage.onnx"), _cache_step_model(tmp_path / "step.onnx")
    rng = np.random.default_rng(5)
    memory = rng.standard_normal((1, 1, 300, 64)).astype(np.float32)
    logits = rng.standard_normal((1, 1, 50)).astype(np.float32)
    past = rng.standard_normal((1, 1, 2, 64)).astype(np.float32)
    assert memory.nbytes > INLINE_BYTES
    plan = cache_step_plan()
    steps = 6
    first = int(np.argmax(logits[0, -1]))
    local = ort.InferenceSession(str(step), providers=["CPUExecutionProvider"])
    want = advance(Loop(plan, {"past": past, "memory": memory.copy()}, 2), first, steps - 1, None, local.run, 60.0)
    assert len(set(want.ids)) > 1  # the tokens move: a cache read wrongly would show

    srv = Server(None, str(tmp_path))
    sent: list[bytes] = []
    srv.send = sent.append
    srv.handle("create", (1, stage.read_bytes(), {"provider": "cpu"}))
    srv.handle("create", (2, step.read_bytes(), {"provider": "cpu"}))

    def scribble():  # every free slot written over, as the next requests' outputs would
        for i in srv.pool.free:
            srv.pool.slots[i].view[:] = 255

    feeds = {"input_ids": np.array([[0]]), "past": past, "memory": Taken("memory", (0, "memory"), memory.shape, "f4")}
    start = (plan, feeds, 2, (0, "first", ()), [(0, "memory")], None)
    srv.handle("chain_steps", ([(1, ["memory", "first"], {"x": memory, "l": logits})], 2, start, steps, None, 0.0, []))
    status, (ids, _, names, items, _, per_stage, _, _, _) = pickle.loads(sent[-1])
    assert status == "ok", ids
    assert per_stage[0][0] == ("inline", None) and len(ids) == 2  # held; the first token and one step
    assert names == []  # the generation's rows go out with its last chunk
    while len(ids) < steps:
        scribble()
        srv.handle("steps", (2, None, ids[-1], steps - len(ids), None, 0.0, []))
        status, (got, _, names, items, _, _, _) = pickle.loads(sent[-1])
        assert status == "ok", got
        ids += got
        assert (names == ["probs"]) == (len(ids) == steps)
    assert ids == [first, *want.ids]
    np.testing.assert_array_equal(items[0][1], want.maps["probs"])  # every step's row
