"""``--texts`` .tsv / .csv with a header row (attnviz/corpus/delimited.py).

The reference is the same records as a .jsonl file, written with ``json.dumps``, each record on the line its row
starts on in the delimited file (blank .jsonl lines stand for the header and a quoted field's further lines), so
the items -- texts, pairs, gold, labels and ``where`` -- and the bytes of the results must be the .jsonl's.  The
delimited files are quoted here by hand (RFC 4180: a field holding the delimiter, a quote or a newline in double
quotes, a quote doubled), not by the ``csv`` module that reads them.
"""

from __future__ import annotations

import codecs
import hashlib
import json

import pyarrow.parquet as pq
import pytest
from onnx_builders import tiny_text_model
from planted import corpus_lines
from test_gold import TRANSLATION

from attnviz.cli import main
from attnviz.corpus import delimited
from attnviz.corpus.items import read_texts

DELIM = {".tsv": "\t", ".csv": ","}


def _quoted(v: str, delim: str) -> str:
    return '"' + v.replace('"', '""') + '"' if any(c in v for c in (delim, '"', "\n", "\r")) else v


def _write(folder, name, names, recs, bom=False, crlf=False, blank_after=None):
    """``recs`` as ``name`` (.tsv / .csv, a header row of ``names``) and as ``name``.jsonl, each record on the line
    its row starts on; a blank line after record ``blank_after``."""
    suffix = name[name.rindex(".") :]
    delim, end = DELIM[suffix], "\r\n" if crlf else "\n"
    chunks = [None]  # None: the header row (a blank line in the .jsonl)
    for k, r in enumerate(recs):
        chunks.append(r)
        if k == blank_after:
            chunks.append("")  # a blank line, in both files
    rows, lines = [], []
    for c in chunks:
        if c is None:
            rows.append(delim.join(names))
            lines.append("")
        elif c == "":
            rows.append("")
            lines.append("")
        else:
            row = delim.join(_quoted(c[n], delim) for n in names)
            rows.append(row)
            lines.append(json.dumps(c, ensure_ascii=False) + "\n" * row.count("\n"))  # its further lines: blank
    data = end.join(rows) + end
    (folder / name).write_bytes((codecs.BOM_UTF8 if bom else b"") + data.encode())
    (folder / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    return folder / name, folder / f"{name}.jsonl"


def _planted_recs(n=14):
    """Texts and pairs the planted model reads ([CLS] A [SEP] B [SEP] within its 24 positions), some holding a tab
    or a newline (whitespace to its tokenizer), a ``note`` column with the delimiters, quotes and newlines no model
    reads (a wrong split would shift every column after it), and one blank text (skipped by every reader)."""
    lines = corpus_lines(n, seed=11)
    recs = []
    for k, t in enumerate(lines):
        text = " ".join(t.split()[:12])
        if k % 3 == 1:
            text = text.replace(" ", "\t", 1)
        if k % 4 == 2:
            text = text.replace(" ", "\n", 1)
        note = f'say "hi", {k}\tthen\nbye' if k % 2 else f"plain {k}"
        recs.append({"text": text, "b": " ".join(lines[-1 - k].split()[:7]), "note": note})
    recs.insert(5, {"text": "  ", "b": "the", "note": "blank, skipped"})
    return recs


def _corpus(args, out):
    assert main(["corpus", *map(str, args), "--out", str(out), "--no-progress", "--workers", "1"]) == 0
    return [(out / f).read_bytes() for f in ("heads.parquet", "examples.parquet")]


@pytest.mark.parametrize("suffix", [".tsv", ".csv"])
def test_a_quoted_delimited_file_gives_the_jsonl_items_and_result_bytes(planted, tmp_path, suffix):
    model, _ = planted
    recs = _planted_recs()
    crlf, bom = suffix == ".csv", suffix == ".csv"  # Excel's CSV: a byte-order mark, CRLF line ends
    f, jsonl = _write(tmp_path, f"c{suffix}", ["text", "b", "note"], recs, bom=bom, crlf=crlf, blank_after=8)
    items = read_texts(f, "b")
    assert items == read_texts(jsonl, "b")  # texts, pairs, indices and each item's "line N"
    assert len(items) == len(recs) - 1 and any("\t" in it.text for it in items) and any("\n" in it.text for it in items)
    before = hashlib.sha256(f.read_bytes()).hexdigest()
    got = _corpus([model, "--texts", f, "--text-pair-column", "b"], tmp_path / "d")
    assert got == _corpus([model, "--texts", jsonl, "--text-pair-column", "b"], tmp_path / "j")
    assert hashlib.sha256(f.read_bytes()).hexdigest() == before


def test_a_csv_of_sentence_pairs_and_gold_links_gives_the_jsonl_bytes(bible_gold, tmp_path):
    """The translation demo's verses: English with commas (quoted in a CSV), gold alignments (--gold-column)."""
    recs = [json.loads(x) for x in (bible_gold / "pairs.jsonl").read_text().splitlines()]
    assert any("," in r["en"] for r in recs)
    f, jsonl = _write(tmp_path, "pairs.csv", ["gold", "en", "text"], recs)
    assert read_texts(f, "en", None, "gold") == read_texts(jsonl, "en", None, "gold")
    flags = ["--text-pair-column", "en", "--gold-column", "gold", "--batch-size", "8"]
    got = _corpus([TRANSLATION, "--texts", f, *flags], tmp_path / "d")
    assert got == _corpus([TRANSLATION, "--texts", jsonl, *flags], tmp_path / "j")
    assert json.loads((tmp_path / "d" / "run.json").read_text())["gold"]["counts"]


def test_compare_reads_a_tsv_as_the_jsonl(planted, tmp_path):
    from test_compare_corpus import _planted_change

    model, _ = planted
    other = _planted_change(model, tmp_path / "changed.onnx")
    f, jsonl = _write(tmp_path, "c.tsv", ["note", "text", "b"], _planted_recs(), blank_after=2)
    runs = []
    for texts in (f, jsonl):
        out = tmp_path / texts.suffix[1:]
        argv = ["compare", model, other, "--texts", texts, "--text-pair-column", "b", "--workers", "1", "--out", out]
        assert main(list(map(str, argv))) == 0
        runs.append([(out / n).read_bytes() for n in ("heads.parquet", "items.parquet")])
    assert runs[0] == runs[1]
    assert pq.read_table(tmp_path / "tsv" / "items.parquet").num_rows == len(_planted_recs()) - 1


def test_ablate_reads_a_tsv_label_column_as_the_jsonl_one(tmp_path):
    """Labels as class names or class indices: a .tsv holds both as text ("1"), the .jsonl as a name or a number."""
    from test_ablate_corpus import _corpus as labelled

    path = tiny_text_model(tmp_path / "cls.onnx", layers=2, heads=2, d=8, seed=1)
    jsonl = labelled(tmp_path / "c.jsonl", n=10, seed=3, labels=["A", 1, "B", 0, 0])
    recs = [json.loads(x) for x in jsonl.read_text().splitlines()]
    tsv = tmp_path / "c.tsv"
    tsv.write_text("y\ttext\n" + "".join(f"{r['y']}\t{r['text']}\n" for r in recs))
    runs = []
    for f in (jsonl, tsv):
        out = tmp_path / f.suffix[1:]
        argv = ["ablate", path, "--all-heads", "--texts", f, "--label-column", "y", "--workers", "1", "--out", out]
        assert main(list(map(str, argv))) == 0
        runs.append((out / "heads.parquet").read_bytes())
        assert json.loads((out / "run.json").read_text())["labels"] == "class"
    assert runs[0] == runs[1]
    assert pq.read_table(tmp_path / "tsv" / "heads.parquet").num_rows == 4


def _bad(tmp_path, name, data: bytes):
    f = tmp_path / name
    f.write_bytes(data)
    return f


CASES = [  # (file name, its bytes, extra flags, what the one line says)
    ("empty.tsv", b"", [], ["empty.tsv: no header row", "text<TAB>label"]),
    ("nohead.tsv", b"the cat\t1\nthe dog\t0\n", [], ["no 'text' column", "'the cat', '1'", "text<TAB>label"]),
    ("nohead.csv", b"sentence,label\nthe cat,1\n", [], ["no 'text' column", "'sentence', 'label'", "text,label"]),
    ("tabs.csv", b"text\tlabel\nthe cat\t1\n", [], ["separated by tabs, not commas; name it .tsv"]),
    ("semi.csv", b"text;label\nthe cat;1\n", [], ["separated by semicolons, not commas", "comma-separated"]),
    ("nopair.tsv", b"text\ten\nthe cat\tx\n", ["--text-pair-column", "b"], ["--text-pair-column b", "'text', 'en'"]),
    ("few.tsv", b'text\tb\nthe\tcat\n"the\ncat"\n', [], ["few.tsv line 3: 1 field, the header row has 2", "a tab"]),
    ("many.csv", b"text,b\nthe cat,dog,x\n", [], ["many.csv line 2: 3 fields, the header row has 2", "a comma"]),
    ("latin1.tsv", "text\nthe caf\xe9\n".encode("latin-1"), [], ["latin1.tsv line 2: byte 0xE9", "UTF-8"]),
    ("nul.csv", b"text\nthe\ncat\0\n", [], ["nul.csv line 3: a NUL byte", "a header row, then one item a row"]),
    ("open.csv", b'text,b\nthe,cat\n"the,dog\nthe,cat\n', [], ["open.csv line 3", "never closed"]),
    ("after.csv", b'text,b\n"the"cat,dog\n', [], ["after.csv line 2", "after its closing quote", '("")']),
    ("dup.tsv", b"text\ttext\nthe\tcat\n", [], ["line 1: the header row names 'text' twice"]),
    ("mac.csv", b"text,b\rthe cat,x\r", [], ["mac.csv line 1: a carriage return (CR, column 7)", "LF or CRLF"]),
    ("blank.tsv", b"text\tb\n \tcat\n\n", [], ["blank.tsv: no items"]),
    (
        "data.xlsx",
        b"PK\x03\x04",
        [],
        ["data.xlsx: unknown format", '.tsv or .csv ("text" column; .tsv / .csv: a header'],
    ),
]


@pytest.mark.parametrize("name, data, flags, says", CASES, ids=[c[0] for c in CASES])
def test_bad_delimited_input_is_one_line_and_writes_nothing(planted, tmp_path, capsys, name, data, flags, says):
    model, _ = planted
    f = _bad(tmp_path, name, data)
    out = tmp_path / "out"
    assert main(["corpus", str(model), "--texts", str(f), *flags, "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnviz: error:") and "\n" not in err and "Traceback" not in err, err
    assert all(s in err for s in says), (says, err)
    assert not out.exists() and f.read_bytes() == data


def test_a_field_past_the_limit_is_one_plain_line(planted, tmp_path, capsys, monkeypatch):
    """A quote left open swallows the rest of the file into one field: csv's "field larger than field limit" named
    no line; the limit (16 Mi characters, set here lower) is named with the line the field starts on."""
    import csv

    model, _ = planted
    limit = csv.field_size_limit()
    monkeypatch.setattr(delimited, "FIELD_LIMIT", 1000)
    f = _bad(tmp_path, "runaway.tsv", b'text\tb\nthe\tcat\n"the\tdog\n' + b"the\tcat\n" * 200)
    out = tmp_path / "out"
    assert main(["corpus", str(model), "--texts", str(f), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "runaway.tsv line 3: a field of more than 1,000 characters" in err and "never closed" in err, err
    assert "\n" not in err and "field limit" not in err and not out.exists()
    assert csv.field_size_limit() == limit  # the process's own setting is back


def test_a_refused_item_names_the_line_after_a_multi_line_field(planted, tmp_path, capsys):
    model, _ = planted
    f = _bad(tmp_path, "c.csv", b'text,note\nthe cat,"one\ntwo\nthree"\n\nthe zebra,x\n')
    assert main(["corpus", str(model), "--texts", str(f), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "corpus item 1 (line 6) 'the zebra'" in err and "unknown token 'zebra'" in err, err


def test_ablate_names_a_missing_label_column_in_one_line(tmp_path, capsys):
    path = tiny_text_model(tmp_path / "cls.onnx", layers=1, heads=2, d=8)
    f = _bad(tmp_path, "c.tsv", b"text\tlabel\nthe cat\t1\n")
    argv = ["ablate", str(path), "--all-heads", "--texts", str(f), "--label-column", "y", "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "--label-column y: --texts c.tsv has no 'y' column; its header row has 'text', 'label'" in err, err
    assert "\n" not in err and not (tmp_path / "o").exists()
