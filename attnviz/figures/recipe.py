"""Figure recipes: a JSON file beside a figure that says exactly how to make it again.

A recipe records the source (model file or ``attnviz extract`` maps file, each with its sha256),
the inputs (text, text pair, image + sha256, feeds file + sha256, generation steps), the view
(:class:`FigureSpec`), run options and the attnviz version.  ``attnviz figure --recipe R.json``
checks the hashes and renders the same bytes again.

Paths are stored relative to the recipe's folder (so a folder of figures, recipes and inputs
can move as a whole) plus the absolute path as a fallback.  Matplotlib-free.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from attnviz import AttnvizError, __version__
from attnviz.core.json_types import check_types, hints_of, shown
from attnviz.core.untrusted import open_regular, parse_json, read_bytes
from attnviz.core.writes import atomic_write_bytes
from attnviz.figures.spec import FigureSpec, check_vmax

RECIPE_FORMAT = 1
RECIPE_SUFFIX = ".recipe.json"
_FILE_KEYS = (
    ("source", "model"),
    ("source", "maps"),
    ("inputs", "image"),
    ("inputs", "audio"),
    ("inputs", "feeds"),
    ("inputs", "tokenizer"),
)
# lists of file entries: one prompt's several images (a vision–language model), in order
_FILE_LISTS = (("inputs", "images"),)
# the types of the values a recipe's sections hold besides its file entries (its "view" is a FigureSpec's fields):
# checked before use, so a hand edit is one line naming the key (core.json_types), never an internal error
_SECTION_TYPES: dict[str, dict] = {
    "inputs": {"text": str | None, "texts": list[str] | None, "text_pair": str | None, "generate": int | None},
    "options": {
        "provider": str,
        "mode": str,
        "image_size": list[int] | None,
        "image_mean": list[float] | None,
        "image_std": list[float] | None,
        "max_tokens": int | None,
        "batch_index": int | None,
        "max_seconds": float | None,
        "variant": str | None,
        "beams": int | None,
    },
    "output": {"path": str | None, "format": str | None},
}
_FIX = "correct it, or write the recipe again with 'attnviz figure ... --out F'"
# the keys read from the sections a hand edit may add to: any other is named in a note (a typo like "max_token"
# drew a different figure without a word); the view's keys are FigureSpec's fields, an unknown one refused
_INPUT_KEYS = ("text", "texts", "text_pair", "image", "images", "audio", "feeds", "tokenizer", "generate")
READ_KEYS = {"inputs": _INPUT_KEYS, "options": tuple(_SECTION_TYPES["options"])}
MAX_KEYS_SAID = 8


_HASHES: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256: --all-heads hashes a model once


def file_sha256(path: str | os.PathLike) -> str:
    if Path(path).is_dir():  # a model folder (optimum export): the hash of its files' names and hashes
        h = hashlib.sha256()
        for f in sorted(Path(path).iterdir()):
            if f.is_file():
                h.update(f.name.encode() + file_sha256(f).encode())
        return h.hexdigest()
    try:
        st = os.stat(path)
        key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
        if key in _HASHES:
            return _HASHES[key]
        h = hashlib.sha256()
        with open_regular(path, "file") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    except FileNotFoundError:
        raise AttnvizError(f"{path}: no such file") from None
    except OSError as e:
        raise AttnvizError(f"cannot read {path}: {e.strerror}") from None
    _HASHES[key] = h.hexdigest()
    return _HASHES[key]


def recipe_path_for(figure_path: str | os.PathLike) -> Path:
    """``fig.pdf`` -> ``fig.pdf.recipe.json`` (one recipe per output file, formats never collide)."""
    p = Path(figure_path)
    return p.with_name(p.name + RECIPE_SUFFIX)


def _file_entry(path) -> dict | None:
    if path is None:
        return None
    p = Path(path).expanduser().resolve()
    return {"path": str(p), "sha256": file_sha256(p)}


def make_recipe(
    spec: FigureSpec,
    *,
    model: str | os.PathLike | None = None,
    maps: str | os.PathLike | None = None,
    text: str | list[str] | None = None,
    text_pair: str | None = None,
    image: str | os.PathLike | list[str] | None = None,
    feeds: str | os.PathLike | None = None,
    tokenizer: str | os.PathLike | None = None,
    generate: int = 0,
    output: str | os.PathLike | None = None,
    audio: str | os.PathLike | None = None,
    **options,
) -> dict:
    """Describe how a figure was made (paths absolute; :func:`write_recipe` makes them relative)."""
    if (model is None) == (maps is None):
        raise AttnvizError("a recipe needs exactly one source: a model file or an 'attnviz extract' maps file")
    source = {"model": _file_entry(model)} if model is not None else {"maps": _file_entry(maps)}
    files = list(image) if isinstance(image, (list, tuple)) else [image] if image is not None else []
    texts = list(text) if isinstance(text, (list, tuple)) else None
    inputs = {
        "text": texts[0] if texts else text,
        # a dual encoder's several candidate texts, in order (recipes of one text have no such key)
        **({"texts": texts} if texts and len(texts) > 1 else {}),
        "text_pair": text_pair,
        "image": _file_entry(files[0]) if len(files) == 1 else None,
        # several images in one prompt: each file in order (recipes of one image have no such key)
        **({"images": [_file_entry(f) for f in files]} if len(files) > 1 else {}),
        **({"audio": _file_entry(audio)} if audio is not None else {}),  # older recipes stay as they were
        "feeds": _file_entry(feeds),
        "tokenizer": _file_entry(tokenizer),
        "generate": int(generate or 0),
    }
    out = None
    if output is not None:
        o = Path(output).expanduser().resolve()
        out = {"path": str(o), "format": o.suffix.lower().lstrip(".")}
    return {
        "attnviz_recipe": RECIPE_FORMAT,
        "attnviz_version": __version__,
        "source": source,
        "inputs": inputs,
        # run options (provider, mode, image_size/mean/std): kept as given, defaults included
        "options": {"provider": "auto", **{k: (list(v) if isinstance(v, tuple) else v) for k, v in options.items()}},
        "view": spec.to_dict(),
        "output": out,
    }


def _relativise(entry: dict | None, base: Path) -> dict | None:
    if not entry:
        return entry
    e = dict(entry)
    e["abs_path"] = e["path"]
    try:
        e["path"] = os.path.relpath(e["path"], base)
    except ValueError:  # another drive (Windows)
        pass
    return e


def write_recipe(recipe: dict, path: str | os.PathLike) -> Path:
    """Write the recipe as sorted, indented JSON, atomically; file paths relative to its folder."""
    return atomic_write_bytes(path, recipe_bytes(recipe, path), RECIPE_FLAG)


RECIPE_FLAG = "--recipe-out"  # the option that names a recipe's file, for the messages


def recipe_bytes(recipe: dict, path: str | os.PathLike) -> bytes:
    """The recipe as :func:`write_recipe` writes it to ``path`` (its file paths relative to that folder), for a
    figure and its recipe written together (figures/render.py's :func:`save_figure_and_recipe`)."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise AttnvizError(f"cannot write {path}: folder {parent} does not exist; create it or choose another path")
    base = parent.resolve()
    r = json.loads(json.dumps(recipe))  # deep copy
    for sec, key in _FILE_KEYS:
        if r.get(sec) and r[sec].get(key):
            r[sec][key] = _relativise(r[sec][key], base)
    for sec, key in _FILE_LISTS:
        if r.get(sec) and r[sec].get(key):
            r[sec][key] = [_relativise(e, base) for e in r[sec][key]]
    if r.get("output"):
        r["output"] = _relativise(r["output"], base)
    return (json.dumps(r, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def _kinds() -> dict[str, tuple[str, ...]]:
    """What each file entry names, by its name's suffix (what the command line opens for that flag)."""
    from attnviz.runtime.audio import AUDIO_SUFFIXES
    from attnviz.runtime.raster import IMAGE_SUFFIXES

    return {"model file": (".onnx",), "maps file": (".npz",), "image": IMAGE_SUFFIXES, "audio file": AUDIO_SUFFIXES,
            "feeds file": (".npz",), "tokenizer": (".json",)}  # fmt: skip


def _model_folder(p: Path) -> bool:
    """An export folder's model files are there (optimum's, a Hub repository's onnx/): listed, none read."""
    return p.is_dir() and (any(p.glob("*.onnx")) or any(p.glob("onnx/*.onnx")))


def _may_look(c: Path, base: Path, what: str, where: str) -> None:
    """Refuse, before it is opened (or its existence told), a file a recipe names outside its own folder that is
    not of its entry's kind: a recipe from elsewhere naming /etc/passwd or /proc/self/environ as its model had it
    hashed, then refused as "changed".  A recipe's inputs may lie elsewhere (its model in models/, the figure in
    figs/: attnviz writes such recipes), so outside the folder a name of the entry's kind is looked at; inside,
    any name (the folder is what the user handed over).  Where a name's links lead counts, not the name."""
    real = Path(os.path.realpath(c))  # (links followed: names read, no file opened)
    if real == base or base in real.parents:
        return
    kinds = _kinds()[what]
    if real.suffix.lower() in kinds or (what == "model file" and _model_folder(real)):
        return
    them = "an export folder or a" if what == "model file" else "an" if what[0] in "aeiou" else "a"
    raise AttnvizError(
        f"{where} names {c}, outside the recipe's folder and not {them} {what} ({', '.join(kinds)}): a recipe "
        f"reads no other file; point it at the {what} or edit the recipe"
    )


def _resolve(entry: dict | None, base: Path, what: str, check: bool, where: str = "the recipe's entry") -> dict | None:
    if not entry:
        return None
    if not (
        isinstance(entry, dict)
        and isinstance(entry.get("path"), str)
        and all(isinstance(entry.get(k), (str, type(None))) for k in ("abs_path", "sha256"))
    ):
        raise AttnvizError(
            f'{where} is {shown(entry)}; give an object like {{"path": "FILE", "sha256": "..."}} ({_FIX})'
        )
    cands = [base / entry["path"]]
    if entry.get("abs_path"):
        cands.append(Path(entry["abs_path"]))
    found = None
    for c in cands:  # in turn: abs_path is looked at only where path names nothing
        _may_look(c, base, what, where)
        # a model may be an export folder (optimum's encoder + decoder files, a Hub repository): file_sha256 hashes
        # those
        if c.is_file() or (what == "model file" and c.is_dir()):
            found = c
            break
    odd = next((c for c in cands if c.exists()), None) if found is None else None
    if odd is not None:
        # a folder, a device or a pipe (/dev/zero, a FIFO) is there: "missing" was the wrong reason (none is read)
        kind = "a folder" if odd.is_dir() else "not a regular file (a pipe, socket or device)"
        raise AttnvizError(f"{where} names {odd}, which is {kind}; point it at the {what}'s file or edit the recipe")
    if found is None:
        raise AttnvizError(
            f"the recipe's {what} {entry['path']} is missing (looked in {', '.join(str(c) for c in cands)}); "
            f"put it back or edit the recipe"
        )
    out = dict(entry, path=str(found.resolve()))
    if check and entry.get("sha256") and file_sha256(found) != entry["sha256"]:
        raise AttnvizError(
            f"the recipe's {what} {found} has changed since the recipe was written (sha256 differs); "
            f"the figure cannot be reproduced exactly from it"
        )
    return out


def load_recipe(path: str | os.PathLike, check_hashes: bool = True) -> dict:
    """Read a recipe; file paths become absolute and (by default) their sha256 is verified."""
    path = Path(path)
    if not path.exists():
        raise AttnvizError(f"{path}: no such recipe file")
    data = read_bytes(path, "recipe", 16 * 2**20)  # (kept: a refused number is shown as the file writes it)
    r = parse_json(data, f"recipe {path}", None, "write one with 'attnviz figure ... --out F'")
    try:
        return _checked_recipe(r, path, check_hashes, data)
    except AttnvizError:  # its own line (a ViewError is a ValueError too: it came out "malformed recipe (ViewE…")
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # a hand-edited or hostile recipe
        raise AttnvizError(
            f"{path}: malformed recipe ({type(e).__name__}: {str(e)[:100]}); regenerate it with 'attnviz figure'"
        ) from None


def _vmax_as_written(data: bytes):
    """The recipe's ``view.vmax`` as its file writes it (``0.0000001``, which json reads as 1e-07): its text parsed
    again (it parsed once, so it is well-formed JSON), numbers kept as written."""
    from attnviz.core.numbers import as_typed_json

    return (json.loads(data.decode("utf-8-sig"), parse_float=as_typed_json).get("view") or {}).get("vmax")


def _checked_recipe(r, path: Path, check_hashes: bool, data: bytes | None = None) -> dict:
    if not isinstance(r, dict) or r.get("attnviz_recipe") is None:
        raise AttnvizError(f"{path}: not an attnviz figure recipe (no 'attnviz_recipe' key)")
    if int(r["attnviz_recipe"]) > RECIPE_FORMAT:
        raise AttnvizError(
            f"{path}: recipe format {r['attnviz_recipe']} is newer than this attnviz understands "
            f"({RECIPE_FORMAT}); update attnviz"
        )
    base = path.parent.resolve()
    names = {
        "model": "model file",
        "maps": "maps file",
        "image": "image",
        "audio": "audio file",
        "feeds": "feeds file",
        "tokenizer": "tokenizer",
    }
    for sec in ("source", "inputs", "options", "output", "view"):
        if r.get(sec) is not None and not isinstance(r[sec], dict):  # (one line naming the key, not a TypeError)
            raise AttnvizError(f'{path.name}: {sec} is {shown(r[sec])}; give an object, {{"key": value, ...}} ({_FIX})')
        if sec in _SECTION_TYPES and r.get(sec):
            check_types(r[sec], _SECTION_TYPES[sec], f"{path.name}: {sec}", _FIX)
    check_types(r.get("view") or {}, hints_of(FigureSpec), f"{path.name}: view", _FIX)
    vmax = (r.get("view") or {}).get("vmax")
    try:
        check_vmax(vmax, f"{path.name}: view.vmax")  # named as the recipe holds it
    except AttnvizError:
        if data is None or not isinstance(vmax, float):
            raise
        check_vmax(_vmax_as_written(data), f"{path.name}: view.vmax")  # the same refusal, the number as written
        raise
    for sec, key in _FILE_KEYS:
        if r.get(sec) and r[sec].get(key):
            r[sec][key] = _resolve(r[sec][key], base, names[key], check_hashes, f"{path.name}: {sec}.{key}")
    for sec, key in _FILE_LISTS:
        if r.get(sec) and r[sec].get(key):
            if not isinstance(r[sec][key], list):
                raise AttnvizError(
                    f"{path.name}: {sec}.{key} is {shown(r[sec][key])}; give a list of file entries ({_FIX})"
                )
            r[sec][key] = [
                _resolve(e, base, "image", check_hashes, f"{path.name}: {sec}.{key}[{n}]")
                for n, e in enumerate(r[sec][key])
            ]
    if r.get("inputs") is None:  # written as null: no inputs, as when the key is left out
        r["inputs"] = {}
    if r.get("output"):
        o = r["output"]
        out = (base / str(o["path"])).resolve()
        if Path(str(o["path"])).is_absolute() or base not in out.parents:
            # a recipe (a user file) may not aim its figure anywhere on disk: without --out the figure command
            # refuses it (figures.command), rather than writing there or somewhere the recipe does not say
            r["output"] = dict(o, path=None, outside=str(o["path"]))
        else:
            r["output"] = dict(o, path=str(out))
    source = r.get("source") or {}
    if not (source.get("model") or source.get("maps")):
        raise AttnvizError(f"{path}: the recipe names no model or maps file")
    r["view"] = FigureSpec.from_dict(r.get("view") or {}).to_dict()
    return r


def unread_keys_note(r: dict, name: str) -> str | None:
    """The note naming the keys of a loaded recipe's ``inputs`` and ``options`` that nothing reads (a typo, or a
    key of another section), each with the key it is nearest to; None when every key is read."""
    import difflib

    from attnviz.core.quoted import quoted

    unknown = [(sec, str(key)) for sec, keys in READ_KEYS.items() for key in r.get(sec) or {} if key not in keys]
    if not unknown:
        return None
    near = [f"{sec}.{k}" for sec, keys in READ_KEYS.items() for k in keys] + [f"view.{f}" for f in _VIEW_FIELDS]
    said = []
    for sec, key in unknown[:MAX_KEYS_SAID]:  # (a recipe of 10,000 made-up keys: the note stays one line)
        meant = difflib.get_close_matches(key[:100], [n.split(".", 1)[1] for n in near], n=1, cutoff=0.6)
        hint = next((n for n in near if meant and n.endswith("." + meant[0])), None)
        shown_key = key if key.isidentifier() and len(key) <= 40 else quoted(key, 40)
        said.append(f"{sec}.{shown_key}" + (f" (did you mean {hint}?)" if hint else ""))
    n = len(unknown)
    if n > MAX_KEYS_SAID:
        said.append(f"and {n - MAX_KEYS_SAID:,} more")
    return (
        f"{name}: {', '.join(said)} not read (no such recipe key{'s' if n > 1 else ''}); the figure is drawn "
        f"without {'them' if n > 1 else 'it'}: correct the key or drop it"
    )


_VIEW_FIELDS = tuple(FigureSpec.__dataclass_fields__)
