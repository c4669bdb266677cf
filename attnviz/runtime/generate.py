"""Greedy generation: a generator of steps, with the KV cache where the model has one.

Without a cache every step re-runs the whole decoder sequence for its logits (the instrumented session asked
for logits only), and the engine runs the final sequence once more for the maps: with causal masking that
pass's row *i* is exactly the attention of step *i*.

With a cache (past inputs and present outputs, e.g. optimum ``with-past`` exports) each step feeds only the
new token and the cache, and records its own maps: a step's query rows against every key so far.  The
:class:`MapAssembler` puts those rows into the same ``[B, H, Tq, Tk]`` maps a full run gives (keys a query
could not see yet are 0, as causal masking makes them).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from attnviz import AttnvizError
from attnviz.core.frames import FramesMap
from attnviz.runtime.errors import Cancelled, ort_message
from attnviz.runtime.finite import note, noted
from attnviz.runtime.steps import StepPlan, greedy


@dataclass
class StepOut:
    """What one cached decoder step gives: next-token logits ``[B, V]`` and maps by canonical site index."""

    logits: np.ndarray
    maps: Mapping[int, np.ndarray | FramesMap] = field(default_factory=dict)  # a tower's frames (VLMCache) as they are
    info: dict = field(default_factory=dict)  # the run's facts (provider, mode, ...)


@dataclass
class StepsOut:
    """Steps run in one go: the chosen ids (the EOS included when reached) and their maps by canonical site
    index, ``[B, H, steps, keys]`` (keys a step could not see yet are 0)."""

    ids: list[int]
    maps: Mapping[int, np.ndarray | FramesMap]
    info: dict
    # query rows each map holds ahead of the steps' own, for the steps before it (the prompt's: the loop's
    # StepPlan.reserve), which MapAssembler writes there
    reserved: int = 0


class CacheStepper(Protocol):
    def start(self, feeds: dict[str, np.ndarray]) -> StepOut:  # the prompt, with an empty cache
        ...

    def step(self, tokens: list[int]) -> StepOut:  # one new token per row, with the cache so far
        ...

    def steps(self, token: int, n: int, eos: int | None) -> StepsOut:  # up to n greedy steps from ``token``
        ...


@dataclass(frozen=True)
class Suppress:
    """Tokens greedy generation never chooses: ``always`` at every step, ``first`` also at the first generated
    one (a Whisper generation_config's suppress_tokens and begin_suppress_tokens, as transformers applies them)."""

    always: tuple[int, ...] = ()
    first: tuple[int, ...] = ()

    def at(self, step: int) -> tuple[int, ...]:
        return self.always + self.first if step == 0 else self.always


NO_SUPPRESS = Suppress()


def suppress_of(meta: dict) -> Suppress:
    """The tokens a model's metadata says generation never chooses (``suppress``: ``always`` / ``first`` ids)."""
    d = meta.get("suppress")
    if not isinstance(d, dict):
        return NO_SUPPRESS

    def ids(key: str) -> tuple[int, ...]:
        v = d.get(key)
        return tuple(int(t) for t in v if isinstance(t, int) and not isinstance(t, bool)) if isinstance(v, list) else ()

    return Suppress(ids("always"), ids("first"))


def one_step(stepper: CacheStepper, token: int, eos: int | None, suppress: tuple[int, ...] = ()) -> StepsOut:
    """:meth:`CacheStepper.steps` for a stepper that can only step once per call."""
    out = stepper.step([token])
    return StepsOut([greedy(out.logits[0], suppress)], out.maps, out.info)


class _Buffers:
    """Assembled maps' memory kept for the next generation of the same shapes: fresh memory costs a page fault
    per 4 kB on its first write (0.8 ms of a 16-token LLaVA generation's 5 MB).  A buffer is handed out again only
    when nothing else refers to it (its reference count is the pool's own: every view of it, a result's map
    included, holds a reference to it), so a result a caller keeps is never written over."""

    KEEP = 32  # buffers at most, and their bytes (the oldest go first): a few generations' sites, not a long
    KEEP_BYTES = 64 << 20  # one's maps held idle after it

    def __init__(self) -> None:
        self.kept: list[np.ndarray] = []
        self.lock = threading.Lock()

    def take(self, shape: tuple[int, ...]) -> np.ndarray:
        with self.lock:
            kept = self.kept
            for i in range(len(kept)):
                # the list's reference and getrefcount's argument alone: no result, view or caller holds it
                if kept[i].shape == shape and sys.getrefcount(kept[i]) == 2:
                    a = kept.pop(i)
                    kept.append(a)  # the most recently used last
                    return a
            a = np.empty(shape, np.float32)
            kept.append(a)
            while kept and (len(kept) > self.KEEP or sum(k.nbytes for k in kept) > self.KEEP_BYTES):
                del kept[0]
            return a


_BUFFERS = _Buffers()


def buffer_rows(shape: tuple[int, ...]) -> tuple[np.ndarray, None]:
    """A generation loop's rows array (:class:`~attnviz.runtime.steps.Rows`) from the kept buffers, in-process."""
    return _BUFFERS.take(shape), None


class MapAssembler:
    """Collect each site's step maps ``[B, H, q, k]`` into one ``[B, H, sum q, max k]`` map per site (the keys a
    step could not see yet zero).  Where the last part came with rows reserved for the parts before it (a
    generation loop's map: :attr:`StepsOut.reserved`), those parts are written there and the map is that part's
    array (the loop's slot in the isolation child's shared memory, or its kept buffer here): no copy of the loop's
    rows, which would hold both at once (2x the generation's maps); else into memory kept from an earlier
    generation of the same shapes where it is free."""

    def __init__(self) -> None:
        self.parts: dict[int, list[np.ndarray]] = {}
        self.reserved: dict[int, list[int]] = {}  # each part's leading rows left for the parts before it
        self.frames: dict[int, FramesMap] = {}  # a tower's sites, seen once with the prompt: kept as they are

    def add(self, maps: Mapping[int, np.ndarray | FramesMap], reserved: int = 0) -> None:
        for i, a in maps.items():
            if isinstance(a, FramesMap):
                self.frames[i] = a
                continue
            # the very array where it is float32 already (its NaN/Inf note, attnviz.runtime.finite, holds)
            f32 = a if type(a) is np.ndarray and a.dtype == np.float32 else np.asarray(a, np.float32)
            self.parts.setdefault(i, []).append(f32)
            self.reserved.setdefault(i, []).append(int(reserved))

    def maps(self) -> dict[int, np.ndarray | FramesMap]:
        out: dict[int, np.ndarray | FramesMap] = dict(self.frames)
        for i, parts in self.parts.items():
            out[i] = _assemble(parts, self.reserved[i])
        return out


def _in_place(parts: list[np.ndarray], reserved: list[int]) -> bool:
    """Whether the parts before the last fill exactly the rows the last one reserved for them, within its keys,
    and the last can be written (an array unpickled from a reply may not be)."""
    *before, last = parts
    rows = sum(p.shape[2] for p in before)
    return (
        len(parts) > 1
        and not any(reserved[:-1])
        and reserved[-1] == rows > 0
        and last.shape[2] >= rows
        and last.flags.writeable
        and all(p.shape[:2] == last.shape[:2] and p.shape[3] <= last.shape[3] for p in before)
    )


def _assemble(parts: list[np.ndarray], reserved: list[int]) -> np.ndarray:
    """One site's map from its parts (each with its leading rows reserved for the parts before it)."""
    # finite where every part was checked finite, not where one was not; else unknown (a reused buffer forgets
    # its last generation's note)
    known = [noted(p) for p in parts]
    verdict = False if False in known else True if all(known) else None
    if _in_place(parts, reserved):
        a = _stack_rows(parts[-1], parts[:-1])  # the last part's reserved rows
        note(a, verdict)
        return a
    if not any(reserved):
        if len(parts) == 1:  # a site the steps never added to (an encoder's, seen once): no copy to make
            return parts[0]
    else:  # reserved rows the parts before do not fill (a site the prompt did not have): left out
        parts = [p[:, :, n:] for p, n in zip(parts, reserved)]
    b, h = parts[0].shape[:2]
    tq = sum(p.shape[2] for p in parts)
    tk = max(p.shape[3] for p in parts)
    a = _stack_rows(_BUFFERS.take((b, h, tq, tk)), parts)
    note(a, verdict)
    return a


def _stack_rows(a: np.ndarray, parts: list[np.ndarray]) -> np.ndarray:
    """``parts`` written into ``a``'s leading query rows one after another, the keys a part lacks zero."""
    r = 0
    for p in parts:
        a[:, :, r : r + p.shape[2], : p.shape[3]] = p
        a[:, :, r : r + p.shape[2], p.shape[3] :] = 0.0
        r += p.shape[2]
    return a


@dataclass
class Generation:
    """The generated ids (the EOS included when reached), and, with a cache, the assembled maps."""

    ids: list[int]
    seconds: float
    method: str  # "kv-cache" | "full re-run"
    maps: dict[int, np.ndarray | FramesMap] | None = None
    info: dict = field(default_factory=dict)  # the last cached step's run facts


def _check(step: int, steps: int, progress: Callable | None, cancelled: Callable | None) -> None:
    if cancelled is not None and cancelled():
        raise Cancelled("cancelled")
    if progress is not None:
        progress(int(100 * step / steps), f"generating: step {step + 1} of {steps}")


def greedy_steps(
    next_logits: Callable[[list[int]], np.ndarray],
    prompt: list[int],
    steps: int,
    eos: int | None,
    progress=None,
    cancelled=None,
    suppress: Suppress = NO_SUPPRESS,
) -> Iterator[int]:
    """Yield greedy tokens; ``next_logits(ids)`` gives the logits of the token after ``ids``."""
    ids = list(prompt)
    for step in range(steps):
        _check(step, steps, progress, cancelled)
        nxt = greedy(next_logits(ids), suppress.at(step))
        yield nxt
        if eos is not None and nxt == int(eos):
            return
        ids.append(nxt)


def full_rerun(
    model,
    build_feeds: Callable[[list[int]], dict],
    prompt: list[int],
    steps: int,
    eos: int | None,
    progress=None,
    cancelled=None,
    suppress: Suppress = NO_SUPPRESS,
) -> Generation:
    t0 = time.perf_counter()

    def next_logits(ids):
        logits = model.logits(build_feeds(ids))
        return logits[0, -1] if logits.ndim == 3 else logits[0]

    ids = list(greedy_steps(next_logits, prompt, steps, eos, progress, cancelled, suppress))
    return Generation(ids, time.perf_counter() - t0, "full re-run")


def with_cache(
    stepper: CacheStepper,
    feeds: dict,
    steps: int,
    eos: int | None,
    progress=None,
    cancelled=None,
    suppress: Suppress = NO_SUPPRESS,
) -> Generation:
    """Greedy generation feeding the cache; records every step's maps (a stepper's later steps suppress what
    its own plan says: the folder's)."""
    t0 = time.perf_counter()
    asm = MapAssembler()
    if steps <= 0:
        return Generation([], 0.0, "kv-cache", {}, {})
    _check(0, steps, progress, cancelled)
    # a stepper that runs the prompt, the first token and the first chunk of steps as one request (a Whisper
    # folder: its encoder too, FolderCache.start_steps) gives both at once; None: it cannot this time
    both = getattr(stepper, "start_steps", None)
    got = both(feeds, steps, eos, suppress.at(0)) if both is not None else None
    if got is not None:
        out, first = got
        asm.add(out.maps)
        asm.add(first.maps, first.reserved)
        ids = list(first.ids)
        info = dict(first.info) or dict(out.info)
    else:
        out = stepper.start(feeds)
        asm.add(out.maps)
        ids = [greedy(out.logits[0], suppress.at(0))]
        info = dict(out.info)
    # the rest in chunks (a chunk runs where the session lives: one round trip for many tokens)
    while len(ids) < steps and (eos is None or ids[-1] != int(eos)):
        _check(len(ids), steps, progress, cancelled)
        part = stepper.steps(ids[-1], steps - len(ids), eos)
        asm.add(part.maps, part.reserved)
        ids += part.ids
        info = dict(part.info) or info
    return Generation(ids, time.perf_counter() - t0, "kv-cache", asm.maps(), info)


# --------------------------------------------------------------------------- one file with past inputs
def present_name(past: str) -> str:
    """optimum / transformers naming: ``past_key_values.0.key`` is fed by ``present.0.key``."""
    return past.replace("past_key_values", "present")


class FileCache:
    """A cached stepper over one model file whose past inputs are fed by its present outputs."""

    def __init__(self, model, site_order: list[int] | None = None):
        self.model = model
        self.roles = dict(model.roles)  # read once: the property re-derives them on every access
        self.past = [i.name for i in model.inputs if self.roles[i.name] == "past"]
        self.order = site_order  # this file's site j is canonical site order[j]
        self.feeds: dict[str, np.ndarray] = {}
        self.length = 0
        self.looping = False  # a loop beside the session holds the cache (see steps)
        self.reserve = 0  # the rows the loop's maps keep for the prompt's (StepPlan.reserve)

    @classmethod
    def for_model(cls, model) -> FileCache | None:
        past = [i.name for i in model.inputs if model.roles[i.name] == "past"]
        outs = {o.name for o in model.outputs}
        if not past or not all(present_name(p) in outs for p in past):
            return None
        return cls(model)

    def _run(self, feeds: dict) -> StepOut:
        r = self.model.run(feeds, mode="dense")
        logits = r.outputs.get("logits", next(iter(r.outputs.values())))
        for p in self.past:
            self.feeds[p] = r.outputs[present_name(p)]
        order = self.order or list(range(len(r.maps)))
        maps = {order[j]: m.array() for j, m in enumerate(r.maps)}
        return StepOut(logits[:, -1] if logits.ndim == 3 else logits, maps, r.info)

    def _decoder_roles(self) -> tuple[str, str]:
        """(token role, mask role) of the decoder side: a decoder-only graph's are the plain ones."""
        roles = set(self.roles.values())
        return ("decoder_tokens", "decoder_mask") if "decoder_tokens" in roles else ("tokens", "mask")

    def start(self, feeds: dict) -> StepOut:
        self.feeds = dict(feeds)
        self.looping = False
        tok_role = self._decoder_roles()[0]
        tok = next(i.name for i in self.model.inputs if self.roles[i.name] == tok_role)
        self.length = feeds[tok].shape[1]
        return self._run(self.feeds)

    def plan(self) -> StepPlan | None:
        """How each step's feeds follow from the last, for a loop beside the session (None: step one by one)."""
        maps = self.model.loop_maps()
        if maps is None or any(np.shape(v)[0] != 1 for v in self.feeds.values() if np.ndim(v) >= 2):  # one row
            return None
        tok_role, mask_role = self._decoder_roles()
        by_role: dict[str, list[str]] = {}
        dtypes = []
        for i in self.model.inputs:
            by_role.setdefault(self.roles[i.name], []).append(i.name)
            dtypes.append((i.name, "bool" if i.dtype == "bool" else i.dtype))
        return StepPlan(
            fetch=(),  # the model fills in its fetch list
            logits="logits" if any(o.name == "logits" for o in self.model.outputs) else self.model.outputs[0].name,
            carry=tuple((p, present_name(p)) for p in self.past),
            token=by_role[tok_role][0],
            grow=tuple(n for n in by_role.get(mask_role, []) if n in self.feeds),
            positions=tuple(by_role.get("positions", [])),
            cache_position=tuple(by_role.get("cache_position", [])),
            flags=tuple((i.name, i.rank) for i in self.model.inputs if i.dtype == "bool" and i.rank <= 1),
            maps=maps,
            dtypes=tuple(dtypes),
            reserve=self.length,  # the prompt's rows, before the first step (FileCache.start)
        )

    def steps(self, token: int, n: int, eos: int | None) -> StepsOut:
        """Up to ``n`` greedy steps in one chunk, run beside the session when the model allows (else one)."""
        plan = None if self.looping else self.plan()
        if not self.looping and plan is None:
            return one_step(self, token, eos)
        if plan is not None:
            self.reserve = plan.reserve
        ids, _, maps, info = self.model.run_loop(plan, self.feeds, self.length, token, n, eos)
        self.looping = True
        self.length += len(ids)
        order = self.order or list(range(len(maps)))
        return StepsOut(ids, {order[j]: m for j, m in enumerate(maps)}, info, self.reserve if maps else 0)

    def reorder(self, rows: np.ndarray) -> None:
        """Beam search (:mod:`attnviz.runtime.beams`): every batch row the next step feeds (the cache, the mask, any
        states) taken from the last run's row ``rows[i]``, the row the running beam ``i`` descends from (numpy take
        on the batch axis: the first step's one prompt row becomes the K beams' rows)."""
        rows = np.asarray(rows, np.int64)
        n = next((np.shape(self.feeds[p])[0] for p in self.past if p in self.feeds), None)
        for k, v in self.feeds.items():
            if isinstance(v, np.ndarray) and v.ndim >= 2 and v.shape[0] == n:
                self.feeds[k] = np.take(v, rows, axis=0)

    def step(self, tokens: list[int]) -> StepOut:
        f = self.feeds
        b = len(tokens)
        tok_role, mask_role = self._decoder_roles()
        for i in self.model.inputs:
            role = self.roles[i.name]
            dt = np.dtype(i.dtype) if i.dtype != "bool" else np.bool_
            if role == tok_role:
                f[i.name] = np.asarray([[t] for t in tokens], dt)
            elif role == mask_role and i.name in f:
                f[i.name] = np.concatenate([f[i.name], np.ones((b, 1), f[i.name].dtype)], axis=1)
            elif role == "positions":
                f[i.name] = np.full((b, 1), self.length, dt)
            elif role == "cache_position":
                f[i.name] = np.asarray([self.length], dt)
            elif i.dtype == "bool" and i.rank <= 1:  # use_cache_branch of merged decoders (optimum: shape [1])
                f[i.name] = np.ones([1] * i.rank, bool)
        self.length += 1
        try:
            return self._run(f)
        except AttnvizError as e:
            raise AttnvizError(f"generation with the KV cache failed: {e}") from None
        except Exception as e:  # pragma: no cover - onnxruntime refusing a shape the export did not foresee
            raise AttnvizError(f"generation with the KV cache failed: {ort_message(e)}") from None
