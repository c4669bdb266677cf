"""The window's figure in the command line's words: the :class:`FigureSpec` (a recipe's ``view``) that draws what
``render_figure(result, view, selection, style)`` draws, so File ▸ Export view can write the recipe ``attnviz figure``
writes.

:func:`spec_of` is the inverse of :func:`attnviz.figures.select.resolve` for what the window can set.  Whether the
inverse is exact is not argued field by field: :func:`recipe_figure` draws the spec as ``attnviz figure --recipe``
would and keeps it only when the bytes equal the window's figure (a recipe that draws another figure is worse than
none).  Matplotlib-free at import.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from attnviz import AttnvizError
from attnviz.core import view as vm
from attnviz.core.attention import AttentionResult
from attnviz.core.rows import pick_row
from attnviz.figures.select import block_label, layer_span, resolve, resolve_block
from attnviz.figures.spec import FigureSpec, FigureStyle

# views whose figure draws every layer of the block: a layer in the spec would draw that layer alone (only_layer)
_ALL_LAYERS = ("overview",)


def batch_row(result: AttentionResult, sel: vm.Selection) -> int | None:
    """The batch row a recipe records (``options.batch_index``: ``figure --batch-index``); None for one row."""
    return int(sel.batch) if result.batch_size > 1 else None


def _block(result: AttentionResult, sel: vm.Selection) -> int | str:
    """The block by name (a recipe that reads as the window's words), its index where the name picks another."""
    rows = pick_row(result, sel.batch) if result.batch_size > 1 else result
    name = block_label(rows.blocks()[sel.block])
    try:
        return name if resolve_block(rows, name)[0] == sel.block else int(sel.block)
    except AttnvizError:  # ambiguous
        return int(sel.block)


def spec_of(result: AttentionResult, view: str, sel: vm.Selection, style: FigureStyle | None = None) -> FigureSpec:
    """The spec ``attnviz figure`` resolves into ``sel`` (and draws in ``style``); AttnvizError when the window's
    figure holds what a recipe cannot say (a comparison's frames, switched-off heads)."""
    style = style or FigureStyle()
    if style.head_frames or style.heads_off:
        what = "a comparison's head frames" if style.head_frames else "switched-off heads"
        raise AttnvizError(f"the figure shows {what}, which a recipe cannot record")
    blocks = result.blocks(sel.batch)
    sel = vm.clamp(sel, blocks)
    block = blocks[sel.block]
    heads: dict = {"head": None, "heads": None, "agg": None, "layer": None, "layer_from": None}
    if sel.mode == "head":
        if sel.heads:
            heads.update(heads=list(sel.heads))
        else:
            heads.update(head=int(sel.head))
        heads["layer"] = int(sel.layer)
    else:
        lo, hi = vm.layer_range(sel, block.n_layers)
        heads.update(agg=sel.mode, layer=hi, layer_from=lo if (lo, hi) != layer_span(hi, sel.mode, None) else None)
    if view in _ALL_LAYERS:
        heads.update(layer=None, layer_from=None)
    return FigureSpec(
        view=view,
        block=_block(result, sel),
        **heads,
        query=None if sel.query is None else int(sel.query),
        step=None if sel.step < 0 or not result.generated else int(sel.step),  # (a step without words: all rows)
        batch=0,  # the row is picked before drawing (options.batch_index), as `figure --batch-index` does
        keep=float(sel.keep),
        log=bool(sel.log),
        hide_special=bool(sel.hide_special),
        rows=sel.rows,
        image_base=sel.image_base,
        scale=sel.scale,
        image_scale=sel.image_scale if view == "image" else None,
        kind_scale=None if sel.kind_scale or view != "overview" else False,  # (a scale chosen in the box wins)
        picture=sel.picture + 1 if sel.picture else None,
        image_from=sel.image_from if sel.image_from != vm.DEFAULT_IMAGE_FROM else None,
        frame=sel.frame + 1 if sel.frame else None,
        link_cut=sel.link_cut if view == "links" else None,
        padding=bool(sel.padding) if result.audio is not None else None,  # (a speech model's recipes say which)
        cmap=style.cmap,
        width=style.width,
        width_in=style.width_in,
        dpi=int(style.dpi),
        title=style.title,
        vmax=sel.vmax,
        font_size=float(style.font_size),
        # a zoomed-in Head map's window (the window's export draws what it shows, as --span / --key-span do)
        span=list(style.span) if style.span is not None else None,
        key_span=list(style.key_span) if style.key_span is not None else None,
    )


@dataclass(frozen=True)
class RecipeCheck:
    """A spec for the window's figure, or why there is none (``spec`` None)."""

    spec: FigureSpec | None
    why_not: str | None = None


def recipe_figure(
    result: AttentionResult, view: str, sel: vm.Selection, style: FigureStyle | None, fmt: str, data: bytes
) -> RecipeCheck:
    """The spec whose figure, drawn as ``attnviz figure --recipe`` draws it (the batch row picked first, then
    :func:`~attnviz.figures.render.render_spec`), has exactly ``data`` (the window's figure encoded as ``fmt``).

    Where ``render_spec`` would make the very call the window's figure was drawn with (one batch row, the spec
    resolving back into ``sel``, its style ``style``), the figure is that figure and is not drawn again: the second
    drawing doubled File ▸ Export's time (an overview PDF 0.3 -> 0.8 s).  Otherwise it is drawn and its bytes
    compared."""
    from attnviz.figures import figure_bytes, render_spec  # (lazily: matplotlib loads with them)

    try:
        spec = spec_of(result, view, sel, style)
        row = batch_row(result, sel)
        if row is None and same_call(result, view, sel, style, spec):
            return RecipeCheck(spec)
        drawn = render_spec(pick_row(result, row) if row is not None else result, spec)
    except AttnvizError as e:
        return RecipeCheck(None, str(e))
    if figure_bytes(drawn, fmt) != data:
        return RecipeCheck(None, "the command line cannot draw this selection exactly")
    return RecipeCheck(spec)


def same_call(
    result: AttentionResult, view: str, sel: vm.Selection, style: FigureStyle | None, spec: FigureSpec
) -> bool:
    """``render_spec(result, spec)`` is ``render_figure(result, view, sel, style)``: the same view, selection and
    style (render_spec validates the spec, resolves it and draws in its style; nothing else goes in)."""
    spec.validate()
    got = resolve(result, spec)
    if view != "links":  # the cut is the links view's alone: another view's recipe keeps none (its_spec)
        got = replace(got, link_cut=sel.link_cut)
    return spec.view == view and got == sel and spec.style == (style or FigureStyle())
