"""The one view model: what a view shows, computed once for the screen and for the figure.

A :class:`Selection` says what the user looks at (block, layers, head or aggregate, generation
step, batch row, special tokens, kept mass, log scale, query).  The functions below turn it plus
an :class:`~attnviz.core.AttentionResult` into plain numbers and strings -- :class:`MapView`
(heatmap, alignment), :func:`thumbnails` (overview), :class:`LinksView` (token links),
:class:`OverlayView` (image regions) -- and hold the palette, colour maps and the label rules.
The GUI draws these with pyqtgraph, :mod:`attnviz.figures` with matplotlib; neither decides
anything about *what* is shown, so what is on screen is what is exported.

Numpy only: no Qt, no matplotlib, no onnxruntime.
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from attnviz import AttnvizError
from attnviz.core import reduce, windows
from attnviz.core.attention import AttentionResult, Block, PatchGrid, TokenAxis
from attnviz.core.words import count


class ViewError(AttnvizError, ValueError):
    """A selection the view model cannot draw (rollout over cross-attention, no image, ...)."""


# "head" shows one head; the others reduce over heads (and layers in the layer range)
MODES = ("head", "mean", "max", "min", "rollout")
MODE_TITLES = {
    "head": "single head",
    "mean": "mean over heads",
    "max": "max over heads",
    "min": "min over heads",
    "rollout": "attention rollout",
}

# -- palette and colour maps (one choice for screen and print) --------------------------------
# Okabe & Ito (2008) colour-blind-safe qualitative palette, for overlaid heads
HEAD_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")
MAP_CMAP = "viridis"  # token x token maps: perceptually uniform, colour-blind safe
OVERLAY_CMAP = "magma"  # heat over the image: dark = unattended, bright = attended
LOG_DECADES = 3  # log scale spans this many decades below the top weight
# colour scales: what the top of a map's colour bar is -> the words the colour bar says it in
SCALES = {
    "fixed": "fixed 0–1",  # weights are probabilities: 1 is the most any can be
    "shared": "shared by the block's heads",  # the largest weight of any head of the block: heads compare
    "map": "stretched to this map",  # to the map's own maximum: most contrast; near-uniform maps look saturated
}
# the default cannot mislead: on 0–1 near-uniform attention (0.1 everywhere in a random-init BERT) looks faint, as
# it is; a stretched scale would paint it as bright as a head that puts all its weight on one token
DEFAULT_SCALE = "fixed"
# -- token links ------------------------------------------------------------------------------
LINK_MIN = 0.05  # weights below this fraction of the top weight are not drawn (clutter)
LINKS_PER_ROW = 12  # at most this many (the strongest) links per query token and head


def link_alpha(w: float) -> float:
    """Opacity of a link of relative weight ``w`` in [0, 1] (screen and print)."""
    return 0.08 + 0.8 * w


# -- overview ---------------------------------------------------------------------------------
THUMB = 64  # overview maps are max-pooled to at most this many cells a side (screen and figure)
# -- labels -----------------------------------------------------------------------------------
MAX_LABEL_CHARS = 18
CBAR_TICKS = 5  # a colour bar carries about this many tick labels


@dataclass(frozen=True)
class Selection:
    """The current focus; change it with :meth:`with_` (it is immutable, so it can key caches)."""

    block: int = 0  # index into result.blocks(batch)
    layer: int = 0
    head: int = 0
    mode: str = "head"  # one of MODES
    layer_lo: int = 0  # layer range used by the aggregates and rollout (inclusive)
    layer_hi: int = -1  # -1 = last layer
    keep: float = 1.0  # keep, per row, the largest weights holding this fraction of the mass
    log: bool = False  # log colour scale
    hide_special: bool = False  # drop special-token rows/columns and renormalise rows
    step: int = -1  # generated steps shown (-1 = all)
    batch: int = 0  # batch row
    query: int | None = None  # a query position of interest (image regions, links focus, heatmap mark)
    rows: str = "predict"  # alignment rows: "predict" = the decoder row that chose a word, "input" = the row reading it
    image_base: str = "grey"  # image regions: what lies under the heat, one of IMAGE_BASES
    heads: tuple[int, ...] = ()  # token links: heads overlaid in head mode; () = the focused head (link_heads)
    scale: str = DEFAULT_SCALE  # the colour scale's top, one of SCALES

    def with_(self, **changes: Any) -> Selection:
        return replace(self, **changes)


@dataclass
class MapView:
    """One drawable map: ``matrix[Tq, Tk]`` with labels and original positions."""

    matrix: np.ndarray
    q_labels: list[str]
    k_labels: list[str]
    q_pos: np.ndarray  # original query position of each row
    k_pos: np.ndarray  # original key position of each column
    title: str
    block: Block | None = None
    q_special: list[bool] = field(default_factory=list)
    k_special: list[bool] = field(default_factory=list)
    x_title: str = "key"
    y_title: str = "query"
    notes: list[str] = field(default_factory=list)  # "step 2/5", "top 90% mass" (also in the title)
    vmax: float = 1.0  # the top of the colour scale (the selection's scale)
    scale: str = DEFAULT_SCALE
    k_values: list[float] | None = None  # a time series' value at each drawn key column (plotted above the map)
    # a signed map (model A minus model B): a diverging colour map from vmin to vmax, centred on 0
    diverging: bool = False
    vmin: float = 0.0

    def value(self, row: int, col: int) -> float:
        return float(self.matrix[row, col])


# ---------------------------------------------------------------------------------------------
# labels


def clean_label(tok: str) -> str:
    """Token text as a person reads it, on screen and in print.

    Drops the byte-level / SentencePiece word markers (``Ġ``, ``▁``), shows whitespace and newline
    tokens visibly and shortens very long tokens.
    """
    s = str(tok).replace("Ċ", "\n").replace("ĉ", "\t")
    if s[:1] in ("Ġ", "▁"):
        s = s[1:]
    s = s.replace("Ġ", " ").replace("▁", " ")
    s = s.replace("\n", "↵").replace("\t", "⇥").replace("\r", "")
    if not s.strip():
        s = "␣"
    if len(s) > MAX_LABEL_CHARS:
        s = s[: MAX_LABEL_CHARS - 1] + "…"
    return s


@functools.lru_cache(maxsize=16)
def _clean_labels(labels: tuple[str, ...]) -> tuple[str, ...]:
    """Every label of an axis cleaned once (a head switch at 2,048 tokens would clean 4,096 again)."""
    return tuple(clean_label(t) for t in labels)


def clean_labels(labels: list[str], positions: np.ndarray) -> list[str]:
    """:func:`clean_label` of ``labels`` at ``positions``."""
    cleaned = _clean_labels(tuple(labels))
    return [cleaned[i] for i in np.asarray(positions).tolist()]


def tick_indices(n: int, fit: int, focus: int | None = None) -> list[int]:
    """Which of ``n`` token labels to show when only ``fit`` fit along the axis.

    The rule a reader can predict: all when they fit; else the first and the last, every
    ``stride``-th in between (an even stride), and the focused (hovered/selected) token -- labels
    less than a stride from the last or the focused one make way for it (they would overlap).
    """
    if n <= 0:
        return []
    fit = max(2, int(fit))
    if n <= fit:
        return list(range(n))
    stride = math.ceil((n - 1) / (fit - 1))
    keep = set(range(0, n, stride))
    must = {0, n - 1} | ({int(focus)} if focus is not None and 0 <= focus < n else set())
    near = stride  # a stride is about one label's extent: a label nearer than that to a kept one would overlap it
    keep = {i for i in keep if i in must or all(abs(i - m) >= near for m in must)}
    return sorted(keep | must)


def nice_ticks(lo: float, hi: float, n: int = CBAR_TICKS) -> list[float]:
    """About ``n`` round tick values (steps of 1, 2, 2.5 or 5 times a power of ten) inside [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, n - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * 0.999)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    t = first
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def scale_ticks(lo: float, hi: float, log: bool) -> list[tuple[float, str]]:
    """A colour bar's ticks as (weight, label), the same on screen and in figures: round values (decades on a log
    scale), and the top of the scale always labelled with its value, so a scale stretched to a map's largest
    weight says what that weight is (a round tick too close under it gives way)."""
    ticks = log_ticks(hi) if log else nice_ticks(lo, hi)
    out = [(t, f"{t:g}") for t in ticks]
    if not (math.isfinite(hi) and hi > lo) or (ticks and abs(hi - ticks[-1]) <= 1e-9 * max(1.0, abs(hi))):
        return out
    below = ticks[-2] if len(ticks) > 1 else lo
    if ticks and (ticks[-1] - below) > 0 and (hi - ticks[-1]) < 0.4 * (ticks[-1] - below) and not log:
        out.pop()
    elif ticks and log and hi / ticks[-1] < 2.5:
        out.pop()
    return [*out, (hi, f"{hi:.3g}")]


def log_ticks(vmax: float) -> list[float]:
    """Decade ticks for the log scale (``LOG_DECADES`` below ``vmax``)."""
    top = math.floor(math.log10(max(vmax, 1e-30)))
    return [10.0**e for e in range(top - LOG_DECADES + 1, top + 1)]


def colour_range(matrix_max: float, log: bool, vmax: float | None = None) -> tuple[float, float]:
    """``(vmin, vmax)`` of a colour scale: linear from 0, or ``LOG_DECADES`` decades below the top."""
    top = float(vmax) if vmax else max(float(matrix_max), 1e-6)
    return (top * 10.0**-LOG_DECADES, top) if log else (0.0, top)


HIDDEN_NOTE = "special tokens hidden"  # a map's note (and title part) when hiding special tokens dropped some


def weight_label(log: bool, hide_special: bool = False, scale: str | None = None) -> str:
    """The colour-bar label, the same words on screen and in print: what the colours are, and on which scale
    ("attention weight (log scale, fixed 0–1)")."""
    label = "attention (special tokens removed, rows renormalised)" if hide_special else "attention weight"
    how = (["log scale"] if log else []) + ([SCALES[check_scale(scale)]] if scale is not None else [])
    return label + (f" ({', '.join(how)})" if how else "")


def notes_label(notes: list[str], log: bool, scale: str | None = None) -> str:
    """The colour-bar label of a drawn map (its ``notes``): it speaks of removed tokens only when some were, and
    says which colour scale it is on (``scale``, one of SCALES)."""
    return weight_label(log, HIDDEN_NOTE in notes, scale)


def check_scale(name: str) -> str:
    if name not in SCALES:
        raise ViewError(f"unknown colour scale {name!r}; use one of {', '.join(SCALES)}", param="scale")
    return name


def block_top(result: AttentionResult, sel: Selection, block: int, blocks: list[Block] | None = None) -> float:
    """The largest weight any head of ``block`` gives, after the selection's step, hidden tokens and kept mass:
    the top of the "shared" scale (the overview's thumbnails keep it: max-pooling keeps maxima)."""
    thumbs = thumbnails(result, sel, THUMB, blocks, only_block=block)
    return max((float(m.max()) for m in thumbs.values() if m.size), default=1.0)


def overview_scale(scale: str) -> str:
    """The overview compares every head on one scale: fixed 0–1, else shared (a scale per thumbnail would make
    every head look alike)."""
    return "fixed" if check_scale(scale) == "fixed" else "shared"


def overview_label(log: bool, scale: str) -> str:
    """The overview's colour-bar words: its shared scale spans every block's heads, not one block's."""
    how = (["log scale"] if log else []) + [
        SCALES["fixed"] if overview_scale(scale) == "fixed" else "shared by every head"
    ]
    return f"attention weight ({', '.join(how)})"


def overview_top(thumbs: dict, scale: str) -> float:
    """The top of the overview's one colour scale over every block's thumbnails."""
    if overview_scale(scale) == "fixed":
        return 1.0
    return max(max((float(m.max()) for m in thumbs.values() if m.size), default=1.0), 1e-6)


def scale_top(
    result: AttentionResult, sel: Selection, block: int, m: np.ndarray, blocks: list[Block] | None = None
) -> float:
    """The top of the colour scale for map ``m`` of ``block`` on the selection's scale."""
    scale = check_scale(sel.scale)
    if scale == "fixed":
        return 1.0
    top = block_top(result, sel, block, blocks) if scale == "shared" else float(np.nanmax(m)) if m.size else 0.0
    return max(top, 1e-6)


# ---------------------------------------------------------------------------------------------
# selection -> map


def layer_range(sel: Selection, n_layers: int) -> tuple[int, int]:
    hi = n_layers - 1 if sel.layer_hi < 0 else min(sel.layer_hi, n_layers - 1)
    lo = max(0, min(sel.layer_lo, hi))
    return lo, hi


# generation steps a translation / captioning model takes when nobody says how many (it stops at EOS first):
# enough for a sentence or a caption, few enough to run in a second on a CPU
DEFAULT_GENERATE = 32
# which input holds the decoder's text, per model kind: given, it is a target to teacher-force instead
DECODER_TEXT = {"encoder-decoder": "text_pair", "vision-decoder": "text"}


def default_generate(kind: str, given: dict | None = None) -> int:
    """Generation steps when none are asked for, the same in the window and in ``attnviz figure``.

    Translation and captioning generate (what they are for, and what Alignment and the strip show); a
    target the caller gave is teacher-forced instead (generating would continue it).  Decoder-only graphs
    may be forecasters with no token input, so they just run."""
    key = DECODER_TEXT.get(str(kind or ""))
    if key is None:
        return 0
    return 0 if (given or {}).get(key) else DEFAULT_GENERATE


def default_selection(result: AttentionResult, blocks: list[Block] | None = None) -> Selection:
    """What a freshly opened result shows, in the window and in ``attnviz figure`` without selection flags.

    The model's declared alignment head (``attnviz.alignment``) when it names one: that head was trained or
    chosen to point, and any other would show what the model was never asked to do.  Otherwise the mean over
    the heads of the last layer of the first block: the last layer is what the output reads, and no head is
    privileged by its index (head 0 is as arbitrary as head 7), so the first look does not single one out; the
    title says "mean over heads", so it is never taken for one head, and one click shows single heads."""
    blocks = result.blocks() if blocks is None else blocks
    if not blocks:
        return Selection()
    declared = declared_alignment(result)
    cross = next((i for i, b in enumerate(blocks) if b.kind == "cross"), None)
    base = default_image_base(result, blocks)
    if declared is not None and cross is not None:
        (layer, head), rows = declared
        blk = blocks[cross]
        if layer < blk.n_layers and head < blk.heads_in(layer):
            return Selection(block=cross, layer=layer, head=head, mode="head", rows=rows, image_base=base)
    last = blocks[0].n_layers - 1
    rows = declared[1] if declared is not None else "predict"
    return Selection(layer=last, mode="mean", layer_lo=last, layer_hi=last, rows=rows, image_base=base)


def default_image_base(result: AttentionResult, blocks: list[Block] | None = None) -> str:
    """What lies under the heat by default: the image in colour under a captioner's words (they name what the
    image shows, colours included: "the blue triangle" over a greyed image hides what the word is about), a
    greyed image elsewhere (where the image's colours could be mistaken for heat)."""
    blocks = result.blocks() if blocks is None else blocks
    captions = result.patch_grid is not None and any(b.kind == "cross" for b in blocks)
    return "colour" if captions else "grey"


def clamp(sel: Selection, blocks: list[Block]) -> Selection:
    """Keep indices inside the result's shape."""
    if not blocks:
        return sel
    b = min(max(sel.block, 0), len(blocks) - 1)
    blk = blocks[b]
    layer = min(max(sel.layer, 0), blk.n_layers - 1)
    head = min(max(sel.head, 0), blk.heads_in(layer) - 1)
    lo = min(max(sel.layer_lo, 0), blk.n_layers - 1)
    hi = sel.layer_hi if sel.layer_hi < 0 else min(max(sel.layer_hi, lo), blk.n_layers - 1)
    return sel.with_(block=b, layer=layer, head=head, layer_lo=lo, layer_hi=hi)


def declared_alignment(result: AttentionResult | None) -> tuple[tuple[int, int], str] | None:
    """The model's declared alignment head (its first) and row convention, as its run recorded them
    (``attnviz.alignment`` in the model's metadata, kept in ``result.info`` and so in an .npz)."""
    from attnviz.core import metadata as md

    declared = md.alignment_heads({"alignment": (result.info or {}).get("alignment")}) if result is not None else None
    return (declared[0][0], declared[1]) if declared else None


def n_steps(result: AttentionResult | None) -> int:
    return len(result.generated or []) if result is not None else 0


def blk_len(blk: Block, axis: int) -> int:
    shape = blk.result.maps[blk.sites[0]].shape
    return int(shape[2 + axis])


def producing_row(result: AttentionResult, tq: int, k: int) -> int:
    """Decoder query row whose output chose generated token ``k`` (0-based).

    The query at decoder position ``p`` predicts the token at ``p + 1``, so token ``k`` was chosen
    by row ``prompt_len - 1 + k``.  Without a known prompt length the axis ends with the generated
    tokens except the last (the runtime does not feed the final token back), so row ``tq - g + k``.
    """
    if result.prompt_len and result.prompt_len > 0:
        return int(result.prompt_len) - 1 + k
    return tq - n_steps(result) + k


def generation_rows(result: AttentionResult, blk: Block) -> list[tuple[int, str]]:
    """``(query row, word)`` for each generated word of a decoder block (one rule for every view).

    Without generated words (teacher forcing) every query row with its own token.
    """
    tq = blk_len(blk, 0)
    if blk.stack == "decoder" and n_steps(result):
        rows = [(r, str(w)) for k, w in enumerate(result.generated) if 0 <= (r := producing_row(result, tq, k)) < tq]
        if rows:
            return rows
    return [(i, str(blk.query_axis.labels[i])) for i in range(tq)]


def target_rows(blk: Block, convention: str, n_rows: int) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Query rows, words and special flags of a teacher-forced target ([start] + target tokens read by the
    decoder): the row that predicts each target token ("predict": row t - 1 for token t) or the row that reads
    it ("input", Shift-Att: row t).  The start token is no target word, so it has no row either way (the rule
    of ``attnviz align``: ``core.align.row_words``)."""
    ax = blk.query_axis
    n = min(n_rows, len(ax.labels))
    special = list(ax.special or [False] * n)
    shift = 1 if convention == "predict" else 0  # the word on row r sits at position r + shift
    rows = [r for r in range(n) if 0 < r + shift < n]
    return (
        np.array(rows, int),
        [str(ax.labels[r + shift]) for r in rows],
        np.array([bool(special[r + shift]) if r + shift < len(special) else False for r in rows], bool),
    )


def word_special(result: AttentionResult, blk: Block, row: int, word: str) -> bool:
    """Is the word chosen at query ``row`` a special token (EOS...)?  It sits at decoder position row + 1."""
    ax = blk.query_axis
    special = list(ax.special or [])
    if not n_steps(result):
        return bool(special[row]) if row < len(special) else False
    if row + 1 < len(special) and ax.labels[row + 1] == word:
        return bool(special[row + 1])
    s = str(word)
    return (s.startswith("<") and s.endswith(">")) or (s.startswith("[") and s.endswith("]"))


def step_rows(result: AttentionResult, block: Block, step: int) -> int | None:
    """How many decoder positions are visible at generation step ``step`` (None = all).

    Step ``s`` shows the positions that existed when the ``s``-th generated token was chosen.
    """
    g = n_steps(result)
    if step < 0 or g == 0 or block.stack != "decoder" or step >= g:
        return None
    tq = blk_len(block, 0)
    return max(1, min(tq, producing_row(result, tq, step) + 1))


def result_blocks(result: AttentionResult, sel: Selection, blocks: list[Block] | None = None) -> list[Block]:
    if blocks is None or (blocks and blocks[0].batch != sel.batch):
        if not 0 <= sel.batch < max(1, result.batch_size):
            raise ViewError(
                f"batch row {sel.batch} is out of range; this result has rows 0..{result.batch_size - 1}",
                param="batch",
            )
        blocks = result.blocks(sel.batch)
    for blk in blocks:
        check_not_empty(blk)
    return blocks


def check_not_empty(blk: Block) -> None:
    """Refuse a block with no heads or no tokens: every mean, pooling factor and colour range divides by them."""
    for i in blk.sites:
        shape = tuple(blk.result.maps[i].shape)
        if 0 in shape[1:]:
            raise ViewError(
                f"{blk.name} has an empty map {list(shape)} [B, H, Tq, Tk]: no heads or tokens to show",
                param="model",
            )


def head_matrix(blk: Block, sel: Selection) -> tuple[np.ndarray, str]:
    """``[Tq, Tk]`` for one head, a head aggregate over the layer range, or rollout; and what it is."""
    lo, hi = layer_range(sel, blk.n_layers)
    rng = f"layer {lo}" if lo == hi else f"layers {lo}–{hi}"
    if sel.mode == "head":
        return blk.head(sel.layer, sel.head), f"layer {sel.layer} · head {sel.head}"
    if sel.mode in reduce.HEAD_AGGREGATES:
        per_layer = [blk.layer(i) for i in range(lo, hi + 1)]
        heads = per_layer[0] if len(per_layer) == 1 else np.concatenate(per_layer, axis=0)  # one layer: no copy
        return reduce.aggregate_heads(heads, sel.mode), f"{rng} · {sel.mode} over heads"
    if sel.mode == "rollout":
        if blk.kind != "self" or blk_len(blk, 0) != blk_len(blk, 1):
            raise ViewError(
                "rollout needs self-attention over one sequence (square maps); pick an encoder or decoder "
                "self-attention block or a mean/max/min aggregate",
                param="aggregate",
            )
        return reduce.rollout([blk.layer(i) for i in range(lo, hi + 1)]), f"rollout {rng}"
    raise ViewError(f"unknown aggregate {sel.mode!r}; use one of {', '.join(MODES)}", param="aggregate")


def _special(axis: TokenAxis, positions: np.ndarray, n_full: int) -> np.ndarray:
    if len(axis) != n_full:  # axis labels do not describe this map (e.g. unlabelled positions)
        return np.zeros(len(positions), bool)
    return np.asarray(axis.special, bool)[positions]


def hide_mask(special: np.ndarray) -> np.ndarray:
    """Which positions "hide special tokens" drops: the special ones, unless that would drop all of them."""
    return special if not special.all() else np.zeros_like(special)


def map_inputs(sel: Selection) -> Selection:
    """``sel`` less what :func:`compute_map` does not read: selections with equal inputs give the same map, so
    a cache keyed on this redraws nothing when only those change (a head switch under "mean over heads")."""
    sel = sel.with_(query=None, rows="predict", image_base="grey", heads=())
    return sel if sel.mode == "head" else sel.with_(layer=0, head=0)


def compute_map(result: AttentionResult, sel: Selection, blocks: list[Block] | None = None) -> MapView:
    """The matrix ``sel`` points at.  Order: aggregate -> generation step -> hide special -> keep mass."""
    blocks = result_blocks(result, sel, blocks)
    if not blocks:
        raise ViewError("this result has no attention maps; nothing to draw", param="model")
    sel = clamp(sel, blocks)
    blk = blocks[sel.block]
    m, what = head_matrix(blk, sel)
    m = np.asarray(m, dtype=np.float32)
    notes: list[str] = []
    q_pos, k_pos = np.arange(m.shape[0]), np.arange(m.shape[1])
    n = step_rows(result, blk, sel.step)
    if n is not None:
        q_pos = q_pos[:n]
        if blk.kind == "self":
            k_pos = k_pos[:n]
        m = m[np.ix_(q_pos, k_pos)]
        notes.append(f"step {sel.step + 1}/{n_steps(result)}")
    q_sp = _special(blk.query_axis, q_pos, blk_len(blk, 0))
    k_sp = _special(blk.key_axis, k_pos, blk_len(blk, 1))
    m, q_pos, k_pos, q_sp, k_sp = _hide(m, q_pos, k_pos, q_sp, k_sp, sel.hide_special, notes)
    if sel.keep < 1.0:
        m = reduce.keep_mass(m, max(sel.keep, 1e-3))
        notes.append(f"top {round(sel.keep * 100)}% mass")
    q_labels = clean_labels(blk.query_axis.labels, q_pos)
    k_labels = clean_labels(blk.key_axis.labels, k_pos)
    xt, yt = ("source (key)", "target (query)") if blk.kind == "cross" else ("key", "query")
    title = " · ".join([blk.name, what, *notes])
    top = scale_top(result, sel, sel.block, m, blocks)
    vals = blk.key_axis.values
    k_values = [vals[i] for i in k_pos] if vals is not None else None
    return MapView(
        m,
        q_labels,
        k_labels,
        q_pos,
        k_pos,
        title,
        blk,
        q_sp.tolist(),
        k_sp.tolist(),
        xt,
        yt,
        notes,
        top,
        sel.scale,
        k_values,
    )


def _hide(
    m: np.ndarray,
    q_pos: np.ndarray,
    k_pos: np.ndarray,
    q_sp: np.ndarray,
    k_sp: np.ndarray,
    on: bool,
    notes: list[str],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Drop special rows / columns (each axis on its own) and renormalise rows."""
    if not on or not (q_sp.any() or k_sp.any()):
        return m, q_pos, k_pos, q_sp, k_sp
    dq, dk = hide_mask(q_sp), hide_mask(k_sp)
    if not (dq.any() or dk.any()):
        return m, q_pos, k_pos, q_sp, k_sp
    m = reduce.drop_positions(m, dq, dk, renormalize=True)
    notes.append(HIDDEN_NOTE)
    return m, q_pos[~dq], k_pos[~dk], q_sp[~dq], k_sp[~dk]


# ---------------------------------------------------------------------------------------------
# alignment


def cross_block(blocks: list[Block], sel: Selection) -> int | None:
    """The block Alignment shows: the selected block when it is cross-attention, else the first one."""
    if blocks and 0 <= sel.block < len(blocks) and blocks[sel.block].kind == "cross":
        return sel.block
    return next((i for i, b in enumerate(blocks) if b.kind == "cross"), None)


def alignment_map(result: AttentionResult, sel: Selection, blocks: list[Block] | None = None) -> MapView:
    """Generated (or target) words x source tokens from cross-attention.

    Row ``k`` is the decoder query that *chose* word ``k`` (the position of the previous token), so
    rows are labelled by the word they chose; the step keeps the words up to it.
    """
    blocks = result_blocks(result, sel, blocks)
    b = cross_block(blocks, sel)
    if b is None:
        raise ViewError(
            "the alignment view needs cross-attention (an encoder-decoder model); this model has only self-attention",
            param="view",
        )
    blk = blocks[b]
    s = clamp(
        sel.with_(block=b, step=-1, hide_special=False, keep=1.0, mode="mean" if sel.mode == "rollout" else sel.mode),
        blocks,
    )
    m, what = head_matrix(blk, s)
    m = np.asarray(m, np.float32)
    notes: list[str] = []
    if n_steps(result):
        rows = generation_rows(result, blk)
        if sel.rows == "input":  # Shift-Att: word k is read by the row after the one that chose it
            rows = [(r + 1, w) for r, w in rows if r + 1 < m.shape[0]]
        if sel.step >= 0:
            rows = rows[: sel.step + 1]
            notes.append(f"step {min(sel.step + 1, n_steps(result))}/{n_steps(result)}")
        if not rows:  # Shift-Att reads word k at the row after the one that chose it: one word has no such row
            raise ViewError(
                "reading rows (Shift-Att) read each word at the row after the one that chose it: with "
                f"{count(n_steps(result), 'generated word')} there is none; generate 2 or more words",
                param="generate",
            )
        q_pos = np.array([r for r, _ in rows], int)
        words = [w for _, w in rows]
        q_sp = np.array([word_special(result, blk, r, w) for r, w in rows], bool)
    else:
        q_pos, words, q_sp = target_rows(blk, sel.rows, m.shape[0])
        if not len(q_pos):
            raise ViewError(
                "the alignment view needs target words: give the target (text pair) to teacher-force, or generate",
                param="generate",
            )
    k_pos = np.arange(m.shape[1])
    k_sp = _special(blk.key_axis, k_pos, blk_len(blk, 1))
    m = m[q_pos]
    if sel.hide_special and (q_sp.any() or k_sp.any()):
        dq, dk = hide_mask(q_sp), hide_mask(k_sp)
        m = reduce.drop_positions(m, dq, dk, renormalize=True)
        q_pos, k_pos, q_sp, k_sp = q_pos[~dq], k_pos[~dk], q_sp[~dq], k_sp[~dk]
        words = [w for w, d in zip(words, dq) if not d]
        notes.append(HIDDEN_NOTE)
    if sel.keep < 1.0:
        m = reduce.keep_mass(m, max(sel.keep, 1e-3))
        notes.append(f"top {round(sel.keep * 100)}% mass")
    target = "generated" if n_steps(result) else "target"
    title = " · ".join(["alignment (cross-attention)", what, *notes])
    return MapView(
        m,
        [clean_label(w) for w in words],
        [clean_label(blk.key_axis.labels[i]) for i in k_pos],
        q_pos,
        k_pos,
        title,
        blk,
        q_sp.tolist(),
        k_sp.tolist(),
        "source",
        target,
        notes,
        scale_top(result, sel.with_(block=b), b, m, blocks),
        sel.scale,
    )


def row_story(result: AttentionResult, blk: Block, row: int) -> str:
    """``“[BOS]” → “Blessed”``: a decoder row is the token it reads *and* the word it chose."""
    own = clean_label(blk.query_axis.labels[row]) if row < len(blk.query_axis) else str(row)
    chosen = dict(generation_rows(result, blk)) if blk.stack == "decoder" and n_steps(result) else {}
    return f"“{own}” → “{clean_label(chosen[row])}”" if row in chosen else f"“{own}”"


# ---------------------------------------------------------------------------------------------
# overview


def _pool_axis(m: np.ndarray, f: int, axis: int) -> np.ndarray:
    """Max over runs of ``f`` positions along ``axis``; a short last run also counts a 0 (the zero padding)."""
    n = m.shape[axis]
    full = n - n % f
    lead = (slice(None),) * (axis % m.ndim)
    whole = m[lead + (slice(0, full),)]
    out = whole.reshape(m.shape[: axis % m.ndim] + (full // f, f) + m.shape[axis % m.ndim + 1 :]).max(
        axis=axis % m.ndim + 1
    )
    if full < n:
        tail = np.maximum(m[lead + (slice(full, n),)].max(axis=axis, keepdims=True), 0)
        out = np.concatenate([out, tail.astype(out.dtype)], axis=axis)
    return out


def downsample(m: np.ndarray, max_side: int = THUMB) -> np.ndarray:
    """Max-pool ``[..., Tq, Tk]`` so neither side exceeds ``max_side`` (keeps sharp peaks visible).

    Cells are runs of ``ceil(T / max_side)`` positions from the start; a short last run is pooled as if padded
    with zeros.  Rows first, through a reshape: that reads the map once, contiguously (72 maps of 2,048² in
    about the time memory takes to deliver them), and leaves a map ``f`` times smaller for the columns.
    """
    tq, tk = m.shape[-2:]
    fq = -(-tq // max_side)
    fk = -(-tk // max_side)
    if fq > 1:
        m = _pool_axis(m, fq, -2)
    if fk > 1:
        m = _pool_axis(m, fk, -1)
    return m


THUMB_CACHE_ENTRIES = 64  # filter settings (per block) remembered per result: a keep slider drag adds one each


class _ThumbCache:
    """The overview's reductions of one result, per block and per filter setting that changes them.

    Only the step, the hidden special tokens, the kept mass and the batch row change the numbers: the colour
    scale, log and focus only change how they are drawn, so they never reach this cache.  None of the filters
    can be derived from another setting's 64-cell reduction -- a step or hidden tokens move the cell borders and
    cut cells in two, hiding renormalises each row by its own kept mass, keeping mass thresholds each row by its
    own weights -- so each setting is pooled from the full maps once and kept.  Settings that leave a block
    unchanged (a step on an encoder block, hiding where the block has no special token) share its entry.
    """

    def __init__(self) -> None:
        self.entries: dict[tuple, list[np.ndarray]] = {}

    def get(self, key: tuple) -> list[np.ndarray] | None:
        return self.entries.get(key)

    def put(self, key: tuple, layers: list[np.ndarray]) -> None:
        if len(self.entries) >= THUMB_CACHE_ENTRIES:
            self.entries.pop(next(iter(self.entries)))
        self.entries[key] = layers


_THUMB_CACHES: dict[int, tuple[weakref.ref, _ThumbCache]] = {}


def _thumb_cache(result: AttentionResult) -> _ThumbCache:
    """The result's cache; it goes with the result (a weak reference: results are not hashable)."""
    key = id(result)
    entry = _THUMB_CACHES.get(key)
    if entry is None or entry[0]() is not result:

        def forget(_: weakref.ref) -> None:  # the result is gone: so is what was kept for it
            _THUMB_CACHES.pop(key, None)

        entry = (weakref.ref(result, forget), _ThumbCache())
        _THUMB_CACHES[key] = entry
    return entry[1]


@dataclass(frozen=True, eq=False)
class _Filters:
    """What the filters do to one block: the rows / keys a step leaves (``step`` None: all) and the special
    positions hiding drops on each axis."""

    step: int | None
    n_q: int
    n_k: int
    drop_q: np.ndarray
    drop_k: np.ndarray

    @property
    def hides(self) -> bool:
        return bool(self.drop_q.any() or self.drop_k.any())


def _block_filters(result: AttentionResult, blk: Block, sel: Selection) -> _Filters:
    q_pos, k_pos = np.arange(blk_len(blk, 0)), np.arange(blk_len(blk, 1))
    n = step_rows(result, blk, sel.step)
    if n is not None:
        q_pos = q_pos[:n]
        k_pos = k_pos[:n] if blk.kind == "self" else k_pos
    q_sp = _special(blk.query_axis, q_pos, blk_len(blk, 0))
    k_sp = _special(blk.key_axis, k_pos, blk_len(blk, 1))
    dq, dk = (hide_mask(q_sp), hide_mask(k_sp)) if sel.hide_special else (q_sp & False, k_sp & False)
    return _Filters(n, len(q_pos), len(k_pos), dq, dk)


def _block_key(result: AttentionResult, bi: int, blk: Block, sel: Selection, max_side: int, f: _Filters) -> tuple:
    """The cache key of one block's thumbnails: only what changes their numbers."""
    hidden = (np.flatnonzero(f.drop_q).tobytes(), np.flatnonzero(f.drop_k).tobytes()) if f.hides else None
    maps = tuple(id(result.maps[i]) for i in blk.sites)  # the result holds them: ids stay theirs
    return (max_side, sel.batch, bi, maps, f.n_q, f.n_k, hidden, float(sel.keep) if sel.keep < 1.0 else 1.0)


# Pooling 72 maps of 2,048² reads 1.2 GB: one core delivers it in ~155 ms of CPU, so the heads are shared among
# threads (numpy's reductions release the GIL).  Below this many cells a layer the threads' start-up costs more.
POOL_THREADS_FROM = 4_000_000
_POOL: list = []  # the shared executor, made on first use (a result of 512 tokens never needs one)


def _pool_map(fn: Callable[[int], np.ndarray], n: int, cells: int) -> list[np.ndarray]:
    """``[fn(i) for i in range(n)]``, on threads when the layer is large enough to pay for them."""
    import os

    workers = min(n, os.cpu_count() or 1, 8)
    if workers < 2 or cells < POOL_THREADS_FROM:
        return [fn(i) for i in range(n)]
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor

        _POOL.append(ThreadPoolExecutor(min(os.cpu_count() or 1, 8), thread_name_prefix="attnviz-pool"))
    return list(_POOL[0].map(fn, range(n)))


def _pool_block(blk: Block, sel: Selection, max_side: int, f: _Filters) -> list[np.ndarray]:
    """``[H, <=max_side, <=max_side]`` per layer of one block, pooled from its full maps.

    Every head is pooled on its own (a contiguous read of its map), large layers on threads.  Hiding and kept
    mass make a new map per head (one head at a time per thread: a 2,048-token layer would need 200 MB for each
    temporary)."""
    hide = f.hides
    out = []
    for layer in range(blk.n_layers):
        a = np.asarray(blk.layer(layer), np.float32)  # [H, Tq, Tk]
        if f.step is not None:  # slice (a view), never copy the full layer when no step is chosen
            a = a[:, : f.n_q, : f.n_k]

        def head(h: int, a: np.ndarray = a) -> np.ndarray:
            m = reduce.drop_positions(a[h], f.drop_q, f.drop_k) if hide else a[h]  # the head map's numbers
            if sel.keep < 1.0:
                m = reduce.keep_mass(m, max(sel.keep, 1e-3))
            return downsample(m, max_side)

        small = np.stack(_pool_map(head, a.shape[0], a.size))
        small.flags.writeable = False  # shared by every later draw: nobody may change it in place
        out.append(small)
    return out


def thumbnails(
    result: AttentionResult,
    sel: Selection | int = -1,
    max_side: int = THUMB,
    blocks: list[Block] | None = None,
    only_block: int | None = None,
    use_cache: bool = True,
) -> dict:
    """``{(block, layer, head): [<=max_side, <=max_side]}``: every head after the step, special-token
    and kept-mass filters, max-pooled.  The app's analyze job calls it in the inference worker for a new
    result, so the GUI thread only uploads small images; each filter setting is pooled once per result and
    kept with it (``use_cache=False`` pools again and replaces what was kept).
    """
    if isinstance(sel, (int, np.integer)):
        sel = Selection(step=int(sel))
    blocks = result_blocks(result, sel, blocks)
    cache = _thumb_cache(result)
    out = {}
    for bi, blk in enumerate(blocks):
        if only_block is not None and bi != only_block:
            continue
        filters = _block_filters(result, blk, sel)
        key = _block_key(result, bi, blk, sel, max_side, filters)
        layers = cache.get(key) if use_cache else None
        if layers is None:
            layers = _pool_block(blk, sel, max_side, filters)
            cache.put(key, layers)
        for layer, small in enumerate(layers):
            for h in range(small.shape[0]):
                out[(bi, layer, h)] = small[h]
    return out


def thumbnails_kept(
    result: AttentionResult, sel: Selection, max_side: int = THUMB, blocks: list[Block] | None = None
) -> bool:
    """Whether every block's thumbnails for ``sel`` are already kept with ``result`` (no pooling to do)."""
    blocks = result_blocks(result, sel, blocks)
    cache = _thumb_cache(result)
    return all(
        cache.get(_block_key(result, bi, blk, sel, max_side, _block_filters(result, blk, sel))) is not None
        for bi, blk in enumerate(blocks)
    )


# ---------------------------------------------------------------------------------------------
# token links


@dataclass
class LinksView:
    """Two token columns and the weighted links between them; ``items`` are (name, colour, matrix)."""

    q_labels: list[str]
    k_labels: list[str]
    q_special: list[bool]
    k_special: list[bool]
    items: list[tuple[str, str, np.ndarray]]
    links: list[tuple[int, int, int, float]]  # (item, query row, key column, weight / vmax in [0, 1])
    vmax: float
    title: str
    block: Block | None = None
    q_pos: np.ndarray | None = None
    x_titles: tuple[str, str] = ("query", "key")


def strongest_links(
    mats: list[np.ndarray], vmax: float | None = None
) -> tuple[list[tuple[int, int, int, float]], float]:
    """The links worth drawing: per query row and matrix the ``LINKS_PER_ROW`` strongest weights of at
    least ``LINK_MIN`` of the top weight, as ``(matrix, row, column, weight / vmax)``."""
    top = float(vmax) if vmax else max((float(m.max()) for m in mats if m.size), default=1.0) or 1.0
    out = []
    for c, m in enumerate(mats):
        order = np.argsort(-m, axis=1, kind="stable")[:, :LINKS_PER_ROW]
        for i in range(m.shape[0]):
            for j in sorted(order[i].tolist()):
                w = float(m[i, j]) / top
                if w >= LINK_MIN:
                    out.append((c, i, int(j), min(w, 1.0)))
    return out, top


def link_heads(blk: Block, sel: Selection) -> list[int]:
    """The heads token links overlay: none for an aggregate; else the selection's ``heads`` that the layer has,
    or, when it names none, the focused head (the window's first look and the figure's default alike)."""
    if sel.mode != "head":
        return []
    n = blk.heads_in(min(max(sel.layer, 0), blk.n_layers - 1))
    return sorted({int(h) for h in sel.heads if 0 <= h < n}) or [sel.head]


def links_view(
    result: AttentionResult, sel: Selection, heads: list[int] | None = None, blocks: list[Block] | None = None
) -> LinksView:
    """Token links for ``sel``: one head, several heads overlaid (``heads``, else :func:`link_heads`) or the
    selected aggregate."""
    blocks = result_blocks(result, sel, blocks)
    sel = clamp(sel, blocks)
    blk = blocks[sel.block]
    if sel.mode == "head":
        hs = link_heads(blk, sel if heads is None else sel.with_(heads=tuple(heads)))
        mvs = [compute_map(result, sel.with_(head=h), blocks) for h in hs]
        items = [(f"head {h}", HEAD_COLOURS[h % len(HEAD_COLOURS)], mv.matrix) for h, mv in zip(hs, mvs)]
        what = items[0][0] if len(items) == 1 else f"{len(items)} heads"
        title = " · ".join([blk.name, f"layer {sel.layer}", what, *mvs[0].notes])
    else:
        mv = compute_map(result, sel, blocks)
        mvs = [mv]
        items = [(MODE_TITLES[sel.mode], HEAD_COLOURS[0], mv.matrix)]
        title = mv.title
    links, vmax = strongest_links([m for _, _, m in items])
    mv0 = mvs[0]
    ends = ("target", "source") if blk.kind == "cross" else ("query", "key")
    return LinksView(
        mv0.q_labels, mv0.k_labels, mv0.q_special, mv0.k_special, items, links, vmax, title, blk, mv0.q_pos, ends
    )


# ---------------------------------------------------------------------------------------------
# strip ("Show, Attend and Tell": one panel per generated word)


@dataclass
class StripPanel:
    """One word's panel: the decoder ``row`` that chose ``word`` and its weights over the keys ``k_pos``."""

    word: str
    row: int
    k_pos: np.ndarray
    k_labels: list[str]
    k_special: list[bool]
    weights: np.ndarray


@dataclass
class StripView:
    """The strip: one panel per word.  Over an image (``image``) each panel is the word's :func:`overlay_view`
    (``weights`` empty); over text the keys shaded by the word's weights, on one colour scale up to ``vmax``."""

    block_index: int
    block: Block
    image: bool
    panels: list[StripPanel]
    vmax: float
    title: str
    notes: list[str] = field(default_factory=list)
    scale: str = DEFAULT_SCALE


def over_image(result: AttentionResult, blk: Block) -> bool:
    """Cross-attention from words to the image's patches (a captioning decoder)."""
    return blk.kind == "cross" and result.image is not None and block_grid(result, blk) is not None


def strip_block(result: AttentionResult, blocks: list[Block], sel: Selection) -> int | None:
    """The block the strip shows: the selected one when it is a decoder's; else cross-attention over the image,
    else the decoder's cross-attention, else its self-attention (a decoder-only model)."""
    if 0 <= sel.block < len(blocks) and blocks[sel.block].stack == "decoder":
        return sel.block
    order = [i for i, b in enumerate(blocks) if over_image(result, b)]
    order += [i for i, b in enumerate(blocks) if b.stack == "decoder" and b.kind == "cross"]
    order += [i for i, b in enumerate(blocks) if b.stack == "decoder" and b.kind == "self"]
    return order[0] if order else None


def strip_view(result: AttentionResult, sel: Selection, blocks: list[Block] | None = None) -> StripView:
    """Each generated word (up to ``sel.step``; over an image the typed caption words first) with where it
    looked.  Over text a panel is a row of the Alignment view: the same row convention (``sel.rows``), special
    keys hidden and rows renormalised, the mass kept; over an image it is the Image regions overlay of that word."""
    blocks = result_blocks(result, sel, blocks)
    b = strip_block(result, blocks, sel)
    if b is None:
        raise ViewError("the strip view needs a decoder: attention from the generated words", param="view")
    blk = blocks[b]
    image = over_image(result, blk)
    base = sel.with_(block=b, step=-1, hide_special=False, keep=1.0)
    if image and sel.mode == "rollout":
        base = base.with_(mode="mean")  # rollout multiplies square self-attention maps
    mv = compute_map(result, base, blocks)
    rows = generation_rows(result, blk) if n_steps(result) else []
    if not image and blk.kind == "cross" and sel.rows == "input":  # Alignment's rows: word k on the row reading it
        rows = [(r + 1, w) for r, w in rows if r + 1 < mv.matrix.shape[0]]
    notes: list[str] = []
    if sel.step >= 0 and rows:
        rows = rows[: sel.step + 1]
        notes.append(f"step {min(sel.step + 1, n_steps(result))}/{n_steps(result)}")
    if image:
        rows = caption_rows(result, blk) + rows
    panels: list[StripPanel] = []
    hidden = False
    for row, word in rows:
        cols = np.arange(mv.matrix.shape[1])
        if blk.kind == "self":  # a decoder sees only the tokens up to its own position
            cols = cols[: row + 1]
        w = np.asarray(mv.matrix[row], np.float32)[cols] if not image else np.zeros(0, np.float32)
        special = np.asarray([mv.k_special[j] for j in cols], bool) if mv.k_special else np.zeros(len(cols), bool)
        if not image and sel.hide_special and special.any():
            drop = hide_mask(special)
            cols, w, special = cols[~drop], w[~drop], special[~drop]
            w = w / max(float(w.sum()), 1e-12)
            hidden = hidden or bool(drop.any())
        if not image and sel.keep < 1.0:
            w = reduce.keep_mass(w[None], max(sel.keep, 1e-3))[0]
        panels.append(StripPanel(clean_label(word), row, cols, [mv.k_labels[j] for j in cols], special.tolist(), w))
    if hidden:
        notes.append(HIDDEN_NOTE)
    if not image and sel.keep < 1.0:
        notes.append(f"top {round(sel.keep * 100)}% mass")
    vmax = max((float(p.weights.max()) for p in panels if p.weights.size), default=0.0)
    if sel.scale != "map" or image:  # fixed 0–1 or the block's top (over an image each panel is its own overlay)
        vmax = scale_top(result, sel.with_(block=b), b, mv.matrix, blocks)
    title = " · ".join([mv.title, *notes])
    return StripView(b, blk, image, panels, max(vmax, 1e-6), title, notes, sel.scale)


# ---------------------------------------------------------------------------------------------
# image regions


QUERY_OUTLINE = "white"  # the outline of a query patch on the image: screen and figure draw it alike


def _cell_rect(
    grid: PatchGrid, cell: tuple[int, int] | None, width: float, height: float
) -> tuple[float, float, float, float] | None:
    if cell is None:
        return None
    r, c = cell
    cw, ch = width / grid.cols, height / grid.rows
    return c * cw, r * ch, cw, ch


@dataclass
class OverlayPanel:
    """The same query's attention over a second set of the image's tokens, drawn beside the overlay on the same
    picture: a tiled VLM image's global image (Idefics3 / SmolVLM keep the whole picture again at one tile's
    resolution, its own run of tokens after the tiles).  The overlay's colour scale, base and opacity rule, so the
    two panels compare: a word may look at the tiles, the global image or both."""

    name: str
    patch: np.ndarray  # [rows, cols] weights
    grid: PatchGrid
    heat: np.ndarray
    alpha: np.ndarray
    share: float  # the fraction of the query row's weight on these keys
    query_cell: tuple[int, int] | None = None

    def query_rect(self, width: float, height: float) -> tuple[float, float, float, float] | None:
        return _cell_rect(self.grid, self.query_cell, width, height)

    @property
    def caption(self) -> str:
        return f"{self.name} · {self.share:.0%} of the row"


GLOBAL_PANEL = "global image"
TILES_PANEL = "tiles"


@dataclass
class OverlayView:
    """One query's attention over the image patches, and the heat to lay over the image."""

    patch: np.ndarray  # [rows, cols] weights
    grid: PatchGrid
    query_label: str
    block_index: int
    heat: np.ndarray  # [H, W] in [0, 1]: the patch map smoothly upsampled, divided by vmax
    alpha: np.ndarray  # [H, W] opacity: unattended regions keep the image visible
    vmax: float
    title: str
    base: str = "grey"  # what lies under the heat (IMAGE_BASES)
    query_cell: tuple[int, int] | None = None  # (row, col) of the query patch, outlined on the image; None: no patch
    # a tiled VLM image's global image, drawn beside the tiles on the same scale (None: one picture)
    global_panel: OverlayPanel | None = None
    share: float = 1.0  # the fraction of the query row's weight on this grid's keys (said beside a global panel)

    def query_rect(self, width: float, height: float) -> tuple[float, float, float, float] | None:
        """``(x, y, w, h)`` of the query patch on an image ``width`` × ``height`` (pixel edges at 0 and width), or
        None: the outline the screen and the figure draw around the patch whose attention is shown."""
        return _cell_rect(self.grid, self.query_cell, width, height)

    @property
    def captions(self) -> tuple[str, ...]:
        """The panels' captions above the tiles and the global image, with the row's weight on each (none for one
        picture): the screen and the figure write the same."""
        if self.global_panel is None:
            return ()
        return (f"{TILES_PANEL} · {self.share:.0%} of the row", self.global_panel.caption)


def patch_grid_for(result: AttentionResult, n_keys: int) -> PatchGrid | None:
    g = result.patch_grid
    if g is not None and g.offset + g.n <= n_keys:
        return g
    return PatchGrid.infer(n_keys)


def block_grid(result: AttentionResult, blk: Block) -> PatchGrid | None:
    """The patch grid a block's keys lie on.  A stage of a hierarchical (Swin) encoder has its own, the result's
    grid (the first stage's: the image's patches) halved per stage; every other block shares the result's."""
    n_keys = blk_len(blk, 1)
    g = result.token_grid_of(blk.batch)  # a padded batch's rows hold their image tokens at keys of their own
    if g is not None and blk.stack == "decoder" and blk.kind == "self":  # a VLM: the image's run of its own keys
        return g if g.end <= n_keys else None
    if blk.stage and result.patch_grid is not None:
        g = windows.stage_grid(result.patch_grid, blk.stage)
        return g if g.n == n_keys else None
    return patch_grid_for(result, n_keys)


def image_source(
    result: AttentionResult, blocks: list[Block], prefer: int | None = None
) -> tuple[int, PatchGrid, str] | None:
    """``(block index, grid, kind)`` of the attention over image patches, or None.

    The selected block when it attends to the patches; else cross-attention (captioning: where
    each word looks), else a vision–language decoder's self-attention to its image tokens (the same question),
    else the first self-attention block over the patches (a ViT).
    """
    if result.image is None and result.patch_grid is None:
        return None

    def grid_of(i):
        return block_grid(result, blocks[i])

    order = [prefer] if prefer is not None and 0 <= prefer < len(blocks) else []
    order += [i for i, b in enumerate(blocks) if b.kind == "cross"]
    if result.token_grid is not None:
        order += [i for i, b in enumerate(blocks) if b.kind == "self" and b.stack == "decoder"]
    order += [i for i, b in enumerate(blocks) if b.kind == "self" and b.stack == "encoder"]
    for i in order:
        g = grid_of(i)
        if g is not None:
            return i, g, blocks[i].kind
    return None


def caption_rows(result: AttentionResult, blk: Block) -> list[tuple[int, str]]:
    """``(query row, word)`` for the caption words that were given (typed), not generated.

    The same rule as for generated words: a word is shown at the row that chose it, and a given word at
    decoder position ``p`` was chosen (forced) at row ``p - 1``.  Empty without a known prompt of more than
    the start token.
    """
    n = min(int(result.prompt_len or 0), blk_len(blk, 0) + 1, len(blk.query_axis))
    if blk.stack != "decoder" or n <= 1:
        return []
    return [(p - 1, str(blk.query_axis.labels[p])) for p in range(1, n)]


def image_queries(result: AttentionResult, blk: Block, grid: PatchGrid) -> list[tuple[str, int]]:
    """``(label, query row)`` choices: the given and generated caption words (cross), else CLS and the mean of
    patch queries (-1)."""
    if blk.kind == "cross":
        given = caption_rows(result, blk)
        if given and not n_steps(result):  # teacher-forced: the typed caption is all there is
            return [(clean_label(w), r) for r, w in given]
        return [(clean_label(w), r) for r, w in given + generation_rows(result, blk)]
    g = result.token_grid_of(blk.batch)
    if g is not None and blk.stack == "decoder" and blk.kind == "self" and len(blk.query_axis) > g.end:
        # a vision–language decoder: each text token after the image, at its own row (where that word looks)
        return [(clean_label(blk.query_axis.labels[r]), r) for r in range(g.end, len(blk.query_axis))]
    first = clean_label(blk.query_axis.labels[0]) if len(blk.query_axis) else "CLS"
    # the leading keys are a CLS token, or (a VLM's tiles before its global image) patches of other images
    out = [(first, 0)] if grid.offset > 0 and not grid.lead_images else []
    return out + [("all patches (mean)", -1)]


def patch_query(grid: PatchGrid, x: float, y: float, width: int, height: int) -> tuple[str, int] | None:
    """``(label, query row)`` of the patch under pixel ``(x, y)`` of an image ``width`` × ``height`` (None outside
    it): "where does this patch look?".  Patch ``(r, c)`` covers the image's ``r``-th of ``rows`` bands, as
    :meth:`PatchGrid.to_image` lays a row of keys out and :func:`upsample` stretches it."""
    if not (0 <= x < width and 0 <= y < height):
        return None
    r = min(int(y * grid.rows / height), grid.rows - 1)
    c = min(int(x * grid.cols / width), grid.cols - 1)
    row = grid.key(r, c)
    return patch_label(grid, row), row


def patch_label(grid: PatchGrid, row: int) -> str:
    """A patch query's name, "patch (r, c)", wherever it is shown (the view's button, its info line, a figure)."""
    r, c = grid.cell(row) or divmod(row - grid.offset, grid.cols)
    return f"patch ({r}, {c})"


def step_query(result: AttentionResult, blk: Block, queries: list[tuple[str, int]], step: int) -> int:
    """Index into ``queries`` of generated word ``step`` (given caption words come first); 0 for no step."""
    if step < 0 or not n_steps(result):
        return 0
    row = producing_row(result, blk_len(blk, 0), min(step, n_steps(result) - 1))
    return next((i for i, (_, r) in enumerate(queries) if r == row), len(queries) - 1)


SMOOTH_SIGMA = 0.5  # cells: the blur that makes a lone hot cell's contours round (and no wider than its neighbours)
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _cell_weights(n_out: int, n_in: int) -> np.ndarray:
    """``[n_out, n_in]``: how much of each cell a Gaussian (σ = ``SMOOTH_SIGMA`` cells) centred on each output pixel
    covers, the edge cells reaching out to infinity so that every row sums to 1."""
    x = (np.arange(n_out) + 0.5) * n_in / n_out - 0.5  # the pixel's position in cell units
    edges = np.arange(n_in + 1) - 0.5
    edges[0], edges[-1] = -np.inf, np.inf
    cdf = 0.5 * (1.0 + _erf((edges[None, :] - x[:, None]) / (SMOOTH_SIGMA * math.sqrt(2.0))))
    return np.diff(cdf, axis=1).astype(np.float32)


def upsample(patch: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Smooth upsampling of a ``[rows, cols]`` map to ``size``: the map as cells, blurred by a Gaussian of half a
    cell.  Bilinear interpolation drew "+"-shaped streaks around a hot cell (a product of two tents has
    star-shaped contours); the blurred cells' contours are round, and each pixel is a weighted mean of the cells
    (within the map's range, 0 stays ≥ 0)."""
    h, w = size
    r, c = patch.shape
    p = np.asarray(patch, np.float32)
    return (_cell_weights(h, r) @ p @ _cell_weights(w, c).T).astype(np.float32)


def overlay_view(
    result: AttentionResult, sel: Selection, size: tuple[int, int] | None = None, blocks: list[Block] | None = None
) -> OverlayView:
    """The image-regions overlay: ``sel.query`` row (None: the default query) of the image block."""
    blocks = result_blocks(result, sel, blocks)
    src = image_source(result, blocks, sel.block)
    if src is None:
        raise ViewError(
            "image regions need an image input (a vision or captioning model); this result has no image patches",
            param="image",
        )
    bi, grid, kind = src
    s = clamp(
        sel.with_(
            block=bi,
            step=-1,
            hide_special=False,
            keep=1.0,
            mode="mean" if kind == "cross" and sel.mode == "rollout" else sel.mode,
        ),
        blocks,
    )
    mv = compute_map(result, s, blocks)
    queries = image_queries(result, blocks[bi], grid)
    rows = [r for _, r in queries]
    query = sel.query if sel.query is not None and (sel.query in rows or 0 <= sel.query < mv.matrix.shape[0]) else None
    if query is None:
        query = rows[step_query(result, blocks[bi], queries, sel.step) if kind == "cross" else 0]
    cell = None
    if query < 0:
        vec, label = mv.matrix[grid.offset :].mean(axis=0), "all patches (mean)"
    else:
        vec = mv.matrix[min(query, mv.matrix.shape[0] - 1)]
        label = dict((r, lab) for lab, r in queries).get(query) or clean_label(blocks[bi].query_axis.labels[query])
        if kind == "self" and grid.cell(query) is not None:  # a patch as the query
            label = patch_label(grid, query)
            cell = grid.cell(query)
    patch = grid.to_image(vec)
    whole = global_grid(grid, len(vec))
    if whole is not None and query >= 0 and whole.cell(query) is not None:  # a global image's token as the query
        label = f"{GLOBAL_PANEL} {patch_label(whole, query)}"
    if size is None:
        shape = np.asarray(result.image).shape if result.image is not None else (grid.rows * 16, grid.cols * 16)
        size = (int(shape[0]), int(shape[1]))
    # the top of the drawn (smoothed) weights, which the colour bar states: sampled 8 times a cell whatever the
    # drawing's size, so the screen (finer) and the figure (the image's pixels) share one scale; with a global
    # image beside the tiles, the top of both (one colour bar: which of the two a word looks at shows)
    vmax = _drawn_top(patch)
    glob = None
    if whole is not None:
        gpatch = whole.to_image(vec)
        vmax = max(vmax, _drawn_top(gpatch))
        gheat = np.clip(upsample(gpatch, size) / vmax, 0.0, 1.0)
        total = max(float(np.sum(vec)), 1e-12)
        gcell = whole.cell(query) if query >= 0 else None
        glob = OverlayPanel(
            GLOBAL_PANEL, gpatch, whole, gheat, overlay_alpha(gheat, sel.image_base), float(gpatch.sum()) / total, gcell
        )
    heat = np.clip(upsample(patch, size) / vmax, 0.0, 1.0)
    alpha = overlay_alpha(heat, sel.image_base)
    title = " · ".join([blocks[bi].name, mv.title.split(" · ", 1)[1], f"query “{label}”"])
    share = float(patch.sum()) / max(float(np.sum(vec)), 1e-12) if glob is not None else 1.0
    return OverlayView(patch, grid, label, bi, heat, alpha, vmax, title, sel.image_base, cell, glob, share)


def _drawn_top(patch: np.ndarray) -> float:
    r, c = patch.shape
    return max(float(upsample(patch, (8 * r, 8 * c)).max()), 1e-6)


def global_grid(grid: PatchGrid, n_keys: int) -> PatchGrid | None:
    """A tiled VLM image's global image grid, when its keys are within the block's (a stored file may lie)."""
    g = grid.global_grid
    return g if g is not None and g.offset + g.n <= n_keys else None


def grey_base(image: np.ndarray) -> np.ndarray:
    """Lightened luminance ``[H, W]`` in [0.25, 1] of an image: a neutral base that does not fight the heat."""
    img = np.asarray(image, np.float32)
    lum = img if img.ndim == 2 else img[..., :3] @ np.array([0.299, 0.587, 0.114], np.float32)
    lum = lum / 255.0 if img.max() > 1.0 else lum
    return 0.25 + 0.75 * np.clip(lum, 0.0, 1.0)


def _colour_base(image: np.ndarray) -> np.ndarray:
    img = np.asarray(image, np.float32)
    img = np.stack([img] * 3, axis=-1) if img.ndim == 2 else img[..., :3]
    return np.clip(img / 255.0 if img.max() > 1.0 else img, 0.0, 1.0)


def _grey_rgb(image: np.ndarray) -> np.ndarray:
    return np.repeat(grey_base(image)[..., None], 3, axis=-1)


def _no_base(image: np.ndarray) -> np.ndarray:
    return np.ones(np.asarray(image).shape[:2] + (3,), np.float32)  # never seen: the heat is opaque


# image regions: what lies under the heat -> (menu text, base [H, W, 3] in [0, 1]); screen and figure draw this
IMAGE_BASES: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]] = {
    "grey": ("grey image", _grey_rgb),  # the default: colours of the image cannot be mistaken for heat
    "colour": ("colour image", _colour_base),  # where colour is the content (which object is where)
    "none": ("heat only", _no_base),  # the smoothed map alone, opaque
}


def check_image_base(name: str) -> str:
    if name not in IMAGE_BASES:
        raise ViewError(f"unknown image base {name!r}; use one of {', '.join(IMAGE_BASES)}", param="image_base")
    return name


def base_rgb(image: np.ndarray, base: str = "grey") -> np.ndarray:
    """``[H, W, 3]`` float32 in [0, 1]: what the image-regions view shows under the heat."""
    return np.asarray(IMAGE_BASES[check_image_base(base)][1](image), np.float32)


def overlay_alpha(heat: np.ndarray, base: str = "grey") -> np.ndarray:
    """Opacity of the heat: grows with the weight over an image (unattended regions keep it visible); opaque alone."""
    if check_image_base(base) == "none":
        return np.ones_like(heat, dtype=np.float32)
    return (0.2 + 0.7 * heat).astype(np.float32)


def composite(image: np.ndarray, heat_rgb: np.ndarray, alpha: np.ndarray, base: str = "grey") -> np.ndarray:
    """``[H, W, 3]`` uint8: the chosen base under the heat colours (``heat_rgb`` in [0, 1]) at ``alpha``."""
    under = base_rgb(image, base)
    a = alpha[..., None]
    return np.clip(255.0 * (under * (1 - a) + heat_rgb[..., :3] * a), 0, 255).round().astype(np.uint8)


# ---------------------------------------------------------------------------------------------
# two models compared (File ▸ Compare with…, attnviz compare): B's map of A's selection, and A − B

DIFF_CMAP = "RdBu_r"  # A − B: blue where B attends more, white where they agree, red where A attends more
# ColorBrewer RdBu (11 classes) from blue to red: the colours matplotlib's RdBu_r interpolates, so the screen
# (pyqtgraph, from these) and the figure (matplotlib's RdBu_r) paint a difference alike
DIFF_COLOURS = (
    "#053061",
    "#2166ac",
    "#4393c3",
    "#92c5de",
    "#d1e5f0",
    "#f7f7f7",
    "#fddbc7",
    "#f4a582",
    "#d6604d",
    "#b2182b",
    "#67001f",
)
DIFF_TITLE = "A − B"
DIFF_FLOOR = 1e-6  # the scale of a difference that is 0 everywhere (a model against itself): ±1e-6, all white


def map_label(mv: MapView, log: bool) -> str:
    """The colour-bar words of a drawn map, screen and figure: a difference says it is one and how it is scaled."""
    if mv.diverging:
        hidden = " (special tokens removed, rows renormalised)" if HIDDEN_NOTE in mv.notes else ""
        return f"A − B weight{hidden} (±max |A − B|)"
    return notes_label(mv.notes, log, mv.scale)


def matching_selection(
    result_a: AttentionResult,
    result_b: AttentionResult,
    sel: Selection,
    blocks_a: list[Block] | None = None,
) -> Selection:
    """The selection on ``result_b`` that shows what ``sel`` shows on ``result_a``: the block of the same stack,
    kind, stage and tower, the layer with the same number (sites are matched as ``attnviz compare`` matches
    them); one message when B has no such block or layer."""
    blocks_a = result_blocks(result_a, sel, blocks_a)
    if not blocks_a:
        raise ViewError("this result has no attention maps; nothing to compare", param="model")
    sel = clamp(sel, blocks_a)
    ba = blocks_a[sel.block]
    blocks_b = result_b.blocks(sel.batch)
    j = next(
        (
            i
            for i, b in enumerate(blocks_b)
            if (b.stack, b.kind, b.stage, b.tower) == (ba.stack, ba.kind, ba.stage, ba.tower)
        ),
        None,
    )
    if j is None:
        raise ViewError(f"model B has no {ba.name}; pick a block both models have", param="block")
    bb = blocks_b[j]
    la = [int(result_a.sites[i].layer) for i in ba.sites]
    lb = [int(result_b.sites[i].layer) for i in bb.sites]
    if sel.mode == "head":
        if la[sel.layer] not in lb:
            raise ViewError(f"model B's {bb.name} has no layer {la[sel.layer]}; pick a layer both have", param="layer")
        li = lb.index(la[sel.layer])
        if sel.head >= bb.heads_in(li):
            raise ViewError(f"model B's layer {la[sel.layer]} has {bb.heads_in(li)} heads, no head {sel.head}")
        return sel.with_(block=j, layer=li)
    if la != lb:
        raise ViewError(
            f"model B's {bb.name} has other layers than A's; compare one head (aggregate 'head')", param="aggregate"
        )
    return sel.with_(block=j)


def compute_other_map(
    result_a: AttentionResult, result_b: AttentionResult, sel: Selection, blocks_a: list[Block] | None = None
) -> MapView:
    """Model B's map of what ``sel`` selects on model A (what Head map shows as "B")."""
    return compute_map(result_b, matching_selection(result_a, result_b, sel, blocks_a))


def compute_diff_map(
    result_a: AttentionResult, result_b: AttentionResult, sel: Selection, blocks_a: list[Block] | None = None
) -> MapView:
    """A − B for what ``sel`` selects (the same step, hidden tokens and kept mass applied to both), on a
    diverging scale centred on 0 with symmetric limits ±max |A − B|; never on a log scale (it is signed)."""
    sel = sel.with_(log=False)
    a = compute_map(result_a, sel, blocks_a)
    b = compute_map(result_b, matching_selection(result_a, result_b, sel, blocks_a))
    if a.matrix.shape != b.matrix.shape or a.q_labels != b.q_labels or a.k_labels != b.k_labels:
        raise ViewError(
            f"A's map is {list(a.matrix.shape)} and B's {list(b.matrix.shape)} over other tokens: no difference to "
            "draw; compare models that share a tokenizer"
        )
    d = a.matrix.astype(np.float32) - b.matrix.astype(np.float32)
    top = max(float(np.abs(d).max()) if d.size else 0.0, DIFF_FLOOR)
    return replace(a, matrix=d, title=f"{a.title} · {DIFF_TITLE}", vmin=-top, vmax=top, diverging=True)


# the Overview's frame around each compared head: white (no divergence) to dark red (the most divergent head)
DIVERGENCE_COLOURS = DIFF_COLOURS[len(DIFF_COLOURS) // 2 :]


def divergence_colour(js: float, top: float) -> str | None:
    """The frame colour of a head whose JS divergence is ``js`` when the most divergent head has ``top``
    (None: the head did not move, no frame)."""
    if not js > 0 or not top > 0:
        return None
    cols = DIVERGENCE_COLOURS
    x = min(max(js / top, 0.0), 1.0) * (len(cols) - 1)
    i = min(int(x), len(cols) - 2)
    f = x - i
    lo, hi = (np.array([int(c[k : k + 2], 16) for k in (1, 3, 5)], float) for c in (cols[i], cols[i + 1]))
    r, g, b = np.rint(lo + (hi - lo) * f).astype(int)
    return f"#{r:02x}{g:02x}{b:02x}"
