"""Corpus inputs: one item per line of .txt, per record of .jsonl / .parquet, or per image file of a folder."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from attnviz import AttnvizError
from attnviz.runtime.raster import IMAGE_SUFFIXES


@dataclass(frozen=True)
class Item:
    """One input; ``index`` is its position in the file (examples point back to it)."""

    index: int
    text: str | None = None
    pair: str | None = None
    image: str | None = None


def item_error(it: Item, e: AttnvizError, pair: bool = False) -> AttnvizError:
    """``e`` (a tokeniser's refusal) naming the corpus item it came from: in a file of thousands of lines the word
    alone does not say where to look.  Items count from 0 without blank lines, so the text's start is quoted too."""
    text = str((it.pair if pair else it.text) or "")
    head = text if len(text) <= 40 else text[:40] + "…"
    what = "the --text-pair-column of corpus item" if pair else "corpus item"
    return AttnvizError(f"{what} {it.index} {head!r}: {e}", param=e.param)


def _txt(path: Path, pair_column: str | None) -> list[tuple[str, str | None]]:
    if pair_column:
        raise AttnvizError(f"--text-pair-column {pair_column}: .txt files have no columns; use .jsonl or .parquet")
    return [(line, None) for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]


def _jsonl(path: Path, pair_column: str | None) -> list[tuple[str, str | None]]:
    out = []
    with path.open(encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise AttnvizError(
                    f'{path.name} line {n}: not JSON ({e.msg}); write one object per line like {{"text": "..."}}'
                ) from None
            if not isinstance(rec, dict) or not isinstance(rec.get("text"), str):
                raise AttnvizError(
                    f'{path.name} line {n}: no "text" string; write one object per line like {{"text": "..."}}'
                )
            if rec["text"].strip():  # a blank text is skipped, as a blank .txt line or .parquet row
                out.append((rec["text"], _pair(rec, pair_column, f"{path.name} line {n}")))
    return out


def read_parquet(path: str | Path, columns: list[str] | None = None):
    """A Parquet file as a pyarrow Table.  Through ``ParquetFile``, not ``pq.read_table``: read_table imports pandas
    (0.2 s warm, about 1 s cold), which opening corpus results in the window paid for nothing.  ParquetFile leaves
    out a column it does not have without a word, so a missing one is refused here (ValueError)."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as f:
        names = f.schema_arrow.names
        for c in columns or ():
            if c not in names:
                raise ValueError(f"no column {c!r}; the file has {', '.join(names) or 'none'}")
        return f.read(columns=columns)


def _parquet(path: Path, pair_column: str | None) -> list[tuple[str, str | None]]:
    try:
        table = read_parquet(path, ["text", pair_column] if pair_column else ["text"])
    except Exception as e:  # missing column, not parquet
        raise AttnvizError(
            f'{path.name}: cannot read a "text" column{" and " + repr(pair_column) if pair_column else ""} ({str(e).splitlines()[0][:160]})'
        ) from None
    texts = table.column("text").to_pylist()
    pairs = table.column(pair_column).to_pylist() if pair_column else [None] * len(texts)
    return [(t, p) for t, p in zip(texts, pairs) if isinstance(t, str) and t.strip()]


def _pair(rec: dict, column: str | None, where: str) -> str | None:
    if not column:
        return None
    v = rec.get(column)
    if not isinstance(v, str):
        raise AttnvizError(f"{where}: no {column!r} string for --text-pair-column")
    return v


READERS = {".txt": _txt, ".jsonl": _jsonl, ".parquet": _parquet}


def read_texts(path: str | Path, pair_column: str | None = None, max_items: int | None = None) -> list[Item]:
    path = Path(path)
    if not path.is_file():
        raise AttnvizError(f"--texts {path}: no such file")
    reader = READERS.get(path.suffix.lower())
    if reader is None:
        raise AttnvizError(
            f'--texts {path.name}: unknown format; use .txt (one item a line), .jsonl ("text" field) or .parquet'
        )
    rows = reader(path, pair_column)
    if max_items is not None:
        rows = rows[:max_items]
    if not rows:
        raise AttnvizError(f"--texts {path.name}: no items (empty lines are skipped)")
    return [Item(i, text=t, pair=p) for i, (t, p) in enumerate(rows)]


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


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_model(path: str | Path) -> str:
    """One .onnx file's sha256, or a model folder's (an optimum export): every file in it, by name."""
    path = Path(path)
    if not path.is_dir():
        return sha256_file(path)
    h = hashlib.sha256()
    for f in sorted(p for p in path.iterdir() if p.is_file()):
        h.update(json.dumps([f.name, sha256_file(f)]).encode())
    return h.hexdigest()


def sha256_items(items: list[Item]) -> str:
    """Identity of the data actually analysed (a folder of images, or the first --max-items of a file)."""
    h = hashlib.sha256()
    for it in items:
        h.update(json.dumps([it.text, it.pair, Path(it.image).name if it.image else None]).encode())
        if it.image:
            h.update(sha256_file(it.image).encode())
    return h.hexdigest()
