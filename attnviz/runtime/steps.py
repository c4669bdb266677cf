"""The greedy loop through a decoder's KV cache, run where the session lives.

A cached generation step is small (one new token's query row against the cache), so with the crash-isolation
child (:mod:`attnviz.runtime.host`) a step per request spent most of its time on the round trip: the parent
wrote the cache out and read it back every token (issue 26: 2.3–2.9× a plain onnxruntime loop per token).
Here the whole loop runs next to the session instead: the cache stays where onnxruntime wrote it, the next
token is chosen there, each step's attention rows are kept, and the caller gets one reply per *chunk* of steps
(a chunk ends after :data:`CHUNK_S` seconds, so progress and cancellation still reach the caller).

Imported by the child (``worker.py``, which must not import onnx or the engine) and by the in-process path
alike, so it imports numpy and :mod:`attnviz.runtime.isolation`'s neighbours only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

CHUNK_S = 0.25  # a chunk's length: the caller checks cancellation and reports progress between chunks


@dataclass(frozen=True)
class StepPlan:
    """How one step's feeds follow from the last one's, by input name (worked out by the caller from the
    model's input roles, so the loop itself knows nothing of roles)."""

    fetch: tuple[str, ...]  # every output a step fetches
    logits: str  # the output whose last row is argmax-ed
    carry: tuple[tuple[str, str], ...]  # (past input, the present output that feeds it next step)
    token: str  # the input the chosen token goes into, as [[id]]
    grow: tuple[str, ...] = ()  # masks that gain a column of ones per step
    positions: tuple[str, ...] = ()  # [*position_lead, B, 1]: the new token's position
    # leading axes of ``positions`` holding the same position on each (Qwen2-VL's M-RoPE [3, B, 1]: a text token's
    # temporal, row and column positions are equal)
    position_lead: tuple[int, ...] = ()
    cache_position: tuple[str, ...] = ()  # [1]: the same, as optimum's cache_position
    flags: tuple[tuple[str, int], ...] = ()  # (bool input, rank <= 1) set true: a merged decoder's use_cache_branch
    maps: tuple[tuple[str, float], ...] = ()  # map outputs and what pads the keys a row could not see yet
    dtypes: tuple[tuple[str, str], ...] = ()  # the dtype of each input the loop writes
    suppress: tuple[int, ...] = ()  # token ids never chosen (a Whisper config's suppress_tokens)
    # (input, output, id dtype) of an embedding model the token goes through first, its output fed to ``token``
    # (a vision-language decoder takes inputs_embeds: the Hub's embed_tokens.onnx runs beside it, see Loop.embed)
    embed: tuple[str, str, str] | None = None


@dataclass
class Loop:
    """A generation in progress: the next step's feeds (the cache included) and the cache's length."""

    plan: StepPlan
    feeds: dict[str, np.ndarray]
    length: int
    embed: Callable[[list[str], dict[str, np.ndarray]], list[np.ndarray]] | None = None  # the embedder's run


@dataclass
class Chunk:
    """Steps run in one go: the chosen ids (the EOS included when reached), and per map output the steps' rows
    stacked on the query axis, keys padded to the last step's length."""

    ids: list[int]
    maps: dict[str, np.ndarray] = field(default_factory=dict)
    finished: bool = False  # EOS reached


def stack_rows(parts: list[np.ndarray], pad: float) -> np.ndarray:
    """``[..., q_i, k_i]`` parts -> ``[..., sum q_i, max k_i]``: each part's rows in turn, its missing keys
    ``pad`` (0 for probabilities: a key a row could not see has weight 0; -inf for scores a softmax follows).
    Parts that are all empty (an ``If`` branch that did not run) give the first of them."""
    if all(p.size == 0 for p in parts):
        return parts[0]
    if len(parts) == 1:
        return parts[0]
    lead = parts[0].shape[:-2]
    if any(p.shape[:-2] != lead for p in parts):
        raise ValueError(f"step maps changed shape mid-generation: {[p.shape for p in parts]}")
    tq = sum(p.shape[-2] for p in parts)
    tk = max(p.shape[-1] for p in parts)
    out = np.full((*lead, tq, tk), pad, np.float32)
    r = 0
    for p in parts:
        out[..., r : r + p.shape[-2], : p.shape[-1]] = p
        r += p.shape[-2]
    return out


_EXACT_IN_FLOAT32 = (np.dtype(np.float32), np.dtype(np.float16))  # rows the suppressed copy below holds unchanged


def greedy(row: np.ndarray, suppress: tuple[int, ...] = ()) -> int:
    """The most likely token of one logits row, never one of ``suppress`` (as transformers'
    SuppressTokensLogitsProcessor sets their scores to -inf)."""
    row = np.asarray(row)
    if suppress and row.dtype in _EXACT_IN_FLOAT32:
        # the unsuppressed row's first maximum, when it is no suppressed id, is also the suppressed row's (the
        # others only fall to -inf; a NaN first is found either way): no copy of a Whisper vocabulary's row
        # (51,865 scores) and no scatter each step
        best = int(np.argmax(row))
        if best not in suppress:
            return best
    if suppress:
        row = np.array(row, np.float32)
        row[[t for t in suppress if 0 <= t < row.shape[-1]]] = -np.inf
    return int(np.argmax(row))


def advance(
    loop: Loop,
    token: int,
    steps: int,
    eos: int | None,
    run: Callable[[list[str], dict[str, np.ndarray]], list[np.ndarray]],
    budget_s: float = CHUNK_S,
) -> Chunk:
    """Feed ``token``, choose the next greedily, and so on for up to ``steps`` steps or ``budget_s`` seconds
    (at least one step), stopping after EOS.  ``run(names, feeds)`` is the session's run."""
    plan = loop.plan
    dtypes = dict(plan.dtypes)
    fetch = list(plan.fetch)
    at = {n: i for i, n in enumerate(fetch)}
    rows: dict[str, list[np.ndarray]] = {n: [] for n, _ in plan.maps}
    f = loop.feeds
    ids: list[int] = []
    finished = False
    t0 = time.perf_counter()
    while len(ids) < steps:
        b = 1
        if plan.embed is not None:  # the token's embedding, from the embedding session beside this one
            if loop.embed is None:
                raise ValueError("a step plan through an embedding model needs the embedding session")
            e_in, e_out, e_dtype = plan.embed
            vec = loop.embed([e_out], {e_in: np.full((b, 1), token, e_dtype)})[0]
            f[plan.token] = np.asarray(vec, dtypes.get(plan.token, "float32"))
        else:
            f[plan.token] = np.full((b, 1), token, dtypes.get(plan.token, "int64"))
        for n in plan.grow:
            f[n] = np.concatenate([f[n], np.ones((f[n].shape[0], 1), f[n].dtype)], axis=1)
        for n in plan.positions:
            f[n] = np.full((*plan.position_lead, b, 1), loop.length, dtypes.get(n, "int64"))
        for n in plan.cache_position:
            f[n] = np.asarray([loop.length], dtypes.get(n, "int64"))
        for n, rank in plan.flags:
            f[n] = np.ones((1,) * rank, bool)
        out = run(fetch, f)
        loop.length += 1
        for past, present in plan.carry:
            new = out[at[present]]
            old = f[past]
            # the encoder half of a merged decoder's cache comes back as an empty placeholder: it stays as it was
            if new.shape[0] == old.shape[0] and new.shape[-2] >= old.shape[-2]:
                f[past] = new
        for n in rows:
            rows[n].append(np.asarray(out[at[n]], np.float32))
        logits = out[at[plan.logits]]
        token = greedy(logits[0, -1] if logits.ndim == 3 else logits[0], plan.suppress)
        ids.append(token)
        if eos is not None and token == int(eos):
            finished = True
            break
        if time.perf_counter() - t0 > budget_s:
            break
    pads = dict(plan.maps)
    return Chunk(ids, {n: stack_rows(parts, pads[n]) for n, parts in rows.items() if parts}, finished)
