"""Figure-independent I/O: attention results to and from ``.npz``.

Layout (the CLI contract): ``attn_000``, ``attn_001``, ... each ``[B,H,Tq,Tk]`` float32 in canonical
order, except a tower's frames (Idefics3's tiles and global image: :class:`~attnviz.core.frames.FramesMap`), whose
``attn_NNN`` is the frames' own maps ``[frames, H, P, P]`` (every row's real frames in turn) and ``attn_NNN_frames``
each row's frame count (``[B]`` int): row ``b``'s ``[H, Tq, Tk]`` is its frames' maps on the diagonal, zeros off
it (the dense map would be the frame count times larger); frames of several sizes (one prompt's images, each at its
own size) add ``attn_NNN_sizes`` (each frame's patches) and their ``attn_NNN`` is flat, each ``[H, P_f, P_f]`` in
turn; ``attn_NNN_rows`` (``[B]`` int) names each batch row's group of frames, or beside a dense ``attn_NNN``
each batch row's row of it (a beam search's map every beam shares, a tower's or an encoder's, written once: row
``b`` is ``attn_NNN[rows[b]]``); ``sites``: JSON list of site dicts; optional ``tokens``, ``key_tokens`` (str arrays),
``tokens_special``/``key_tokens_special`` (bool), ``tokens_pad``/``key_tokens_pad`` (bool: a padded batch's
padding, the attention mask's 0s, of row 0; every row's is in ``info["rows"]``), ``tokens_values`` (a time
series' values, float), ``patch_grid`` ([rows, cols, offset]), ``token_grid`` (the same, a VLM decoder's image tokens); either may add
``_columns`` (every cell's key: a tiled image's tokens, Qwen2-VL's tower in merge order), ``_stop``, ``_global``
(a tiled image's global image, [rows, cols, offset]), ``_lead`` (Idefics3's tower: the tiles before the global
image's patches) and ``_tiles`` (those tiles' [rows, cols], where the tower ran alone on an image), e.g. ``token_grid_columns``; ``image``, ``generated`` (str array), ``info``
(JSON); a speech model's sound: ``audio_waves`` ([B, samples], zero-padded), ``audio_lengths`` ([B]),
``audio_features`` ([B, mels, frames] log-mel) and ``audio_timing`` ([rate, hop, seconds per encoder frame]).
"""

from __future__ import annotations

import json
import math
import os
import zipfile
from pathlib import Path
from typing import IO, Any

import numpy as np

from attnviz import AttnvizError
from attnviz.core.attention import (
    KINDS,
    STACKS,
    AttentionResult,
    AudioTrack,
    DenseMap,
    MapSource,
    PatchGrid,
    SiteInfo,
    TokenAxis,
)
from attnviz.core.frames import MAX_FRAMES, FramesMap
from attnviz.core.setting_words import name as setting_name
from attnviz.core.untrusted import npz_problem, open_regular, parse_json
from attnviz.core.words import dtype_words
from attnviz.core.writes import atomic_path


def save_npz(result: AttentionResult, path: str | os.PathLike) -> Path:
    """Write atomically (:func:`attnviz.core.writes.atomic_path`) so a failed write never leaves a half file.

    Maps are produced and written one at a time (the ``np.savez`` layout, streamed): on-demand results never
    hold more than one site's dense maps in memory.
    """
    path = Path(path)
    arrays: dict[str, object] = {}
    for i, m in enumerate(result.maps):
        if isinstance(m, FramesMap):  # a tower's frames: their own maps and each row's count, never laid out
            arrays[f"attn_{i:03d}"] = m.blocks
            arrays[f"attn_{i:03d}{FRAMES_SUFFIX}"] = np.array(m.groups, dtype=np.int64)
            if m.rows is not None:  # rows sharing frames (a beam search's beams, one image): each row's group
                arrays[f"attn_{i:03d}{ROWS_SUFFIX}"] = np.array(m.rows, dtype=np.int64)
            if not m.uniform:  # frames of several sizes: attn_NNN is their flat buffer, frame after frame
                arrays[f"attn_{i:03d}{SIZES_SUFFIX}"] = np.array(m.sizes, dtype=np.int64)
            if not m.natural:  # one row of a padded batch: its padding's keys after its frames'
                arrays[f"attn_{i:03d}{KEYS_SUFFIX}"] = np.array(m.shape[2], dtype=np.int64)
            continue
        if isinstance(m, DenseMap) and m.rows is not None:  # rows sharing one map (a beam search's tower / encoder)
            arrays[f"attn_{i:03d}"] = m.held
            arrays[f"attn_{i:03d}{ROWS_SUFFIX}"] = np.array(m.rows, dtype=np.int64)
            continue
        arrays[f"attn_{i:03d}"] = m.array  # called when its turn to be written comes
    arrays["sites"] = np.array(result.sites_json())
    for name, ax in (("tokens", result.tokens), ("key_tokens", result.key_tokens)):
        if ax is not None:
            arrays[name] = np.array(ax.labels, dtype=str)
            arrays[f"{name}_special"] = np.array(ax.special, dtype=bool)
            if ax.values is not None:
                arrays[f"{name}_values"] = np.array(ax.values, dtype=np.float64)
            if ax.pad is not None:  # a padded batch's row 0: which positions are padding
                arrays[f"{name}_pad"] = np.array(ax.pad, dtype=bool)
    for name, grid in (("patch_grid", result.patch_grid), ("token_grid", result.token_grid)):
        if grid is not None:
            arrays.update(_grid_arrays(name, grid))
    if result.image is not None:
        arrays["image"] = np.asarray(result.image, dtype=np.uint8)
    for k, picture in enumerate(result.images):  # one prompt's several images, in order
        arrays[f"images_{k:03d}"] = np.asarray(picture, dtype=np.uint8)
    if result.audio is not None:
        arrays.update(_audio_arrays(result.audio))
    if result.generated:
        arrays["generated"] = np.array(result.generated, dtype=str)
    arrays["prompt_len"] = np.array(result.prompt_len, dtype=np.int64)
    arrays["info"] = np.array(json.dumps(result.info, default=str))
    with atomic_path(path, setting_name("output")) as tmp:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            for name, value in arrays.items():
                a = np.asarray(value() if callable(value) else value)
                if name.startswith("attn_") and not name.endswith(COUNT_SUFFIXES):
                    a = a.astype(np.float32, copy=False)
                with zf.open(name + ".npy", "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, a, allow_pickle=False)
                del a
    return path


def written_bytes(m: MapSource) -> int:
    """The bytes :func:`save_npz` writes of map ``m``: its dense ``[B, H, Tq, Tk]`` float32, a tower's frames'
    own maps (``attn_NNN_frames``)."""
    if isinstance(m, FramesMap | DenseMap):  # frames' own maps, a shared map's one row
        return m.nbytes
    b, h, tq, tk = m.shape
    return b * h * tq * tk * 4


def load_npz(path: str | os.PathLike) -> AttentionResult:
    """Read an ``attnviz extract`` file; anything malformed is one :class:`AttnvizError` line, never a traceback."""
    path = Path(path)
    with open_regular(path, "maps") as f:
        if f.read(2) != b"PK":  # np.load would take it for a pickle and say it "contains pickled (object) data"
            raise AttnvizError(f"{path}: not a .npz file (not a zip archive); extract one with 'attnviz extract'")
        f.seek(0)
        try:
            with np.load(f, allow_pickle=False) as z:
                _check_declared_size(z, path)
                return _parse(_Entries(z, path), path)
        except AttnvizError:
            raise
        except Exception as e:  # the archive itself (cut short, not a zip), or a layout no check below foresaw
            why = npz_problem(e, other="its entries are not laid out as 'attnviz extract' writes them")
            raise AttnvizError(f"{path}: not a readable attnviz .npz file: {why}; {REEXTRACT}") from None


def _held(a: np.ndarray) -> str:
    """An array's shape and what it holds, in words ("[1, 5] (text)", "[3] (64-bit integers)"), not numpy's dtype
    codes ("<U1", "int64")."""
    return f"{list(a.shape)} ({dtype_words(a.dtype)})"


class _Entries:
    """The archive's entries, each read with any failure in one plain line naming the entry (a missing one, one
    of pickled objects, one cut short) instead of Python's own words."""

    def __init__(self, z: np.lib.npyio.NpzFile, path: Path) -> None:
        self._z, self._path, self.files = z, path, z.files

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self._z[name]
        except Exception as e:
            raise AttnvizError(f"{self._path}: {npz_problem(e, name)}; {REEXTRACT}") from None

    def floats(self, name: str) -> np.ndarray:
        """Entry ``name``, a map: read as numpy reads it, except that floats of another width or byte order
        (float64: a user's own maps, a double-precision model's) are read :data:`READ_BAND` bytes at a time into
        the float32 array every map is held as (:class:`~attnviz.core.attention.DenseMap` converts at the same
        rounding): ``np.load`` then ``astype`` held the float64 array and its float32 copy at once, 3x the map."""
        header = self._header(name)
        if header is None:
            return self[name]
        shape, fortran, dtype = header
        archive = self._z.zip
        assert archive is not None  # (_header found the entry in it)
        try:  # (the allocation too: a shape numpy refuses, or no memory for it, is the entry's problem as before)
            out = np.empty(shape, np.float32, order="F" if fortran else "C")
            flat, step = out.ravel(order="K"), max(1, READ_BAND // dtype.itemsize)  # (a view: memory order)
            with archive.open(name + ".npy") as fh:
                self._skip_header(fh)
                for i in range(0, flat.size, step):
                    n = min(step, flat.size - i)
                    raw = fh.read(n * dtype.itemsize)
                    if len(raw) != n * dtype.itemsize:
                        raise EOFError("EOF: the array's data is cut short")
                    with np.errstate(over="ignore"):  # past float32's range: Inf, refused in one line by _parse
                        flat[i : i + n] = np.frombuffer(raw, dtype=dtype)
        except Exception as e:
            raise AttnvizError(f"{self._path}: {npz_problem(e, name)}; {REEXTRACT}") from None
        return out

    def _header(self, name: str) -> tuple[tuple[int, ...], bool, np.dtype] | None:
        """Entry ``name``'s shape, order and dtype where it holds floats other than native float32; else None
        (read whole by numpy, any problem in its words)."""
        archive = self._z.zip
        if archive is None or name + ".npy" not in archive.namelist():
            return None
        try:
            with archive.open(name + ".npy") as fh:
                shape, fortran, dtype = self._skip_header(fh)
        except Exception:  # a header numpy cannot read: numpy's own read says which problem
            return None
        if dtype.kind != "f" or dtype == np.float32 or dtype.hasobject:
            return None
        return tuple(int(s) for s in shape), bool(fortran), dtype

    @staticmethod
    def _skip_header(fh: IO[bytes]) -> tuple[tuple[int, ...], bool, np.dtype]:
        version = np.lib.format.read_magic(fh)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        return read(fh)

    def whole(self, name: str) -> int:
        """Entry ``name``: one whole number (a count, an index)."""
        a = self[name]
        if a.ndim != 0 or a.dtype.kind not in "iu":
            raise AttnvizError(f"{self._path}: {name} is {_held(a)}, not one whole number; {REEXTRACT}")
        return int(a)

    def texts(self, name: str) -> np.ndarray:
        """Entry ``name``: a list of texts (labels, generated words)."""
        a = self[name]
        if a.ndim != 1 or a.dtype.kind != "U":
            raise AttnvizError(f"{self._path}: {name} is {_held(a)}, not one list of texts; {REEXTRACT}")
        return a

    def json(self, name: str) -> Any:
        """Entry ``name``: one JSON text (``save_npz`` writes a 0-d text array), parsed; malformed, one line naming
        the entry and the fix, not the JSON parser's words."""
        a = self[name]
        if a.ndim != 0 or a.dtype.kind != "U":
            raise AttnvizError(f"{self._path}: its entry '{name}' is {_held(a)}, not one JSON text; {REEXTRACT}")
        return parse_json(str(a), f"{self._path}: its entry '{name}'", fix=REEXTRACT, quote=False)

    def picture(self, name: str) -> np.ndarray:
        """Entry ``name``: an image, [H, W] or [H, W, 1|3|4] numbers."""
        a = self[name]
        if a.dtype.kind not in "uif" or not (a.ndim == 2 or (a.ndim == 3 and a.shape[2] in (1, 3, 4))) or 0 in a.shape:
            raise AttnvizError(
                f"{self._path}: {name} is {_held(a)}, not an image of numbers [H, W] or [H, W, 3]; {REEXTRACT}"
            )
        return a


def _check_declared_size(z: np.lib.npyio.NpzFile, path: Path) -> None:
    """The arrays' sizes as their .npy headers declare them, against the cap ``attnviz extract`` writes under
    (ATTNVIZ_MAX_OUTPUT_MB), before any is read: a 3.5 MB compressed file of zeros declaring a 30,000² map had numpy
    allocate 3.4 GB (a MemoryError's text, or the OOM killer, on a smaller machine)."""
    from attnviz.core import limits

    archive = z.zip
    assert archive is not None  # (an NpzFile np.load made from a zip archive)
    total = 0
    for info in archive.infolist():
        if not info.filename.endswith(".npy"):
            continue
        try:
            with archive.open(info) as fh:
                version = np.lib.format.read_magic(fh)
                read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                shape, _, dtype = read(fh)
        except Exception as e:  # a header numpy cannot read: which entry, in plain words
            raise AttnvizError(f"{path}: {npz_problem(e, info.filename[:-4])}; {REEXTRACT}") from None
        total += int(np.prod(shape, dtype=np.float64)) * dtype.itemsize  # (float: a lying shape cannot overflow)
    mb, cap = total / 2**20, limits.limit("output_mb")
    if mb > cap:
        env = limits.LIMITS["output_mb"].env("output_mb")
        raise AttnvizError(
            f"{path.name}: its arrays hold {mb:,.0f} MB once decompressed, over the limit of {cap:,} MB that "
            f"'attnviz extract' writes under; open a smaller file, or raise the limit with {env}={math.ceil(mb)}"
        )


def _grid(z: _Entries, name: str, path: Path) -> PatchGrid:
    a = z[name]
    if a.shape != (3,) or a.dtype.kind not in "iu" or a.min() < 0:
        raise AttnvizError(f"{path}: {name} is {_held(a)}, not [rows, cols, offset] whole numbers; {REEXTRACT}")
    rows, cols, offset = (int(v) for v in a)
    return PatchGrid(rows, cols, offset)


def _grid_arrays(name: str, g: PatchGrid) -> dict[str, np.ndarray]:
    """A grid as ``name`` ([rows, cols, offset]) and what it adds: every cell's key (a tiled image's decoder
    tokens, Qwen2-VL's tower in its merge order), where its keys stop, its global image's grid, and how many tiles
    lead its keys (Idefics3's tower: each tile a run of the tower's keys before the global image's)."""
    out = {name: np.array([g.rows, g.cols, g.offset], dtype=np.int64)}
    if g.columns is not None:
        out[f"{name}_columns"] = np.array(g.columns, dtype=np.int64)
    if g.stop is not None:
        out[f"{name}_stop"] = np.array(g.stop, dtype=np.int64)
    if g.global_grid is not None:
        gg = g.global_grid
        out[f"{name}_global"] = np.array([gg.rows, gg.cols, gg.offset], dtype=np.int64)
    if g.lead_images:
        out[f"{name}_lead"] = np.array(g.lead_images, dtype=np.int64)
    if g.tile_layout is not None:
        out[f"{name}_tiles"] = np.array(g.tile_layout, dtype=np.int64)
    return out


def _grid_from(z: _Entries, name: str, path: Path) -> PatchGrid | None:
    """:func:`_grid_arrays`' grid back (None: the file has none); a file from before an addition was kept reads
    without it."""
    if name not in z.files:
        return None
    g = _grid(z, name, path)
    if f"{name}_columns" in z.files:
        columns = tuple(int(v) for v in np.ravel(z[f"{name}_columns"]))
        if len(columns) != g.n:
            raise AttnvizError(f"{path}: {name}_columns does not name one key per grid cell; {REEXTRACT}")
        g.columns = columns
    if f"{name}_stop" in z.files:
        g.stop = z.whole(f"{name}_stop")
    if f"{name}_global" in z.files:
        g.global_grid = _grid(z, f"{name}_global", path)
    if f"{name}_lead" in z.files:
        g.lead_images = z.whole(f"{name}_lead")
        if not 0 <= g.lead_images * g.n <= g.offset:  # the tiles' keys lie before the grid's own
            raise AttnvizError(f"{path}: {name}_lead names more tiles than keys before the grid; {REEXTRACT}")
    if f"{name}_tiles" in z.files:
        layout = np.ravel(z[f"{name}_tiles"])
        if layout.shape != (2,) or layout.dtype.kind not in "iu" or int(layout[0]) * int(layout[1]) != g.lead_images:
            raise AttnvizError(f"{path}: {name}_tiles is not [rows, cols] of its {name}_lead tiles; {REEXTRACT}")
        g.tile_layout = (int(layout[0]), int(layout[1]))
    return g


def _tiles_before(tower: PatchGrid, words: PatchGrid | None) -> int:
    """A file from before ``patch_grid_lead`` was kept: the tiles whose tower keys lead the global image's, from
    the decoder's tiled image (Idefics3: as many tiles as its tokens' grid holds of its global image's, each a tower
    run of the global image's size) where the tower's leading keys are exactly that many runs; else none."""
    whole = words.global_grid if words is not None else None
    if words is None or whole is None or not whole.n or words.rows % whole.rows or words.cols % whole.cols:
        return 0
    tiles = (words.rows // whole.rows) * (words.cols // whole.cols)
    return tiles if tower.offset == tiles * tower.n else 0


def _parse(z: _Entries, path: Path) -> AttentionResult:
    if "sites" not in z.files:
        raise AttnvizError(f"{path}: has no 'sites' entry; it was not written by 'attnviz extract'")
    sites = _sites(z.json("sites"), path)
    if not sites:  # nothing any view or figure could draw
        raise AttnvizError(f"{path}: holds no attention maps (0 sites); {REEXTRACT}")
    maps: list[MapSource] = []
    for i in range(len(sites)):
        a = z.floats(f"attn_{i:03d}")
        sized = _sized_frames(z, i, a, sites[i].heads, path)
        if sized is not None:  # frames of several sizes (one prompt's images each at its own size)
            maps.append(sized)
            continue
        if a.ndim != 4 or a.dtype.kind != "f":
            raise AttnvizError(f"{path}: attn_{i:03d} is {_held(a)}, not a [B, H, Tq, Tk] map of floats; {REEXTRACT}")
        per_row, side = _frames(z, i, a, path)
        if a.shape[1] != sites[i].heads:  # a site's head count is what every view and ranking labels
            raise AttnvizError(
                f"{path}: site {i} claims {sites[i].heads:,} heads but attn_{i:03d} holds {a.shape[1]}; {REEXTRACT}"
            )
        if 0 in a.shape:  # no batch row, head or token: nothing any view can draw or average over
            raise AttnvizError(
                f"{path}: attn_{i:03d} has an empty axis {list(a.shape)} [B, H, Tq, Tk]; "
                "extract it again with at least one token and one head"
            )
        if not _all_finite(a):
            raise AttnvizError(f"{path}: attn_{i:03d} contains NaN or Inf values; these maps cannot be shown")
        if per_row is None:
            maps.append(DenseMap(a, _shared_rows(z, i, [1] * a.shape[0], path, f"rows of attn_{i:03d}")))
        else:
            maps.append(FramesMap(a, per_row, side, rows=_shared_rows(z, i, per_row, path)))

    lengths = {n for m in maps for n in m.shape[2:]}  # every query and key length some map has
    notes: list[str] = []

    def axis(name):
        if name not in z.files:
            return None
        labels = z.texts(name)
        if len(labels) not in lengths:  # views would put positions in its place without a word: say so once
            notes.append(f"{name} ({len(labels)} labels) fit no map's axis ({sorted(lengths)}); shown as positions")
            return None
        sp_a = z[f"{name}_special"] if f"{name}_special" in z.files else None
        sp = None if sp_a is None else sp_a.tolist()
        if sp_a is not None and (sp_a.shape != labels.shape or sp_a.dtype.kind != "b"):
            raise AttnvizError(f"{path}: {name}_special must be one true/false per {name} label; {REEXTRACT}")
        vals = z[f"{name}_values"] if f"{name}_values" in z.files else None
        if vals is not None and (vals.dtype.kind not in "fiu" or vals.shape != labels.shape):
            raise AttnvizError(f"{path}: {name}_values must be one number per {name} label; extract it again")
        pad = z[f"{name}_pad"] if f"{name}_pad" in z.files else None  # files from before it was kept have none
        if pad is not None and (pad.dtype.kind != "b" or pad.shape != labels.shape):
            raise AttnvizError(f"{path}: {name}_pad must be one true/false per {name} label; {REEXTRACT}")
        vals_list = None if vals is None else vals.astype(float).tolist()
        return TokenAxis(labels.tolist(), sp, vals_list, None if pad is None else pad.tolist())

    grid, token_grid = _grid_from(z, "patch_grid", path), _grid_from(z, "token_grid", path)
    if grid is not None and "patch_grid_lead" not in z.files:
        grid.lead_images = _tiles_before(grid, token_grid)
    tokens, key_tokens, info = axis("tokens"), axis("key_tokens"), _info(z, path)
    if notes:
        info["notes"] = [*(info["notes"] if isinstance(info.get("notes"), list) else []), *notes]
    result = AttentionResult(
        maps=maps,
        sites=sites,
        tokens=tokens,
        key_tokens=key_tokens,
        patch_grid=grid,
        token_grid=token_grid,
        image=z.picture("image") if "image" in z.files else None,
        images=[z.picture(k) for k in sorted(f for f in z.files if f.startswith("images_"))],
        audio=_audio(z, path) if "audio_waves" in z.files else None,
        generated=z.texts("generated").tolist() if "generated" in z.files else [],
        prompt_len=z.whole("prompt_len") if "prompt_len" in z.files else 0,
        info=info,
    )
    each = result.vision_grids()  # one prompt's several images: the first image's patch grid whole (its key order)
    if (
        each
        and grid is not None
        and (grid.rows, grid.cols, grid.offset) == (each[0].rows, each[0].cols, each[0].offset)
    ):
        result.patch_grid = each[0]
    return result


REEXTRACT = "extract the maps again with 'attnviz extract'"
FRAMES_SUFFIX = "_frames"  # attn_NNN_frames: attn_NNN holds a tower's frames' maps, this many frames a row
KEYS_SUFFIX = "_keys"  # attn_NNN_keys: the keys of a padded batch's one row (its padding's after its frames')
SIZES_SUFFIX = "_sizes"  # attn_NNN_sizes: each frame's patches, frames of several sizes (attn_NNN flat, in turn)
# attn_NNN_rows: each batch row's group of frames (rows sharing one tower run: beams), or, beside a dense attn_NNN,
# each batch row's row of it (a map every beam shares, held once: DenseMap.rows)
ROWS_SUFFIX = "_rows"
COUNT_SUFFIXES = (FRAMES_SUFFIX, KEYS_SUFFIX, SIZES_SUFFIX, ROWS_SUFFIX)
MAX_SHARED_ROWS = 4096  # rows a file may show one group's frames in (a beam search's beams: at most 64)
READ_BAND = 1 << 20  # bytes of a float64 (any non-float32) map read at a time into its float32 array (1 MiB)
FINITE_BAND = 1 << 22  # values checked for NaN/Inf at a time (16 MB of float32): the mask is a band's, not the map's


def _all_finite(a: np.ndarray) -> bool:
    """No NaN and no ±Inf in ``a``, checked a band of :data:`FINITE_BAND` values at a time: ``np.isfinite`` of a
    whole crafted 30,000-token map made a 900 MB mask beside its 3.6 GB.  A map as ``np.load`` reads it is one
    contiguous block (C or Fortran order), walked as the flat view of it; any other array is checked whole."""
    if not (a.flags.c_contiguous or a.flags.f_contiguous):
        return bool(np.isfinite(a).all())
    flat = a.ravel(order="K")  # (a view: the block in memory order)
    return all(bool(np.isfinite(flat[i : i + FINITE_BAND]).all()) for i in range(0, flat.size, FINITE_BAND))


def _sized_frames(z: _Entries, i: int, a: np.ndarray, heads: int, path: Path) -> FramesMap | None:
    """Frames of several sizes (``attn_NNN_sizes``: each frame's patches; ``attn_NNN`` their ``[H, P_f, P_f]`` maps
    flat, frame after frame; ``attn_NNN_frames`` each row's count), checked as a file from elsewhere may hold
    anything; None where ``attn_NNN`` is not such frames."""
    name, counts_name = f"attn_{i:03d}{SIZES_SUFFIX}", f"attn_{i:03d}{FRAMES_SUFFIX}"
    if name not in z.files:
        return None
    sizes = z[name]
    counts = z[counts_name] if counts_name in z.files else np.zeros(0, np.int64)
    keys = f"attn_{i:03d}{KEYS_SUFFIX}"
    side = z[keys] if keys in z.files else None
    ok = (
        a.ndim == 1
        and a.dtype.kind == "f"
        and sizes.ndim == 1
        and counts.ndim == 1
        and sizes.dtype.kind in "iu"
        and counts.dtype.kind in "iu"
        and 0 < len(counts)
        and len(sizes) <= MAX_FRAMES * len(counts)
        and (not len(sizes) or sizes.min() >= 1)
        and (not len(counts) or counts.min() >= 1)
        and int(counts.sum()) == len(sizes)
        and a.size == heads * int((sizes.astype(np.int64) ** 2).sum())
        and (side is None or (side.ndim == 0 and side.dtype.kind in "iu"))
    )
    if ok:
        rows = _shared_rows(z, i, counts.tolist(), path)
        m = FramesMap(a.astype(np.float32, copy=False), counts.tolist(), None, sizes=sizes.tolist(), rows=rows)
        if side is None or m.shape[2] <= int(side) <= m.shape[2] + MAX_FRAMES * max(m.sizes):
            if not _all_finite(a):
                raise AttnvizError(f"{path}: attn_{i:03d} contains NaN or Inf values; these maps cannot be shown")
            return m if side is None else FramesMap(m.blocks, m.groups, int(side), sizes=m.sizes, rows=rows)
    raise AttnvizError(
        f"{path}: attn_{i:03d} {_held(a)} is not {heads} heads of the frames {name} names "
        f"(each [H, P, P] flat, counted row by row by {counts_name}); {REEXTRACT}"
    )


def _shared_rows(z: _Entries, i: int, groups: list[int], path: Path, what: str = "") -> list[int] | None:
    """Each batch row's group of frames where ``attn_NNN_rows`` names them (rows sharing one tower run: a beam
    search's beams), checked: a file from elsewhere may name any; None where every group is a row.  A dense map's
    (``what`` names its rows): each batch row's row of ``attn_NNN`` (a map every beam shares: one row)."""
    name = f"attn_{i:03d}{ROWS_SUFFIX}"
    if name not in z.files:
        return None
    rows = z[name]
    if (
        rows.ndim != 1
        or not 0 < len(rows) <= MAX_SHARED_ROWS
        or rows.dtype.kind not in "iu"
        or int(rows.min()) < 0
        or int(rows.max()) >= len(groups)
    ):
        raise AttnvizError(
            f"{path}: {name} ({_held(rows)}) does not name, for at most {MAX_SHARED_ROWS:,} rows, one of the "
            f"{len(groups)} {what or f'groups of frames attn_{i:03d}{FRAMES_SUFFIX} counts'}; {REEXTRACT}"
        )
    return [int(g) for g in rows]


def _frames(z: _Entries, i: int, a: np.ndarray, path: Path) -> tuple[list[int] | None, int | None]:
    """Each row's frame count where ``attn_NNN`` holds a tower's frames' maps ``[frames, H, P, P]`` (checked:
    a file from elsewhere may hold any counts), else None (a dense ``[B, H, Tq, Tk]`` map); and the map's keys
    where they are more than its most frames' (``attn_NNN_keys``), else None."""
    name, keys = f"attn_{i:03d}{FRAMES_SUFFIX}", f"attn_{i:03d}{KEYS_SUFFIX}"
    if name not in z.files:
        return None, None
    side = z[keys] if keys in z.files else None
    p = a.shape[-1]
    if side is not None and (
        side.ndim != 0 or side.dtype.kind not in "iu" or int(side) % max(p, 1) or int(side) > MAX_FRAMES * p
    ):  # a hand-edited count would have each head laid out over that many keys
        raise AttnvizError(
            f"{path}: {keys} is not a count of keys of at most {MAX_FRAMES} frames of {p} patches; {REEXTRACT}"
        )
    counts = z[name]
    if (
        counts.ndim != 1
        or not len(counts)
        or counts.dtype.kind not in "iu"
        or counts.min() < 1
        or int(counts.sum()) != a.shape[0]
        or a.shape[2] != a.shape[3]
        or (side is not None and int(side) < int(counts.max()) * a.shape[2])
    ):
        raise AttnvizError(
            f"{path}: {name} ({list(counts.shape)}) does not count the {a.shape[0]} frames' maps of attn_{i:03d} "
            f"{list(a.shape)} [frames, H, P, P] row by row; {REEXTRACT}"
        )
    return [int(k) for k in counts], None if side is None else int(side)


def _audio_arrays(a: AudioTrack) -> dict[str, np.ndarray]:
    longest = max((len(w) for w in a.waves), default=0)
    waves = np.zeros((len(a.waves), longest), np.float32)
    for i, w in enumerate(a.waves):
        waves[i, : len(w)] = w
    return {
        "audio_waves": waves,
        "audio_lengths": np.array([len(w) for w in a.waves], np.int64),
        "audio_features": np.asarray(a.features, np.float32),
        "audio_timing": np.array([a.rate, a.hop, a.frame_seconds], np.float64),
    }


def _audio(z: _Entries, path: Path) -> AudioTrack:
    """The sound of a speech result, checked: a file from elsewhere may hold any shapes."""
    need = ("audio_lengths", "audio_features", "audio_timing")
    waves, lengths = z["audio_waves"], z["audio_lengths"] if "audio_lengths" in z.files else None
    timing, feats = z["audio_timing"] if "audio_timing" in z.files else None, None
    ok = all(k in z.files for k in need) and waves.ndim == 2 and waves.dtype.kind == "f"
    if ok:
        feats = z["audio_features"]
        ok = (
            lengths is not None
            and lengths.shape == (len(waves),)
            and lengths.dtype.kind in "iu"
            and bool(np.all((lengths >= 0) & (lengths <= waves.shape[1])))
            and feats.ndim == 3
            and len(feats) == len(waves)
            and feats.dtype.kind == "f"
            and timing is not None
            and timing.shape == (3,)
            and bool(np.all(np.isfinite(timing)) and np.all(timing > 0))
        )
    if not ok or lengths is None or timing is None or feats is None:
        raise AttnvizError(f"{path}: its audio entries ({', '.join(need)}) do not fit together; {REEXTRACT}")
    return AudioTrack(
        [waves[i, : int(n)].astype(np.float32) for i, n in enumerate(lengths)],
        feats.astype(np.float32),
        int(timing[0]),
        int(timing[1]),
        float(timing[2]),
    )


_SITE_INTS, _SITE_STRS = ("layer", "heads"), ("node", "method")


def _sites(raw: Any, path: Path) -> list[SiteInfo]:
    """The 'sites' list checked field by field: a file from elsewhere may hold anything JSON can."""
    if not isinstance(raw, list) or not all(isinstance(d, dict) for d in raw):
        raise AttnvizError(f"{path}: 'sites' is not a list of sites; {REEXTRACT}")
    for i, d in enumerate(raw):
        bad = (
            [k for k in ("stack",) if d.get(k) not in STACKS]
            + [k for k in ("kind",) if d.get(k) not in KINDS]
            + [k for k in _SITE_INTS if type(d.get(k)) is not int or d[k] < 0]
            + [k for k in _SITE_STRS if not isinstance(d.get(k), str)]
            + [k for k in ("stage",) if d.get(k) is not None and (type(d[k]) is not int or d[k] < 0)]
        )
        if bad:
            raise AttnvizError(f"{path}: site {i} has a bad {bad[0]!r} ({str(d.get(bad[0]))[:40]}); {REEXTRACT}")
    return [SiteInfo.from_dict(d) for d in raw]


def _info(z: _Entries, path: Path) -> dict:
    info = z.json("info") if "info" in z.files else {}
    if not isinstance(info, dict):
        raise AttnvizError(f"{path}: 'info' is {type(info).__name__}, not a record of run facts; {REEXTRACT}")
    return info
