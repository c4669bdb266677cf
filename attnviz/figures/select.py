"""Pick what a figure shows from an :class:`AttentionResult`: block, layer, head/aggregate, rows.

Numpy only (no matplotlib), so the GUI can use the same validation and the same numbers.
Every range problem is an :class:`AttnvizError` that names the valid range.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from attnviz import AttnvizError
from attnviz.core.attention import AttentionResult, Block, TokenAxis
from attnviz.core.reduce import aggregate_heads, drop_positions, keep_mass, rollout


def block_label(block: Block) -> str:
    """Short name used on the command line and in recipes: ``"encoder self"``."""
    return f"{block.stack} {block.kind}"


def _norm(name: str) -> str:
    return " ".join(name.lower().replace("-attention", "").replace("_", " ").replace("-", " ").split())


def resolve_block(result: AttentionResult, block: int | str | None, default: int = 0) -> tuple[int, Block]:
    """Return ``(index, Block)`` for an index, a name (``"decoder cross"``, ``"cross"``) or None (``default``)."""
    blocks = result.blocks()
    if not blocks:
        raise AttnvizError("this result holds no attention maps; nothing to draw")
    names = [block_label(b) for b in blocks]
    valid = ", ".join(f"{i} ({n})" for i, n in enumerate(names))
    if block is None:
        return default, blocks[default]
    if isinstance(block, (int, np.integer)) or (isinstance(block, str) and block.strip().lstrip("-").isdigit()):
        i = int(block)
        if not 0 <= i < len(blocks):
            raise AttnvizError(f"block {i} is out of range; this model has blocks {valid}")
        return i, blocks[i]
    want = _norm(str(block))
    exact = [i for i, n in enumerate(names) if n == want]
    partial = exact or [i for i, n in enumerate(names) if want in n.split() or n.startswith(want)]
    if len(partial) == 1 or (partial and exact):
        return partial[0], blocks[partial[0]]
    if partial:
        raise AttnvizError(f"block {block!r} is ambiguous; use one of {valid}")
    raise AttnvizError(f"no block {block!r}; this model has blocks {valid}")


def check_layer(block: Block, layer: int | None) -> int:
    n = block.n_layers
    if layer is None:
        return n - 1
    layer = int(layer)
    if not 0 <= layer < n:
        raise AttnvizError(f"layer {layer} is out of range; {block.name} has layers 0..{n - 1}")
    return layer


def check_head(block: Block, layer: int, head: int) -> int:
    n = block.heads_in(layer)
    head = int(head)
    if not 0 <= head < n:
        raise AttnvizError(f"head {head} is out of range; {block.name} layer {layer} has heads 0..{n - 1}")
    return head


def check_query(block: Block, query: int, what: str = "query") -> int:
    n = len(block.query_axis)
    query = int(query)
    if not 0 <= query < n:
        raise AttnvizError(f"{what} {query} is out of range; {block.name} has query positions 0..{n - 1}")
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
        raise AttnvizError(f"layer range {layer_from}-{layer} is invalid; {block.name} has layers 0..{block.n_layers - 1} "
                           f"and the range must run low to high")
    return layer_from


def head_or_aggregate(block: Block, layer: int, head: int | None, agg: str | None,
                      layer_from: int | None = None) -> np.ndarray:
    """``[Tq, Tk]`` for one head, a head aggregate (over one layer or a layer range), or attention rollout."""
    if head is not None:
        return np.asarray(block.head(layer, check_head(block, layer, head)), dtype=np.float32)
    agg = agg or "mean"
    lo, hi = layer_span(layer, agg, check_layer_from(block, layer, layer_from))
    if agg == "rollout":
        tq, tk = len(block.query_axis), len(block.key_axis)
        if block.kind != "self" or tq != tk:
            raise AttnvizError(f"rollout needs square self-attention; {block.name} is {tq}x{tk}; use --agg mean|max|min")
        return rollout(np.stack([block.layer(i) for i in range(lo, hi + 1)]))
    return aggregate_heads(np.concatenate([block.layer(i) for i in range(lo, hi + 1)], axis=0), agg)


def _special(axis: TokenAxis) -> np.ndarray:
    return np.asarray(axis.special, dtype=bool)


def hide(matrix: np.ndarray, q_axis: TokenAxis, k_axis: TokenAxis, rows: np.ndarray, cols: np.ndarray):
    """Drop special query rows / key columns and renormalise rows.

    ``matrix`` is indexed by ``rows``/``cols`` (original positions); returns the new matrix and positions.
    """
    dq = _special(q_axis)[rows] if len(q_axis) else np.zeros(0, bool)
    dk = _special(k_axis)[cols] if len(k_axis) else np.zeros(0, bool)
    if dq.all() or dk.all():  # nothing left: keep everything rather than draw an empty map
        return matrix, rows, cols
    m = drop_positions(matrix, dq, dk, renormalize=True)
    return m, rows[~dq], cols[~dk]


def sub_axis(axis: TokenAxis, positions: np.ndarray, labels: list[str] | None = None) -> TokenAxis:
    labs = labels if labels is not None else [axis.labels[i] for i in positions]
    return TokenAxis(labs, [axis.special[i] for i in positions])


def check_step(result: AttentionResult, step: int | None) -> int | None:
    if step is None:
        return None
    g = len(result.generated or [])
    if g == 0:
        raise AttnvizError("--step needs generated words; run with --generate N")
    step = int(step)
    if not 0 <= step < g:
        raise AttnvizError(f"step {step} is out of range; {g} words were generated (steps 0..{g - 1})")
    return step


def step_positions(result: AttentionResult, block: Block, step: int | None) -> int | None:
    """Decoder positions that existed when generated word ``step`` was chosen (None: all, or not a decoder block)."""
    if step is None or block.stack != "decoder" or not result.generated:
        return None
    rows = generation_rows(result, block)
    return min(len(block.query_axis), rows[min(step, len(rows) - 1)][0] + 1)


def select(result: AttentionResult, spec, block: int | str | None = None, default_block: int = 0,
           hide_special: bool | None = None) -> Selection:
    """Resolve and validate block/layer/head(s)/aggregate/step from ``spec`` (a FigureSpec) and compute the map.

    ``block`` overrides ``spec.block``; ``hide_special`` overrides ``spec.hide_special``.
    Order: aggregate -> generation step -> hide special tokens -> keep the top mass per row.
    """
    bi, b = resolve_block(result, spec.block if block is None else block, default_block)
    layer = check_layer(b, spec.layer)
    layer_from = check_layer_from(b, layer, spec.layer_from)
    step = check_step(result, spec.step)
    m = head_or_aggregate(b, layer, spec.head, spec.agg, layer_from)
    rows = np.arange(m.shape[0])
    cols = np.arange(m.shape[1])
    notes = []
    n = step_positions(result, b, step)
    if n is not None:
        rows = rows[:n]
        if b.kind == "self":
            cols = cols[:n]
        m = m[np.ix_(rows, cols)]
        notes.append(f"step {step + 1}/{len(result.generated)}")
    if spec.hide_special if hide_special is None else hide_special:
        m, rows, cols = hide(m, b.query_axis, b.key_axis, rows, cols)
    if spec.keep is not None and spec.keep < 1.0:
        m = keep_mass(m, spec.keep)
        notes.append(f"top {round(spec.keep * 100)}% mass")
    head = None if spec.head is None else int(spec.head)
    return Selection(
        bi, b, layer, head, None if head is not None else (spec.agg or "mean"), np.asarray(m, np.float32),
        sub_axis(b.query_axis, rows), sub_axis(b.key_axis, cols), rows, cols, layer_from, notes,
    )


def generation_rows(result: AttentionResult, block: Block) -> list[tuple[int, str]]:
    """``(query row, word)`` for each generated word of a decoder block.

    The word produced at decoding step k comes out of the query at position ``prompt_len - 1 + k``
    (the position holding the previous token).  Without generated words every query row is
    returned with its own label (teacher forcing).
    """
    tq = len(block.query_axis)
    p = int(result.prompt_len or 0)
    gen = list(result.generated or [])
    if block.stack == "decoder" and gen and p >= 1:
        rows = [(p - 1 + k, w) for k, w in enumerate(gen) if p - 1 + k < tq]
        if rows:
            return rows
    return [(i, block.query_axis.labels[i]) for i in range(tq)]


def first_block(result: AttentionResult, kind: str | None = None, stack: str | None = None) -> int | None:
    for i, b in enumerate(result.blocks()):
        if (kind is None or b.kind == kind) and (stack is None or b.stack == stack):
            return i
    return None


def patch_block(result: AttentionResult) -> int | None:
    """First block whose keys are the image patches (vision encoder self-attention, or cross-attention to it)."""
    g = result.patch_grid
    if g is None:
        return None
    for i, b in enumerate(result.blocks()):
        if len(b.key_axis) == g.offset + g.n:
            return i
    return None


def keys_are_patches(result: AttentionResult, block: Block) -> bool:
    g = result.patch_grid
    return g is not None and len(block.key_axis) == g.offset + g.n
