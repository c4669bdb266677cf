"""The greedy loop through a decoder's KV cache, run where the session lives.

A cached generation step is small (one new token's query row against the cache), so with the crash-isolation
child (:mod:`attnviz.runtime.host`) a step per request spent most of its time on the round trip: the parent
wrote the cache out and read it back every token (issue 26: 2.3–2.9× a plain onnxruntime loop per token).
Here the whole loop runs next to the session instead: the cache stays where onnxruntime wrote it, the next
token is chosen there, each step's attention rows are kept, and the caller gets one reply per *chunk* of steps
(a chunk ends after :data:`CHUNK_S` seconds, so progress and cancellation still reach the caller).  The rows go
straight into one array per map output for the whole generation (:class:`Rows`: in the child a shared slot), which
the generation's last reply alone names.

Where the session runs on CUDA the cache also stays on the device between steps (:class:`DeviceRun`: IO binding,
the ``present.*`` outputs left in onnxruntime's device memory and bound as the next step's past inputs); only what
the loop reads comes to the host (the logits' row, the map rows).  Fed as numpy arrays, every step copied the whole
cache device->host and back, a cost that grows with the cache (issue 26's H100 rows: 1.07x a plain IO-binding loop
at 64 tokens, 2.19x at 1,024).

Imported by the child (``worker.py``, which must not import onnx or the engine) and by the in-process path
alike, so it imports numpy and :mod:`attnviz.runtime.isolation`'s neighbours only (onnxruntime where a loop binds).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnviz import AttnvizError
from attnviz.runtime.isolation import loop_run

CHUNK_S = 0.25  # a chunk's length: the caller checks cancellation and reports progress between chunks
BINDING_ENV = "ATTNVIZ_LOOP_BINDING"  # auto (bind on CUDA) | on (bind on CPU too) | off (numpy feeds everywhere)
_BINDINGS = ("auto", "on", "off")


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
    # where the cache stays between steps: "" numpy feeds (each step's presents come back as arrays and go in
    # again), else IO binding's device, "cpu" or "cuda" (see loop_device: the caller, which knows the provider)
    device: str = ""
    # query rows each map's array keeps ahead of the loop's own (:class:`Rows`), for the prompt's: the generation's
    # map is then that array, the prompt's rows written into it (generate.MapAssembler), not a copy of both
    reserve: int = 0


def loop_device(provider: str, binding: str | None = None) -> str:
    """:attr:`StepPlan.device` for a session whose first provider is ``provider``: CUDA binds (the cache stays on
    the GPU); CPU feeds numpy arrays, as a plain loop does (bit for bit the loop's CPU path of before).
    ``binding`` (default: the ``ATTNVIZ_LOOP_BINDING`` environment variable, else "auto"): "on" binds on CPU
    too ("cpu" OrtValues through the same code: how the tests run the CUDA path's code without a GPU), "off"
    feeds numpy arrays on CUDA too (what ``bench/gen_iobind_check.py`` compares against)."""
    mode = binding if binding is not None else os.environ.get(BINDING_ENV, "auto") or "auto"
    if mode not in _BINDINGS:
        raise AttnvizError(f"{BINDING_ENV}={mode!r} is not a loop binding; use one of {', '.join(_BINDINGS)}")
    if mode == "off":
        return ""
    if provider == "CUDAExecutionProvider":
        return "cuda"
    return "cpu" if mode == "on" else ""


class DeviceRun:
    """A step's run through IO binding, with :func:`~attnviz.runtime.isolation.loop_run`'s call signature: the
    carried presents come back as OrtValues where onnxruntime wrote them (``plan.device``), which :func:`advance`
    feeds to the next step as they are; the logits and the maps come back as numpy arrays (bound to host memory);
    other outputs the plan fetches are not computed (None: the loop reads none of them).

    On a device other than the CPU every feed that no step rewrites (the prompt's cache, an encoder's states and
    mask) goes there once: replaced in the loop's feeds by its device copy, so that later steps and chunks bind
    it without a copy.  On the CPU the arrays are bound in place, as the numpy run reads them (a feed still lent
    by the parent is copied by the child at the chunk's end as before: ``worker.Server._chunk``).  A new binding
    each step: a binding reused would write the next step's presents into the buffers it fed as the past."""

    def __init__(self, sess, plan: StepPlan, move: bool | None = None):
        from onnxruntime import OrtValue  # the child imports onnxruntime anyway; the numpy path does not need it

        self._ortvalue = OrtValue
        self.sess = sess
        self.device = plan.device
        # feeds no step rewrites go to the device once (``move``: True off the CPU; a test sets it on the CPU to
        # run those lines without a GPU)
        self.move = self.device != "cpu" if move is None else move
        self.device_id = 0
        if self.device == "cuda":  # the session's own GPU
            opts = sess.get_provider_options().get("CUDAExecutionProvider", {})
            self.device_id = int(opts.get("device_id", 0) or 0)
        self.keep = frozenset(p for _, p in plan.carry)
        self.host = frozenset((plan.logits, *(n for n, _ in plan.maps)))
        self.fresh = frozenset(
            (plan.token, *plan.grow, *plan.positions, *plan.cache_position, *(n for n, _ in plan.flags))
        )

    def __call__(self, names: list[str], feeds: dict) -> list:
        io = self.sess.io_binding()
        for k, v in feeds.items():
            if isinstance(v, self._ortvalue):
                io.bind_ortvalue_input(k, v)
            elif self.move and k not in self.fresh:  # once: the loop keeps the device copy
                v = feeds[k] = self._ortvalue.ortvalue_from_numpy(_c_order(v), self.device, self.device_id)
                io.bind_ortvalue_input(k, v)
            else:
                io.bind_cpu_input(k, _c_order(v))  # the binding holds the array until it is dropped
        wanted = [n for n in names if n in self.keep or n in self.host]
        for n in wanted:
            if n in self.keep:
                io.bind_output(n, self.device, self.device_id)
            else:
                io.bind_output(n, "cpu", 0)
        self.sess.run_with_iobinding(io)
        got = dict(zip(wanted, io.get_outputs()))
        return [None if n not in got else got[n] if n in self.keep else got[n].numpy() for n in names]


def _c_order(v) -> np.ndarray:
    """``v`` as a C-ordered array, itself where it is one (bound in place); rank 0 stays rank 0 (unlike
    ``np.ascontiguousarray``, which makes it [1])."""
    if type(v) is np.ndarray and v.flags.c_contiguous:  # every array the loop writes: no np.require (~2 us)
        return v
    return np.require(v, requirements="C")


def step_run(sess, plan: StepPlan) -> Callable[[list[str], dict], list]:
    """The run :func:`advance` steps ``sess`` with: numpy feeds (:func:`~attnviz.runtime.isolation.loop_run`) or
    IO binding with the cache kept on ``plan.device`` (:class:`DeviceRun`)."""
    return DeviceRun(sess, plan) if plan.device else loop_run(sess)


def _dims(x) -> tuple:
    """A cache tensor's shape: a numpy array's, or an OrtValue's (a method there)."""
    shape = x.shape
    return tuple(shape()) if callable(shape) else shape


def _fresh(shape: tuple[int, ...]) -> tuple[np.ndarray, None]:
    return np.empty(shape, np.float32), None


class Rows:
    """A generation's map rows, each step's written once, straight into the array the generation's map will be
    read from: per map output one ``[*lead, q * total, keys]`` array, made at the output's first row for the
    whole generation (``total`` steps; a step's row sees one key more than the last: keys = the first row's +
    total - 1), each row followed by the pad on the keys it could not see yet (0 for probabilities, -inf for
    scores a softmax follows), as :func:`stack_rows` pads them.

    ``make(shape)`` gives the array and a token for it (the child: a slot of its shared memory, so that the
    generation's last reply names the slot instead of a stacked copy per chunk going through a slot and the
    parent assembling the copies; issue 26's CUDA rows: 0.3-0.7 ms a token over the in-process loop); ``drop(token)``
    gives one back that no reply will name (an output whose rows stopped fitting, a generation cancelled or
    failed: :meth:`close`).  An output whose rows do not fit one array (its lead shape or row count changes, more
    keys than foreseen, an empty map from an ``If`` branch that did not run) keeps its rows as a list of parts from
    then on, stacked at the end as before.

    The whole generation's rows are made at once while all outputs' arrays fit :data:`UPFRONT_BYTES` (issue 26's
    GPT-2 at 1,024 tokens: 4 x 34 MB); beyond it an array starts with the rows that fit its share, and the keys
    those rows' steps see, and doubles when full (the rows so far copied over), so that a long generation stopped
    early by EOS does not hold, nor fault in, memory for the steps it never ran.

    ``reserve`` (:attr:`StepPlan.reserve`): query rows every output's map keeps ahead of the steps' rows, the pad
    until the prompt's rows are written there (:class:`~attnviz.runtime.generate.MapAssembler`), so that the
    generation's map is this array rather than a new one holding a copy of both (Whisper-large's cross maps: 1.6
    GB of copy at 448 tokens); every map :meth:`maps` gives starts with them."""

    UPFRONT_BYTES = 256 << 20

    def __init__(
        self,
        pads: dict[str, float],
        total: int,
        make: Callable[[tuple[int, ...]], tuple[np.ndarray, Any]] = _fresh,
        drop: Callable[[Any], None] | None = None,
        reserve: int = 0,
    ):
        self.pads = pads
        self.total = max(1, int(total))
        self.make, self.drop = make, drop
        self.reserve = max(0, int(reserve))
        self.arrays: dict[str, np.ndarray] = {}
        self.tokens: dict[str, object] = {}
        # per array [rows written (the reserved ones included), the most keys a row saw, the rows' lead shape, the
        # first row's keys, rows a step]: one lookup a row on the way that runs every step (~3 us a map output,
        # where two slice writes a row and the checks cost ~20)
        self.used: dict[str, list] = {}
        self.parts: dict[str, list[np.ndarray]] = {}
        self.bare: set[str] = set()  # outputs whose parts never had an array: no reserved rows among them
        self.steps = 0  # steps whose rows were added

    def add(self, name: str, row: np.ndarray) -> None:
        u = self.used.get(name)
        if u is not None and row.ndim >= 2:
            a = self.arrays[name]
            r, k, lead = u[0], u[1], u[2]
            q, n = row.shape[-2:]
            if row.shape[:-2] == lead and r + q <= a.shape[-2] and n <= a.shape[-1] and row.size:
                a[..., r : r + q, :n] = row  # the keys past n hold the pad already (_new)
                u[0] = r + q
                if n > k:
                    u[1] = n
                return
        self._add(name, row)

    def _add(self, name: str, row: np.ndarray) -> None:
        """:meth:`add` off its common way: an output's first row, an array outgrown, a row that does not fit."""
        if name in self.parts:
            self.parts[name].append(row)
            return
        q, n = row.shape[-2:] if row.ndim >= 2 else (0, 0)
        if name not in self.arrays and row.ndim >= 2 and row.size:
            share = self.UPFRONT_BYTES // max(1, len(self.pads))  # bytes a row of this output takes, below
            fit = share // max(1, math.prod(row.shape[:-2]) * (n + self.total - 1) * 4) // max(1, q) * q
            self.used[name] = [self.reserve, 0, row.shape[:-2], n, q]
            self._new(name, min(q * self.total, max(q, fit)))
            self.add(name, row)
            return
        a = self.arrays.get(name)
        r, k, lead = self.used[name][:3] if a is not None else (0, 0, ())
        if a is not None and row.size and row.shape[:-2] == lead and a.shape[-2] - self.reserve < q * self.total:
            had = a.shape[-2] - self.reserve  # the steps' rows it had room for
            self._grow(name, min(q * self.total, max(r - self.reserve + q, 2 * had)))  # more than it had
            if r + q <= self.arrays[name].shape[-2] and n <= self.arrays[name].shape[-1]:
                self.add(name, row)
                return
            a = self.arrays[name]
        # lead shape or row count changed, more keys or steps than foreseen, an empty map: parts from here, as before
        # (the first of them the array's rows so far: the reserved ones included)
        self.parts[name] = ([a[..., :r, :k].copy()] if a is not None and r else []) + [row]
        if a is None:
            self.bare.add(name)
        self._forget(name)

    def _new(self, name: str, rows: int) -> np.ndarray:
        """``name``'s array for the reserved rows and ``rows`` rows of steps, and the keys their last step sees (one
        more a step than the first row's), every key the pad at first (a slot reused from an earlier run holds its
        old bytes): a row then writes only its own keys."""
        _, _, lead, first, q = self.used[name]
        a, self.tokens[name] = self.make((*lead, self.reserve + rows, first + rows // q - 1))
        a[...] = self.pads[name]
        self.arrays[name] = a
        return a

    def _grow(self, name: str, rows: int) -> None:
        """``name``'s array made anew with room for ``rows`` rows of steps, the rows so far copied over, the old one
        dropped."""
        old, token = self.arrays[name], self.tokens[name]
        r = self.used[name][0]
        a = self._new(name, rows)
        a[..., :r, : old.shape[-1]] = old[..., :r, :]
        del old
        if token is not None and self.drop is not None:
            self.drop(token)

    def maps(self) -> dict[str, np.ndarray]:
        """Every output's rows so far, after the reserved ones: ``[*lead, rows, keys]`` (a view of its array), or
        its parts stacked."""
        out = {}
        for name in (*self.arrays, *self.parts):
            if name in self.arrays:
                r, k = self.used[name][:2]
                out[name] = self.arrays[name][..., :r, :k]
            else:
                a = stack_rows(self.parts[name], self.pads[name])
                if name in self.bare and self.reserve and a.ndim >= 2:  # rows that never had an array: reserve too
                    a = stack_rows([np.zeros((*a.shape[:-2], self.reserve, 0), np.float32), a], self.pads[name])
                out[name] = a
        return out

    def close(self) -> None:
        """Give back every array no reply named (the generation was cancelled, failed or replaced)."""
        for name in list(self.arrays):
            self._forget(name)

    def _forget(self, name: str) -> None:
        self.arrays.pop(name, None)
        self.used.pop(name, None)
        token = self.tokens.pop(name, None)
        if token is not None and self.drop is not None:
            self.drop(token)


@dataclass
class Loop:
    """A generation in progress: the next step's feeds (the cache included) and the cache's length; ``rows``:
    where its steps' map rows go for the whole generation (None: each chunk stacks its own, :func:`advance`)."""

    plan: StepPlan
    feeds: dict[str, np.ndarray]  # a bound loop's (plan.device) carried cache and moved feeds: OrtValues
    length: int
    embed: Callable[[list[str], dict[str, np.ndarray]], list[np.ndarray]] | None = None  # the embedder's run
    rows: Rows | None = None


@dataclass
class Chunk:
    """Steps run in one go: the chosen ids (the EOS included when reached), and per map output the rows stacked
    on the query axis, keys padded to the last step's length: this chunk's, or with :attr:`Loop.rows` the whole
    generation's, given by its last chunk alone (the chunks before it: none)."""

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
    (at least one step), stopping after EOS.  ``run(names, feeds)`` is the session's run (:func:`step_run`): the
    carried presents it returns may be OrtValues, which stay in the feeds as they are."""
    plan = loop.plan
    dtypes = dict(plan.dtypes)
    fetch = list(plan.fetch)
    at = {n: i for i, n in enumerate(fetch)}
    rows = loop.rows if loop.rows is not None else Rows(dict(plan.maps), steps)
    names = [n for n, _ in plan.maps]
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
            have, got = _dims(f[past]), _dims(new)
            # the encoder half of a merged decoder's cache comes back as an empty placeholder: it stays as it was
            if got[0] == have[0] and got[-2] >= have[-2]:
                f[past] = new
        for n in names:
            rows.add(n, np.asarray(out[at[n]], np.float32))
        rows.steps += 1
        logits = out[at[plan.logits]]
        token = greedy(logits[0, -1] if logits.ndim == 3 else logits[0], plan.suppress)
        ids.append(token)
        if eos is not None and token == int(eos):
            finished = True
            break
        if time.perf_counter() - t0 > budget_s:
            break
    if loop.rows is None:
        return Chunk(ids, rows.maps(), finished)
    # the generation's rows go out once, with its last chunk (a chunk before it: ids alone)
    last = finished or rows.steps >= rows.total
    return Chunk(ids, rows.maps() if last else {}, finished)
