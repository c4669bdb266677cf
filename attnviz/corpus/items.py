"""Corpus inputs: one item per line of .txt, per record of .jsonl / .parquet / .tsv / .csv, or per image file of a
folder."""

from __future__ import annotations

import codecs
import hashlib
import io
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from attnviz import AttnvizError
from attnviz.core.links import may_read
from attnviz.core.untrusted import MissingColumn, open_regular, parquet_problem, parse_json, regular_file
from attnviz.runtime.raster import IMAGE_SUFFIXES


@dataclass(frozen=True)
class Item:
    """One input; ``index`` is its position in the file (examples point back to it).  ``gold``: the pair's gold
    word alignment, a Pharaoh line (``--gold-column``).  ``audio``: a recording of ``--audio-dir``, ``reference``
    its word times in ``--gold-dir`` (corpus/audio_items.py)."""

    index: int
    text: str | None = None
    pair: str | None = None
    image: str | None = None
    gold: str | None = None
    audio: str | None = None
    reference: str | None = None
    where: str | None = None  # where in the --texts file ("line 12", "row 12"), for a message naming it


def item_error(it: Item, e: AttnvizError, pair: bool = False) -> AttnvizError:
    """``e`` (a tokeniser's refusal) naming the corpus item it came from: in a file of thousands of lines the word
    alone does not say where to look.  Items count from 0 without blank lines, so the text's start is quoted too."""
    text = str((it.pair if pair else it.text) or "")
    head = text if len(text) <= 40 else text[:40] + "…"
    what = "the --text-pair-column of corpus item" if pair else "corpus item"
    at = f" ({it.where})" if it.where else ""
    # the item's own text is the corpus file's, not a --text to fix: its line names it
    param = None if e.param in ("text", "text_pair") else e.param
    return AttnvizError(f"{what} {it.index}{at} {head!r}: {e}", param=param)


@dataclass(frozen=True)
class Columns:
    """The optional string columns each record may carry besides ``text``: the flag that names each, its column."""

    pair: str | None = None  # --text-pair-column
    gold: str | None = None  # --gold-column

    def named(self) -> list[tuple[str, str]]:
        flags = (("--text-pair-column", self.pair), ("--gold-column", self.gold))
        return [(flag, c) for flag, c in flags if c]

    def values(self, get) -> tuple[str | None, str | None]:
        """(pair, gold) of one record, ``get(flag, column)`` reading a named column (unnamed ones are None)."""
        return (
            get("--text-pair-column", self.pair) if self.pair else None,
            get("--gold-column", self.gold) if self.gold else None,
        )


Row = tuple[str, tuple[str | None, str | None], str]  # text, (pair, gold), where in the file


_UTF16_MARKS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)  # (UTF-32 LE's mark begins with UTF-16 LE's)


# what a --texts file of each format holds, for a refusal's fix (a .txt holds one item a line; a table does not)
_LAYOUT = {".tsv": "a header row, then one item a row", ".csv": "a header row, then one item a row"}


def decode_texts(data: bytes, path: str | Path, first_line: int = 1) -> str:
    """A --texts file's bytes (or one line's, ``first_line`` its number) as text: UTF-8, a byte-order mark at the
    start dropped (Notepad writes one); else one line naming the line and the fix.  Decoding with
    ``errors="replace"`` turned a Latin-1 corpus into U+FFFD tokens ([UNK] to a WordPiece tokenizer: statistics of
    the wrong words, exit 0) and kept the mark in the first item, where a tokenizer refused it as an unknown word."""
    name = Path(path).name
    if first_line == 1:
        if data.startswith(_UTF16_MARKS):
            raise AttnvizError(f"--texts {name}: UTF-16 text; save it as UTF-8 (e.g. iconv -f UTF-16 -t UTF-8)")
        data = data.removeprefix(codecs.BOM_UTF8)
    nul = data.find(b"\0")
    if nul >= 0:
        line = first_line + data.count(b"\n", 0, nul)
        raise AttnvizError(
            f"--texts {name} line {line}: a NUL byte: a binary file (or UTF-16 "
            f"text without its mark), not text; give UTF-8 text, {_LAYOUT.get(Path(path).suffix.lower(), 'one item a line')}"
        )
    cr = _lone_cr(data)
    if cr >= 0:
        line = first_line + data.count(b"\n", 0, cr)
        col = cr - data.rfind(b"\n", 0, cr)
        raise AttnvizError(
            f"--texts {name} line {line}: a carriage return (CR, column {col}) with no line feed after it (an old-Mac "
            "line end, or a stray CR); end lines with LF or CRLF (an old-Mac file: tr '\\r' '\\n' < "
            f"{name} > fixed{Path(name).suffix}), or remove the CR"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = first_line + data.count(b"\n", 0, e.start)
        col = e.start - data.rfind(b"\n", 0, e.start)
        raise AttnvizError(
            f"--texts {name} line {line}: byte 0x{data[e.start]:02X} (column {col}) is not UTF-8; save the file as "
            "UTF-8 (e.g. iconv -f latin1 -t UTF-8)"
        ) from None


def _lone_cr(data: bytes) -> int:
    """Where the first CR that no LF follows lies in ``data``, or -1.  A lone CR (classic Mac OS line ends; Excel
    for Mac's "CSV (Macintosh)") is a line end to Python's ``csv`` and ``str.splitlines`` but not to a JSON-lines
    reader, ``grep -n``, ``wc -l`` or vim, so a "line N" would mean another line in each of them: every reader
    refuses it instead, and every line number counts LFs.  Two C scans when there is none (the usual case)."""
    if data.count(b"\r") == data.count(b"\r\n"):
        return -1
    found = _LONE_CR.search(data)
    return found.start() if found else -1


_LONE_CR = re.compile(rb"\r(?!\n)")
PIECE = 1 << 20  # bytes a streamed read decodes at a time (text_pieces)


def text_pieces(f, path: str | Path, size: int = PIECE) -> Iterator[str]:
    """The decoded text of the --texts file open as ``f`` (binary, ``read(n)``: a file object or Ray's pyarrow
    stream), in pieces of about ``size`` bytes that each end with a line, each checked by :func:`decode_texts` with
    the number of its first line: every error names the line that the whole file decoded at once named."""
    line, parts = 1, []
    while block := f.read(size):
        end = block.rfind(b"\n") + 1
        if end == 0:  # a line longer than a block: kept until it ends
            parts.append(block)
            continue
        data = b"".join([*parts, block[:end]])
        yield decode_texts(data, path, line)
        line += data.count(b"\n")
        parts = [block[end:]]
    data = b"".join(parts)
    if data or line == 1:  # (an empty file is one empty piece: its reader says what it lacks)
        yield decode_texts(data, path, line)


def text_lines_of(f, path: str | Path) -> Iterator[str]:
    """The lines of the --texts file open as ``f`` with their ends (LF or CRLF: :func:`decode_texts` refuses a lone
    CR), streamed through :func:`text_pieces`; line ``n`` of the file is the ``n``-th."""
    for piece in text_pieces(f, path):
        yield from io.StringIO(piece, newline="")  # (only CR, LF and CRLF end a line here, never U+2028)


def text_lines(path: str | Path):
    """``(number, text)`` of each line of a .jsonl (or .txt) file, streamed, each decoded by :func:`decode_texts`."""
    with open_regular(path, "--texts") as f:
        for n, raw in enumerate(f, 1):
            yield n, decode_texts(raw, path, n)


def txt_rows(f, path: Path, cols: Columns) -> Iterator[Row]:
    """The items of the .txt file open as ``f`` (binary), streamed: one a line, blank lines skipped.  A line ends at
    LF or CRLF only, as grep -n and a .jsonl's reader count lines, not at the other ends ``str.splitlines`` knows
    (a form feed, U+2028...: they stay in their line's text), so "line N" is the same line in every format.  Both
    engines read a .txt through here (the Ray engine in its read task)."""
    for flag, c in cols.named():
        raise AttnvizError(f"{flag} {c}: .txt files have no columns; use .jsonl, .parquet, .tsv or .csv")
    for n, line in enumerate(text_lines_of(f, path), 1):
        text = line.removesuffix("\n").removesuffix("\r")
        if text.strip():
            yield text, (None, None), f"line {n}"


def _txt(path: Path, cols: Columns) -> list[Row]:
    with open_regular(path, "--texts") as f:
        return list(txt_rows(f, path, cols))


def _jsonl(path: Path, cols: Columns) -> list[Row]:
    out = []
    for n, line in text_lines(path):
        if not line.strip():
            continue
        rec = parse_json(line, f"{path.name} line {n}", fix='write one object per line like {"text": "..."}')
        if not isinstance(rec, dict) or not isinstance(rec.get("text"), str):
            raise AttnvizError(
                f'{path.name} line {n}: no "text" string; write one object per line like {{"text": "..."}}'
            )
        if rec["text"].strip():  # a blank text is skipped, as a blank .txt line or .parquet row
            out.append(
                (
                    rec["text"],
                    cols.values(lambda flag, c, rec=rec, n=n: _string(rec.get(c), flag, c, f"{path.name} line {n}")),
                    f"line {n}",
                )
            )
    return out


def read_parquet(path: str | Path, columns: list[str] | None = None):
    """A Parquet file as a pyarrow Table.  Through ``ParquetFile``, not ``pq.read_table``: read_table imports pandas
    (0.2 s warm, about 1 s cold), which opening corpus results in the window paid for nothing.  ParquetFile leaves
    out a column it does not have without a word, so a missing one is refused here (:class:`MissingColumn`)."""
    import pyarrow.parquet as pq

    with open_regular(path, "parquet file") as fh, pq.ParquetFile(fh) as f:
        names = f.schema_arrow.names
        for c in columns or ():
            if c not in names:
                raise MissingColumn(f"no column {c!r}; the file has {', '.join(names) or 'none'}")
        return f.read(columns=columns)


def _parquet(path: Path, cols: Columns) -> list[Row]:
    named = [c for _, c in cols.named()]
    try:
        table = read_parquet(path, ["text", *named])
    except AttnvizError:
        raise
    except Exception as e:  # missing column, not parquet
        also = "".join(f" and {c!r}" for c in named)
        fix = "" if isinstance(e, MissingColumn) else '; write it again with a "text" column, or give a .jsonl file'
        raise AttnvizError(f'{path.name}: cannot read a "text" column{also} ({parquet_problem(e)}){fix}') from None
    check_string_columns(table.schema, ["text", *named], path)
    texts = table.column("text").to_pylist()
    extra = {c: table.column(c).to_pylist() for c in named}
    out = []
    for n, t in enumerate(texts):
        if isinstance(t, str) and t.strip():
            where = f"{path.name} row {n + 1}"
            out.append(
                (t, cols.values(lambda flag, c, n=n, where=where: _string(extra[c][n], flag, c, where)), f"row {n + 1}")
            )
    return out


def check_string_columns(schema, columns: list[str], path: Path) -> None:
    """Each of ``columns`` that a Parquet file's ``schema`` has holds strings: a column of numbers or lists held no
    string, and the run said "no items (empty lines are skipped)"."""
    import pyarrow as pa

    for c in columns:
        if c not in schema.names:
            continue  # (a missing column is named where it is read)
        kind = schema.field(c).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind)):
            raise AttnvizError(f"--texts {path.name}: column {c!r} holds {kind}, not text; give a column of strings")


def _string(v, flag: str, column: str, where: str) -> str:
    if not isinstance(v, str):
        raise AttnvizError(f"{where}: no {column!r} string for {flag}")
    return v


def delimited_rows(f, path: Path, cols: Columns, column: tuple[str, str] | None = None) -> Iterator[Row]:
    """The items of the .tsv / .csv file open as ``f`` (binary; a header row, corpus/delimited.py), streamed: its
    ``text`` column and the named ones, each item where its row starts; a blank text is skipped, as a blank line.
    ``column``: (flag, name) of one more column every row must have, whose value then stands for the (pair, gold)
    (:func:`delimited_column`).  Both engines read a delimited corpus through here (the Ray engine in its read
    task), so they read the very same items and refuse the same files in the same line."""
    from attnviz.corpus.delimited import read_rows

    header, rows = read_rows(text_lines_of(f, path), path)
    text = header.column("text")
    at = {c: header.column(c, flag) for flag, c in cols.named()}  # every named column checked, even with no rows
    if column is not None:
        extra = header.column(column[1], column[0])
        for line, fields in rows:
            if fields[text].strip():
                yield fields[text], (fields[extra], None), f"line {line}"
        return
    for line, fields in rows:
        if fields[text].strip():
            yield fields[text], cols.values(lambda flag, c, fields=fields: fields[at[c]]), f"line {line}"


def _delimited(path: Path, cols: Columns) -> list[Row]:
    with open_regular(path, "--texts") as f:
        return list(delimited_rows(f, path, cols))


def delimited_column(path: str | Path, column: str, flag: str) -> list[str]:
    """The ``column`` value of each item of a .tsv / .csv corpus, items as :func:`read_texts` keeps them."""
    out = []
    with open_regular(path, "--texts") as f:
        for _, (v, _), _ in delimited_rows(f, Path(path), Columns(), (flag, column)):
            assert v is not None  # (a field: always a string)
            out.append(v)
    return out


READERS = {".txt": _txt, ".jsonl": _jsonl, ".parquet": _parquet, ".tsv": _delimited, ".csv": _delimited}
FORMATS = '.txt (one item a line), .jsonl ("text" field), .parquet, .tsv or .csv ("text" column; .tsv / .csv: a header row naming it)'


def read_texts(
    path: str | Path, pair_column: str | None = None, max_items: int | None = None, gold_column: str | None = None
) -> list[Item]:
    path = Path(path)
    if path.is_dir():  # (it exists: "no such file" sent the user looking for a typo)
        raise AttnvizError(
            f"--texts {path}: is a folder; give a .txt, .jsonl, .parquet, .tsv or .csv file (images: --images DIR)"
        )
    regular_file(path, "--texts")  # a FIFO or a device is named as one, not "no such file"
    reader = READERS.get(path.suffix.lower())
    if reader is None:
        raise AttnvizError(f"--texts {path.name}: unknown format; use {FORMATS}")
    rows = reader(path, Columns(pair_column, gold_column))
    if max_items is not None:
        rows = rows[:max_items]
    if not rows:
        raise AttnvizError(f"--texts {path.name}: no items (empty lines are skipped)")
    return [Item(i, text=t, pair=p, gold=g, where=w) for i, (t, (p, g), w) in enumerate(rows)]


def read_images(folder: str | Path, max_items: int | None = None) -> list[Item]:
    folder = Path(folder)
    if not folder.is_dir():
        raise AttnvizError(f"--images {folder}: not a folder")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    if max_items is not None:
        files = files[:max_items]
    if not files:
        raise AttnvizError(f"--images {folder}: no image files ({', '.join(IMAGE_SUFFIXES)})")
    return [Item(i, image=str(p)) for i, p in enumerate(files)]


class HashStopped(Exception):
    """A hash given up on (its ``stop`` event was set): the run that wanted it has ended."""


def sha256_file(path: str | Path, chunk: int = 1 << 20, stop: threading.Event | None = None) -> str:
    h = hashlib.sha256()
    with open_regular(path, "model") as f:
        while block := f.read(chunk):
            if stop is not None and stop.is_set():
                raise HashStopped(str(path))
            h.update(block)
    return h.hexdigest()


def sha256_model(path: str | Path, stop: threading.Event | None = None) -> str:
    """One .onnx file's sha256, or a model folder's (an optimum export): every file in it, by name -- and in a Hub
    repository's ``onnx/`` folder, where its model files are (the files above are only its configs).  ``stop``:
    set from another thread, the hash ends at the next MB read with :class:`HashStopped`."""
    path = Path(path)
    if not path.is_dir():
        return sha256_kept(path, stop)
    h = hashlib.sha256()
    files = [p for p in path.iterdir() if p.is_file()]
    if (path / "onnx").is_dir():
        files += [p for p in (path / "onnx").iterdir() if p.is_file()]
    for f in sorted(files):
        # a link out of the folder (attnviz.core.links) is named by where it points, never read: the open refuses it
        # if the model needs it, and a file the model does not read is no reason to read outside the folder
        sha = sha256_kept(f, stop) if may_read(f, path) else f"a link to {f.resolve()}"
        h.update(json.dumps([f.relative_to(path).as_posix(), sha]).encode())
    return h.hexdigest()


def sha256_kept(path: str | Path, stop: threading.Event | None = None) -> str:
    """:func:`sha256_file` of a model file, from the hash kept by an earlier command where the file has not changed
    since (:mod:`attnviz.runtime.optcache`: a 90 MB model was ~0.1 s CPU a command), else computed and kept."""
    from attnviz.runtime import optcache

    if stop is not None and stop.is_set():  # given up on: as a hash would end at its next read
        raise HashStopped(str(path))
    known = optcache.known_sha256(path)
    if known is not None:
        return known
    before = optcache.stat_key(path)
    sha = sha256_file(path, stop=stop)
    optcache.remember_sha256(path, sha, before)
    return sha


def sha256_items(items: list[Item]) -> str:
    """Identity of the data actually analysed (a folder of images, or the first --max-items of a file)."""
    h = hashlib.sha256()
    for it in items:
        fields = [it.text, it.pair, Path(it.image).name if it.image else None]
        h.update(json.dumps(fields if it.gold is None else [*fields, it.gold]).encode())
        if it.image:
            h.update(sha256_file(it.image).encode())
    return h.hexdigest()
