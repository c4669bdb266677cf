"""Audit 17: a --texts file that is not plain UTF-8.  The readers decoded with ``errors="replace"``: a Latin-1
corpus became U+FFFD characters (to a WordPiece tokenizer [UNK] tokens: statistics of words nobody wrote, exit 0),
a UTF-8 byte-order mark (Notepad's) stayed in the first item (refused as an unknown token), UTF-16 and binary files
became garbage items, and a folder given as --texts was "no such file".  Now: a mark is dropped, the rest is one
line naming the line and the fix, nothing written, the file unchanged."""

from __future__ import annotations

import codecs
import hashlib
import json

import pytest
from test_engines import _assert_same, _cfg, _table

from attnviz.cli import main
from attnviz.corpus import run_corpus


def one_line(err: str, *words):
    assert err.startswith("attnviz: error:") and "\n" not in err and "Traceback" not in err, err
    for w in words:
        assert w.lower() in err.lower(), (w, err)


def test_a_byte_order_mark_is_dropped_and_the_results_equal_the_files_without_it(planted, tmp_path):
    model, texts = planted
    marked = tmp_path / "marked.txt"
    marked.write_bytes(codecs.BOM_UTF8 + texts.read_bytes())
    run_corpus(_cfg(model, texts, tmp_path / "plain"))
    run_corpus(_cfg(model, marked, tmp_path / "marked"))
    _assert_same(_table(tmp_path / "plain"), _table(tmp_path / "marked"))
    runs = [json.loads((tmp_path / d / "run.json").read_text()) for d in ("plain", "marked")]
    assert runs[0]["data_sha256"] == runs[1]["data_sha256"]  # the same items, the mark in none of them
    jsonl = tmp_path / "marked.jsonl"
    lines = texts.read_text().splitlines()
    jsonl.write_bytes(codecs.BOM_UTF8 + "".join(json.dumps({"text": t}) + "\n" for t in lines).encode())
    run_corpus(_cfg(model, jsonl, tmp_path / "marked_jsonl"))  # was: line 1 "not valid JSON"
    _assert_same(_table(tmp_path / "plain"), _table(tmp_path / "marked_jsonl"))


def _latin1(tmp_path, words, suffix):
    p = tmp_path / f"latin1{suffix}"
    lines = [words[0], f"{words[1]} café {words[2]}", words[3]]
    if suffix == ".jsonl":
        lines = [json.dumps({"text": t}, ensure_ascii=False) for t in lines]
    p.write_bytes("\n".join(lines).encode("latin-1") + b"\n")
    return p


@pytest.mark.parametrize("suffix", [".txt", ".jsonl"])
@pytest.mark.parametrize("command", ["corpus", "ablate"])
def test_latin1_is_one_line_naming_the_line_and_the_byte(planted, tmp_path, capsys, suffix, command):
    model, texts = planted
    words = texts.read_text().split()
    bad = _latin1(tmp_path, words, suffix)
    before = hashlib.sha256(bad.read_bytes()).hexdigest()
    out = tmp_path / "out"
    extra = ["--all-heads"] if command == "ablate" else []
    rc = main([command, str(model), "--texts", str(bad), "--out", str(out), "--no-progress", *extra])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    one_line(err, bad.name, "line 2", "0xE9", "UTF-8")
    assert not out.exists() and hashlib.sha256(bad.read_bytes()).hexdigest() == before


@pytest.mark.parametrize(
    "content, words",
    [
        ("the cat sat\n".encode("utf-16"), ["UTF-16"]),  # with its mark
        ("the cat sat\n".encode("utf-16-le"), ["line 1", "NUL"]),  # without it
        (b"MZ\x90\x00\x03\x00\x00\x00\x04\x00", ["line 1", "NUL", "binary"]),  # an executable's first bytes
    ],
    ids=["utf16", "utf16-no-mark", "binary"],
)
def test_utf16_and_binary_files_are_refused(planted, tmp_path, capsys, content, words):
    model, _ = planted
    bad = tmp_path / "odd.txt"
    bad.write_bytes(content)
    rc = main(["corpus", str(model), "--texts", str(bad), "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    one_line(err, "odd.txt", *words)
    assert not (tmp_path / "out").exists()


def test_a_folder_given_as_texts_is_named_a_folder(planted, tmp_path, capsys):
    model, _ = planted
    (tmp_path / "texts").mkdir()
    rc = main(["corpus", str(model), "--texts", str(tmp_path / "texts"), "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    one_line(err, "is a folder", "--images")
    assert "no such file" not in err


@pytest.mark.parametrize("column", ["text", "en"])
def test_a_parquet_column_that_holds_no_strings_is_named(planted, tmp_path, capsys, column):
    """A "text" column of numbers (or lists) held no string, and the run said "no items (empty lines are
    skipped)"; a --text-pair-column of numbers was "row 1: no 'en' string".  Now the column and its type."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    model, _ = planted
    data = {"text": ["the cat", "the dog"], "en": ["a", "b"]}
    data[column] = [[1, 2], [3]] if column == "text" else [1, 2]
    f = tmp_path / "c.parquet"
    pq.write_table(pa.table(data), f)
    argv = ["corpus", str(model), "--texts", str(f), "--out", str(tmp_path / "o"), "--no-progress"]
    rc = main([*argv, *(["--text-pair-column", "en"] if column == "en" else [])])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    one_line(err, "c.parquet", f"column {column!r}", "int64", "not text")
    assert not (tmp_path / "o").exists()


# One corpus in each format, its lines counted by hand: a blank line, and in a .tsv / .csv a header row and a quoted
# field over two lines.  (its bytes with LF line ends, the line each item starts on, the line of "the\rdog" below)
LINE_ENDS = {
    ".txt": (b"the cat\n\nthe dog\nthe bird\n", [1, 3, 4], 3),
    ".jsonl": (b'{"text": "the cat"}\n\n{"text": "the dog"}\n{"text": "the bird"}\n', [1, 3, 4], 3),
    ".tsv": (b'text\tb\nthe cat\t"x\ny"\n\nthe dog\tz\nthe bird\tw\n', [2, 5, 6], 5),
    ".csv": (b'text,b\nthe cat,"x\ny"\n\nthe dog,z\nthe bird,w\n', [2, 5, 6], 5),
}


@pytest.mark.parametrize("suffix", LINE_ENDS)
def test_line_numbers_count_lf_and_crlf_alike_and_a_lone_cr_is_refused(tmp_path, suffix):
    """Every reader numbers lines as grep -n and wc -l do: CRLF and LF give the same items and the same "line N"
    (NEL or U+2028 inside a line, line ends to str.splitlines, stay in its text); a lone CR (old-Mac line ends, or one stray inside a line) is a line end to some readers and not to
    others (csv and str.splitlines against JSON lines, grep, vim), so it is refused, naming its line, in every
    format alike."""
    from attnviz import AttnvizError
    from attnviz.corpus.items import read_texts

    lf, lines, stray = LINE_ENDS[suffix]
    got = []
    odd = "the\x85dog\u2028".encode()  # NEL and U+2028: line ends to str.splitlines, not to grep or JSON lines
    for name, data in (("lf", lf), ("crlf", lf.replace(b"\n", b"\r\n")), ("odd", lf.replace(b"the dog", odd))):
        f = tmp_path / f"{name}{suffix}"
        f.write_bytes(data)
        items = read_texts(f)
        assert [it.text for it in items] == ["the cat", "the dog" if name != "odd" else odd.decode(), "the bird"]
        got.append([it.where for it in items])
    assert got == [[f"line {n}" for n in lines]] * 3
    for name, data, line in (
        ("mac", lf.replace(b"\n", b"\r"), 1),
        ("stray", lf.replace(b"the dog", b"the\rdog"), stray),
        ("stray_crlf", lf.replace(b"\n", b"\r\n").replace(b"the dog", b"the\rdog"), stray),
    ):
        f = tmp_path / f"{name}{suffix}"
        f.write_bytes(data)
        with pytest.raises(AttnvizError) as e:
            read_texts(f)
        assert f"--texts {f.name} line {line}: a carriage return (CR," in str(e.value), e.value
        assert "LF or CRLF" in str(e.value) and f"< {f.name} > fixed{suffix}" in str(e.value)


def test_ablate_reads_the_labels_of_the_items_read_texts_reads(tmp_path):
    """A raw NEL or U+2028 inside a .jsonl string (json.dumps(ensure_ascii=False) writes them so) is a line end to
    str.splitlines: the label reader cut such a record in two (refused as not JSON) while read_texts read it whole."""
    from attnviz.corpus.ablate_plan import read_labels
    from attnviz.corpus.items import read_texts

    recs = [{"text": "the cat", "y": "a"}, {"text": "the\x85dog\u2028sat", "y": "b"}, {"text": "the mat", "y": "c"}]
    f = tmp_path / "c.jsonl"
    f.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs), encoding="utf-8")
    assert [it.text for it in read_texts(f)] == [r["text"] for r in recs]
    assert read_labels(str(f), "y", 10) == ["a", "b", "c"]
