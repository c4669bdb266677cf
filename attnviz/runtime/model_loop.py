"""A file model's greedy generation through its KV cache, run where its session lives
(:mod:`attnviz.runtime.steps`): with crash isolation the child runs a chunk of steps per request and keeps the
cache between them; in-process (``ATTNVIZ_INPROCESS``) the same loop runs here, its cache on CUDA device memory
through IO binding.  A chain's stages (a Whisper folder's encoder, a VLM's vision and embeddings) can run first in
the same request, the loop fed from their outputs.  Mixed into :class:`~attnviz.runtime.model.AttentionModel`."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from attnviz import AttnvizError
from attnviz.runtime import graph as gr
from attnviz.runtime.chain import First, first_token, reads, resolve, run_bound, run_outs
from attnviz.runtime.errors import Cancelled, ort_message
from attnviz.runtime.host import RemoteSession, run_chain_steps
from attnviz.runtime.isolation import Taken, loop_run
from attnviz.runtime.steps import CHUNK_S, Chunk, Loop, Rows, StepPlan, advance, loop_device, step_run

# site methods whose dense output is one [.., q, k] tensor per run: a generation loop stacks each step's rows
_STACKABLE = ("softmax", "onnx-attention", "mha-qk", "gqa-qk")


class _Stage(Protocol):
    """A prepared run (:class:`~attnviz.runtime.model.PreparedRun`) as a chain's stage: its session, fetch list
    and feeds."""

    sess: Any
    fetch: list[str]
    feeds: dict


class _Host(Protocol):
    """What the loop reads of the model it is mixed into (:class:`~attnviz.runtime.model.AttentionModel`)."""

    path: Path
    name: str
    provider_note: str
    fidelity: list[str]
    _sites: list[gr.Site]
    _loop: Loop | None
    _loop_cache: str

    def _session(self, mode: str) -> Any: ...

    def check_feeds(self, feeds: dict[str, np.ndarray], made: Collection[str] = ()) -> dict[str, np.ndarray]: ...

    def _fetch_list(self, mode: str, exposed) -> list[str]: ...

    def _collect_maps(self, exposed, got: dict, batch: int, mode: str) -> tuple[list[gr.Site], list, list[str]]: ...

    def _loop_plan(self, plan: StepPlan, sess, exposed) -> StepPlan: ...

    def _advance_here(self, sess, token: int, n: int, eos) -> Chunk: ...

    def _loop_maps(self, sess, exposed, got: dict, t0: float) -> tuple[list[np.ndarray], dict]: ...


class ModelLoop:
    """The generation loop's methods of a file model (their ``self`` is the model: :class:`_Host`)."""

    _loop: Loop | None  # an in-process generation's state, None between generations (the model's __init__)
    _loop_cache: str  # where the last generation's loop kept its cache

    def loop_maps(self: _Host) -> tuple[tuple[str, float], ...] | None:
        """The dense session's map outputs a generation loop beside the session can stack row by row, each
        with what pads the keys a row could not see yet (0 for probabilities, -inf for scores a softmax
        follows), or None when a site's maps are not one tensor per run (packed recompute, Loop/Scan bodies)."""
        if any(s.method not in _STACKABLE or s.loop for s in self._sites):
            return None
        return tuple((s.probs, -np.inf if s.method == "mha-qk" else 0.0) for s in self._sites)

    def run_loop(
        self: _Host,
        plan: StepPlan | None,
        feeds: dict | None,
        length: int,
        token: int,
        n: int,
        eos,
        embed: _Host | None = None,
    ):
        """A chunk of greedy cached steps run where the session lives (:mod:`attnviz.runtime.steps`): with
        ``plan`` a new generation from ``feeds`` (the cache included, ``length`` tokens in it), else the one in
        progress; ``embed``: the model each token goes through first (``plan.embed``), run beside this one.
        Returns (ids, finished, this file's maps in site order ``[B, H, steps, keys]``, run facts)."""
        sess, exposed = self._session("dense")
        embed_sess = embed._session("dense")[0] if embed is not None and plan is not None else None
        start = None
        if plan is not None:
            plan = self._loop_plan(plan, sess, exposed)
            embed_sid = embed_sess.sid_on(sess) if isinstance(embed_sess, RemoteSession) else None
            start = (plan, self.check_feeds(feeds or {}), length, embed_sid)
        t0 = time.perf_counter()
        try:
            if isinstance(sess, RemoteSession):
                ids, finished, got = sess.steps(start, token, n, eos, CHUNK_S)
            else:  # ATTNVIZ_INPROCESS: the same loop, here
                if start is not None:
                    sess.memory.check(start[1], None)  # once, as the child does: each step adds one cache row
                    embed_run = loop_run(embed_sess.unguarded) if embed_sess is not None else None
                    self._loop = Loop(start[0], dict(start[1]), length, embed_run, _rows(start[0], n))
                if self._loop is None:
                    raise AttnvizError("generation lost its cache; generate again")
                chunk = self._advance_here(sess, token, n, eos)
                ids, finished, got = chunk.ids, chunk.finished, chunk.maps
        except (AttnvizError, Cancelled):
            raise
        except Exception as e:
            raise AttnvizError(f"generation with the KV cache failed: {ort_message(e)}") from None
        return ids, finished, *self._loop_maps(sess, exposed, got, t0)

    def chain_loop(
        self: _Host,
        runs: Sequence[_Stage],
        plan: StepPlan,
        feeds: dict,
        length: int,
        first: First,
        n: int,
        eos,
        embed: _Host | None = None,
    ) -> tuple[list[list[np.ndarray]], list[int], bool, list[np.ndarray] | None, dict]:
        """Prepared runs (:func:`run_stages`) and a new generation beside this file's session after them, in one
        go where the sessions live (with crash isolation one request): the first token chosen from the runs'
        outputs (``first``, :func:`attnviz.runtime.chain.first_token`), then up to ``n - 1`` greedy cached steps
        from ``feeds`` (``length`` tokens in their cache), whose :class:`~attnviz.runtime.isolation.Taken` feeds
        are the runs' outputs.  Returns (each run's values, the ids with the first token, finished, this file's
        maps in site order ``[B, H, steps, keys]`` or None where no step ran, the steps' run facts).  The runs'
        outputs that only the loop reads (its Taken feeds: a prompt's presents) stay where the sessions run: None
        among the values with crash isolation.  ``embed``: the model each token goes through first (``plan.embed``,
        a VLM's embed_tokens.onnx), run beside this one."""
        sess, exposed = self._session("dense")
        embed_sess = embed._session("dense")[0] if embed is not None else None
        plan = self._loop_plan(plan, sess, exposed)
        made = {k: v for k, v in feeds.items() if isinstance(v, Taken)}
        held = sorted({v.source for v in made.values()} - reads(p.feeds for p in runs) - {(first[0], first[1])})
        start = (plan, {**self.check_feeds({k: v for k, v in feeds.items() if k not in made}, made=made), **made})
        t0 = time.perf_counter()
        try:
            if isinstance(sess, RemoteSession) and all(isinstance(p.sess, RemoteSession) for p in runs):
                stages = [(p.sess, p.fetch, p.feeds) for p in runs]
                embed_sid = embed_sess.sid_on(sess) if isinstance(embed_sess, RemoteSession) else None
                values, ids, finished, got = run_chain_steps(
                    stages, sess, (*start, length, first, held, embed_sid), n, eos, CHUNK_S
                )
            else:  # ATTNVIZ_INPROCESS: the same, here
                sess.memory.check(start[1], None)  # once, as the child does: each step adds one cache row
                outs, values = run_outs(
                    [(p.fetch, p.feeds) for p in runs], lambda i, f, x: run_bound(runs[i].sess, f, x)
                )
                token = first_token(first, outs)
                ids, finished, got = [token], eos is not None and token == int(eos), {}
                self._loop = None
                if not finished and n > 1:
                    embed_run = loop_run(embed_sess.unguarded) if embed_sess is not None else None
                    self._loop = Loop(start[0], resolve(start[1], outs), length, embed_run, _rows(start[0], n - 1))
                    chunk = self._advance_here(sess, token, n - 1, eos)
                    ids, finished, got = ids + chunk.ids, chunk.finished, chunk.maps
        except (AttnvizError, Cancelled):
            raise
        except Exception as e:
            raise AttnvizError(f"generation with the KV cache failed: {ort_message(e)}") from None
        if not got:
            return values, ids, finished, None, {}
        return values, ids, finished, *self._loop_maps(sess, exposed, got, t0)

    def _loop_plan(self: _Host, plan: StepPlan, sess, exposed) -> StepPlan:
        """The caller's plan with this file's fetch list and where the loop keeps the cache (the session's provider
        decides: :func:`~attnviz.runtime.steps.loop_device`)."""
        device = loop_device(sess.get_providers()[0])
        self._loop_cache = device or "numpy"
        return dataclasses.replace(plan, fetch=tuple(self._fetch_list("dense", exposed)), device=device)

    def _advance_here(self: _Host, sess, token: int, n: int, eos) -> Chunk:
        """A chunk of the in-process loop; the loop (its cache: on CUDA device memory) is dropped once the
        generation ends or fails, as the child drops its own (the caller asks for exactly the steps it needs)."""
        loop = self._loop
        assert loop is not None
        try:
            chunk = advance(loop, token, n, eos, step_run(sess.unguarded, loop.plan))
        except BaseException:
            self._loop = None
            raise
        if chunk.finished or len(chunk.ids) >= n:
            self._loop = None
        return chunk

    def _loop_maps(self: _Host, sess, exposed, got: dict, t0: float) -> tuple[list[np.ndarray], dict]:
        """A chunk's maps in this file's site order, from the rows the loop fetched (none before a generation's
        last chunk: :class:`~attnviz.runtime.steps.Rows`), and its run facts."""
        kept: list[gr.Site] = []
        maps: list = []
        if got:
            kept, maps, _ = self._collect_maps(exposed, got, 1, "dense")
            if len(kept) != len(self._sites):
                raise AttnvizError("generation with the KV cache lost a site's maps; use the full re-run")
        info = {
            "provider": sess.get_providers()[0],
            "provider_note": self.provider_note,
            "mode": "dense",
            "loop_cache": self._loop_cache,  # numpy feeds, or IO binding's device ("cpu", "cuda")
            "run_s": time.perf_counter() - t0,
            "model": self.name,
            "model_path": str(self.path),
        }
        if self.fidelity:  # what every run of this file says (run() adds them too): generation's result keeps them
            info["notes"] = list(self.fidelity)
            info["fidelity"] = list(self.fidelity)
        return [m.array() for m in maps], info


def _rows(plan: StepPlan, total: int) -> Rows:
    """Where an in-process generation's rows go: arrays kept from an earlier generation of the same shapes where
    they are free (:func:`attnviz.runtime.generate.buffer_rows`)."""
    from attnviz.runtime.generate import buffer_rows  # (only a generation: a single run never loads generate.py)

    return Rows(dict(plan.maps), total, buffer_rows, reserve=plan.reserve)
