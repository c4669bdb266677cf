"""Pick what a figure shows from an :class:`AttentionResult`: block, layer, head/aggregate, rows.

Numpy only (no matplotlib), so the GUI can use the same validation and the same numbers.
Every range problem is an :class:`AttnvizError` that names the valid range.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from attnviz import AttnvizError
from attnviz.core import view
from attnviz.core.attention import AttentionResult, Block, TokenAxis


def block_label(block: Block) -> str:
    """Short name used on the command line and in recipes: ``"encoder self"`` (``"encoder self stage 2"``)."""
    return f"{block.stack} {block.kind}" + (f" stage {block.stage}" if block.stage else "")


def _norm(name: str) -> str:
    return " ".join(name.lower().replace("-attention", "").replace("_", " ").replace("-", " ").split())


def resolve_block(result: AttentionResult, block: int | str | None, default: int = 0) -> tuple[int, Block]:
    """Return ``(index, Block)`` for an index, a name (``"decoder cross"``, ``"cross"``) or None (``default``)."""
    blocks = result.blocks()
    if not blocks:
        raise AttnvizError("this result holds no attention maps; nothing to draw", param="model")
    names = [block_label(b) for b in blocks]
    valid = ", ".join(f"{i} ({n})" for i, n in enumerate(names))
    if block is None:
        return default, blocks[default]
    if isinstance(block, (int, np.integer)) or (isinstance(block, str) and block.strip().lstrip("-").isdigit()):
        i = int(block)
        if not 0 <= i < len(blocks):
            raise AttnvizError(f"block {i} is out of range; this model has blocks {valid}", param="block")
        return i, blocks[i]
    want = _norm(str(block))
    exact = [i for i, n in enumerate(names) if n == want]
    partial = exact or [i for i, n in enumerate(names) if want in n.split() or n.startswith(want)]
    if len(partial) == 1 or (partial and exact):
        return partial[0], blocks[partial[0]]
    if partial:
        raise AttnvizError(f"block {block!r} is ambiguous; use one of {valid}", param="block")
    raise AttnvizError(f"no block {block!r}; this model has blocks {valid}", param="block")


def check_layer(block: Block, layer: int | None) -> int:
    n = block.n_layers
    if layer is None:
        return n - 1
    layer = int(layer)
    if not 0 <= layer < n:
        raise AttnvizError(f"layer {layer} is out of range; {block.name} has layers 0..{n - 1}", param="layer")
    return layer


def check_head(block: Block, layer: int, head: int) -> int:
    n = block.heads_in(layer)
    head = int(head)
    if not 0 <= head < n:
        raise AttnvizError(
            f"head {head} is out of range; {block.name} layer {layer} has heads 0..{n - 1}", param="head"
        )
    return head


def check_query(block: Block, query: int, what: str = "query") -> int:
    n = len(block.query_axis)
    query = int(query)
    if not 0 <= query < n:
        raise AttnvizError(
            f"{what} {query} is out of range; {block.name} has query positions 0..{n - 1}", param="query"
        )
    return query


@dataclass
class Selection:
    """One resolved map with its axes and a human description (``"head 3"``, ``"mean of 12 heads"``)."""

    block_index: int
    block: Block
    layer: int
    head: int | None
    agg: str | None
    matrix: np.ndarray  # [Tq, Tk] float32
    query_axis: TokenAxis
    key_axis: TokenAxis
    rows: np.ndarray  # original query positions kept (after hiding special tokens)
    cols: np.ndarray  # original key positions kept
    layer_from: int | None = None
    notes: list[str] = field(default_factory=list)  # "step 2/5", "top 90% mass" ...
    map_view: view.MapView | None = None  # what the view model computed (the screen draws the same)

    @property
    def what(self) -> str:
        return describe(self.block, self.layer, self.head, self.agg, self.layer_from)

    @property
    def layers(self) -> str:
        return layer_text(self.layer, self.head, self.agg, self.layer_from)


def layer_span(layer: int, agg: str | None, layer_from: int | None) -> tuple[int, int]:
    """Inclusive layer range an aggregate covers: rollout starts at 0, head aggregates at ``layer``."""
    if layer_from is not None:
        return layer_from, layer
    return (0, layer) if agg == "rollout" else (layer, layer)


def describe(block: Block, layer: int, head: int | None, agg: str | None, layer_from: int | None = None) -> str:
    """What a map aggregates: ``"head 3"``, ``"mean of 12 heads"``, ``"max of heads"`` (layer range), ``"rollout"``."""
    if head is not None:
        return f"head {head}"
    agg = agg or "mean"
    lo, hi = layer_span(layer, agg, layer_from)
    if agg == "rollout":
        return "rollout"
    if lo == hi:
        n = block.heads_in(layer)
        return f"{agg} of {n} head{'' if n == 1 else 's'}"
    return f"{agg} of heads"


def layer_text(layer: int, head: int | None, agg: str | None, layer_from: int | None = None) -> str:
    """``"layer 3"`` or, for aggregates over a range (and rollout), ``"layers 0-3"``."""
    if head is None:
        lo, hi = layer_span(layer, agg or "mean", layer_from)
        if lo != hi:
            return f"layers {lo}-{hi}"
    return f"layer {layer}"


def check_layer_from(block: Block, layer: int, layer_from: int | None) -> int | None:
    if layer_from is None:
        return None
    layer_from = int(layer_from)
    if not 0 <= layer_from <= layer:
        raise AttnvizError(
            f"layer range {layer_from}-{layer} is invalid; {block.name} has layers 0..{block.n_layers - 1} "
            f"and the range must run low to high",
            param="layers",
        )
    return layer_from


def check_step(result: AttentionResult, step: int | None) -> int | None:
    if step is None:
        return None
    g = len(result.generated or [])
    if g == 0:
        raise AttnvizError("a generation step needs generated words; generate some steps first", param="step")
    step = int(step)
    if not 0 <= step < g:
        raise AttnvizError(f"step {step} is out of range; {g} words were generated (steps 0..{g - 1})", param="step")
    return step


def declared_rows(result: AttentionResult) -> str:
    """The row convention the model declares for alignment (as the window uses it), else predict."""
    declared = view.declared_alignment(result)
    return declared[1] if declared else "predict"


def alignment_defaults(result: AttentionResult, spec):
    """``spec`` (a FigureSpec) for ``figure --view alignment`` as the window opens that view: with no head,
    aggregate or layer given, the model's declared alignment head; with no rows given, its declared row
    convention.  Returns (spec, a note saying what was chosen, or None when nothing was)."""
    declared = view.declared_alignment(result)
    if spec.view != "alignment" or declared is None:
        return spec, None
    (layer, head), rows = declared
    chosen: dict = {}
    if spec.rows is None:
        chosen["rows"] = rows
    unset = (spec.head, spec.heads, spec.agg, spec.layer, spec.layer_from)
    if all(v is None for v in unset):
        chosen.update(layer=layer, head=head)
    if not chosen:
        return spec, None
    what = [f"alignment head (decoder layer {layer} head {head})"] if "head" in chosen else []
    what += [f"row convention ({rows})"] if "rows" in chosen else []
    flags = " and ".join(f for f, k in (("--head/--layer/--aggregate", "head"), ("--rows", "rows")) if k in chosen)
    note = f"alignment as the window draws it: the model's declared {' and '.join(what)} ({flags} to change)"
    return type(spec)(**dict(spec.to_dict(), **chosen)), note


def core_selection(
    result: AttentionResult,
    spec,
    block: int | str | None = None,
    default_block: int = 0,
    hide_special: bool | None = None,
) -> tuple[int, Block, view.Selection]:
    """Validate ``spec`` (a FigureSpec) and translate it into the view model's :class:`~attnviz.core.view.Selection`.

    The figure and the screen then go through the same :func:`attnviz.core.view.compute_map`.
    """
    bi, b = resolve_block(result, spec.block if block is None else block, default_block)
    try:
        layer = check_layer(b, spec.layer)
    except AttnvizError as e:
        if spec.layer_from is None:
            raise
        # with a range, the layer is its top: the setting to fix is the range (--layers LO-HI), not --layer
        raise AttnvizError(str(e), param="layers") from None
    layer_from = check_layer_from(b, layer, spec.layer_from)
    step = check_step(result, spec.step)
    hs = spec.hide_special if hide_special is None else hide_special
    common = dict(
        block=bi,
        keep=float(spec.keep),
        log=bool(spec.log),
        hide_special=bool(hs),
        step=-1 if step is None else step,
        batch=int(getattr(spec, "batch", 0) or 0),
        query=spec.query,
        rows=str(getattr(spec, "rows", None) or declared_rows(result)),
        image_base=str(getattr(spec, "image_base", "grey") or "grey"),
    )
    if spec.head is not None:
        return bi, b, view.Selection(mode="head", layer=layer, head=check_head(b, layer, spec.head), **common)
    agg = spec.agg or "mean"
    lo, hi = layer_span(layer, agg, layer_from)
    return bi, b, view.Selection(mode=agg, layer=layer, layer_lo=lo, layer_hi=hi, **common)


def select(
    result: AttentionResult,
    spec,
    block: int | str | None = None,
    default_block: int = 0,
    hide_special: bool | None = None,
) -> Selection:
    """Resolve and validate block/layer/head(s)/aggregate/step from ``spec`` (a FigureSpec) and compute the map.

    ``block`` overrides ``spec.block``; ``hide_special`` overrides ``spec.hide_special``.
    """
    bi, b, sel = core_selection(result, spec, block, default_block, hide_special)
    mv = view.compute_map(result, sel)
    head = None if spec.head is None else int(spec.head)
    return Selection(
        bi,
        mv.block or b,
        sel.layer,
        head,
        None if head is not None else (spec.agg or "mean"),
        mv.matrix,
        TokenAxis(mv.q_labels, mv.q_special),
        TokenAxis(mv.k_labels, mv.k_special),
        mv.q_pos,
        mv.k_pos,
        check_layer_from(b, sel.layer, spec.layer_from),
        list(mv.notes),
        mv,
    )


def generation_rows(result: AttentionResult, block: Block) -> list[tuple[int, str]]:
    """``(query row, word)`` for each generated word: :func:`attnviz.core.view.generation_rows`."""
    return view.generation_rows(result, block)


def first_block(result: AttentionResult, kind: str | None = None, stack: str | None = None) -> int | None:
    for i, b in enumerate(result.blocks()):
        if (kind is None or b.kind == kind) and (stack is None or b.stack == stack):
            return i
    return None


def patch_block(result: AttentionResult) -> int | None:
    """First block whose keys are the image patches (vision encoder self-attention, or cross-attention to it)."""
    return next((i for i, b in enumerate(result.blocks()) if keys_are_patches(result, b)), None)


def keys_are_patches(result: AttentionResult, block: Block) -> bool:
    """The block's keys are exactly the result's patches, or (a stage of a hierarchical encoder) its stage's."""
    g = result.patch_grid
    if g is None:
        return False
    if block.stage:
        return view.block_grid(result, block) is not None
    return len(block.key_axis) == g.offset + g.n
