"""A malformed file a user hands attnviz is refused in attnviz's own words, naming the problem and the fix: never
numpy's type codes ("input_ids is <U1 (records, text or objects)"), nor the words of the library that tripped on it
(protobuf's "Error parsing message with type 'onnx.ModelProto'", pyarrow's "Parquet magic bytes not found in
footer", libsndfile's "Error opening <_io.BufferedReader name=...>")."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from onnx_builders import tiny_text_model

from attnviz import AttnvizError
from attnviz.cli import main
from attnviz.core.words import dtype_words
from attnviz.runtime import audio as au

CODES = re.compile(r"<U\d|\|S\d|<[iuf]\d|\[\('|complex64|datetime64|float64|uint64|Error\b|Traceback")
LIBRARY_WORDS = re.compile(r"ModelProto|Wire format|magic bytes|thrift|Thrift|BufferedReader|Error opening|libsndfile'")


def _line(capsys, *words: str) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnviz: error:") and "\n" not in err, err
    assert not CODES.search(err) and not LIBRARY_WORDS.search(err), err
    for w in words:
        assert w in err, (w, err)
    return err


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_text_model(tmp_path_factory.mktemp("m") / "tiny.onnx")


@pytest.mark.parametrize(
    ("feed", "words"),
    [
        (np.array([["a", "b"]]), "text"),
        (np.array([[b"ab"]]), "bytes"),
        (np.zeros((1, 2), dtype=[("a", "i4"), ("b", "f4")]), "records of named fields"),
        (np.zeros((1, 2), np.complex64), "complex numbers"),
        (np.zeros((1, 2), "M8[s]"), "dates"),
    ],
)
def test_a_feed_that_is_not_numbers_says_what_it_holds_in_words(tmp_path, capsys, model, feed, words):
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, input_ids=feed)
    assert main(["extract", str(model), "--inputs", str(feeds), "--out", str(tmp_path / "m.npz")]) == 2
    _line(capsys, "input_ids holds " + words, "numpy.savez", "whole numbers for token ids")
    assert not (tmp_path / "m.npz").exists()


@pytest.mark.parametrize(
    ("feed", "words"),
    [
        (np.array([[1.5, 2.0]]), ["takes whole numbers (int64)", "64-bit floats", "save whole numbers"]),
        (np.array([[2**64 - 1]], np.uint64), ["64-bit unsigned integers outside int64's range", "save values"]),
    ],
)
def test_a_feed_the_input_cannot_take_names_the_files_numbers_in_words(tmp_path, capsys, model, feed, words):
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, input_ids=feed)
    assert main(["extract", str(model), "--inputs", str(feeds), "--out", str(tmp_path / "m.npz")]) == 2
    _line(capsys, "'input_ids'", *words)


@pytest.mark.parametrize(
    ("dtype", "words"),
    [
        ("int64", "64-bit integers"),
        ("uint8", "8-bit unsigned integers"),
        ("float16", "16-bit floats"),
        ("bool", "true/false values"),
        ("<U7", "text"),
        ("O", "Python objects"),
        ("m8[s]", "time spans"),
        ([("a", "i4")], "records of named fields"),
    ],
)
def test_dtype_words(dtype, words):
    assert dtype_words(np.dtype(dtype)) == words


def test_a_model_cut_short_is_one_line_without_protobufs_words(tmp_path, capsys, model):
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    assert main(["extract", str(cut), "--text", "the cat", "--out", str(tmp_path / "m.npz")]) == 2
    _line(capsys, "cut.onnx: not a readable ONNX model", "re-export it")


def _damaged(data: bytes) -> bytes:
    """The footer's metadata overwritten (its magic bytes kept): pyarrow says "Couldn't deserialize thrift"."""
    return data[:-40] + b"\xff" * 32 + data[-8:]


@pytest.mark.parametrize(
    ("name", "damage", "words"),
    [
        ("empty", lambda data: b"", "(it is empty)"),
        ("cut", lambda data: data[: len(data) // 2], "(it is not a Parquet file, or a partial copy cut short)"),
        ("damaged", _damaged, "(it is damaged: parts of it cannot be read)"),
    ],
)
def test_a_malformed_parquet_corpus_is_one_plain_line(tmp_path, capsys, model, name, damage, words):
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"text": ["the cat sat"] * 200}), good)
    texts = tmp_path / f"{name}.parquet"
    texts.write_bytes(damage(good.read_bytes()))
    assert main(["corpus", str(model), "--texts", str(texts), "--out", str(tmp_path / "out")]) == 2
    _line(capsys, f'{name}.parquet: cannot read a "text" column', words, 'write it again with a "text" column')
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "data",
    [b"\x00\x01not a sound file" * 64, b"RIFF\x00\x00\x00\x00WAVEfmt " + b"\x00" * 20, b""],
    ids=["junk", "short header", "empty"],
)
def test_a_file_that_is_no_sound_is_one_line_without_libsndfiles_words(tmp_path, data):
    clip = tmp_path / "clip.wav"
    clip.write_bytes(data)
    with pytest.raises(AttnvizError) as e:
        au.load_audio(clip, au.FeatureSpec())
    line = str(e.value)
    assert line.startswith("clip.wav: not a readable sound file") and "give a WAV, FLAC or OGG file" in line, line
    assert not LIBRARY_WORDS.search(line) and "\n" not in line, line
