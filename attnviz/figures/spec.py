"""What a figure shows: :class:`FigureSpec`, the view names and the width presets.

Matplotlib-free, so the CLI parser and the GUI can build and validate specs without loading it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from attnviz import AttnvizError
from attnviz.core.view import IMAGE_BASES, MAP_CMAP, OVERLAY_CMAP, Selection
from attnviz.core.view_names import FIGURE_VIEWS, view_key

# figure view (core.view_names) -> one-line description (the renderer's registry in views.py has the same keys)
VIEW_HELP = {
    "heatmap": "one map: query tokens x key tokens, tokens as text on both axes, colour bar",
    "overview": "every layer x head of a block on one shared colour scale",
    "links": "two token columns joined by lines weighted by attention; several heads overlaid",
    "alignment": "cross-attention alignment: generated/target tokens x source tokens",
    "image": "one query's attention over the image patches, smoothed and overlaid on the image",
    "strip": "'Show, Attend and Tell' strip: one panel per generated word, the word under it (image or shaded source)",
}
VIEWS = FIGURE_VIEWS  # VIEW_HELP describes each, in this order (tests/core/test_view_names.py)

# column widths of common two-column paper templates, inches
WIDTH_PRESETS = {"single": 3.5, "double": 7.16}
AGGREGATES = ("mean", "max", "min", "rollout")
FORMATS = ("pdf", "svg", "png")
# colour-blind-safe, perceptually uniform defaults
# the view model's choice, shared with the screen
DEFAULT_CMAP = {"image": OVERLAY_CMAP, "strip": OVERLAY_CMAP}
FALLBACK_CMAP = MAP_CMAP


@dataclass
class FigureSpec:
    """Everything that decides how a figure looks (the ``view`` part of a recipe)."""

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
    vmax: float | None = None  # top of the colour scale; None: the largest weight shown
    font_size: float = 7.0  # tick-label size in points (titles are 1 pt larger)
    batch: int = 0  # batch row of the result
    # alignment rows: predict (the row that chose the word) | input (the row reading it); None: the model's
    # declared convention (attnviz.alignment), else predict
    rows: str | None = None
    image_base: str = "grey"  # image / strip: what lies under the heat, grey | colour | none (heat only)

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
        if self.width is not None and self.width not in WIDTH_PRESETS:
            raise AttnvizError(
                f"unknown width preset {self.width!r}; use one of {', '.join(WIDTH_PRESETS)} or --width-in"
            )
        if self.width_in is not None and not (0.5 <= float(self.width_in) <= 50):
            raise AttnvizError(f"width {self.width_in} in is out of range; use 0.5..50 inches")
        if not (10 <= int(self.dpi) <= 2400):
            raise AttnvizError(f"dpi {self.dpi} is out of range; use 10..2400")
        if not (3 <= float(self.font_size) <= 30):
            raise AttnvizError(f"font size {self.font_size} is out of range; use 3..30 pt")
        if not (0.0 < float(self.keep) <= 1.0):
            raise AttnvizError(f"keep {self.keep} is out of range; use a mass fraction in (0, 1], e.g. 0.9")
        if self.step is not None and int(self.step) < 0:
            raise AttnvizError(f"step {self.step} must be 0 or more")
        if self.image_base not in IMAGE_BASES:
            raise AttnvizError(
                f"unknown image base {self.image_base!r}; use one of {', '.join(IMAGE_BASES)}", param="image_base"
            )
        if self.vmax is not None and not float(self.vmax) > 0:
            raise AttnvizError(f"vmax {self.vmax} must be > 0")
        return self

    @property
    def fixed_width(self) -> float | None:
        """The asked width in inches, or None when the figure is sized to its content."""
        if self.width_in is not None:
            return float(self.width_in)
        if self.width is not None:
            return WIDTH_PRESETS[self.width]
        return None

    @property
    def colormap(self) -> str:
        return self.cmap or DEFAULT_CMAP.get(self.view, FALLBACK_CMAP)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> FigureSpec:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise AttnvizError(f"unknown figure option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**d)


def spec_from_selection(view: str, sel: Selection, heads: list[int] | None = None, **options) -> FigureSpec:
    """The figure of what the screen shows: the view model's :class:`~attnviz.core.view.Selection` plus a style.

    ``heads``: links only, the heads overlaid on screen.  ``options`` are FigureSpec style fields
    (width, width_in, dpi, cmap, title...).  This is all "export this view" needs.
    """
    view = view_key(view) or str(view).lower()  # a tab title or an old name: its figure view
    d: dict = dict(
        view=view,
        block=sel.block,
        hide_special=bool(sel.hide_special),
        keep=float(sel.keep),
        log=bool(sel.log),
        step=None if sel.step < 0 else int(sel.step),
        query=sel.query,
        batch=sel.batch,
        rows=sel.rows,
        image_base=sel.image_base,
    )
    if sel.mode == "head":
        d.update(layer=sel.layer, head=sel.head)
        if view == "links" and heads:
            d.update(head=None, heads=sorted(int(h) for h in heads))
    else:
        d.update(agg=sel.mode, layer=None if sel.layer_hi < 0 else sel.layer_hi, layer_from=sel.layer_lo)
    if view == "overview":  # the grid shows every head of every layer
        d.update(layer=None, head=None, agg=None, layer_from=None)
    d.update(options)
    return FigureSpec(**d)


def spec_from_gui(
    kind: str,
    block: int = 0,
    layer: int = 0,
    head: int = 0,
    mode: str = "head",
    layer_range: tuple[int, int] = (0, -1),
    keep: float = 1.0,
    log: bool = False,
    hide_special: bool = False,
    step: int = -1,
    query: int | None = None,
    **options,
) -> FigureSpec:
    """:func:`spec_from_selection` from loose keywords (mode "head" or an aggregate over ``layer_range``)."""
    lo, hi = layer_range
    sel = Selection(
        block=block,
        layer=layer,
        head=head,
        mode=mode,
        layer_lo=lo,
        layer_hi=-1 if hi is None else hi,
        keep=keep,
        log=log,
        hide_special=hide_special,
        step=-1 if step is None else step,
        query=query,
    )
    return spec_from_selection(kind, sel, **options)
