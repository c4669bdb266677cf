"""``--text-file FILE`` on extract, figure and open: a long document's text from a file, as ``--text`` takes it.
``--text "$(cat doc.txt)"`` stops at the kernel's limit on one argument (128 KiB on Linux, before attnviz runs).
The file's text runs exactly as the same text given as ``--text`` (its final newline dropped, as ``$(cat)`` drops
it; a UTF-8 byte-order mark dropped), a 200 kB file runs cut by ``--max-tokens``, and a bad file is one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from attnviz.cli import build_parser, main
from attnviz.core.io import load_npz
from attnviz.core.text_file import text_from_file

DEMO = Path(__file__).resolve().parents[1] / "models" / "translation.onnx"
GREEK = "ἐν ἀρχῇ ἦν ὁ λόγος, καὶ ὁ λόγος ἦν πρὸς τὸν θεόν"


def _extract(tmp_path, name, *flags):
    out = tmp_path / f"{name}.npz"
    assert main(["extract", str(DEMO), *flags, "--generate", "3", "--out", str(out)]) == 0
    return load_npz(out)


def test_a_text_file_runs_as_the_same_text_given_on_the_command_line(tmp_path):
    doc = tmp_path / "doc.txt"
    doc.write_bytes(b"\xef\xbb\xbf" + GREEK.encode() + b"\r\n")  # a byte-order mark and a Windows line end
    by_file = _extract(tmp_path, "file", "--text-file", str(doc))
    by_text = _extract(tmp_path, "text", "--text", GREEK)
    assert by_file.tokens.labels == by_text.tokens.labels
    assert by_file.generated == by_text.generated
    for a, b in zip(by_file.maps, by_text.maps):
        np.testing.assert_array_equal(a.array(), b.array())


def test_a_document_past_one_arguments_limit_runs_cut(tmp_path):
    doc = tmp_path / "long.txt"
    doc.write_text((GREEK + ". ") * 2200, encoding="utf-8")
    assert doc.stat().st_size > 200_000  # past Linux's 128 KiB for one argument
    r = _extract(tmp_path, "long", "--text-file", str(doc), "--max-tokens", "128")
    assert len(r.tokens.labels) == 128
    assert any("truncated to the first 128" in n for n in r.info.get("notes", []))


def test_open_takes_the_file_as_its_text_box(tmp_path):
    from attnviz.gui.command import input_values

    doc = tmp_path / "doc.txt"
    doc.write_text(GREEK + "\n\n", encoding="utf-8")
    args = build_parser().parse_args(["open", str(DEMO), "--text-file", str(doc)])
    text_from_file(args)
    assert input_values(args)["text"] == GREEK


BAD = [
    (["--text", "x"], b"text", "give --text or --text-file, not both"),
    ([], b"\xff\xfe\x00bad", "not UTF-8 text (byte 0); save it as UTF-8"),
    ([], b"\n\n  \n", "holds no text; give a file with the text to analyse"),
]


@pytest.mark.parametrize("extra,data,msg", BAD)
def test_a_bad_text_file_is_one_line(tmp_path, capsys, extra, data, msg):
    doc = tmp_path / "doc.txt"
    doc.write_bytes(data)
    out = tmp_path / "o.npz"
    assert main(["extract", str(DEMO), "--text-file", str(doc), *extra, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_a_missing_text_file_is_one_line(tmp_path, capsys):
    assert main(["figure", str(DEMO), "--text-file", str(tmp_path / "nope.txt"), "--out", str(tmp_path / "f.pdf")]) == 2
    err = capsys.readouterr().err
    assert "--text-file" in err and "nope.txt" in err and len(err.strip().splitlines()) == 1
