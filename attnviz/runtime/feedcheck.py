"""A model's feeds checked before a run: every input present, numeric, of the declared rank and fixed sizes, cast
to the input's dtype only where that keeps its values, no NaN, token ids inside the embedding table they index;
each refusal one line naming the input and the fix."""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from attnviz import AttnvizError
from attnviz.core.words import dtype_words
from attnviz.runtime import graph as gr
from attnviz.runtime.inputs import IOInfo

# a signed id dtype (native byte order) -> the unsigned one of its size, and its own largest value
_UNSIGNED = {
    np.dtype(t): (np.dtype(u), int(np.iinfo(t).max))
    for t, u in ((np.int8, np.uint8), (np.int16, np.uint16), (np.int32, np.uint32), (np.int64, np.uint64))
}
CASTABLE = ("float32", "float16", "float64", "int64", "int32", "bool", "uint8", "int8")


def cast_feed(name: str, i: IOInfo, a: np.ndarray, cast_to: np.dtype) -> np.ndarray:
    """A feed cast to the input's dtype, refused where the cast would change its values."""
    if cast_to.kind in "iu" and a.dtype.kind == "f":
        if not np.all(np.isfinite(a)) or not np.all(a == np.round(a)):
            raise AttnvizError(
                f"input {name!r} takes whole numbers ({i.dtype}) and the feeds give {dtype_words(a.dtype)} with "
                "fractions, NaN or Inf; save whole numbers"
            )
    if cast_to.kind == "f" and a.dtype.kind not in "fiub":
        raise AttnvizError(f"input {name!r} takes numbers ({i.dtype}), not {dtype_words(a.dtype)}; save numbers")
    if cast_to.kind in "iu" and a.dtype.kind in "iu" and a.size:  # a cast would wrap (uint64 2⁶⁴-1 -> -1)
        lo, hi = np.iinfo(cast_to).min, np.iinfo(cast_to).max
        if int(a.min()) < lo or int(a.max()) > hi:
            raise AttnvizError(
                f"input {name!r} holds {dtype_words(a.dtype)} outside {i.dtype}'s range ({lo:,} to {hi:,}); save "
                "values within it"
            )
    return a.astype(cast_to)


def check_values(name: str, a: np.ndarray, vocab: int | None) -> None:
    """NaN never is a legal feed (±inf is, as an additive mask); token ids must index the embedding table."""
    if a.dtype.kind == "f" and np.isnan(a).any():
        raise AttnvizError(f"input {name!r} contains NaN values; every map would be NaN — fix the inputs")
    if vocab is None or a.dtype.kind not in "iu" or a.size == 0:
        return
    unsigned = _UNSIGNED.get(a.dtype)
    if unsigned is not None and vocab <= unsigned[1]:
        # one pass, not a max and a min (a run's feeds are checked before each run): seen as unsigned, a negative
        # id is 2**(bits-1) or more, above this vocabulary's last id
        bad_ids = int(a.view(unsigned[0]).max()) >= vocab
    else:
        bad_ids = int(a.max()) >= vocab or int(a.min()) < 0
    if bad_ids:  # a negative id is no token: Gather would wrap it to the end of the vocabulary
        bad = a[(a >= vocab) | (a < 0)]
        raise AttnvizError(
            f"token id {int(bad.flat[0])} in input {name!r} is out of range: the model's vocabulary has {vocab} "
            f"entries, ids 0 to {vocab - 1}"
        )


def feed_plan(inputs: list[IOInfo], graph: gr.Graph) -> dict[str, tuple]:
    """Per input, what :func:`check_feeds` checks: the IOInfo, its fixed axes, the dtype feeds are cast to, and
    the vocabulary size of every embedding table it indexes (token ids beyond it crash inside onnxruntime)."""
    plan = {}
    for i in inputs:
        fixed = [(ax, want) for ax, want in enumerate(i.shape) if isinstance(want, int) and want > 0]
        cast_to = np.dtype(i.dtype) if i.dtype in CASTABLE else None
        vocab = []
        for ci, j in graph.consumers.get(i.name, []):
            n = graph.nodes[ci]
            if n.op_type == "Gather" and j == 1:
                table = graph.initializers.get(n.input[0])
                if table is not None and table.dims:
                    vocab.append(int(table.dims[0]))
        plan[i.name] = (i, fixed, cast_to, min(vocab) if vocab else None)
    return plan


def check_feeds(
    plan: dict[str, tuple], feeds: dict[str, np.ndarray], made: Collection[str] = ()
) -> dict[str, np.ndarray]:
    """The feeds checked against a :func:`feed_plan` (and cast where the input's dtype differs); ``made``: inputs
    left out here (checked where they are made)."""
    for k in feeds:
        if k not in plan:
            raise AttnvizError(f"unknown input {k!r}; the model's inputs are: {', '.join(sorted(plan))}")
    out = {}
    for name, (i, fixed, cast_to, vocab) in plan.items():
        if name in made:
            continue
        if name not in feeds:
            raise AttnvizError(f"missing input {name!r} ({i.describe()}); add it to the feeds")
        a = np.asarray(feeds[name])
        if a.dtype.kind not in "biuf":
            raise AttnvizError(f"input {name!r} holds {dtype_words(a.dtype)}; feeds must be numbers ({i.describe()})")
        if a.ndim != i.rank:
            raise AttnvizError(f"input {name!r} expects rank {i.rank} {i.describe()}, got shape {tuple(a.shape)}")
        for ax, want in fixed:
            if want != a.shape[ax]:
                raise AttnvizError(
                    f"input {name!r} expects size {want} on axis {ax} ({i.describe()}), got shape {tuple(a.shape)}"
                )
        if cast_to is not None and a.dtype != cast_to:
            a = cast_feed(name, i, a, cast_to)
        check_values(name, a, vocab)
        out[name] = a
    return out
