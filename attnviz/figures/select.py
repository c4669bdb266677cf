"""Pick what a figure shows from an :class:`AttentionResult`: block, layer, head/aggregate, rows.

Numpy only (no matplotlib), so the GUI can use the same validation and the same numbers.
Every range problem is an :class:`AttnvizError` that names the valid range.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnviz import AttnvizError
from attnviz.core.attention import AttentionResult, Block, TokenAxis
from attnviz.core.reduce import aggregate_heads, drop_positions, rollout


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

    @property
    def what(self) -> str:
        return describe(self.block, self.layer, self.head, self.agg)

    @property
    def where(self) -> str:
        return f"{block_label(self.block)} layer {self.layer}"


def describe(block: Block, layer: int, head: int | None, agg: str | None) -> str:
    """``"head 3"``, ``"mean of 12 heads"``, ``"rollout of layers 0-5"``."""
    if head is not None:
        return f"head {head}"
    agg = agg or "mean"
    if agg == "rollout":
        return f"rollout of layers 0-{layer}"
    return f"{agg} of {block.heads_in(layer)} heads"


def head_or_aggregate(block: Block, layer: int, head: int | None, agg: str | None) -> np.ndarray:
    """``[Tq, Tk]`` for one head, a head aggregate, or attention rollout up to ``layer``."""
    if head is not None:
        return np.asarray(block.head(layer, check_head(block, layer, head)), dtype=np.float32)
    agg = agg or "mean"
    if agg == "rollout":
        tq, tk = len(block.query_axis), len(block.key_axis)
        if block.kind != "self" or tq != tk:
            raise AttnvizError(f"rollout needs square self-attention; {block.name} is {tq}x{tk}; use --agg mean|max|min")
        return rollout(np.stack([block.layer(i) for i in range(layer + 1)]))
    return aggregate_heads(block.layer(layer), agg)


def _special(axis: TokenAxis) -> np.ndarray:
    return np.asarray(axis.special, dtype=bool)


def hide(matrix: np.ndarray, q_axis: TokenAxis, k_axis: TokenAxis, rows: np.ndarray, cols: np.ndarray):
    """Drop special query rows / key columns and renormalise rows; returns the new matrix, axes and positions."""
    dq = _special(q_axis)[rows] if len(q_axis) else np.zeros(0, bool)
    dk = _special(k_axis)[cols] if len(k_axis) else np.zeros(0, bool)
    if dq.all() or dk.all():  # nothing left: keep everything rather than draw an empty map
        return matrix, rows, cols
    m = drop_positions(matrix, dq, dk, renormalize=True)
    return m, rows[~dq], cols[~dk]


def sub_axis(axis: TokenAxis, positions: np.ndarray, labels: list[str] | None = None) -> TokenAxis:
    labs = labels if labels is not None else [axis.labels[i] for i in positions]
    return TokenAxis(labs, [axis.special[i] for i in positions])


def select(
    result: AttentionResult,
    block: int | str | None = None,
    layer: int | None = None,
    head: int | None = None,
    agg: str | None = None,
    hide_special: bool = False,
    default_block: int = 0,
) -> Selection:
    """Resolve and validate block/layer/head and compute the map to draw."""
    bi, b = resolve_block(result, block, default_block)
    layer = check_layer(b, layer)
    m = head_or_aggregate(b, layer, head, agg)
    rows = np.arange(m.shape[0])
    cols = np.arange(m.shape[1])
    if hide_special:
        m, rows, cols = hide(m, b.query_axis, b.key_axis, rows, cols)
    else:
        m = m[rows][:, cols]
    return Selection(
        bi, b, layer, head, None if head is not None else (agg or "mean"), np.asarray(m, np.float32),
        sub_axis(b.query_axis, rows), sub_axis(b.key_axis, cols), rows, cols,
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
