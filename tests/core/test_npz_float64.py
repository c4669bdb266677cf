"""Maps of floats other than float32 in an ``.npz`` (a user's own float64 maps, a double-precision model's, float16,
big-endian): every map is held as float32, and ``np.load`` then the conversion held the float64 array and its
float32 copy at once (3x the float32 map).  They are now read a band at a time into the float32 array: the same
numbers as numpy's conversion, bit for bit, and a peak of about the float32 map alone."""

from __future__ import annotations

import json
import tracemalloc
import zipfile

import numpy as np
import pytest

from attnviz import AttnvizError
from attnviz.core.io import load_npz


def sites(heads: int) -> np.ndarray:
    site = {"stack": "encoder", "kind": "self", "layer": 0, "heads": heads, "node": "n", "method": "softmax"}
    return np.array(json.dumps([site]))


def awkward(shape: tuple[int, ...]) -> np.ndarray:
    """float64 values, among them ones float32 rounds (ties, subnormals, values past its precision)."""
    a = np.random.default_rng(7).random(shape)
    flat = a.reshape(-1)
    flat[:6] = [1 / 3, 1 + 2**-24, 1 + 3 * 2**-24, 1e-40, 5e-324, 0.0]  # a tie each way, float32 subnormal, underflow
    return a


@pytest.mark.parametrize(
    "dtype,order",
    [("<f8", "C"), ("<f8", "F"), (">f8", "C"), ("<f2", "C"), (">f4", "C")],
    ids=["float64", "float64-fortran", "float64-big-endian", "float16", "float32-big-endian"],
)
@pytest.mark.parametrize("compressed", [False, True], ids=["stored", "deflated"])
def test_a_map_of_other_floats_reads_as_numpys_float32_bit_for_bit(tmp_path, dtype, order, compressed):
    a = np.asarray(awkward((2, 3, 37, 1029)), dtype=dtype, order=order)  # rows wider than a read band's edge
    p = tmp_path / "m.npz"
    (np.savez_compressed if compressed else np.savez)(p, attn_000=a, sites=sites(3))
    got = load_npz(p).maps[0].array()
    want = np.asarray(a, dtype=np.float32)  # numpy's own conversion: what DenseMap made of np.load's array
    assert got.dtype == np.float32 and got.shape == a.shape
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_frames_maps_of_float64_read_as_float32_bit_for_bit(tmp_path):
    """A tower's frames ([frames, H, P, P], each row's count) and frames of several sizes (flat), in float64."""
    blocks = awkward((3, 2, 5, 5))
    flat = awkward((2 * (4 * 4 + 6 * 6),)).reshape(-1)
    p = tmp_path / "f.npz"
    np.savez(
        p,
        attn_000=blocks,
        attn_000_frames=np.array([1, 2]),
        attn_001=flat,
        attn_001_frames=np.array([2]),
        attn_001_sizes=np.array([4, 6]),
        sites=np.array(json.dumps([json.loads(str(sites(2)))[0]] * 2)),
    )
    r = load_npz(p)
    assert np.array_equal(r.maps[0].blocks.view(np.uint32), blocks.astype(np.float32).view(np.uint32))
    assert np.array_equal(r.maps[1].blocks.view(np.uint32), flat.astype(np.float32).view(np.uint32))


def stream_float64_map(path, heads: int, side: int) -> np.ndarray:
    """A [1, heads, side, side] float64 map written head by head (the test never holds it whole); returns the
    float32 of its last head."""
    rng = np.random.default_rng(3)
    with zipfile.ZipFile(path, "w") as z:
        with z.open("sites.npy", "w") as f:
            np.lib.format.write_array(f, sites(heads))
        with z.open("attn_000.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(
                f, {"descr": "<f8", "fortran_order": False, "shape": (1, heads, side, side)}
            )
            for _ in range(heads):
                head = rng.random((side, side))
                f.write(head.tobytes())
    return head.astype(np.float32)


def test_a_float64_map_is_read_without_its_float64_copy(tmp_path):
    heads, side = 4, 2048  # 128 MiB of float64, 64 MiB as float32
    last = stream_float64_map(tmp_path / "big.npz", heads, side)
    f32 = heads * side * side * 4
    tracemalloc.start()
    try:
        r = load_npz(tmp_path / "big.npz")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.array_equal(r.maps[0].head(0, heads - 1), last)
    # before: the float64 array (2x) and its float32 copy (1x) at once, 3x
    assert peak < 1.3 * f32, f"peak {peak / 2**20:.0f} MiB for a {f32 / 2**20:.0f} MiB float32 map"


def test_a_float64_map_cut_short_is_one_line(tmp_path):
    p = tmp_path / "short.npz"
    with zipfile.ZipFile(p, "w") as z:
        with z.open("sites.npy", "w") as f:
            np.lib.format.write_array(f, sites(1))
        with z.open("attn_000.npy", "w") as f:
            np.lib.format.write_array_header_1_0(f, {"descr": "<f8", "fortran_order": False, "shape": (1, 1, 4, 4)})
            f.write(np.zeros(10, "<f8").tobytes())  # 10 of its 16 values
    with pytest.raises(AttnvizError) as e:
        load_npz(p)
    assert str(e.value) == (
        f"{p}: its entry 'attn_000' is cut short or damaged (a partial copy or download); "
        "extract the maps again with 'attnviz extract'"
    )


def test_a_float64_value_past_float32s_range_is_refused_in_one_line(tmp_path, recwarn):
    """Before, the float64 check passed and the float32 map then held Inf (what no view can colour); now the
    map as held is checked, and numpy's overflow warning is not printed beside the line."""
    a = np.full((1, 1, 2, 2), 0.25)
    a[0, 0, 1, 0] = 1e300
    p = tmp_path / "over.npz"
    np.savez(p, attn_000=a, sites=sites(1))
    with pytest.raises(AttnvizError) as e:
        load_npz(p)
    assert str(e.value) == f"{p}: attn_000 contains NaN or Inf values; these maps cannot be shown"
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
