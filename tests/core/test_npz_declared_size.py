"""Audit 17: an .npz whose arrays decompress to far more than its bytes (a map of zeros compresses ~1000:1).
np.load allocated every array its header declared before attnviz looked at it (a 3.5 MB file declaring a 30,000²
map: 3.4 GB).  The headers are read first and their total held to the cap ``attnviz extract`` writes under
(ATTNVIZ_MAX_OUTPUT_MB): one line, and nothing allocated."""

from __future__ import annotations

import json
import tracemalloc
import zipfile

import numpy as np
import pytest

from attnviz import AttnvizError
from attnviz.core.io import load_npz

SITES = [{"stack": "encoder", "kind": "self", "layer": 0, "heads": 1, "node": "n", "method": "softmax"}]


def compressed_maps(path, t: int):
    """An extract-like file (sites + one [1, 1, t, t] map of zeros), deflated, written a row at a time."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("sites.npy", "w") as f:
            np.lib.format.write_array(f, np.array(json.dumps(SITES)))
        with z.open("attn_000.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (1, 1, t, t)})
            row = np.zeros(t, "<f4").tobytes()
            for _ in range(t):
                f.write(row)
    return path


def test_arrays_past_the_output_cap_are_refused_before_they_are_read(tmp_path, monkeypatch):
    p = compressed_maps(tmp_path / "bomb.npz", 6000)  # 137 MB of map in a file of about 140 kB
    assert p.stat().st_size < 2**20
    monkeypatch.setenv("ATTNVIZ_MAX_OUTPUT_MB", "64")
    tracemalloc.start()
    try:
        with pytest.raises(AttnvizError) as e:
            load_npz(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    msg = str(e.value)
    assert (
        "bomb.npz" in msg
        and "137 MB once decompressed, over the limit of 64 MB" in msg
        and "ATTNVIZ_MAX_OUTPUT_MB=138" in msg
    ), msg
    assert peak < 16 * 2**20, peak  # the 137 MB were never allocated


def test_arrays_under_the_cap_load_as_before(tmp_path):
    p = compressed_maps(tmp_path / "small.npz", 8)
    r = load_npz(p)
    assert r.maps[0].array().shape == (1, 1, 8, 8) and not r.maps[0].array().any()
