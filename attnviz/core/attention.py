"""The attention data model.

One *site* is one attention operation in the graph (one layer's self- or cross-attention).
Its probabilities are a map ``[batch, heads, query, key]`` float32.  Sites of the same
(stack, kind) with the same query/key axes form a *block* ``[layer, head, query, key]``
for one batch item, which is what every view and figure consumes.

Maps may be dense (an array) or recomputed per head on demand (long inputs), so views ask
a :class:`MapSource` for one head at a time and only call ``array()`` when they need all.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Protocol, runtime_checkable

import numpy as np

STACKS = ("encoder", "decoder")
KINDS = ("self", "cross", "pooling")  # pooling: learned probe queries over a stack's tokens (no input's queries)


@dataclass(frozen=True)
class SiteInfo:
    """Where one attention map came from."""

    stack: str  # "encoder" | "decoder"
    kind: str  # "self" | "cross" | "pooling"
    layer: int  # 0-based within its stack and kind
    heads: int
    node: str  # source node name in the ONNX graph
    method: str  # how the probabilities were obtained, e.g. "softmax", "onnx-attention"
    stage: int | None = None  # 1-based stage of a hierarchical (Swin) encoder, whose stages have their own grids
    # "image" | "text": the tower of a dual encoder (CLIP, SigLIP), both encoders, each numbering its layers from 0
    tower: str | None = None
    # what the site attends within when not the whole sequence (Qwen2.5-VL's vision windows: "32-px windows")
    window: str | None = None
    # its softmax runs over an attention sink too (GPT-OSS: a learned logit per head, its column cut off before
    # P·V): the map's rows sum to less than 1, the sink taking the rest
    sink: bool = False

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("stage", "tower", "window"):  # files of models without them keep the six keys they always had
            if d[k] is None:
                del d[k]
        if not d["sink"]:
            del d["sink"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> SiteInfo:
        stage, tower, window = d.get("stage"), d.get("tower"), d.get("window")
        return cls(
            **{k: d[k] for k in ("stack", "kind", "layer", "heads", "node", "method")},
            stage=int(stage) if stage is not None else None,
            tower=str(tower) if tower is not None else None,
            window=str(window) if window is not None else None,
            sink=d.get("sink") is True,
        )

    @property
    def label(self) -> str:
        return (
            f"{self.stack} {self.kind} L{self.layer}"
            + (f" stage {self.stage}" if self.stage else "")
            + (f" ({self.tower})" if self.tower else "")
            + (f" [{self.window}]" if self.window else "")
        )


@runtime_checkable
class MapSource(Protocol):
    """One site's probabilities, ``[B, H, Tq, Tk]``, dense or on demand."""

    shape: tuple[int, int, int, int]

    def head(self, b: int, h: int) -> np.ndarray:  # [Tq, Tk] float32
        ...

    def array(self) -> np.ndarray:  # [B, H, Tq, Tk] float32, may be costly
        ...


@runtime_checkable
class RowSource(Protocol):
    """A :class:`MapSource` that brings every head of a batch row at once more cheaply than one head at a time (an
    on-demand map kept on a device: one request a site, not one a head)."""

    def heads(self, b: int) -> np.ndarray:  # [H, Tq, Tk] float32
        ...


@runtime_checkable
class PooledSource(Protocol):
    """A :class:`MapSource` that max-pools its heads where its numbers are (an on-demand map kept on a device:
    only the thumbnails come back), as :func:`attnviz.core.view.downsample` pools each head of
    ``array()[b, :, :n_q, :n_k]``; None when it cannot (the caller pools on the host)."""

    def pooled(self, b: int, n_q: int, n_k: int, max_side: int) -> np.ndarray | None:  # [H, <=side, <=side]
        ...


class DenseMap:
    """A map held in memory.

    ``rows`` (where given): batch row ``b`` is row ``rows[b]`` of the array held (``held``) -- a beam search's K
    rows of a site every beam shares (a vision tower's or an encoder's: one run of the same input), or a dual
    encoder's pairs, each showing its image's and its text's rows of its towers' maps (runtime/dual_towers.py) --
    held once and each row a read-only view of it, not a copy a row.  Rows that all name one row are one broadcast
    view (``np.broadcast_to``); rows naming several are taken as one array only when :meth:`array` asks for them
    all (:meth:`head` is a view of the held row).  A reader never writes into a map."""

    def __init__(self, a: np.ndarray, rows: list[int] | None = None):
        # a float32 array kept as the very object (numpy's asarray hands back a view of an unpickled one, whose
        # dtype is not its float32 singleton): what is noted of that array (runtime/finite.py) holds for the map
        if not (type(a) is np.ndarray and a.dtype == np.float32):  # a subclass (np.memmap) as a plain array
            a = np.asarray(a, dtype=np.float32)
        if a.ndim != 4:
            raise ValueError(f"attention map must be [B,H,Tq,Tk], got shape {a.shape}")
        self.held = a
        self.rows = None if rows is None else [int(g) for g in rows]
        if self.rows is not None:
            if not self.rows or min(self.rows) < 0 or max(self.rows) >= a.shape[0]:
                raise ValueError(f"rows {self.rows} name rows outside the map's {a.shape[0]}")
            if self.rows == list(range(a.shape[0])):  # every row its own: the array as held
                self.rows = None
        self._a: np.ndarray | None = a if self.rows is None else _shown(a, self.rows)
        b = len(self.rows) if self.rows is not None else a.shape[0]
        _, h, tq, tk = (int(s) for s in a.shape)
        self.shape = (int(b), h, tq, tk)  # four named ints, so a DenseMap is a MapSource to mypy too

    def shared(self, n: int) -> DenseMap:
        """``n`` batch rows each showing this one-row map (the same array, no copy)."""
        if self.shape[0] != 1:
            raise ValueError(f"only a one-row map can be shared by rows, not {self.shape[0]} rows'")
        return DenseMap(self.held, [self.rows[0] if self.rows else 0] * int(n))

    def head(self, b: int, h: int) -> np.ndarray:
        if self._a is None:  # (rows naming several: the held row's head, no copy)
            assert self.rows is not None
            return self.held[self.rows[b], h]
        return self._a[b, h]

    def array(self) -> np.ndarray:
        if self._a is None:  # taken when first asked for whole (a figure of every row, a comparison), then kept
            assert self.rows is not None
            self._a = self.held[self.rows]
            self._a.flags.writeable = False
        return self._a

    @property
    def nbytes(self) -> int:
        """The bytes held (a shared map's one row, not its rows' views)."""
        return self.held.nbytes

    def __getstate__(self) -> dict:
        # pickled as held (a crash-isolation or job process's reply): the rows' views made again, not K copies
        return {"held": self.held, "rows": self.rows}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["held"], state["rows"])  # type: ignore[misc]


def _shown(a: np.ndarray, rows: list[int]) -> np.ndarray | None:
    """The batch rows ``rows`` of ``a``, read-only: one row's broadcast view where all name it (no copy); None
    where they name several (taken when asked for whole: :meth:`DenseMap.array`)."""
    if len(set(rows)) == 1:
        return np.broadcast_to(a[rows[0] : rows[0] + 1], (len(rows), *a.shape[1:]))
    return None


@dataclass
class TokenAxis:
    """Labels along one side of a map (tokens, generated words, or patches)."""

    labels: list[str]
    special: list[bool] | None = None  # True for [CLS]/[SEP]/<pad>/BOS/EOS and other non-content positions
    values: list[float] | None = None  # a time series' value at each step (drawn above its maps)
    # True where a padded batch's row has padding (its attention mask's 0s): no token of that row, unlike a trailing
    # EOS that is special too; None when the run was not padded (or a file from before this was kept)
    pad: list[bool] | None = None

    def __post_init__(self):
        self.labels = [str(x) for x in self.labels]
        if self.special is None:
            self.special = [False] * len(self.labels)
        if len(self.special) != len(self.labels):
            raise ValueError("special mask and labels differ in length")
        if self.pad is not None:
            self.pad = [bool(p) for p in self.pad]
            if len(self.pad) != len(self.labels):
                raise ValueError("padding mask and labels differ in length")
            if not any(self.pad):  # nothing padded: the same axis as an unpadded run's
                self.pad = None
        if self.values is not None:
            self.values = [float(v) for v in self.values]
            if len(self.values) != len(self.labels):
                raise ValueError("series values and labels differ in length")

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def real(self) -> list[int]:
        """The positions of the row's own tokens: every position but its padding (the attention mask's 1s)."""
        return [i for i in range(len(self.labels)) if not (self.pad and self.pad[i])]

    @classmethod
    def positions(cls, n: int, prefix: str = "") -> TokenAxis:
        return cls([f"{prefix}{i}" for i in range(n)])


@dataclass
class PatchGrid:
    """How key positions of an image encoder map onto the image.

    Positions ``offset .. offset + rows*cols`` are patches in row-major order; the ``offset``
    leading positions (CLS, registers) are not.  A tiled image (a vision–language decoder whose image was split
    into tiles, each a run of tokens between marker tokens) names the key of every cell instead: ``columns[k]`` is
    the key of cell ``k`` (row-major over ``rows`` × ``cols``), and ``stop`` is the key after the image's last
    token (its global image and closing markers included), where the words after the image begin.  Such an
    image's global image (Idefics3 / SmolVLM: the whole picture again, resized to one tile) is a second run of
    tokens on a grid of its own, ``global_grid``, over the same picture.  A tiled image's vision tower (its tiles'
    patches, ``lead_images`` runs of this grid, before the global image's) names its tiles' arrangement in
    ``tile_layout`` where the split is known (the tower opened alone: the processor's split; the whole model: the
    prompt's ``<row_r_col_c>`` markers), so a frame is named by its place either way.
    """

    rows: int
    cols: int
    offset: int = 0
    columns: tuple[int, ...] | None = None
    stop: int | None = None
    lead_images: int = 0  # the ``offset`` leading keys are this many earlier images on the same grid (VLM tiles)
    global_grid: PatchGrid | None = None  # the tiled image's global image: its keys on their own grid
    tile_layout: tuple[int, int] | None = None  # the lead images as rows x columns of tiles, where the split is known

    def __post_init__(self) -> None:
        if self.columns is not None:
            self.columns = tuple(int(c) for c in self.columns)
            if len(self.columns) != self.rows * self.cols:
                raise ValueError("a tiled grid names one key per cell")

    @property
    def n(self) -> int:
        return self.rows * self.cols

    @property
    def end(self) -> int:
        """The key after the image's tokens."""
        if self.stop is not None:
            return self.stop
        return max(self.columns) + 1 if self.columns else self.offset + self.n

    def key(self, r: int, c: int) -> int:
        """The key position of patch ``(r, c)``."""
        return self.columns[r * self.cols + c] if self.columns is not None else self.offset + r * self.cols + c

    def cell(self, key: int) -> tuple[int, int] | None:
        """``(row, col)`` of the patch at key position ``key`` (None: not a patch of this grid)."""
        if self.columns is not None:
            k = self.columns.index(key) if key in self.columns else -1
            return divmod(k, self.cols) if k >= 0 else None
        return divmod(key - self.offset, self.cols) if self.offset <= key < self.offset + self.n else None

    @classmethod
    def infer(cls, n_keys: int, hint: tuple[int, int] | None = None) -> PatchGrid | None:
        """Guess a grid from the key count: metadata hint first, else square with 0..4 extra tokens."""
        if hint is not None:
            r, c = hint
            extra = n_keys - r * c
            if 0 <= extra <= 8:
                return cls(r, c, extra)
        for extra in (0, 1, 2, 3, 4, 5):
            side = int(round((n_keys - extra) ** 0.5))
            if side > 0 and side * side == n_keys - extra:
                return cls(side, side, extra)
        return None

    def to_dict(self) -> dict:
        """Plain values (a result's info keeps each batch row's grid, so an extracted ``.npz`` has them)."""
        d: dict = {"rows": self.rows, "cols": self.cols, "offset": self.offset}
        if self.columns is not None:
            d["columns"] = list(self.columns)
        if self.stop is not None:
            d["stop"] = self.stop
        if self.global_grid is not None:
            d["global_grid"] = self.global_grid.to_dict()
        if self.lead_images:  # a tiled image's vision keys (its tiles before the global image's patches)
            d["lead_images"] = self.lead_images
        if self.tile_layout is not None:
            d["tile_layout"] = list(self.tile_layout)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> PatchGrid:
        glob = d.get("global_grid")
        layout = d.get("tile_layout")
        return cls(
            int(d["rows"]),
            int(d["cols"]),
            int(d.get("offset", 0)),
            tuple(d["columns"]) if d.get("columns") is not None else None,
            int(d["stop"]) if d.get("stop") is not None else None,
            lead_images=int(d.get("lead_images", 0)),
            global_grid=cls.from_dict(glob) if isinstance(glob, dict) else None,
            tile_layout=(int(layout[0]), int(layout[1])) if isinstance(layout, list) and len(layout) == 2 else None,
        )

    def shifted(self, by: int) -> PatchGrid:
        """The same grid over keys ``by`` later (one prompt's several images: image k's keys follow the earlier
        images' in the vision block, each image's grid made over its own keys first)."""
        return PatchGrid(
            self.rows,
            self.cols,
            self.offset + by,
            tuple(c + by for c in self.columns) if self.columns is not None else None,
            self.end + by,
            self.lead_images,
            self.global_grid.shifted(by) if self.global_grid is not None else None,
            self.tile_layout,
        )

    def to_image(self, row: np.ndarray) -> np.ndarray:
        """Take one query row over keys and return the ``[rows, cols]`` patch map."""
        if self.columns is not None:
            return np.asarray(row, dtype=np.float32)[list(self.columns)].reshape(self.rows, self.cols)
        return np.asarray(row[self.offset : self.offset + self.n], dtype=np.float32).reshape(self.rows, self.cols)


@dataclass
class Block:
    """All sites of one (stack, kind) as ``[layer, head, query, key]`` for one batch item."""

    stack: str
    kind: str
    sites: list[int]  # indices into AttentionResult.maps
    query_axis: TokenAxis
    key_axis: TokenAxis
    result: AttentionResult = field(repr=False)
    batch: int = 0
    stage: int | None = None  # the stage of a hierarchical encoder (SiteInfo.stage): one block per stage
    tower: str | None = None  # a dual encoder's tower (SiteInfo.tower): one block per tower

    @property
    def shown_stack(self) -> str:
        """The stack as a user reads it: "vision" for a vision–language model's tower (:func:`shown_stack`)."""
        return shown_stack(self.stack, self.result.vision_tower)

    @property
    def name(self) -> str:
        return (
            f"{self.shown_stack} {self.kind}-attention"
            + (f" stage {self.stage}" if self.stage else "")
            + (f" ({self.tower})" if self.tower else "")
        )

    @property
    def n_layers(self) -> int:
        return len(self.sites)

    @property
    def n_heads(self) -> int:
        return max(self.result.maps[i].shape[1] for i in self.sites)

    def heads_in(self, layer: int) -> int:
        return self.result.maps[self.sites[layer]].shape[1]

    def head(self, layer: int, head: int) -> np.ndarray:
        """``[Tq, Tk]`` float32 for one layer and head."""
        return self.result.maps[self.sites[layer]].head(self.batch, head)

    def layer(self, layer: int) -> np.ndarray:
        """``[H, Tq, Tk]``."""
        src = self.result.maps[self.sites[layer]]
        if isinstance(src, DenseMap):
            return src.array()[self.batch]
        if isinstance(src, RowSource):
            return src.heads(self.batch)
        return np.stack([src.head(self.batch, h) for h in range(src.shape[1])])

    def stacked(self) -> np.ndarray:
        """``[L, H, Tq, Tk]``; every layer must have the same head count."""
        return np.stack([self.layer(i) for i in range(self.n_layers)])


@dataclass
class AudioTrack:
    """The sound a speech model heard, per batch row: the clip at the feature extractor's rate and the log-mel
    features its encoder took (what the Audio regions view draws under the attention)."""

    waves: list[np.ndarray]  # mono float32 samples at ``rate``, one clip per batch row (before padding to the window)
    features: np.ndarray  # [batch, mel bins, mel frames] float32 log-mel, the encoder's input
    rate: int  # samples per second
    hop: int  # samples per mel frame
    frame_seconds: float  # seconds per encoder position (a cross-attention key): 2 hops for Whisper

    def duration(self, batch: int = 0) -> float:
        return len(self.waves[batch]) / self.rate


TOKEN_GRIDS_KEY = "token_grids"  # info: each batch row's token grid (AttentionResult.token_grid_of)
# info: each batch row's patch grid among the vision tower's keys, where a padded batch's rows hold different numbers
# of frames (Idefics3's tiles: a row's own, its padding frames' keys after them; AttentionResult.patch_grid_of)
PATCH_GRIDS_KEY = "patch_grids"
# info: one prompt's several images, each image's token grid in order (AttentionResult.image_grids)
IMAGE_GRIDS_KEY = "image_grids"
# info: one prompt's several images, each image's patch grid among the vision tower's keys, in order (each image's
# keys after the earlier ones': the vision block is their maps on the diagonal; AttentionResult.vision_grids)
VISION_GRIDS_KEY = "vision_grids"
# info: a dual encoder run on several images (retrieval, or every image against every text): each batch row's image,
# an index into ``AttentionResult.images`` (AttentionResult.image_of)
ROW_IMAGES_KEY = "row_images"
# info: the maps are a vision–language model's vision tower run alone (its vision file opened by itself,
# runtime/vlm_tower.py): its encoder block is named as the whole model names it (Block.name)
VISION_TOWER_KEY = "vision_tower"
# info: a speech decoder's forced prompt length (Whisper's <|startoftranscript|>, language, task, <|notimestamps|>),
# the decoder positions before the transcript's (prompt_len also counts a transcript given to teacher-force)
SPEECH_PROMPT_KEY = "speech_prompt_len"
VISION_STACK = "vision"  # what a vision–language model's encoder sites are called wherever a user reads them


def shown_stack(stack: str, vision_tower: bool) -> str:
    """A stack's name as the views, tables and messages show it: a vision–language model's encoder (the whole
    model's, or its vision file run alone: ``vision_tower``) is its vision tower, and "encoder" would read as a text
    encoder.  The sites keep "encoder" (SiteInfo.stack); :func:`site_stack` reads either name back."""
    return VISION_STACK if vision_tower and stack == "encoder" else stack


def shown_label(site: SiteInfo, vision_tower: bool) -> str:
    """``site.label`` with its stack as :func:`shown_stack` shows it ("vision self L0" on a vision tower)."""
    return shown_stack(site.stack, vision_tower) + site.label[len(site.stack) :]


def site_stack(name: str, vision_tower: bool) -> str:
    """The sites' stack a user's name means (``--heads 'vision self 2:5'`` on a vision tower is its encoder's
    sites); the sites' own spelling ("encoder") means itself."""
    return "encoder" if vision_tower and name == VISION_STACK else name


@dataclass
class AttentionResult:
    """Everything one run produced: the maps in canonical order plus axes and run facts."""

    maps: list[MapSource]
    sites: list[SiteInfo]
    tokens: TokenAxis | None = None  # encoder / only sequence (queries of self-attention)
    key_tokens: TokenAxis | None = None  # second sequence: decoder tokens for enc-dec, generated words
    patch_grid: PatchGrid | None = None  # when the encoder input is an image
    # a vision–language decoder: where the image's tokens lie among its own keys (offset = the first image token)
    token_grid: PatchGrid | None = None
    image: np.ndarray | None = None  # [H, W, 3] uint8, the image as the model saw it (resized)
    # a prompt holding several images (a vision–language decoder): every one as the model saw it, in order
    # (``image`` is the first); empty for one image
    images: list[np.ndarray] = field(default_factory=list)
    audio: AudioTrack | None = None  # a speech model's clips and features (cross-attention keys are their frames)
    outputs: dict[str, np.ndarray] = field(default_factory=dict)  # the model's ordinary graph outputs
    generated: list[str] = field(default_factory=list)  # generated words (decoder axis after the prompt)
    prompt_len: int = 0  # decoder positions that were given, not generated
    info: dict = field(default_factory=dict)  # provider, timings, model name, mode
    decoder_ids: list[list[int]] = field(default_factory=list)  # the decoder's token ids fed, one row per batch item

    def __post_init__(self):
        if len(self.maps) != len(self.sites):
            raise ValueError("maps and sites differ in length")

    @property
    def vision_tower(self) -> bool:
        """The encoder is a vision–language model's vision tower: the whole model's (its image tokens among the
        decoder's keys) or its vision file run alone (:data:`VISION_TOWER_KEY`)."""
        return self.token_grid is not None or (self.info or {}).get(VISION_TOWER_KEY) is True

    def token_grid_of(self, batch: int = 0) -> PatchGrid | None:
        """Where batch row ``batch``'s image tokens lie among its keys: rows of a padded batch differ (left padding
        shifts them, Idefics3 rows may split their images differently); ``info["token_grids"]`` keeps each row's
        (plain values, so an extracted ``.npz`` has them), else every row is ``token_grid``."""
        return self._row_grid(TOKEN_GRIDS_KEY, batch, self.token_grid)

    def patch_grid_of(self, batch: int = 0) -> PatchGrid | None:
        """Where batch row ``batch``'s image patches lie among the vision tower's keys: rows of a padded batch
        differ where they hold different numbers of frames (Idefics3's tiles); ``info["patch_grids"]`` keeps each
        row's, else every row is ``patch_grid``."""
        return self._row_grid(PATCH_GRIDS_KEY, batch, self.patch_grid)

    def _row_grid(self, key: str, batch: int, first: PatchGrid | None) -> PatchGrid | None:
        """Row ``batch``'s grid out of ``info[key]`` (one per row), else ``first`` (row 0's, every row's)."""
        grids = (self.info or {}).get(key)
        if batch and isinstance(grids, list) and batch < len(grids):
            d = grids[batch]
            try:
                return PatchGrid.from_dict(d) if isinstance(d, dict) else None
            except (KeyError, TypeError, ValueError):  # a hand-edited file: no grid rather than a wrong one
                return None
        return first

    def image_grids(self) -> list[PatchGrid]:
        """Where each image's tokens lie among the keys, in order: one prompt's several images
        (``info["image_grids"]``, so an extracted ``.npz`` keeps them), else the one ``token_grid``."""
        grids = (self.info or {}).get(IMAGE_GRIDS_KEY)
        if isinstance(grids, list) and len(grids) > 1:
            try:
                return [PatchGrid.from_dict(d) for d in grids]
            except (KeyError, TypeError, ValueError, AttributeError):  # a hand-edited file: the first image only
                pass
        return [] if self.token_grid is None else [self.token_grid]

    def vision_grids(self) -> list[PatchGrid]:
        """Where each of one prompt's several images' patches lie among the vision tower's keys, in order
        (``info["vision_grids"]``); empty for one image (``patch_grid`` is its grid)."""
        grids = (self.info or {}).get(VISION_GRIDS_KEY)
        if isinstance(grids, list) and len(grids) > 1:
            try:
                return [PatchGrid.from_dict(d) for d in grids]
            except (KeyError, TypeError, ValueError, AttributeError):  # a hand-edited file: no per-image grids
                pass
        return []

    def image_of(self, batch: int = 0) -> np.ndarray | None:
        """Batch row ``batch``'s image: a dual encoder's several images each own their rows
        (``info["row_images"]``, indices into ``images``); else the one ``image``."""
        index = (self.info or {}).get(ROW_IMAGES_KEY)
        if isinstance(index, list) and 0 <= batch < len(index) and isinstance(index[batch], int):
            if 0 <= index[batch] < len(self.images):
                return self.images[index[batch]]
        return self.image

    def picture(self, k: int) -> AttentionResult:
        """This result seen through image ``k`` (0-based) of a prompt's several: that image, its tokens' grid and
        its patches' grid in the vision tower, the maps and axes shared (what Image regions draws); the result
        itself for its first or only image."""
        grids = self.image_grids()
        if k == 0 or not 0 < k < len(grids):
            return self
        vision = self.vision_grids()
        return replace(
            self,
            image=self.images[k] if k < len(self.images) else None,
            token_grid=grids[k],
            patch_grid=vision[k] if k < len(vision) else self.patch_grid,
        )

    # -- axes --------------------------------------------------------------
    def row_axes(self, batch: int = 0) -> tuple[TokenAxis | None, TokenAxis | None]:
        """(tokens, key_tokens) of one batch row: rows of a padded batch differ (see core.rows)."""
        rows = (self.info or {}).get("rows")
        if batch and isinstance(rows, list) and batch < len(rows) and isinstance(rows[batch], dict):

            def ax(d):
                return TokenAxis(list(d["labels"]), d.get("special"), d.get("values"), d.get("pad")) if d else None

            return ax(rows[batch].get("tokens")), ax(rows[batch].get("key_tokens"))
        return self.tokens, self.key_tokens

    def _axes_for(
        self, stack: str, kind: str, tq: int, tk: int, batch: int = 0, tower: str | None = None
    ) -> tuple[TokenAxis, TokenAxis]:
        enc, dec = self.row_axes(batch)
        has_decoder = any(s.stack == "decoder" for s in self.sites) and any(s.stack == "encoder" for s in self.sites)
        if tower == "text":  # a dual encoder: the image's patches are the first axis, the text the second
            q_ax = dec if dec is not None and len(dec) == tq else None
            k_ax = dec if dec is not None and len(dec) == tk else None
        elif stack == "encoder" or not has_decoder:
            q_ax = enc if enc is not None and len(enc) == tq else None
            k_ax = enc if enc is not None and len(enc) == tk else None
        elif kind == "self":
            q_ax = dec if dec is not None and len(dec) == tq else None
            k_ax = dec if dec is not None and len(dec) == tk else None
        else:
            q_ax = dec if dec is not None and len(dec) == tq else None
            k_ax = enc if enc is not None and len(enc) == tk else None
        if q_ax is None:
            q_ax = TokenAxis.positions(tq)
        if k_ax is None:
            k_ax = TokenAxis.positions(tk)
        return q_ax, k_ax

    def blocks(self, batch: int = 0) -> list[Block]:
        """Group sites into blocks, keeping canonical order (encoder, decoder self, decoder cross); the stages of
        a hierarchical encoder are blocks of their own."""
        groups: dict[tuple, list[int]] = {}
        for i, s in enumerate(self.sites):
            _, _, tq, tk = self.maps[i].shape
            groups.setdefault((s.stack, s.kind, tq, tk, s.stage, s.tower), []).append(i)
        order = {("encoder", "self"): 0, ("encoder", "cross"): 1, ("decoder", "self"): 2, ("decoder", "cross"): 3}
        # a pooling head (one learned probe query over a tower's patches, SigLIP's) ranks with the self-attention of
        # its stack, so it follows the layers it pools (the sites' order) and precedes a second tower
        order |= {(st, "pooling"): order[st, "self"] for st in STACKS}
        out = []
        for (stack, kind, tq, tk, stage, tower), idx in sorted(
            groups.items(), key=lambda kv: (order[kv[0][:2]], kv[1][0])
        ):
            q_ax, k_ax = self._axes_for(stack, kind, tq, tk, batch, tower)
            out.append(Block(stack, kind, idx, q_ax, k_ax, self, batch, stage, tower))
        return out

    @property
    def batch_size(self) -> int:
        return self.maps[0].shape[0] if self.maps else 0

    def dense(self) -> list[np.ndarray]:
        return [m.array() for m in self.maps]

    def sites_json(self) -> str:
        return json.dumps([s.to_dict() for s in self.sites])
