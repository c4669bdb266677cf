"""A cached generation's maps are the loop's own rows arrays, the prompt's rows written into rows the loop kept
ahead for them (``StepPlan.reserve``, ``steps.Rows``, ``generate.MapAssembler``): no new ``[B, H, P+G, K]`` buffer
that the loop's rows are copied into while they still exist (2x the generation's decoder maps at that moment;
whisper-large-v3's shapes: 1.6 GB of copy at 448 tokens).

Checked against rows laid out by hand, against the copy the assembler makes where it cannot write in place (the
old way, bit for bit), by where the maps' memory is (``np.shares_memory`` with the loop's array) and by what
assembling allocates (tracemalloc: an allocation count, not a timing), for Whisper (the three-request and the
one-request paths), GPT-2 (decoder-only) and a LLaVA (vision-language), crash-isolated and in-process; and a
result's map, now a view of the child's slot, must keep that slot from later generations.
"""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest
from one_request import open_without_eos

from attnviz.runtime import generate as g
from attnviz.runtime.steps import Rows

# gc.collect() here frees what each test made; not a traversal of the whole suite's heap (conftest.py)
pytestmark = pytest.mark.usefixtures("young_gc")


def _made():
    return lambda shape: (np.full(shape, 7.0, np.float32), None)  # a reused slot's old bytes


def _by_hand(prompt: int, steps: list[np.ndarray], pad: float) -> np.ndarray:
    """``prompt`` pad rows, then step i's row, its keys past its own ``pad``."""
    lead = steps[0].shape[:-2]
    k = max(s.shape[-1] for s in steps)
    want = np.full((*lead, prompt + len(steps), k), pad, np.float32)
    for i, s in enumerate(steps):
        want[..., prompt + i, : s.shape[-1]] = s[..., 0, :]
    return want


@pytest.mark.parametrize("pad", [0.0, -np.inf])
def test_rows_keep_the_prompts_rows_ahead_upfront_doubling_and_as_parts(pad):
    """``reserve`` pad rows come first in every way the rows are kept: the array made upfront, the array that
    starts small and doubles (rows copied over), the parts an output goes on with when its rows stop fitting, and
    parts that never had an array."""
    rng = np.random.default_rng(0)
    steps = [rng.random((1, 2, 1, 3 + i), dtype=np.float32) for i in range(7)]
    upfront = Rows({"p": pad}, 8, _made(), reserve=4)
    small = Rows({"p": pad}, 8, _made(), reserve=4)
    small.UPFRONT_BYTES = 2 * 2 * 10 * 4  # room for two steps at first
    for s in steps:
        upfront.add("p", s)
        small.add("p", s)
    want = _by_hand(4, steps, pad)
    for rows in (upfront, small):
        got = rows.maps()["p"]
        np.testing.assert_array_equal(got, want)
        assert np.shares_memory(got, rows.arrays["p"]) and rows.arrays["p"].shape[-2] == 4 + 8
    parts = Rows({"p": pad}, 8, _made(), reserve=4)
    for s in steps[:3]:
        parts.add("p", s)
    wide = rng.random((1, 2, 1, 40), dtype=np.float32)  # more keys than foreseen: parts from here
    parts.add("p", wide)
    assert "p" in parts.parts
    np.testing.assert_array_equal(parts.maps()["p"], _by_hand(4, [*steps[:3], wide], pad))
    bare = Rows({"p": pad}, 8, _made(), reserve=4)
    bare.add("p", np.zeros((1, 2, 0, 0), np.float32))  # an empty first map (an If branch that did not run)
    bare.add("p", steps[0])
    assert "p" in bare.bare
    np.testing.assert_array_equal(bare.maps()["p"], _by_hand(4, [steps[0]], pad))


def _site_parts(rng, prompt=5, steps=6, heads=3, keys=None):
    """A site's prompt map [1, H, P, kP] and the loop's rows as Rows leaves them with ``prompt`` rows reserved
    (pad 0); ``keys``: a cross site's fixed key count, else self-attention's (one more a step)."""
    kp = keys or prompt
    first = rng.random((1, heads, prompt, kp), dtype=np.float32)
    rows = [rng.random((1, heads, 1, keys or prompt + s + 1), dtype=np.float32) for s in range(steps)]
    loop = _by_hand(prompt, rows, 0.0)
    return first, rows, loop


def _copied(parts):
    """The map as the assembler copies it (the old way): every part's rows in turn, missing keys 0."""
    tq, tk = sum(p.shape[2] for p in parts), max(p.shape[3] for p in parts)
    want = np.full((1, parts[0].shape[1], tq, tk), 0.0, np.float32)
    r = 0
    for p in parts:
        want[:, :, r : r + p.shape[2], : p.shape[3]] = p
        r += p.shape[2]
    return want


def test_the_prompts_rows_go_into_the_loops_array_and_nothing_is_copied():
    """Self and cross sites: the assembled map is the loop's array itself (reserved rows written, the keys past the
    prompt's 0 though the array held 7s there), equal to the old copy of [prompt; steps]; assembling allocates under
    2 % of the maps (tracemalloc).  The old assembler made a new map: its allocation was the maps' size."""
    rng = np.random.default_rng(1)
    before, loop, want = {}, {}, {}
    for i, keys in enumerate((None, 1500)):
        first, rows, whole = _site_parts(rng, prompt=4, steps=120, heads=8, keys=keys)
        whole[:, :, :4] = 7.0  # what a reused slot may hold there
        before[i], loop[i], want[i] = first, whole, _copied([first, *rows])
    asm = g.MapAssembler()
    asm.add(before)
    asm.add(loop, reserved=4)
    nbytes = sum(a.nbytes for a in loop.values())
    tracemalloc.start()
    try:
        got = asm.maps()
        allocated = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    for i in want:
        assert got[i] is loop[i]
        np.testing.assert_array_equal(got[i], want[i])
    assert allocated < 0.02 * nbytes, (allocated, nbytes)


def test_parts_that_do_not_fill_the_reserved_rows_are_copied_without_them():
    """Where the prompt's rows cannot go in place -- a site the prompt did not have, a prompt of other rows than
    reserved, a prompt with more keys than the loop's, a loop array that cannot be written (unpickled) -- the map is
    copied as before, the reserved rows left out."""
    rng = np.random.default_rng(2)
    first, rows, whole = _site_parts(rng)
    cases = {
        "no prompt": ([], whole, rows),
        "other rows": ([first[:, :, :3]], whole, [first[:, :, :3], *rows]),
        "more keys": ([np.pad(first, ((0, 0), (0, 0), (0, 0), (0, 20)))], whole, None),
    }
    read_only = whole.copy()
    read_only.flags.writeable = False
    cases["read-only"] = ([first], read_only, [first, *rows])
    for name, (prompt, loop, parts) in cases.items():
        asm = g.MapAssembler()
        for p in prompt:
            asm.add({0: p})
        asm.add({0: loop}, reserved=5)
        got = asm.maps()[0]
        assert not np.shares_memory(got, loop), name
        if parts is None:
            parts = [prompt[0], *rows]
        np.testing.assert_array_equal(got, _copied(parts), err_msg=name)


# --------------------------------------------------------------------------- whole generations
RATE = 16000


def _chirp(seconds=2.5, f0=100.0, f1=4000.0):
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.5 * np.sin(2 * np.pi * (f0 * t + (f1 - f0) / (2 * seconds) * t**2))).astype(np.float32)


class _Watch:
    """MapAssembler.maps watched: per generation, the sites assembled, whether each map is its loop part's memory,
    their bytes, and what assembling allocated (a fresh buffer pool, so that the copy path would allocate)."""

    def __init__(self, monkeypatch):
        self.seen: list[dict] = []
        real = g.MapAssembler.maps
        monkeypatch.setattr(g, "_BUFFERS", g._Buffers())

        def maps(asm):
            tracemalloc.start()
            try:
                out = real(asm)
                allocated = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            sites = [i for i, parts in asm.parts.items() if len(parts) > 1]
            self.seen.append(
                dict(
                    sites=len(sites),
                    shared=all(np.shares_memory(out[i], asm.parts[i][-1]) for i in sites),
                    nbytes=sum(out[i].nbytes for i in sites),
                    allocated=allocated,
                )
            )
            return out

        monkeypatch.setattr(g.MapAssembler, "maps", maps)


def _no_copy(watch: _Watch, sites: int) -> None:
    for w in watch.seen:
        assert w["sites"] == sites and w["shared"], w
        assert w["allocated"] < 0.1 * w["nbytes"], w


def _same(a, b) -> None:
    assert a.info["generated_ids"] == b.info["generated_ids"]
    for x, y in zip(a.maps, b.maps):
        x, y = x.array(), y.array()
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


@pytest.mark.slow
@pytest.mark.parametrize("inprocess", [False, True], ids=["isolated", "in-process"])
def test_whisper_maps_are_the_loops_rows_and_equal_the_copy(optimum_export, monkeypatch, inprocess):
    """The three-request generation (the first of a shape) and the one-request one (the next): every decoder site's
    map is its loop array, assembling allocates under 10 % of the maps, and the maps equal, bit for bit, the ones
    assembled by copying (in-place writing switched off)."""
    if inprocess:
        monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
    m = open_without_eos(optimum_export("whisper") / "onnx")
    watch = _Watch(monkeypatch)
    clip = _chirp()
    first = m.analyze(audio=clip, generate=30)
    m._enc_cache = None
    again = m.analyze(audio=clip, generate=30)
    decoder = sum(s.stack == "decoder" for s in again.sites)
    assert decoder and len(watch.seen) == 2
    _no_copy(watch, decoder)
    monkeypatch.setattr(g, "_in_place", lambda parts, reserved: False)
    m._enc_cache = None
    copied = m.analyze(audio=clip, generate=30)
    assert watch.seen[-1]["sites"] == decoder and not watch.seen[-1]["shared"]
    _same(first, copied)
    _same(again, copied)


@pytest.mark.slow
@pytest.mark.parametrize("inprocess", [False, True], ids=["isolated", "in-process"])
def test_gpt2_maps_are_the_loops_rows_and_equal_the_copy(optimum_export, monkeypatch, inprocess):
    if inprocess:
        monkeypatch.setenv("ATTNVIZ_INPROCESS", "1")
    m = open_without_eos(optimum_export("gpt2") / "onnx")
    watch = _Watch(monkeypatch)
    prompt = np.array([[3, 4, 5]])
    feeds = {"input_ids": prompt, "attention_mask": np.ones_like(prompt)}
    got = m.analyze(feeds=feeds, generate=80)  # 2 layers x 4 heads x 82 x 82: over INLINE_BYTES, a slot
    _no_copy(watch, len(got.sites))
    monkeypatch.setattr(g, "_in_place", lambda parts, reserved: False)
    _same(got, m.analyze(feeds=feeds, generate=80))


VLM_PROMPTS = {
    "llava_repo": "<s> <image> a photo of the cat",
    "idefics3_repo": "<s> <image> a photo of the cat",
    "qwen2vl_repo": "<|vision_start|><|image_pad|><|vision_end|>describe the cat",
    "paligemma_repo": "<image>a photo of the cat",
}


@pytest.mark.slow
@pytest.mark.parametrize("fixture", list(VLM_PROMPTS))
def test_vlm_maps_are_the_loops_rows_and_equal_the_copy(request, fixture, tmp_path, monkeypatch):
    """Vision-language models: the decoder's sites in place (the reserved rows are the spliced prompt's, image
    tokens included), the tower's frames as they were; both generation paths."""
    pytest.importorskip("torch")
    from PIL import Image

    image = tmp_path / "photo.png"
    Image.fromarray((np.random.default_rng(3).random((45, 70, 3)) * 255).astype(np.uint8)).save(image)
    m = open_without_eos(request.getfixturevalue(fixture))
    watch = _Watch(monkeypatch)
    kw = dict(text=VLM_PROMPTS[fixture], image=str(image), generate=8)
    first = m.analyze(**kw)
    again = m.analyze(**kw)
    decoder = sum(s.stack == "decoder" for s in again.sites)
    assert decoder and len(watch.seen) == 2
    for w in watch.seen:
        assert w["sites"] == decoder and w["shared"], w
    monkeypatch.setattr(g, "_in_place", lambda parts, reserved: False)
    copied = m.analyze(**kw)
    _same(first, copied)
    _same(again, copied)


@pytest.mark.slow
def test_a_held_generations_maps_keep_their_slot_from_later_generations(optimum_export):
    """GPT-2, isolated: a result's maps (and a head's view of one) are views of the child's slot the loop wrote;
    later generations of the same shapes, other tokens, never write over them, and once the result and the view are
    dropped the slot goes back and is reused (no slot grows per generation)."""
    from attnviz.runtime import host

    m = open_without_eos(optimum_export("gpt2") / "onnx")
    ids_a = np.array([[3, 4, 5]])
    ids_b = np.array([[7, 8, 9]])

    def gen(ids):
        return m.analyze(feeds={"input_ids": ids, "attention_mask": np.ones_like(ids)}, generate=80)

    held = gen(ids_a)
    want = [x.array().copy() for x in held.maps]
    head = held.maps[1].head(0, 1)
    head_want = head.copy()
    slots = {i: mm for i, mm in host._host.maps.items()}
    for ids in (ids_b, ids_a, ids_b):
        r = gen(ids)
        assert not any(np.shares_memory(x.array(), y.array()) for x in r.maps for y in held.maps)
        del r
        gc.collect()
        for x, w in zip(held.maps, want):
            np.testing.assert_array_equal(x.array(), w)
    other = gen(ids_b)
    assert not np.array_equal(other.maps[1].array(), want[1])
    del held, other
    gc.collect()
    for ids in (ids_b, ids_b):  # the result gone, the head's view still holds its slot
        gen(ids)
        gc.collect()
        np.testing.assert_array_equal(head, head_want)
    del head
    gc.collect()
    for ids in (ids_b, ids_b, ids_b):
        gen(ids)
        gc.collect()
    assert len(host._host.maps) <= len(slots) + 4  # the slots go round: a generation does not keep its own
