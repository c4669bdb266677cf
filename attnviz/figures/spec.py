"""How a figure is asked for: :class:`FigureStyle` (size, fonts, colours), :class:`FigureSpec` (the command line's
and a recipe's words for a figure), the view names and the width presets.

What a figure *shows* is the view model's :class:`~attnviz.core.view.Selection`, the one the window holds:
``render_figure(result, view, selection, style)``.  A :class:`FigureSpec` is only the form that selection takes on
the command line and in a recipe file (its field names are the recipe format); :func:`attnviz.figures.select.resolve`
turns it into a selection once.  Matplotlib-free, so the CLI parser and the GUI can use it without loading it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from attnviz import AttnvizError
from attnviz.core.json_types import shown
from attnviz.core.numbers import spelled
from attnviz.core.view import (
    IMAGE_BASES,
    IMAGE_FROM,
    LINK_CUTS,
    MAP_CMAP,
    OVERLAY_CMAP,
    SCALES,
    FramesKey,
    check_vmax,
)
from attnviz.core.view_flags import views_reading
from attnviz.core.view_names import FIGURE_VIEWS

# figure view (core.view_names) -> one-line description (the renderer's registry in views.py has the same keys)
VIEW_HELP = {
    "heatmap": "one map: query tokens x key tokens, tokens as text on both axes, colour bar",
    "overview": "every layer x head of a block on one shared colour scale",
    "links": "two token columns joined by lines weighted by attention; several heads overlaid",
    "alignment": "cross-attention alignment: generated/target tokens x source tokens",
    "image": "one query's attention over the image patches, smoothed and overlaid on the image",
    "audio": "a speech model's waveform and spectrogram with a word's cross-attention (or a frame's) along time",
    "strip": "'Show, Attend and Tell' strip: one panel per generated word, the word under it (image or shaded source)",
}
VIEWS = FIGURE_VIEWS  # VIEW_HELP describes each, in this order (tests/core/test_view_names.py)

# the views that draw a map of positions, which --span / --key-span cut a window of (core.view_flags: which view
# reads which flag)
SPAN_VIEWS = views_reading("span")
# column widths of common two-column paper templates, inches
WIDTH_PRESETS = {"single": 3.5, "double": 7.16}
AGGREGATES = ("mean", "max", "min", "rollout")
FORMATS = ("pdf", "svg", "png")
# colour-blind-safe, perceptually uniform defaults
# the view model's choice, shared with the screen
DEFAULT_CMAP = {"image": OVERLAY_CMAP, "strip": OVERLAY_CMAP, "audio": OVERLAY_CMAP}
FALLBACK_CMAP = MAP_CMAP


@dataclass(frozen=True)
class FigureStyle:
    """How a figure is drawn, apart from what it shows: size, resolution, fonts, colour map, title."""

    cmap: str | None = None  # matplotlib colormap name; None: the view model's (viridis; magma for image overlays)
    width: str | None = None  # "single" (3.5 in) | "double" (7.16 in); None: sized to the content
    width_in: float | None = None  # explicit width in inches (wins over `width`)
    dpi: int = 300  # raster resolution (PNG size = width_in * dpi)
    title: str | None = None  # None: automatic (model and the view model's title); "": no title
    # (the colour scale's top set by hand is not a style: it is what the figure shows, Selection.vmax, which the
    # window's box sets too; FigureSpec.vmax is its command-line and recipe form)
    font_size: float = 7.0  # tick-label size in points (titles are 1 pt larger)
    # heatmap / alignment: only query positions span[0]..span[1] (inclusive; a self-attention map's keys too) and
    # key positions key_span[0]..key_span[1]; None: all (core/view/span.py)
    span: tuple[int, int] | None = None
    key_span: tuple[int, int] | None = None
    # overview only: this layer's heads alone, as a near-square grid (the window's overview shows every layer;
    # a paper may want one).  Not in a recipe: `figure --view overview --layer L` sets it
    only_layer: int | None = None
    # overview only: a frame colour per (layer, head) of the drawn block, and what the frames mean (File ▸ Compare
    # with…: each head's divergence from model B, as the window frames it).  Not in a recipe: a comparison's
    head_frames: tuple[tuple[int, int, str], ...] = ()
    frames_note: str = ""
    frames_key: FramesKey | None = None  # the frames' colour key (their scale), drawn under the grid
    # overview only: the (layer, head)s of the drawn block that are switched off (right-click ▸ Switch head off),
    # veiled and crossed out as the window draws them.  Not in a recipe: the window's state, as the frames are
    heads_off: tuple[tuple[int, int], ...] = ()

    def __post_init__(self):
        check_style(self)

    @property
    def fixed_width(self) -> float | None:
        """The asked width in inches, or None when the figure is sized to its content."""
        if self.width_in is not None:
            return float(self.width_in)
        if self.width is not None:
            return WIDTH_PRESETS[self.width]
        return None

    def colormap(self, view: str) -> str:
        return self.cmap or DEFAULT_CMAP.get(view, FALLBACK_CMAP)


STYLE_FIELDS = tuple(
    f.name
    for f in fields(FigureStyle)
    if f.name not in ("only_layer", "head_frames", "frames_note", "frames_key", "heads_off")
)


MAX_TITLE_CHARS = 1000  # a figure title, a line or a few; far past any caption a page can hold


def check_span(flag: str, span) -> None:
    """A window of positions: two whole numbers, 0 <= LO <= HI (None: no window)."""
    if span is None:
        return
    try:
        lo, hi = (int(v) for v in span)
        ok = [lo, hi] == list(span) and 0 <= lo <= hi
    except (TypeError, ValueError):
        ok = False
    if not ok:
        # said as typed (5-2), not as the list it was parsed into ([5, 2]); a recipe's odd value as its file spells it
        typed = f"{span[0]}-{span[1]}" if isinstance(span, (list, tuple)) and len(span) == 2 and all(
            isinstance(v, int) for v in span) else shown(span)  # fmt: skip
        raise AttnvizError(f"{flag} {typed}: give positions LO-HI, 0 <= LO <= HI (e.g. {flag} 300-399)", param="span")


def check_style(st) -> None:
    """The style fields of a FigureStyle or a FigureSpec; AttnvizError naming the fix."""
    if st.width is not None and st.width not in WIDTH_PRESETS:
        raise AttnvizError(f"unknown width preset {st.width!r}; use one of {', '.join(WIDTH_PRESETS)} or --width-in")
    if st.width_in is not None and not (0.5 <= float(st.width_in) <= 50):
        raise AttnvizError(f"width {spelled(st.width_in)} in is out of range; use 0.5..50 inches", param="width_in")
    if not (10 <= int(st.dpi) <= 2400):
        raise AttnvizError(f"dpi {spelled(st.dpi)} is out of range; use 10..2400", param="dpi")
    if not (3 <= float(st.font_size) <= 30):
        raise AttnvizError(f"font size {spelled(st.font_size)} is out of range; use 3..30 pt", param="font_size")
    for flag, span in (("--span", st.span), ("--key-span", st.key_span)):
        check_span(flag, span)
    if st.title is not None and len(st.title) > MAX_TITLE_CHARS:
        # matplotlib lays a title out glyph by glyph: a hand-edited recipe's 1 MB title ran two minutes, not drawn
        raise AttnvizError(
            f"title of {len(st.title):,} characters is too long to draw; give at most {MAX_TITLE_CHARS:,} (see --title)",
            param="title",
        )


@dataclass
class FigureSpec:
    """A figure in the words of the command line and of a recipe's ``view`` section (whose format these field
    names are).  Unset fields (None) take the view model's defaults when :func:`attnviz.figures.select.resolve`
    turns it into a :class:`~attnviz.core.view.Selection` for a result."""

    view: str = "heatmap"  # one of VIEWS
    block: int | str | None = None  # index into result.blocks() or a name like "encoder self"; None: the view's default
    layer: int | None = None  # 0-based; None: the last layer
    layer_from: int | None = None  # aggregates over a layer range layer_from..layer (rollout default: from 0)
    head: int | None = None  # one head; None: the aggregate `agg` (or, for links, every head overlaid)
    heads: list[int] | None = None  # links only: these heads overlaid in distinct colours
    agg: str | None = None  # mean|max|min|rollout over heads; None with head None: mean
    query: int | None = None  # query position for image/links (None: the view's default)
    cmap: str | None = None  # matplotlib colormap name; None: viridis (magma for image overlays)
    width: str | None = None  # "single" (3.5 in) | "double" (7.16 in); None: sized to the content
    width_in: float | None = None  # explicit width in inches (wins over `width`)
    dpi: int = 300  # raster resolution (PNG size = width_in * dpi)
    hide_special: bool = False  # drop special tokens ([CLS], [SEP], <pad>...) and renormalise rows
    keep: float = 1.0  # keep, per row, the largest weights holding this fraction of the mass (1: all)
    log: bool = False  # logarithmic colour scale
    step: int | None = None  # generation step: only the decoder positions that existed when word `step` was chosen
    title: str | None = None  # None: automatic (model, block, layer, head); "": no title
    vmax: float | None = None  # top of the colour scale set by hand (Selection.vmax); None: the scale's own top
    font_size: float = 7.0  # tick-label size in points (titles are 1 pt larger)
    batch: int = 0  # batch row of the result
    # alignment rows: predict (the row that chose the word) | input (the row reading it); None: the model's
    # declared convention (attnviz.alignment), else predict
    rows: str | None = None
    image_base: str = "grey"  # image / strip: what lies under the heat, grey | colour | none (heat only)
    # the colour scale's top: fixed (0–1) | shared (the block's heads) | map (this map's maximum).  None: "map",
    # the scale every figure had before there was a choice, so a recipe written then draws the same bytes;
    # `attnviz figure` without --scale writes the view model's default (fixed) into its recipe
    scale: str | None = None
    # image: which of one prompt's several images is drawn (1-based); None: the first (a recipe without it)
    picture: int | None = None
    # image: whose attention lies over the image, the words' or the vision tower's own (IMAGE_FROM); None: the words'
    image_from: str | None = None
    # heatmap of a vision tower's frames (tiles, images): which frame is drawn (1-based); None: the first
    frame: int | None = None
    # image: the overlay's colour scale, fixed | shared (the block's heads, this query's row) | map, with `log`.
    # None: stretched to the map, linear, as every image figure was drawn before there was a choice (its recipe's
    # `scale` and `log` were not read), so such a recipe draws the same bytes; `figure --view image` records it
    image_scale: str | None = None
    # heatmap / alignment: a window of query positions [LO, HI] (a self-attention map's keys too), and of key
    # positions; None: the whole map (a recipe without them)
    span: list[int] | None = None
    key_span: list[int] | None = None
    # links: what a link's weight is measured against, each query token's strongest (row) or the top weight (map)
    # (LINK_CUTS).  None: map, as every links figure was drawn before there was a choice, so such a recipe draws
    # the same bytes; `figure --view links` records the view model's default (row)
    link_cut: str | None = None
    # a speech model's maps: the encoder frames after the clip too (the padding of the model's window).  None: as a
    # recipe written before the choice drew them (the whole window); `attnviz figure` records False, the window's
    padding: bool | None = None
    # overview: False where a scale was chosen (--scale, the window's colour-scale box), which then wins over the
    # kind of model's own (a speech model's top per block: core.view.overview_scale); None: the kind's own
    kind_scale: bool | None = None

    def __post_init__(self):
        self.validate()

    def validate(self) -> FigureSpec:
        """Check the fields that need no result; raise AttnvizError naming the fix."""
        if self.view not in VIEW_HELP:
            raise AttnvizError(f"unknown view {self.view!r}; use one of {', '.join(VIEWS)}")
        if self.agg is not None and self.agg not in AGGREGATES:
            raise AttnvizError(f"unknown head aggregate {self.agg!r}; use one of {', '.join(AGGREGATES)}")
        if self.head is not None and self.agg is not None:
            raise AttnvizError("give a head or an aggregate, not both", param="aggregate")
        if self.heads is not None:
            self.heads = [int(h) for h in self.heads]
            if not self.heads:
                raise AttnvizError("heads list is empty; give at least one head")
            if self.agg is not None:
                raise AttnvizError("give heads or an aggregate, not both", param="aggregate")
        check_style(self)
        check_vmax(self.vmax)  # (the view model's own check: the window's box says the same)
        if (self.span is not None or self.key_span is not None) and self.view not in SPAN_VIEWS:
            raise AttnvizError(
                f"--span and --key-span cut a map's positions: the {self.view} view has none to cut; use --view "
                f"{' or --view '.join(SPAN_VIEWS)}",
                param="span",
            )
        if not (0.0 < float(self.keep) <= 1.0):
            raise AttnvizError(
                f"keep {spelled(self.keep)} is out of range; use a mass fraction in (0, 1], e.g. 0.9", param="keep"
            )
        if self.step is not None and int(self.step) < 0:
            raise AttnvizError(f"step {self.step} must be 0 or more")
        if self.scale is not None and self.scale not in SCALES:
            raise AttnvizError(f"unknown colour scale {self.scale!r}; use one of {', '.join(SCALES)}", param="scale")
        if self.image_scale is not None and self.image_scale not in SCALES:
            raise AttnvizError(
                f"unknown colour scale {self.image_scale!r}; use one of {', '.join(SCALES)}", param="scale"
            )
        if self.kind_scale is not None and not isinstance(self.kind_scale, bool):
            raise AttnvizError(f"kind_scale {self.kind_scale!r}: use true or false", param="scale")
        if self.picture is not None and (isinstance(self.picture, bool) or int(self.picture) < 1):
            raise AttnvizError(f"picture {self.picture}: images count from 1; give --picture N", param="picture")
        if self.frame is not None and (isinstance(self.frame, bool) or int(self.frame) < 1):
            raise AttnvizError(f"frame {self.frame}: frames count from 1; give --frame N", param="frame")
        if self.image_from is not None and self.image_from not in IMAGE_FROM:
            raise AttnvizError(
                f"unknown image attention {self.image_from!r}; use one of {', '.join(IMAGE_FROM)}", param="image_from"
            )
        if self.link_cut is not None and self.link_cut not in LINK_CUTS:
            raise AttnvizError(
                f"unknown link cut {self.link_cut!r}; use one of {', '.join(LINK_CUTS)}", param="link_cut"
            )
        if self.image_base not in IMAGE_BASES:
            raise AttnvizError(
                f"unknown image base {self.image_base!r}; use one of {', '.join(IMAGE_BASES)}", param="image_base"
            )
        return self

    @property
    def style(self) -> FigureStyle:
        only = self.layer if self.view == "overview" else None
        spans = {k: tuple(getattr(self, k)) if getattr(self, k) is not None else None for k in ("span", "key_span")}
        return FigureStyle(**{k: getattr(self, k) for k in STYLE_FIELDS} | spans, only_layer=only)

    def to_dict(self) -> dict:
        d = asdict(self)
        # not chosen: the recipe as it was before there was a choice
        for key in (
            "picture",
            "image_from",
            "frame",
            "image_scale",
            "span",
            "key_span",
            "link_cut",
            "padding",
            "kind_scale",
        ):
            if d[key] is None:
                del d[key]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> FigureSpec:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise AttnvizError(f"unknown figure option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**d)
