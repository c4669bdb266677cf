"""An odd ``.npz`` (``--maps``, ``--inputs``, a corpus checkpoint) is refused in plain words naming the problem
and the fix: never Python's own text ("(ValueError: Object arrays cannot be loaded when allow_pickle=False)",
"(KeyError: 'attn_000 is not a file in the archive')", "(BadZipFile)"), and never an internal error (a number
where the generated words belong was one, exit 1)."""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest

from attnviz import AttnvizError
from attnviz.cli import main
from attnviz.core.attention import AttentionResult, DenseMap, SiteInfo, TokenAxis
from attnviz.core.io import save_npz

PYTHON_WORDS = re.compile(
    r"\w+Error\b|BadZipFile|allow_pickle|not a file in the archive|Traceback|np\.str_|Expecting|line \d+ column|"
    r"<U\d|\|S\d|<i\d|int32|float64"
)


def _good(tmp: Path) -> Path:
    site = SiteInfo("encoder", "self", 0, 1, "softmax_0", "softmax")
    result = AttentionResult([DenseMap(np.full((1, 1, 3, 3), 1 / 3, np.float32))], [site], TokenAxis(list("abc")))
    return save_npz(result, tmp / "good.npz")


def _rewritten(tmp: Path, name: str, drop=(), **replace) -> Path:
    """good.npz with entries dropped or replaced, written as np.savez would (pickles allowed: a file from
    elsewhere)."""
    with np.load(_good(tmp)) as z:
        arrays = {k: z[k] for k in z.files if k not in drop}
    arrays.update(replace)
    with zipfile.ZipFile(tmp / name, "w") as zf:
        for k, a in arrays.items():
            with zf.open(k + ".npy", "w") as f:
                np.lib.format.write_array(f, np.asarray(a), allow_pickle=True)
    return tmp / name


def _cut(tmp: Path, name: str, keep: float) -> Path:
    data = _good(tmp).read_bytes()
    (tmp / name).write_bytes(data[: int(len(data) * keep)])
    return tmp / name


def _bad_crc(tmp: Path, name: str) -> Path:
    """attn_000's stored bytes changed after the zip's CRC was written (a damaged copy)."""
    data = bytearray(_good(tmp).read_bytes())
    with zipfile.ZipFile(tmp / "good.npz") as zf:
        info = zf.getinfo("attn_000.npy")
    name_len, extra_len = (
        int.from_bytes(data[info.header_offset + 26 : info.header_offset + 28], "little"),
        int.from_bytes(data[info.header_offset + 28 : info.header_offset + 30], "little"),
    )
    data[info.header_offset + 30 + name_len + extra_len + info.compress_size - 4] ^= 0x55
    (tmp / name).write_bytes(bytes(data))
    return tmp / name


def _bad_header(tmp: Path, name: str) -> Path:
    with np.load(_good(tmp)) as z, zipfile.ZipFile(tmp / name, "w") as zf:
        for k in z.files:
            if k == "attn_000":
                zf.writestr(k + ".npy", b"\x93NUMPY\x01\x00\x10\x00{'descr': 'zz'}\n")
            else:
                with zf.open(k + ".npy", "w") as f:
                    np.lib.format.write_array(f, z[k])
    return tmp / name


SITES = json.dumps([SiteInfo("encoder", "self", 0, 1, "softmax_0", "softmax").to_dict()])
# file -> words the line must hold (besides the file's name and the fix)
CASES = {
    "half": (lambda t: _cut(t, "half.npz", 0.5), ["cut short or damaged"]),
    "tail": (lambda t: _cut(t, "tail.npz", 0.99), ["cut short or damaged"]),
    "crc": (lambda t: _bad_crc(t, "crc.npz"), ["attn_000", "cut short or damaged"]),
    "header": (lambda t: _bad_header(t, "header.npz"), ["attn_000", "not a numpy array"]),
    "missing map": (lambda t: _rewritten(t, "m.npz", drop=("attn_000",)), ["no 'attn_000' entry"]),
    "pickled map": (lambda t: _rewritten(t, "p.npz", attn_000=np.array([{}], object)), ["attn_000", "pickled"]),
    "pickled sites": (lambda t: _rewritten(t, "s.npz", sites=np.array([SITES], object)), ["sites", "pickled"]),
    "pickled tokens": (lambda t: _rewritten(t, "k.npz", tokens=np.array(list("abc"), object)), ["tokens", "pickled"]),
    "int map": (
        lambda t: _rewritten(t, "i.npz", attn_000=np.ones((1, 1, 3, 3), np.int32)),
        ["32-bit integers", "floats"],
    ),
    "prompt_len list": (lambda t: _rewritten(t, "l.npz", prompt_len=np.array([1, 2])), ["prompt_len", "whole number"]),
    "grid of 4": (
        lambda t: _rewritten(t, "g.npz", patch_grid=np.arange(4)),
        ["patch_grid", "[4]", "[rows, cols, offset]"],
    ),
    "grid of words": (lambda t: _rewritten(t, "w.npz", patch_grid=np.array(list("abc"))), ["patch_grid"]),
    "grid stop list": (
        lambda t: _rewritten(t, "st.npz", patch_grid=np.array([1, 1, 0]), patch_grid_stop=np.array([1, 2])),
        ["patch_grid_stop", "whole number"],
    ),
    "generated number": (lambda t: _rewritten(t, "n.npz", generated=np.array(3.5)), ["generated", "texts"]),
    "special words": (lambda t: _rewritten(t, "sp.npz", tokens_special=np.array(list("xyz"))), ["true/false"]),
    "image of words": (lambda t: _rewritten(t, "im.npz", image=np.array(["x"])), ["image", "[H, W"]),
    # JSON entries: the entry and "not valid JSON", never the parser's "Expecting ',' delimiter" (PYTHON_WORDS)
    "sites not JSON": (
        lambda t: _rewritten(t, "sj.npz", sites=np.array('[{"stack": "encoder",, }]')),
        ["its entry 'sites'", "not valid JSON"],
    ),
    "info not JSON": (lambda t: _rewritten(t, "ij.npz", info=np.array('{"a": 1')), ["its entry 'info'", "not valid"]),
    "sites of numbers": (
        lambda t: _rewritten(t, "sn.npz", sites=np.array([1, 2, 3])),
        ["its entry 'sites'", "[3] (64-bit integers)", "not one JSON text"],
    ),
    "map of text": (lambda t: _rewritten(t, "mt.npz", attn_000=np.array([["a", "b"]])), ["attn_000", "(text)"]),
    "map of records": (
        lambda t: _rewritten(t, "mr.npz", attn_000=np.zeros(3, dtype=[("a", "i4")])),
        ["attn_000", "records of named fields"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_odd_maps_file_is_one_plain_line(tmp_path, capsys, case):
    make, words = CASES[case]
    maps = make(tmp_path)
    before = hashlib.sha256(maps.read_bytes()).hexdigest()
    rc = main(["figure", "--maps", str(maps), "--out", str(tmp_path / "f.png")])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert err.startswith("attnviz: error:") and "\n" not in err, err
    assert not PYTHON_WORDS.search(err), err
    for w in [maps.name, "attnviz extract", *words]:
        assert w in err, (w, err)
    assert not (tmp_path / "f.png").exists() and hashlib.sha256(maps.read_bytes()).hexdigest() == before


def test_a_pickled_feed_is_named_in_plain_words(tmp_path, capsys):
    feeds = tmp_path / "feeds.npz"
    with zipfile.ZipFile(feeds, "w") as zf, zf.open("input_ids.npy", "w") as f:
        np.lib.format.write_array(f, np.array([[1, 2]], object), allow_pickle=True)
    from attnviz.runtime.inputs import load_feeds

    with pytest.raises(AttnvizError) as e:
        load_feeds(feeds)
    assert "pickled" in str(e.value) and "numpy.savez" in str(e.value) and not PYTHON_WORDS.search(str(e.value))


@pytest.mark.parametrize("kind", ["cut", "foreign"])
def test_an_odd_checkpoint_is_named_in_plain_words(tmp_path, kind):
    from attnviz.corpus.reduce import Accumulator

    path = tmp_path / "checkpoint.npz"
    if kind == "cut":
        path.write_bytes(_good(tmp_path).read_bytes()[:100])
    else:  # a zip of other arrays: no fingerprint
        np.savez(path, other=np.zeros(2))
    with pytest.raises(AttnvizError) as e:
        Accumulator.load(path, "f" * 64, 2, 3)
    msg = str(e.value)
    assert "delete it to start over" in msg and not PYTHON_WORDS.search(msg), msg
    assert ("cut short" if kind == "cut" else "no 'fingerprint' entry") in msg, msg


@pytest.mark.parametrize(
    "data", [b"input_ids,attention_mask\n1,1\n", b"", b"\x93NUMPY\x01\x00v\x00{'descr': '<i8', 'shape': (1,), }"]
)
def test_feeds_that_are_not_a_zip_archive_say_so(tmp_path, data):
    """``--inputs`` on a text file, an empty one or an .npy: np.load takes it for a pickle, and the line said the
    file "holds pickled Python objects" (8424b81); it says what the file is not, as ``--maps`` does."""
    from attnviz.runtime.inputs import load_feeds

    feeds = tmp_path / "feeds.npz"
    feeds.write_bytes(data)
    with pytest.raises(AttnvizError) as e:
        load_feeds(feeds)
    said = str(e.value)
    assert "not a .npz file" in said and "numpy.savez" in said and "pickled" not in said
    assert not PYTHON_WORDS.search(said) and "\n" not in said and feeds.read_bytes() == data
