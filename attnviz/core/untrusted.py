"""The one place where files from strangers are opened: regular files only, size caps.

Every reader of user-supplied files (models, tokenizers, images, feeds, maps, recipes, checkpoints) goes through
:func:`regular_file` / :func:`open_regular` / :func:`read_bytes`, so a FIFO or device named ``tokenizer.json``
can never block a read.  Images additionally go through :func:`attnviz.runtime.raster.open_raster` (Pillow lives
outside ``core``).  Failures are :class:`~attnviz.AttnvizError` with one line naming the fix.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import zipfile
import zlib
from pathlib import Path
from typing import Any, BinaryIO

from attnviz import AttnvizError
from attnviz.core.words import with_article


def regular_file(path: str | os.PathLike, what: str = "file") -> Path:
    """``path`` if it names an existing regular file (symlinks followed), else one clear error."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise AttnvizError(f"{what} {p}: {missing(p)}") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise AttnvizError(f"{what} {p}: {LOOP}") from None
        raise AttnvizError(f"{what} {p}: cannot read it ({e.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise AttnvizError(f"{what} {p}: is a folder; give a file")
    if not stat.S_ISREG(st.st_mode):
        raise AttnvizError(f"{what} {p}: not a regular file (a pipe, socket or device); give a regular file")
    return p


LOOP = "a symbolic link that leads back to itself; point it at the file"


def missing(p: Path) -> str:
    """Why ``p`` is not there: no such file, or a link whose target is gone (the link itself is there: "no such
    file" sent the user looking for a typo)."""
    try:
        target = os.readlink(p)
    except OSError:
        return "no such file"
    try:
        os.stat(p)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return LOOP
    return f"a symbolic link to {target}, which does not exist; point it at the file, or give the file itself"


def open_regular(path: str | os.PathLike, what: str = "file") -> BinaryIO:
    """A binary file object for a regular file; opened non-blocking and re-checked, so a file swapped for a
    FIFO between the check and the open still cannot block."""
    p = regular_file(path, what)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as e:
        raise AttnvizError(f"{what} {p}: cannot read it ({e.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise AttnvizError(f"{what} {p}: not a regular file (a pipe, socket or device); give a regular file")
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def inside_folder(path: str | os.PathLike, folder: str | os.PathLike, what: str = "file") -> Path:
    """``path`` if it names a regular file whose real location (symlinks followed) lies inside ``folder``; a
    file that only links to somewhere else is refused before anything reads it."""
    p = regular_file(path, what)
    base = Path(folder).resolve()
    if base not in p.resolve().parents:
        raise AttnvizError(f"{what} {p}: a link to {p.resolve()}, outside {base}; copy the file into the folder")
    return p


def read_bytes(path: str | os.PathLike, what: str = "file", limit: int | None = None) -> bytes:
    with open_regular(path, what) as f:
        data = f.read(-1 if limit is None else limit + 1)
    if limit is not None and len(data) > limit:
        raise AttnvizError(
            f"{what} {path}: larger than {limit // 2**20} MB; this is not {with_article(what)} attnviz can use"
        )
    return data


def read_text(path: str | os.PathLike, what: str = "file", limit: int | None = 64 * 2**20) -> str:
    """A UTF-8 text file (a UTF-8 byte-order mark dropped: Notepad writes one, and it stuck to the first word);
    else one line naming the line, the byte and the fix (it said "not UTF-8 text" and no more)."""
    data = read_bytes(path, what, limit)
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise AttnvizError(f"{what} {path}: UTF-16 text; save it as UTF-8 (e.g. iconv -f UTF-16 -t UTF-8)")
    try:
        return data.removeprefix(b"\xef\xbb\xbf").decode("utf-8")
    except UnicodeDecodeError as e:
        at = e.start + (3 if data.startswith(b"\xef\xbb\xbf") else 0)
        line, col = data.count(b"\n", 0, at) + 1, at - data.rfind(b"\n", 0, at)
        raise AttnvizError(
            f"{what} {path} line {line}: byte 0x{data[at]:02X} (column {col}) is not UTF-8; save the file as UTF-8 "
            "(e.g. iconv -f latin1 -t UTF-8)"
        ) from None


# --- JSON from strangers ---------------------------------------------------------------------------------------
# json.loads recurses once per level (RecursionError near 1,000) and Python's int() refuses numbers past 4,300
# digits (ValueError); neither is a message a user can act on.  Every JSON a user or a file from elsewhere supplies
# is parsed by parse_json/read_json, which check both before json.loads runs, so every refusal is one line.

JSON_MAX_DEPTH = 100  # Hugging Face configs, tokenizers, recipes and metadata nest under 10 levels
JSON_MAX_DIGITS = 1000  # a digit run this long is no id, size or count attnviz could use
JSON_MAX_BYTES = 64 * 2**20
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)  # unrolled: linear, no backtracking
_LONG_DIGITS = re.compile(rf"\d{{{JSON_MAX_DIGITS + 1}}}")


def _json_depth(text: str) -> int:
    """The deepest bracket nesting in ``text`` outside strings (numpy over the bracket bytes only: no recursion)."""
    import numpy as np  # here: the modules that import this one for its file checks (runtime.raster, the corpus
    # command's checks before it starts its workers) need no numpy

    b = np.frombuffer(text.encode("utf-8", "replace"), np.uint8)
    opens, closes = (b == 91) | (b == 123), (b == 93) | (b == 125)  # [ {  and  ] }
    steps = opens[opens | closes].astype(np.int64) * 2 - 1
    return int(np.cumsum(steps).max(initial=0))


def check_json(text: str, what: str, fix: str = "") -> None:
    """What :func:`parse_json` refuses before parsing (nesting deeper than :data:`JSON_MAX_DEPTH`, a number
    longer than :data:`JSON_MAX_DIGITS` digits), for text another parser reads (Ray Data's JSON reader)."""
    tail = f"; {fix}" if fix else "; give well-formed JSON"
    if text.count("[") + text.count("{") > JSON_MAX_DEPTH or _LONG_DIGITS.search(text):
        bare = _JSON_STRING.sub('""', text)  # brackets and digits inside strings are only text
        if _json_depth(bare) > JSON_MAX_DEPTH:
            raise AttnvizError(f"{what}: JSON nested deeper than {JSON_MAX_DEPTH} levels{tail}")
        if _LONG_DIGITS.search(bare):
            raise AttnvizError(f"{what}: a JSON number longer than {JSON_MAX_DIGITS:,} digits{tail}")


def parse_json(
    data: str | bytes,
    what: str,
    limit_bytes: int | None = JSON_MAX_BYTES,
    fix: str = "",
    checked: bool = False,
    quote: bool = True,
) -> Any:
    """``data`` parsed as JSON, or one :class:`~attnviz.AttnvizError` naming ``what`` (a file, a line, a
    metadata key) and the problem: too large, not UTF-8, nested deeper than :data:`JSON_MAX_DEPTH`, a number
    longer than :data:`JSON_MAX_DIGITS` digits, or not JSON.  ``fix`` (what the user should do) ends the line.
    ``checked``: this very text passed :func:`check_json` in an earlier process (the caller holds the proof: a kept
    pass, runtime/inputs.py), so its two regex passes are skipped; the rest of the guard stays.  ``quote``: a
    malformed text's line says where the parser stopped and what it expected (help to whoever wrote the file by
    hand); False for a text attnviz wrote itself (an ``.npz`` entry), where "Expecting ',' delimiter" helps no one
    and the fix is to write it again."""
    tail = f"; {fix}" if fix else "; give well-formed JSON"
    if limit_bytes is not None and len(data) > limit_bytes:
        raise AttnvizError(f"{what}: larger than {limit_bytes // 2**20 or 1} MB of JSON{tail}")
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise AttnvizError(f"{what}: not UTF-8 text{tail}") from None
    else:
        text = data
    if not checked:
        check_json(text, what, fix)
    try:
        return json.loads(text)
    except RecursionError:  # the scan above makes this unreachable for JSON; kept so no input can get past
        raise AttnvizError(f"{what}: JSON nested too deeply{tail}") from None
    except ValueError as e:
        if not quote:
            raise AttnvizError(f"{what}: not valid JSON (damaged or edited){tail}") from None
        msg = getattr(e, "msg", None) or str(e).splitlines()[0][:80]
        where = f" at line {e.lineno} column {e.colno}" if isinstance(e, json.JSONDecodeError) else ""
        raise AttnvizError(f"{what}: not valid JSON ({msg}{where}){tail}") from None


def where_json_breaks(text: str) -> tuple[int, int] | None:
    """(line, column) where ``text`` stops being JSON, for a refusal that says what the text is in its own words
    (runtime/tokenizer_file.py); None where it parses, or where Python's parser gives up on it (nesting past its
    recursion limit, a number past its digits limit: the guard's own line then stands).  Only called on a text
    already refused, so the guard (:func:`check_json`) is not run over it a second time."""
    try:
        json.loads(text)
    except json.JSONDecodeError as e:
        return e.lineno, e.colno
    except (AttnvizError, ValueError, RecursionError):
        return None
    return None


def read_json(path: str | os.PathLike, what: str = "file", limit: int | None = JSON_MAX_BYTES, fix: str = "") -> Any:
    """A JSON file read through the regular-file guard (:func:`read_bytes`) and parsed by :func:`parse_json`."""
    return parse_json(read_bytes(path, what, limit), f"{what} {path}", None, fix)


def npz_problem(e: BaseException, entry: str | None = None, other: str = "it is not laid out as numpy writes") -> str:
    """What reading a ``.npz`` (``np.load``, then one entry) ran into, in plain words instead of Python's own
    ("ValueError: Object arrays cannot be loaded when allow_pickle=False"); ``entry`` names the array read;
    ``other``: the words for anything else (the caller knows what the file should have held)."""
    what = f"its entry '{entry}'" if entry else "it"
    text = str(e)
    if isinstance(e, KeyError):  # numpy: "NAME is not a file in the archive"
        return f"it has no '{text.strip(chr(39)).split(' is not a file')[0]}' entry"
    if isinstance(e, (zipfile.BadZipFile, EOFError, zlib.error)) or "CRC" in text or "EOF" in text:
        return f"{what} is cut short or damaged (a partial copy or download)"
    if isinstance(e, ValueError) and "pickle" in text:
        return f"{what} holds pickled Python objects, which attnviz never loads (loading them can run code)"
    if isinstance(e, MemoryError):
        return f"{what} is larger than this machine's free memory"
    if isinstance(e, NotImplementedError):  # zipfile: a compression method this Python cannot read
        return f"{what} is compressed in a way numpy cannot read"
    return f"{what} is not a numpy array numpy can read" if entry else other


class MissingColumn(ValueError):
    """A Parquet file without a column asked for (its words are attnviz's own: they name the columns it has)."""


def parquet_problem(e: BaseException) -> str:
    """What reading a Parquet file ran into, in plain words instead of pyarrow's ("Parquet magic bytes not found in
    footer", "Couldn't deserialize thrift: TProtocolException: Invalid data"); a missing column as its own line
    says.  pyarrow is not imported here: its exceptions are told apart by their words."""
    text = str(e)
    if isinstance(e, MissingColumn):
        return text
    if isinstance(e, MemoryError):
        return "it is larger than this machine's free memory"
    if "size is 0 bytes" in text:
        return "it is empty"
    if "magic bytes" in text:
        return "it is not a Parquet file, or a partial copy cut short"
    return "it is damaged: parts of it cannot be read"


def checkpoint_problem(e: BaseException) -> str:
    """:func:`npz_problem` for a corpus command's ``checkpoint.npz``."""
    return npz_problem(e, other="its entries are not the ones this command writes")
