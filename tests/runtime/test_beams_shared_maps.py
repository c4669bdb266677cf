"""``--beams K``: a map every beam shares (an encoder's self-attention over the one source, a vision tower's over the
one image) is one array, each batch row a read-only view of it (``DenseMap.rows``), in memory, pickled and in the
.npz (``attn_NNN`` one row and ``attn_NNN_rows``), not K copies; each row holds the very numbers of the source's own
encoder run (the old layout's rows).  A file of the old layout still loads; a malformed rows entry is one line."""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest
from cli_run import run_cli

from attnviz import AttnvizError
from attnviz.core.attention import DenseMap
from attnviz.core.io import load_npz, save_npz
from attnviz.runtime import builders as bd
from attnviz.runtime import open_model
from attnviz.runtime.request import AnalyzeRequest

DEMO = Path(__file__).resolve().parents[2] / "models" / "translation.onnx"
TEXT = "μακάριοι οἱ πτωχοὶ τῷ πνεύματι"
K = 4


@pytest.fixture(scope="module")
def demo():
    return open_model(DEMO, provider="cpu")


def _encoder_alone(m) -> list[np.ndarray]:
    """The encoder's maps of one run on the source (the decoder fed its start token alone)."""
    feeds = bd.prepare(m, AnalyzeRequest(text=TEXT)).feeds
    src = {k: np.asarray(v) for k, v in feeds.items() if k in ("input_ids", "attention_mask")}
    special = m.meta["special"]
    start = special.get("decoder_start", special.get("bos"))
    r = m.analyze(feeds=src | {"decoder_input_ids": np.array([[start]], np.int64)})
    return [mm.array()[0] for mm, s in zip(r.maps, r.sites) if s.stack == "encoder"]


@pytest.mark.parametrize("use_cache", [True, False])
def test_the_encoders_maps_are_one_array_every_beam_views(demo, use_cache):
    r = demo.analyze(text=TEXT, generate=20, beams=K, use_cache=use_cache)
    assert r.batch_size == K
    enc = [m for m, s in zip(r.maps, r.sites) if s.stack == "encoder"]
    dec = [m for m, s in zip(r.maps, r.sites) if s.stack == "decoder"]
    assert enc and dec
    for m, want in zip(enc, _encoder_alone(demo)):
        assert isinstance(m, DenseMap) and m.rows == [0] * K and m.held.shape[0] == 1
        a = m.array()
        assert a.shape[0] == K and m.nbytes * K == a.size * 4 and not a.flags.writeable  # one row held
        for b in range(K):
            assert np.shares_memory(a[b], m.held)
            np.testing.assert_allclose(a[b], want, atol=1e-6)
    assert all(isinstance(m, DenseMap) and m.rows is None for m in dec)  # each beam's own
    back = pickle.loads(pickle.dumps(r.maps[0]))  # a job process's reply: still one row held
    assert back.rows == [0] * K and back.nbytes == r.maps[0].nbytes
    np.testing.assert_array_equal(back.array(), r.maps[0].array())


def test_the_npz_holds_a_shared_map_once_and_every_row_reads_back_the_same_bytes(demo, tmp_path):
    r = demo.analyze(text=TEXT, generate=20, beams=K)
    path = save_npz(r, tmp_path / "t.npz")
    enc = [i for i, s in enumerate(r.sites) if s.stack == "encoder"]
    with np.load(path) as z:
        for i in enc:
            assert z[f"attn_{i:03d}"].shape[0] == 1 and z[f"attn_{i:03d}_rows"].tolist() == [0] * K
        assert not any(f"attn_{i:03d}_rows" in z.files for i in range(len(r.sites)) if i not in enc)
    back = load_npz(path)
    for i, (a, c) in enumerate(zip(r.maps, back.maps)):
        assert (c.rows is not None) == (i in enc)
        for b in range(K):
            assert a.array()[b].tobytes() == c.array()[b].tobytes()
    # the old layout (every row written out): the same numbers, K times the bytes, still read
    old = tmp_path / "old.npz"
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(old, "w") as zout:
        for name in zin.namelist():
            if name.endswith("_rows.npy"):
                continue
            i = int(name[5:8]) if name.startswith("attn_") and name[5:8].isdigit() else None
            if i in enc and name == f"attn_{i:03d}.npy":
                with zout.open(name, "w") as f:
                    np.lib.format.write_array(f, np.ascontiguousarray(r.maps[i].array()))
            else:
                zout.writestr(name, zin.read(name))
    assert old.stat().st_size > path.stat().st_size
    legacy = load_npz(old)
    for i in enc:
        assert legacy.maps[i].rows is None and legacy.maps[i].array().tobytes() == back.maps[i].array().tobytes()


@pytest.fixture(scope="module")
def saved(demo, tmp_path_factory):
    return save_npz(demo.analyze(text=TEXT, generate=6, beams=K), tmp_path_factory.mktemp("npz") / "t.npz")


@pytest.mark.parametrize(
    ("rows", "why"),
    [
        (np.array([0, 1, 0, 0]), "one of the 1 rows of attn_000"),
        (np.array([0.0, 0.0]), "does not name"),
        (np.zeros((2, 2), np.int64), "does not name"),
        (np.zeros(0, np.int64), "does not name"),
    ],
)
def test_a_malformed_rows_entry_beside_a_dense_map_is_one_line(saved, tmp_path, rows, why):
    path, bad = saved, tmp_path / "bad.npz"
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(bad, "w") as zout:
        for name in zin.namelist():
            if name == "attn_000_rows.npy":
                with zout.open(name, "w") as f:
                    np.lib.format.write_array(f, rows)
            else:
                zout.writestr(name, zin.read(name))
    with pytest.raises(AttnvizError, match=why) as e:
        load_npz(bad)
    assert "\n" not in str(e.value) and "attn_000_rows" in str(e.value)
    if rows.ndim == 2:  # the command line says that line too (one case is enough: a process each)
        code, text = run_cli("figure", bad, "--out", tmp_path / "x.png")
        assert code == 2 and "attn_000_rows" in text and "Traceback" not in text
