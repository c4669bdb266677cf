""".tsv / .csv corpora: a header row naming the columns (``text`` and any ``--text-pair-column``, ``--gold-column``,
``--label-column``), then one item a row, read with the standard library's ``csv`` (RFC 4180 quoting: a quoted field
may hold the delimiter, a newline, or a doubled quote).  Each row keeps the line it starts on, as a user counts
lines, so a message about an item names the line an editor shows."""

from __future__ import annotations

import csv
import io
import threading
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
class Table:
    """A delimited file's header (``names``) and its rows: (the line each row starts on, its fields)."""

    name: str  # the file's name, for messages
    names: list[str]
    rows: list[tuple[int, list[str]]]

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


def parse_table(text: str, path: Path) -> Table:
    """The header and rows of the .tsv / .csv file ``path`` (the delimiter by its suffix), ``text`` its contents
    (decoded by corpus.items.decode_texts: bytes that are not UTF-8, or hold a NUL, are refused there, a byte-order
    mark dropped); blank lines skipped.  Bad input is one line: no header, a row with another number of fields than
    the header, a quote left open, a field past :data:`FIELD_LIMIT`."""
    delim = DELIMITERS[path.suffix.lower()]
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delim, strict=True)
    names: list[str] | None = None
    rows: list[tuple[int, list[str]]] = []
    start = 1  # the line the next row starts on (a quoted field may span lines)
    with _limit_lock:
        before = csv.field_size_limit(FIELD_LIMIT)
        try:
            for fields in reader:
                line, start = start, reader.line_num + 1
                if not any(f.strip() for f in fields) and len(fields) <= 1:
                    continue  # a blank (or only-spaces) line, as a .txt file's
                if names is None:
                    names = [n.strip() for n in fields]  # "text, label" names "label" (values keep theirs)
                    _check_header(names, path.name, line)
                elif len(fields) != len(names):
                    _wrong_count(path.name, line, len(fields), len(names), delim)
                else:
                    rows.append((line, fields))
        except csv.Error as e:
            _csv_error(e, path.name, start, reader.line_num, delim)
        finally:
            csv.field_size_limit(before)
    if names is None:
        shown = SHOWN[delim]
        raise AttnvizError(
            f"--texts {path.name}: no header row (the file is empty or blank); write a header row naming the "
            f"columns, e.g. text{shown}label, then one item a row"
        )
    return Table(path.name, names, rows)


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
