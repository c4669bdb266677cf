""".tsv / .csv corpora: a header row naming the columns (``text`` and any ``--text-pair-column``, ``--gold-column``,
``--label-column``), then one item a row, read with the standard library's ``csv`` (RFC 4180 quoting: a quoted field
may hold the delimiter, a newline, or a doubled quote).  Each row keeps the line it starts on, as a user counts
lines, so a message about an item names the line an editor shows."""

from __future__ import annotations

import csv
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from attnviz import AttnvizError

DELIMITERS = {".tsv": "\t", ".csv": ","}
SHOWN = {"\t": "<TAB>", ",": ","}  # how a fix writes the delimiter: a tab is invisible in a message
WORDS = {"\t": "tabs", ",": "commas", ";": "semicolons"}
# csv's own limit is 128 Ki characters a field and its refusal ("field larger than field limit") names no line.
# 16 Mi characters is millions of tokens, far past what any model reads (--max-tokens cuts the rest), and still
# stops early a quote left open that would otherwise swallow the rest of a large file into one field.
FIELD_LIMIT = 16 * 2**20
_limit_lock = threading.Lock()  # csv.field_size_limit is one setting for the whole process


@dataclass(frozen=True)
class Header:
    """A delimited file's header row: the names of its columns."""

    name: str  # the file's name, for messages
    names: list[str]

    def column(self, column: str, flag: str | None = None) -> int:
        """The position of ``column`` (``flag``: the option that named it), or one line naming the columns the
        file has and the fix."""
        if column in self.names:
            return self.names.index(column)
        has = _shown(self.names)
        if flag is None:
            delim = DELIMITERS[Path(self.name).suffix.lower()]
            other = next((d for d in ("\t", ",", ";") if d != delim and d in self.names[0]), None)
            if len(self.names) == 1 and other is not None:  # a TSV named .csv, or Excel's ';' (a comma locale)
                fix = {"\t": "name it .tsv", ",": "name it .csv"}.get(
                    other, "save it comma-separated, or tab-separated as a .tsv"
                )
                raise AttnvizError(
                    f"--texts {self.name}: no 'text' column; its first row {has} is separated by {WORDS[other]}, not "
                    f"{WORDS[delim]}; {fix}"
                )
            delim = SHOWN[delim]
            raise AttnvizError(
                f"--texts {self.name}: no 'text' column; its first row has {has}; start the file with a header row "
                f"naming a text column, e.g. text{delim}label"
            )
        raise AttnvizError(
            f"{flag} {column}: --texts {self.name} has no {column!r} column; its header row has {has}; name one of "
            "them, or add that column"
        )


def _shown(names: list[str], most: int = 8, width: int = 40) -> str:
    """A header's names for a message: a first row that is data (no header) may hold a whole paragraph."""
    cut = [repr(n if len(n) <= width else n[:width] + "…") for n in names[:most]]
    return ", ".join(cut) + (f" and {len(names) - most} more" if len(names) > most else "")


ROWS_UNDER_LOCK = 1024  # rows csv reads under one hold of the field-limit lock (never held across a yield)


def read_rows(lines: Iterable[str], path: Path) -> tuple[Header, Iterator[tuple[int, list[str]]]]:
    """The header of the .tsv / .csv file ``path`` (the delimiter by its suffix) and an iterator over its rows: (the
    line each row starts on, its fields); blank lines skipped.  ``lines``: its decoded lines with their ends
    (corpus.items.text_pieces: bytes that are not UTF-8, hold a NUL or a lone CR, are refused there, a byte-order
    mark dropped), consumed as the rows are, so a file of any size is read in a few MB.  Bad input is one line,
    raised as the rows reach it: no header, a row with another number of fields than the header, a quote left open,
    a field past :data:`FIELD_LIMIT`."""
    rows = _rows(lines, path)
    first = next(rows, None)
    if first is None:
        shown = SHOWN[DELIMITERS[path.suffix.lower()]]
        raise AttnvizError(
            f"--texts {path.name}: no header row (the file is empty or blank); write a header row naming the "
            f"columns, e.g. text{shown}label, then one item a row"
        )
    line, fields = first
    names = [n.strip() for n in fields]  # "text, label" names "label" (values keep theirs)
    _check_header(names, path.name, line)
    return Header(path.name, names), _counted(rows, path.name, len(names), DELIMITERS[path.suffix.lower()])


def _counted(rows, name: str, want: int, delim: str) -> Iterator[tuple[int, list[str]]]:
    for line, fields in rows:
        if len(fields) != want:
            _wrong_count(name, line, len(fields), want, delim)
        yield line, fields


def _rows(lines: Iterable[str], path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line, fields) of each non-blank row, the header's included.  csv counts the lines it reads
    (``line_num``), so a row after a quoted multi-line field starts where an editor shows it."""
    delim = DELIMITERS[path.suffix.lower()]
    reader = csv.reader(lines, delimiter=delim, strict=True)
    start = 1  # the line the next row starts on (a quoted field may span lines)
    while True:
        got: list[tuple[int, list[str]]] = []
        error = None  # raised after the rows before it: a refusal names the first bad line, as a whole read did
        with _limit_lock:  # a block of rows at a time: the process's own limit is back between blocks
            before = csv.field_size_limit(FIELD_LIMIT)
            try:
                for fields in reader:
                    line, start = start, reader.line_num + 1
                    if not any(f.strip() for f in fields) and len(fields) <= 1:
                        continue  # a blank (or only-spaces) line, as a .txt file's
                    got.append((line, fields))
                    if len(got) == ROWS_UNDER_LOCK:
                        break
            except csv.Error as e:
                error = (e, start, reader.line_num)
            finally:
                csv.field_size_limit(before)
        yield from got
        if error is not None:
            _csv_error(error[0], path.name, error[1], error[2], delim)
        if len(got) < ROWS_UNDER_LOCK:
            return


def _check_header(names: list[str], name: str, line: int) -> None:
    seen = set()
    for n in names:
        if n in seen:
            raise AttnvizError(
                f"--texts {name} line {line}: the header row names {n!r} twice; give each column its own name"
            )
        seen.add(n)


def _wrong_count(name: str, line: int, got: int, want: int, delim: str) -> None:
    what = "a tab" if delim == "\t" else "a comma"
    raise AttnvizError(
        f"--texts {name} line {line}: {got} field{'s' * (got != 1)}, the header row has {want}; give every row "
        f"{want} (a field that holds {what} goes in double quotes)"
    )


def _csv_error(e: csv.Error, name: str, start: int, at: int, delim: str) -> None:
    """csv's refusals as one line naming the line and the fix ("field larger than field limit" named neither)."""
    msg = str(e)
    if "field limit" in msg:
        raise AttnvizError(
            f"--texts {name} line {start}: a field of more than {FIELD_LIMIT:,} characters, longer than any model "
            'reads; a quote (") that opens a field and is never closed? Close it, or shorten the item'
        ) from None
    if "unexpected end of data" in msg:
        raise AttnvizError(
            f'--texts {name} line {start}: a quote (") opens a field that is never closed; close it, or write a '
            'quote inside a quoted field as two ("")'
        ) from None
    sep = "a tab" if delim == "\t" else "a comma"
    raise AttnvizError(
        f"--texts {name} line {at}: a quoted field goes on after its closing quote ({msg}); end it with {sep} or "
        'the line, or write a quote inside it as two ("")'
    ) from None
