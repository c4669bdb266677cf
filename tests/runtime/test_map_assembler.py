"""Generation's map assembly (``generate.MapAssembler``) writes into memory kept from an earlier generation of the
same shapes (fresh memory page-faults on its first write): every assembled map must equal the one made into
zeroed memory by hand, and a map a caller still holds -- whole or through a view -- must never be written over."""

import numpy as np

from attnviz.runtime import generate as g


def _parts(rng, prompt=5, steps=4):
    """A site's prompt map [1, 2, prompt, prompt] then one row per step, each a key longer."""
    first = rng.random((1, 2, prompt, prompt), dtype=np.float32)
    return [first, *(rng.random((1, 2, 1, prompt + s + 1), dtype=np.float32) for s in range(steps))]


def _by_hand(parts):
    tq, tk = sum(p.shape[2] for p in parts), max(p.shape[3] for p in parts)
    want = np.zeros((1, 2, tq, tk), np.float32)
    r = 0
    for p in parts:
        want[:, :, r : r + p.shape[2], : p.shape[3]] = p
        r += p.shape[2]
    return want


def _assemble(parts):
    asm = g.MapAssembler()
    for p in parts:
        asm.add({0: p, 1: 2 * p})
    return asm.maps()


def _at(a):
    return a.__array_interface__["data"][0]


def test_assembled_maps_equal_zeroed_memory_filled_by_hand_and_reuse_only_free_buffers():
    rng = np.random.default_rng(0)
    parts = _parts(rng)
    held = _assemble(parts)
    np.testing.assert_array_equal(held[0], _by_hand(parts))
    np.testing.assert_array_equal(held[1], _by_hand([2 * p for p in parts]))
    keep = held[0].copy()
    view = held[1][0, 1]  # a view keeps its whole buffer from reuse
    want_view = view.copy()
    places = {_at(held[0]), _at(held[1])}
    del held
    for seed in range(1, 4):  # later generations of the same shapes, the earlier buffers written over where free
        other = _parts(np.random.default_rng(seed))
        got = _assemble(other)
        np.testing.assert_array_equal(got[0], _by_hand(other))  # the keys not seen yet are zero again
        np.testing.assert_array_equal(got[1], _by_hand([2 * p for p in other]))
        np.testing.assert_array_equal(view, want_view)  # the view's buffer untouched
        assert not np.shares_memory(got[1], view) and not np.shares_memory(got[0], view)
        reused = {_at(got[0]), _at(got[1])} & places
        assert reused, "a free buffer of the same shape was not reused"
        del got
    kept = _assemble(parts)[0]  # a result held while the next generation assembles
    np.testing.assert_array_equal(kept, keep)
    again = _assemble(_parts(np.random.default_rng(9)))
    assert not np.shares_memory(again[0], kept) and not np.shares_memory(again[1], kept)
    np.testing.assert_array_equal(kept, keep)


def test_the_pool_keeps_a_bounded_number_of_bytes(monkeypatch):
    pool = g._Buffers()
    monkeypatch.setattr(pool, "KEEP_BYTES", 4 * 100 * 3)
    taken = [pool.take((100,)) for _ in range(5)]  # all held: each a fresh buffer
    assert len({_at(a) for a in taken}) == 5
    assert len(pool.kept) == 3 and sum(a.nbytes for a in pool.kept) <= pool.KEEP_BYTES
    big = pool.take((1000,))  # over the cap alone: handed out, not kept
    assert big.shape == (1000,) and all(a is not big for a in pool.kept)
