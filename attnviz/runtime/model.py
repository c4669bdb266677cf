"""Open an ONNX model, find its attention, run it and return core objects."""

from __future__ import annotations

import dataclasses
import time
import weakref
from collections.abc import Callable, Collection
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from attnviz import AttnvizError
from attnviz.core import metadata as md
from attnviz.core import windows as win
from attnviz.core.attention import AttentionResult, DenseMap, PatchGrid, SiteInfo, TokenAxis
from attnviz.core.words import with_article
from attnviz.runtime import analyze as engine
from attnviz.runtime import fidelity as fid
from attnviz.runtime import graph as gr
from attnviz.runtime import inputs as ip
from attnviz.runtime.chain import First, first_token, reads, resolve, run_local, run_outs
from attnviz.runtime.errors import Cancelled, ort_message
from attnviz.runtime.generate import FileCache
from attnviz.runtime.host import ModelCrashed, RemoteSession, make_session, run_chain, run_chain_steps
from attnviz.runtime.inputs import IOInfo
from attnviz.runtime.isolation import Spliced, Taken, loop_run
from attnviz.runtime.limits import PositionLimit, find_position_limit
from attnviz.runtime.naming import model_name
from attnviz.runtime.protocol import AttnModel, EncoderPair
from attnviz.runtime.sidecar import sidecar_json
from attnviz.runtime.steps import CHUNK_S, Chunk, Loop, StepPlan, advance, loop_device, step_run

PROBE_MAX_ELEMENTS = 1 << 20  # per dummy input (a 3x512x512 image); above it no probe runs (issue 9: 6.4 GB)
# site methods whose dense output is one [.., q, k] tensor per run: a generation loop stacks each step's rows
_STACKABLE = ("softmax", "onnx-attention", "mha-qk", "gqa-qk")
DENSE_LIMIT_MB = 512.0  # above this estimate of L·H·Tq·Tk·4·B bytes, keep Q/K and recompute heads on demand
ONNX_DTYPES = {
    1: "float32",
    2: "uint8",
    3: "int8",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    16: "bfloat16",
}


def io_info(v) -> IOInfo:
    """A graph input / output (ValueInfoProto) as :class:`IOInfo`: name, dtype word, dims."""
    t = v.type.tensor_type
    dims = []
    for d in t.shape.dim:
        dims.append(int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?"))
    return IOInfo(v.name, ONNX_DTYPES.get(t.elem_type, f"type{t.elem_type}"), dims)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    x = x.astype(np.float32)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(x - m)
    s = e.sum(axis=axis, keepdims=True)
    out = np.divide(e, s, out=np.zeros_like(e), where=s > 0)  # a row masked everywhere: zeros
    # a NaN score (a NaN scale) makes its row NaN, not zeros, so analyze.refuse_non_finite sees it
    return np.where(np.isnan(s), np.float32(np.nan), out) if np.isnan(s).any() else out


def to_bhqk(a: np.ndarray, batch: int) -> np.ndarray:
    """Normalise a probability tensor to ``[B, H, Tq, Tk]`` float32."""
    a = np.asarray(a)
    if a.ndim == 4:
        out = a
    elif a.ndim == 3:
        out = a.reshape(batch, a.shape[0] // batch, *a.shape[1:]) if a.shape[0] % batch == 0 else a[None]
    elif a.ndim == 2:
        out = a[None, None]
    elif a.ndim == 5:  # grouped heads [B, Hkv, G, Tq, Tk]
        out = a.reshape(a.shape[0], a.shape[1] * a.shape[2], *a.shape[3:])
    else:
        raise AttnvizError(f"attention tensor has unexpected rank {a.ndim} (shape {a.shape})")
    if out.shape[0] != batch and out.shape[0] == 1:
        out = np.broadcast_to(out, (batch, *out.shape[1:]))
    if out.dtype == np.float32 and out.flags.c_contiguous:
        return out  # the very array (numpy may hand back a view of an unpickled one): its NaN/Inf note holds
    return np.ascontiguousarray(out, dtype=np.float32)


class RecomputeMap:
    """One site kept as Q and Kᵀ; a head's probabilities are recomputed through the graph's own epilogue."""

    def __init__(
        self,
        q: np.ndarray,
        k: np.ndarray,
        side: dict[str, np.ndarray],
        epi_session,
        qk_name: str,
        batch: int,
        matmul_attrs: dict,
    ):
        q = np.asarray(q)
        k = np.asarray(k)
        if q.ndim == 3:
            q = q.reshape(batch, -1, *q.shape[1:])
        if k.ndim == 3:
            k = k.reshape(batch, -1, *k.shape[1:])
        if matmul_attrs.get("transA"):
            q = np.swapaxes(q, -1, -2)
        if matmul_attrs.get("transB"):
            k = np.swapaxes(k, -1, -2)
        self.q, self.k = q, k
        self.alpha = float(matmul_attrs.get("alpha", 1.0))
        # side inputs (masks, biases) broadcast right-aligned against [B, H, Tq, Tk]: make them 4-D to slice
        self.side = {n: v.reshape((1,) * (4 - v.ndim) + v.shape) if v.ndim < 4 else v for n, v in side.items()}
        self.sess = epi_session
        self.qk_name = qk_name
        self.batch = batch
        heads = max(q.shape[1], k.shape[1])
        self.shape = (batch, int(heads), int(q.shape[-2]), int(k.shape[-1]))
        self.out_name = epi_session.get_outputs()[0].name

    CHUNK_ELEMS = 1 << 22  # rows per epilogue call so that one chunk of scores is ~16 MB

    def head(self, b: int, h: int) -> np.ndarray:
        qh = self.q[b if self.q.shape[0] > 1 else 0, h if self.q.shape[1] > 1 else 0]
        kh = self.k[b if self.k.shape[0] > 1 else 0, h * self.k.shape[1] // self.shape[1]]
        tq, tk = self.shape[2], self.shape[3]
        side = {}
        for name, v in self.side.items():
            if v.ndim == 4:
                v = v[b : b + 1] if v.shape[0] == self.batch and self.batch > 1 else v[:1]
                v = v[:, h : h + 1] if v.shape[1] == self.shape[1] and self.shape[1] > 1 else v[:, :1]
            side[name] = v
        out = np.empty((tq, tk), np.float32)
        step = max(1, self.CHUNK_ELEMS // max(tk, 1))
        # softmax is per row: the epilogue runs on row blocks, so a head never needs more than ~3 chunks at once
        for r0 in range(0, tq, step):
            r1 = min(tq, r0 + step)
            scores = qh[r0:r1] @ kh
            if self.alpha != 1.0:
                scores *= self.alpha
            feeds = {self.qk_name: scores[None, None].astype(self.q.dtype, copy=False)}
            for name, v in side.items():
                feeds[name] = v[:, :, r0:r1] if v.ndim == 4 and v.shape[2] == tq and tq > 1 else v
            out[r0:r1] = np.asarray(self.sess.run([self.out_name], feeds)[0], np.float32).reshape(r1 - r0, tk)
        return out

    def array(self) -> np.ndarray:
        return np.stack([np.stack([self.head(b, h) for h in range(self.shape[1])]) for b in range(self.shape[0])])

    @property
    def nbytes(self) -> int:
        return self.q.nbytes + self.k.nbytes


class PackedMap:
    """onnxruntime's packed com.microsoft.Attention: probabilities recomputed from X and the QKV weights."""

    def __init__(
        self, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, heads: int, mask: np.ndarray | None, extra: dict
    ):
        b, t, _ = x.shape
        sizes = extra.get("qkv_hidden_sizes") or [w.shape[1] // 3] * 3
        qw, kw = w[:, : sizes[0]], w[:, sizes[0] : sizes[0] + sizes[1]]
        q = x @ qw
        k = x @ kw
        if bias is not None:
            q = q + bias[: sizes[0]]
            k = k + bias[sizes[0] : sizes[0] + sizes[1]]
        d = sizes[0] // heads
        self.q = q.reshape(b, t, heads, d).transpose(0, 2, 1, 3)  # (B, H, T, d)
        self.k = k.reshape(b, t, heads, sizes[1] // heads).transpose(0, 2, 1, 3)
        self.scale = extra.get("scale") or 1.0 / np.sqrt(d)
        fill = extra.get("mask_filter_value", -10000.0)
        bias_add = np.zeros((b, 1, t, t), np.float32)
        if mask is not None:
            mask = np.asarray(mask)
            if mask.ndim == 2:  # [B, T] 1 = keep
                bias_add += ((1 - mask.astype(np.float32)) * fill)[:, None, None, :]
            elif mask.ndim == 1:  # [B] right-padded lengths (or [2B] end/start)
                lens = mask[:b]
                keep = np.arange(t)[None, :] < lens[:, None]
                bias_add += np.where(keep, 0.0, fill)[:, None, None, :]
            elif mask.ndim == 3:
                bias_add += ((1 - mask.astype(np.float32)) * fill)[:, None]
        if extra.get("unidirectional"):
            bias_add = bias_add + np.triu(np.full((t, t), fill, np.float32), 1)[None, None]
        self.bias = bias_add
        self.shape = (b, heads, t, t)

    def head(self, b: int, h: int) -> np.ndarray:
        s = (self.q[b, h] @ self.k[b, h].T) * self.scale + self.bias[b, 0]
        return softmax(s)

    def array(self) -> np.ndarray:
        return np.stack([np.stack([self.head(b, h) for h in range(self.shape[1])]) for b in range(self.shape[0])])


class AttentionModel(engine.AnalyzeMethod):
    """A loaded model with its attention sites found and labelled.  Sessions are created lazily.

    ``encoder_pairing``: for a decoder file that takes encoder_hidden_states, how to run it behind the encoder
    beside it (:func:`attnviz.runtime.folder.open_model` gives it; this module cannot import folder.py).
    """

    # a map batch larger than the image batch means windows (Swin); a VLM's vision file maps one image of each
    # row's several (Idefics3's tiles, the padding images dropped) per map row instead: its set turns this off
    maps_per_image = True
    # the input whose first axis is the maps' batch (None: the first input's); a vision file that takes one
    # image's flattened patches (Qwen2-VL) counts its images on image_grid_thw instead
    batch_input: str | None = None

    def __init__(
        self,
        path: str | Path,
        provider: str = "auto",
        tokenizer: str | None = None,
        threads: int | None = None,
        encoder_pairing: Callable[[], EncoderPair | None] | None = None,
    ):
        t0 = time.perf_counter()
        self.path = Path(path)
        self.proto, self.external_dir = gr.load_model(self.path)
        self.metadata = {p.key: p.value for p in self.proto.metadata_props}
        self.meta = md.parse(self.metadata)
        md.check_special(self.meta.get("special"), f"{self.path.name} metadata attnviz.special")
        self.name = model_name(self.path, self.meta)  # not "model" for every export-hf / optimum model.onnx
        self.graph = gr.Graph(self.proto, self.external_dir)
        self.inputs = [io_info(v) for v in self.graph.inputs]
        self.outputs = [io_info(v) for v in self.proto.graph.output]
        sites, self.no_attention_reason = gr.find_sites(self.graph)
        # the folder's config.json model type (through the sidecar guard) tells a dual encoder's causal text tower
        model_type = sidecar_json(self.path, "config.json").get("model_type")
        self._sites = gr.label_sites(self.graph, sites, self.meta, model_type if isinstance(model_type, str) else "")
        for s in self._sites:
            s.heads = gr.static_heads(self.graph, s)
        # what the folder's config.json says the eager attention has and the graph lacks (soft-capping, a window)
        self.attention_config = fid.AttentionConfig.of(self.path)
        self.fidelity = fid.static_notes(self.graph, self._sites, self.attention_config)
        self.requested_provider = provider
        self.threads = threads
        self._tokenizer_arg = tokenizer
        self._tokenizers: tuple[ip.TextEncoder | None, ip.TextEncoder | None] | None = None  # found on first use
        self._sessions: dict[str, tuple] = {}
        # extra_session's sessions, alive while their callers hold them (a dropped one frees its memory)
        self._extra_sessions: weakref.WeakValueDictionary[str, ExtraSession] = weakref.WeakValueDictionary()
        self._plan: dict[str, tuple] | None = None  # check_feeds' per-input checks (_feed_plan)
        self._roles: tuple[tuple, dict[str, str]] | None = None  # (what they were worked out from, the roles)
        self._fetch: dict[str, tuple] = {}  # per session mode: (its exposed outputs, the names a run fetches)
        self._epilogues: dict[int, object] = {}
        self.provider_note = ""
        # the graph or the config already said why this is an encoder (a dual encoder's tower): no map overrules it
        self._stack_confirmed = any("encoder_why" in s.extra for s in self._sites)
        self._probed = False
        self._grids: dict[tuple, gr.TokenGrid | None] = {}  # (image input, fed size, keys) -> the graph's grid
        self.encoder_pairing = encoder_pairing
        self._loop: Loop | None = None  # an in-process generation loop's state (see run_loop)
        self._loop_cache = "numpy"  # where the last generation's loop kept its cache (run facts: loop_cache)
        self.timings = {"load_s": time.perf_counter() - t0}

    # -- description -----------------------------------------------------------
    @property
    def sites(self) -> list[SiteInfo]:
        return [s.info() for s in self._sites]

    @property
    def roles(self) -> dict[str, str]:
        # asked per input in every run's feed building (a with-past decoder has 18 inputs): worked out once per
        # metadata roles and input list, a copy handed out (callers may change theirs)
        given = md.section(self.meta, "inputs")
        key = (id(self.inputs), len(self.inputs), tuple(given.items()))
        if self._roles is None or self._roles[0] != key:
            roles = {i.name: given.get(i.name) or ip.guess_role(i.name, i.dtype, i.rank) for i in self.inputs}
            self._roles = (key, roles)
        return dict(self._roles[1])

    @property
    def kind(self) -> str:
        roles = set(self.roles.values())
        stacks = {s.stack for s in self._sites}
        has_cross = any(s.kind == "cross" for s in self._sites)
        if "image" in roles:
            return "vision-decoder" if has_cross or "decoder" in stacks else "vision"
        if has_cross or ("encoder" in stacks and "decoder" in stacks):
            return "encoder-decoder"
        if stacks == {"decoder"}:
            return "decoder"
        return "encoder"

    @property
    def provider(self) -> str:
        """The execution provider actually used (creates the session that runs need anyway)."""
        sess = next(iter(self._sessions.values()))[0] if self._sessions else self._session("dense")[0]
        return sess.get_providers()[0]

    def probe(self) -> bool:
        """One short run on dummy inputs to confirm labels (causal => decoder) and read head counts.

        Returns False (and changes nothing) when dummy inputs cannot be built or the run fails.
        """
        if (self._stack_confirmed and all(s.heads for s in self._sites)) or self._probed:
            return self._stack_confirmed
        self._probed = True
        feeds = {}
        for i in self.inputs:
            role = self.roles[i.name]
            shape = []
            for ax, d in enumerate(i.shape):
                if isinstance(d, int) and d > 0:
                    shape.append(d)
                elif ax == 0:
                    shape.append(1)
                else:
                    shape.append(0 if role == "past" else 6)
            dt = np.dtype(i.dtype) if i.dtype in ("float32", "float16", "int64", "int32", "bool") else None
            if dt is None:
                return False
            if int(np.prod(shape)) > PROBE_MAX_ELEMENTS:
                return False  # a declared input size this big would make the "short" run costly: labels stay static
            if role == "image" or dt.kind == "f":
                feeds[i.name] = np.random.default_rng(0).standard_normal(shape).astype(dt)
            elif role in ("mask", "decoder_mask"):
                feeds[i.name] = np.ones(shape, dt)
            elif role in ("positions", "cache_position"):
                feeds[i.name] = np.broadcast_to(np.arange(shape[-1], dtype=dt), shape).copy()
            elif dt == np.bool_:
                feeds[i.name] = np.zeros(shape, dt)
            else:
                feeds[i.name] = np.full(shape, 1, dt)
        try:
            r = self.run(feeds, mode="dense")
        except Exception:
            return False
        for s, m in zip(self._sites, r.maps):
            s.heads = int(m.shape[1])
        return True

    def probe_state(self) -> tuple[bool, bool, list[tuple[str, int]]]:
        """What :meth:`probe` found (probed, stacks confirmed, each site's stack and head count), for
        :meth:`adopt_probe` on another Model of the same file in another process (one that holds a session)."""
        return self._probed, self._stack_confirmed, [(s.stack, s.heads) for s in self._sites]

    def adopt_probe(self, state: tuple[bool, bool, list[tuple[str, int]]]) -> bool:
        """Take over a :meth:`probe_state` as if this model had probed; False (nothing changed) when its sites
        are not these."""
        probed, confirmed, sites = state
        if len(sites) != len(self._sites):
            return False
        for s, (stack, heads) in zip(self._sites, sites):
            s.stack, s.heads = str(stack), int(heads)
        self._probed, self._stack_confirmed = bool(probed), bool(confirmed)
        return True

    def describe(self) -> dict:
        return {
            "model": str(self.path),
            "kind": self.kind,
            "inputs": [vars(i) | {"role": self.roles[i.name]} for i in self.inputs],
            "outputs": [vars(o) for o in self.outputs],
            "metadata": {
                k: (v if len(v) <= 200 else v[:200] + f"... ({len(v)} chars)") for k, v in self.metadata.items()
            },
            "producer": f"{self.proto.producer_name} {self.proto.producer_version}".strip(),
            "opsets": {(o.domain or "ai.onnx"): o.version for o in self.proto.opset_import},
            "sites": [s.to_dict() for s in self.sites],
            "no_attention_reason": self.no_attention_reason,
            "fidelity": list(self.fidelity),
        }

    # -- sessions ----------------------------------------------------------------
    def _session(self, mode: str):
        """mode: plain (no extra outputs) | dense | ondemand."""
        if mode not in self._sessions:
            t0 = time.perf_counter()
            if mode == "plain":
                data, exposed = _serialize(self.proto), None
            else:
                try:
                    data, exposed = gr.instrumented_bytes(self.graph, self._sites, mode)
                except ValueError as e:
                    raise AttnvizError(
                        f"model too large to instrument in memory ({e}); models over 2 GB are not supported yet"
                    ) from None
            try:
                # a cached decoder's presents grow by a row every generation step: the child's shared arena
                # extends by exactly what is asked and cannot reuse the last step's smaller block, so such a
                # session keeps an arena of its own (12.7 vs 2.2 ms a token at 1,024 tokens, GPT-2, measured)
                sess, note = make_session(
                    data,
                    self.requested_provider,
                    self.threads,
                    external_dir=self.external_dir,
                    label=self.path.name,
                    shared_arena=not any(r == "past" for r in self.roles.values()),
                    # the maps handed on as fetched (not a softmax of scores, not packed inputs to recompute):
                    # the child checks them for NaN/Inf where they are written (attnviz.runtime.finite)
                    finite=tuple(s.probs for s in self._sites if s.method not in ("mha-qk", "recompute-packed"))
                    if mode == "dense"
                    else (),
                )
            except ModelCrashed:
                raise
            except AttnvizError:
                zero = _zero_head_node(self.graph)
                if zero is not None:  # onnxruntime's words for it are a C++ condition on a kernel's attribute
                    raise AttnvizError(
                        f"{self.path.name}: attention node {zero} declares 0 heads, and onnxruntime cannot run an "
                        "attention op without heads; re-export the model with its real head count"
                    ) from None
                raise
            except Exception as e:  # onnxruntime refuses the graph (unknown op, bad attribute, type error)
                raise AttnvizError(
                    f"{self.path.name}: onnxruntime cannot load this model: {ort_message(e)}; "
                    "re-export it (or update onnxruntime)"
                ) from None
            self.provider_note = note or self.provider_note
            self._sessions[mode] = (sess, exposed)
            self.timings[f"session_{mode}_s"] = time.perf_counter() - t0
        return self._sessions[mode]

    # -- extra sessions (public: tools that run an edited copy of the graph, e.g. the corpus statistics) --------
    @property
    def graph_sites(self) -> list[gr.Site]:
        """The graph-level records behind :attr:`sites` (node, tensors, epilogue), in the same order: what code
        that edits a copy of :attr:`graph` needs (:func:`attnviz.runtime.statgraph.stats_model`).  Read them only."""
        return list(self._sites)

    @property
    def open_provider(self) -> str | None:
        """The execution provider of a session this model already has open, None before the first; unlike
        :attr:`provider` it never opens one only to answer."""
        own = next(iter(self._sessions.values()), None)
        if own is not None:
            return own[0].get_providers()[0]
        extra = next(iter(self._extra_sessions.values()), None)
        return extra.provider if extra is not None else None

    def extra_session(self, edited: onnx.ModelProto, key: str) -> ExtraSession:
        """A session of ``edited`` (a changed copy of this model's graph) with this model's provider, threads,
        external-data folder and crash isolation.  Cached under ``key`` while the caller holds it: the same key
        returns the same session, so the key must name everything the edit depends on."""
        extra = self._extra_sessions.get(key)
        if extra is None:
            sess, _ = make_session(
                _serialize(edited),
                self.requested_provider,
                self.threads,
                external_dir=self.external_dir,
                label=self.path.name,
            )
            extra = self._extra_sessions[key] = ExtraSession(sess)
        return extra

    def close_session(self, mode: str) -> None:
        """Drop this model's own session of ``mode`` (``"dense"``: e.g. once an extra session replaces it, so the
        weights sit in memory once); a later :meth:`run` in that mode opens it again."""
        self._sessions.pop(mode, None)

    def dense_map(self, site: int, fetched: dict[str, np.ndarray], batch: int, extra: dict | None = None) -> np.ndarray:
        """Site ``site``'s map ``[B, H, Tq, Tk]`` from the tensors a session fetched, where that session exposes
        the site as :func:`attnviz.runtime.graph.instrument` does (``extra``: its ``Exposed.site_extra`` entry)."""
        return self._site_map(self._sites[site], extra or {}, fetched, batch, "dense").array()

    # -- feeds ---------------------------------------------------------------------
    def check_feeds(self, feeds: dict[str, np.ndarray], made: Collection[str] = ()) -> dict[str, np.ndarray]:
        """The feeds checked (and cast where the input's dtype differs); ``made``: inputs a chain makes where
        the session runs (:mod:`attnviz.runtime.chain`), checked there, left out here."""
        plan = self._feed_plan()
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
                raise AttnvizError(
                    f"input {name!r} is {with_article(str(a.dtype))} array; feeds must be numeric ({i.describe()})"
                )
            if a.ndim != i.rank:
                raise AttnvizError(f"input {name!r} expects rank {i.rank} {i.describe()}, got shape {tuple(a.shape)}")
            for ax, want in fixed:
                if want != a.shape[ax]:
                    raise AttnvizError(
                        f"input {name!r} expects size {want} on axis {ax} ({i.describe()}), got shape {tuple(a.shape)}"
                    )
            if cast_to is not None and a.dtype != cast_to:
                a = _cast_feed(name, i, a, cast_to)
            _check_values(name, a, vocab)
            out[name] = a
        return out

    def _feed_plan(self) -> dict[str, tuple]:
        """Per input, what :meth:`check_feeds` checks, worked out once: the IOInfo, its fixed axes, the dtype
        feeds are cast to, and the vocabulary size of every embedding table it indexes (token ids beyond it
        crash inside onnxruntime).  A run's checks then cost a few microseconds, not a graph lookup each."""
        if self._plan is None:
            plan = {}
            for i in self.inputs:
                fixed = [(ax, want) for ax, want in enumerate(i.shape) if isinstance(want, int) and want > 0]
                cast_to = np.dtype(i.dtype) if i.dtype in _CASTABLE else None
                vocab = []
                for ci, j in self.graph.consumers.get(i.name, []):
                    n = self.graph.nodes[ci]
                    if n.op_type == "Gather" and j == 1:
                        table = self.graph.initializers.get(n.input[0])
                        if table is not None and table.dims:
                            vocab.append(int(table.dims[0]))
                plan[i.name] = (i, fixed, cast_to, min(vocab) if vocab else None)
            self._plan = plan
        return self._plan

    # -- running ---------------------------------------------------------------------
    def estimate_mb(self, feeds: dict[str, np.ndarray]) -> float:
        b = max((a.shape[0] for a in feeds.values() if np.ndim(a) >= 1), default=1)
        t = max((a.shape[-1] for n, a in feeds.items() if np.ndim(a) == 2), default=0)
        for a in feeds.values():
            if np.ndim(a) == 4:
                t = max(t, (a.shape[-1] // 16) * (a.shape[-2] // 16) + 1)
            elif np.ndim(a) == 3 and a.dtype.kind == "f":
                t = max(t, a.shape[1])
        heads = [s.heads or 12 for s in self._sites]
        return sum(b * h * t * t * 4 for h in heads) / 2**20

    def choose_mode(self, feeds, mode: str = "auto") -> str:
        if mode in ("dense", "ondemand"):
            return mode
        if mode != "auto":
            raise AttnvizError(f"unknown mode {mode!r}; use auto, dense or ondemand")
        if self.estimate_mb(feeds) <= DENSE_LIMIT_MB:
            return "dense"
        # sites that cannot be recomputed per head stay dense inside the on-demand session
        return "ondemand" if any(gr.can_recompute(self.graph, s) for s in self._sites) else "dense"

    def run(self, feeds: dict[str, np.ndarray], mode: str = "auto") -> AttentionResult:
        """Run on raw feeds; return maps in canonical order plus the model's own outputs."""
        p = self.prepare(feeds, mode)
        t0 = time.perf_counter()
        (values,) = run_stages([p])
        return self.finish(p, values, time.perf_counter() - t0)

    def prepare(self, feeds: dict, mode: str = "auto") -> PreparedRun:
        """A run with every map, checked and planned but not made: :func:`run_stages` makes it (alone, or as a
        chain's stage after others), :meth:`finish` reads its maps.  A :class:`~attnviz.runtime.isolation.Spliced`
        feed is made where the session runs, from earlier stages' outputs."""
        if not self._sites:
            raise AttnvizError(f"{self.path.name}: {self.no_attention_reason}")
        made = {k: v for k, v in feeds.items() if isinstance(v, (Spliced, Taken))}
        checked = self.check_feeds({k: v for k, v in feeds.items() if k not in made}, made=made)
        mode = self.choose_mode(checked, mode)
        sess, exposed = self._session(mode)
        return PreparedRun(self, {**checked, **made}, mode, sess, exposed, self._fetch_list(mode, exposed))

    def prepare_outputs(self, feeds: dict) -> PreparedRun:
        """A run of the model's own outputs alone (an embedding file, which has no maps), for :func:`run_stages`."""
        sess, exposed = self._session("dense")
        return PreparedRun(self, self.check_feeds(feeds), "dense", sess, exposed, [o.name for o in self.outputs])

    def finish(self, p: PreparedRun, values: list, run_s: float) -> AttentionResult:
        """The result of a prepared run from the values its fetch list got."""
        feeds, mode, sess, exposed, fetch = p.feeds, p.mode, p.sess, p.exposed, p.fetch
        own = [o.name for o in self.outputs]
        got = dict(zip(fetch, values))
        batch = (
            feeds[self.batch_input].shape[0]
            if self.batch_input in feeds
            else next(iter(feeds.values())).shape[0]
            if feeds
            else 1
        )
        kept, maps, notes = self._collect_maps(exposed, got, batch, mode)
        maps = self._place_windows(kept, maps, feeds) if self.maps_per_image else maps
        sites = [s.info(m.shape[1]) for s, m in zip(kept, maps)]
        if not self._stack_confirmed:
            self._confirm_stack(sites, maps, kept)
            sites = [s.info(m.shape[1]) for s, m in zip(kept, maps)]  # the stacks it may have relabelled
        sites = [_with_stage(i, m) for i, m in zip(sites, maps)]
        for site, m in zip(kept, maps):
            site.heads = site.heads or int(m.shape[1])  # a real run counts heads as well as a probe would
        fidelity = self.fidelity + fid.map_notes(sites, maps, self.attention_config)
        notes = notes + fidelity
        info = {
            "provider": sess.get_providers()[0],
            "provider_note": self.provider_note,
            "mode": mode,
            "run_s": run_s,
            "model": self.name,
            "model_path": str(self.path),
        }
        if info["provider"] == "CUDAExecutionProvider" and hasattr(sess, "pinned"):
            info["pinned"] = sess.pinned()  # the outputs' host buffers page-locked or why not (runtime/pinning.py)
        if notes:
            info["notes"] = notes  # analyze() appends its own notes to these
        if fidelity:
            info["fidelity"] = fidelity  # the export's maps differ from the model's eager attention (also a note)
        if any(getattr(got.get(n), "dtype", None) == np.float16 for n in fetch[len(own) :]):
            # an fp16 graph (a Hub _fp16 file): its maps are float16 numbers shown as float32, and a NaN/Inf in
            # them is float16's range overflowing, not broken weights (analyze.refuse_non_finite says so)
            info["map_dtype"] = "float16"
        return AttentionResult(maps=maps, sites=sites, outputs={n: got[n] for n in own}, info=info)

    def _place_windows(self, kept: list[gr.Site], maps: list, feeds: dict[str, np.ndarray]) -> list:
        """Windowed attention (Swin: ``[B·windows, H, N, N]``, each window's patches attending among themselves)
        would pass for a batch of B·windows inputs with N tokens each: a map right number by number but shown on
        the wrong axes.  With a window layout (``attnviz.windows`` metadata, or a Swin export folder's
        config.json) every site becomes a :class:`~attnviz.core.windows.WindowedMap` over its stage's patch grid,
        once each map has exactly the shape the layout predicts for the size the image was fed; a windowed model
        without a layout, or one that disagrees with it, is refused in one line."""
        image = next((i.name for i in self.inputs if self.roles[i.name] == "image" and i.name in feeds), None)
        if image is None:
            return maps
        batch = feeds[image].shape[0]
        windowed = next(
            ((s, m) for s, m in zip(kept, maps) if m.shape[0] != batch and batch and m.shape[0] % batch == 0), None
        )
        layout = win.WindowLayout.from_meta(md.section(self.meta, "windows"))
        if layout is None:
            if windowed is None:
                return maps
            s, m = windowed
            raise AttnvizError(
                f"{self.path.name}: site {s.node_name!r} attends within windows ({m.shape[0] // batch} windows of "
                f"{m.shape[-1]} patches per image, as Swin does) and no window layout is known to place them on "
                "the image; open the model from its export folder (config.json with model_type swin) or declare "
                "attnviz.windows metadata"
            )
        hw = feeds[image].shape[-2:]
        plan = layout.sites((int(hw[0]), int(hw[1])))
        if len(plan) != len(maps):
            raise AttnvizError(
                f"{self.path.name}: its window layout has {len(plan)} blocks (depths {list(layout.depths)}) but "
                f"the graph has {len(maps)} attention sites; the layout does not describe this model"
            )
        placed = []
        for s, m, sw in zip(kept, maps, plan):
            why = win.layout_problem(sw, m.shape, batch)
            if why:
                raise AttnvizError(
                    f"{self.path.name}: site {s.node_name!r} does not match its window layout at "
                    f"{hw[0]}x{hw[1]} pixels: {why}"
                )
            placed.append(win.WindowedMap(m.array(), batch, sw))
        return placed

    def _fetch_list(self, mode: str, exposed) -> list[str]:
        """The outputs a run of ``mode``'s session fetches: the model's own, then each site's exposed tensors
        (worked out once per session)."""
        known = self._fetch.get(mode)
        if known is not None and known[0] is exposed:  # a session made anew (corpus) may expose other names
            return list(known[1])
        fetch = [o.name for o in self.outputs]
        for s, ex in zip(self._sites, exposed.site_extra):
            names = [ex["q"], ex["k"], *ex.get("side", [])] if "q" in ex else [s.probs]
            names += [ex["mask_index"]] if "mask_index" in ex else []
            fetch += [n for n in names if n not in fetch]
        self._fetch[mode] = (exposed, fetch)
        return list(fetch)

    def _collect_maps(self, exposed, got: dict, batch: int, mode: str) -> tuple[list[gr.Site], list, list[str]]:
        """Maps in canonical order, with the sites they belong to.

        A site in a ``Loop``/``Scan`` body gives one map per iteration (its layers, numbered on); a site in an
        ``If`` branch that did not run (an empty placeholder) gives none; a Softmax found not to normalise the
        key axis is refused with a note, never shown as attention.
        """
        kept: list[gr.Site] = []
        maps: list = []
        notes: list[str] = []
        for s, ex in zip(self._sites, exposed.site_extra):
            raw = got.get(s.probs) if "q" not in ex else None
            if raw is not None and raw.size == 0 and s.g is not None and s.g.path:
                continue  # the If branch holding this site did not run
            if raw is not None and not _normalises_keys(s, raw):
                notes.append(
                    f"site {s.node_name!r} skipped: its Softmax normalises axis {s.extra['softmax_axis']} of a "
                    f"rank-{raw.ndim - bool(s.loop)} tensor, not the key axis, so it is not attention"
                )
                continue
            if s.loop and raw is not None:
                for it in range(raw.shape[0]):
                    kept.append(_iteration_site(s, it))
                    maps.append(self._site_map(s, ex, {s.probs: raw[it]}, batch, mode))
                continue
            kept.append(s)
            maps.append(self._site_map(s, ex, got, batch, mode))
        if len(kept) != len(self._sites) or any(s.loop for s in kept):
            kept = [dataclasses.replace(s, extra=dict(s.extra)) for s in kept]  # this run's numbering only
            _renumber(kept)
        if not kept:
            raise AttnvizError(
                f"{self.path.name}: no attention map came out of this run ({'; '.join(notes) or 'every site was in a branch that did not run'})"
            )
        return kept, maps, notes

    def _site_map(self, s: gr.Site, ex: dict, got: dict, batch: int, mode: str):
        if "q" in ex:
            epi = self._epilogue_session(s, got)
            if epi is not None:
                side = {n: got[n] for n in ex.get("side", [])}
                node = self.graph.nodes[self.graph.producer[s.qk]]
                attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
                return RecomputeMap(got[ex["q"]], got[ex["k"]], side, epi, s.qk, batch, attrs)
            raise AttnvizError(
                f"site {s.node_name!r}: its epilogue could not be rebuilt for per-head recompute; use dense memory mode",
                param="memory",
            )
        if s.method == "mha-qk":
            return DenseMap(softmax(to_bhqk(got[s.probs], batch)))
        if s.method == "recompute-packed":
            node = self.graph.nodes[s.node_index]
            w = self._packed_const(node.input[1])
            bias = self._packed_const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
            mask = None
            if "mask_index" in ex:
                mask = got.get(ex["mask_index"])
                if mask is None:
                    mask = self.graph.const_value(ex["mask_index"])
            pm = PackedMap(got[s.probs].astype(np.float32), w, bias, s.heads, mask, s.extra)
            return pm if mode == "ondemand" else DenseMap(pm.array())
        return DenseMap(to_bhqk(got[s.probs], batch))

    def _packed_const(self, name: str) -> np.ndarray:
        """A weight or bias of a com.microsoft Attention node, as float32 (the site finder refuses non-constant ones)."""
        v = self.graph.const_value(name)
        if v is None:
            raise AttnvizError(
                f"{name!r} of a com.microsoft Attention node is not a constant; its maps cannot be recomputed"
            )
        return v.astype(np.float32)

    def _epilogue_session(self, s: gr.Site, got: dict):
        if s.node_index in self._epilogues:
            return self._epilogues[s.node_index]
        side = gr.epilogue_side_inputs(self.graph, s)
        qv = got[s.q]
        dtypes = {s.qk: (qv.dtype, 4)}
        for n in side:
            dtypes[n] = (got[n].dtype, 4)
        if any(got[n].ndim > 4 for n in side):
            sess = None
        else:
            m = gr.epilogue_model(self.graph, s, self.proto.opset_import, dtypes)
            sess = None if m is None else make_session(_serialize(m), "cpu", threads=1, arena=False)[0]
        self._epilogues[s.node_index] = sess
        return sess

    def _confirm_stack(self, sites: list[SiteInfo], maps, kept: list | None = None) -> None:
        """Single-stack graphs: a causal map (nothing above the diagonal) means a decoder."""
        if self._stack_confirmed or any(s.kind == "cross" for s in self._sites):
            return
        if len({s.stack for s in self._sites}) != 1:
            return
        m = maps[0]
        _, _, tq, tk = m.shape
        if tq < 3 or tq != tk:
            return
        h = m.head(0, 0)
        upper = float(np.abs(np.triu(h, 1)).sum())
        causal = upper < 1e-6
        want = "decoder" if causal else "encoder"
        for s in [*self._sites, *(kept or [])]:
            s.stack = want
        self._stack_confirmed = True

    # -- high level ---------------------------------------------------------------------
    @property
    def tokenizers(self) -> tuple[ip.TextEncoder | None, ip.TextEncoder | None]:
        """(encoder-side, decoder-side) tokenizers."""
        if self._tokenizers is None:
            self._tokenizers = ip.find_tokenizers(self.path, self.meta, self._tokenizer_arg)
        return self._tokenizers

    @property
    def needs_probe(self) -> bool:
        """A single-stack graph whose labels are guesses: a short run tells encoder from decoder first."""
        return not self._stack_confirmed and len({s.stack for s in self._sites}) == 1

    @cached_property
    def position_limit(self) -> PositionLimit | None:
        """The longest token input: metadata, the graph's position table, or the folder's tokenizer_config.json."""
        return find_position_limit(self.meta, self.proto, self.path)

    def pair_with_encoder(self) -> EncoderPair | None:
        """The set that runs this decoder file behind the encoder beside it, when it takes encoder states."""
        return self.encoder_pairing() if self.encoder_pairing is not None else None

    def grid(self, n_keys: int, image_hw: tuple[int, int] | None = None) -> PatchGrid | None:
        return grid_for(self, n_keys, image_hw)

    def load_image(self, source, spec):
        return None  # a file's image goes through attnviz's own resize / rescale / normalise

    def several_images(self, count: int) -> str | None:
        ip.one_image_per_run(self.path.name, count)
        return None

    def logits(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """The logits alone (generation steps): the instrumented session, no maps fetched."""
        sess, _ = self._session("dense")
        names = [o.name for o in self.outputs]
        try:
            return sess.run(["logits" if "logits" in names else names[0]], self.check_feeds(feeds))[0]
        except Exception as e:
            raise AttnvizError(f"the model failed to run during generation: {ort_message(e)}") from None

    def cache_stepper(self) -> FileCache | None:
        """Greedy steps through the KV cache when past inputs are fed by present outputs (else None)."""
        return FileCache.for_model(self)

    def loop_maps(self) -> tuple[tuple[str, float], ...] | None:
        """The dense session's map outputs a generation loop beside the session can stack row by row, each
        with what pads the keys a row could not see yet (0 for probabilities, -inf for scores a softmax
        follows), or None when a site's maps are not one tensor per run (packed recompute, Loop/Scan bodies)."""
        if any(s.method not in _STACKABLE or s.loop for s in self._sites):
            return None
        return tuple((s.probs, -np.inf if s.method == "mha-qk" else 0.0) for s in self._sites)

    def run_loop(
        self,
        plan: StepPlan | None,
        feeds: dict | None,
        length: int,
        token: int,
        n: int,
        eos,
        embed: AttentionModel | None = None,
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
                    self._loop = Loop(start[0], dict(start[1]), length, embed_run)
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
        self,
        runs: list[PreparedRun],
        plan: StepPlan,
        feeds: dict,
        length: int,
        first: First,
        n: int,
        eos,
        embed: AttentionModel | None = None,
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
                    [(p.fetch, p.feeds) for p in runs], lambda i, f, x: _run_bound(runs[i].sess, f, x)
                )
                token = first_token(first, outs)
                ids, finished, got = [token], eos is not None and token == int(eos), {}
                self._loop = None
                if not finished and n > 1:
                    embed_run = loop_run(embed_sess.unguarded) if embed_sess is not None else None
                    self._loop = Loop(start[0], resolve(start[1], outs), length, embed_run)
                    chunk = self._advance_here(sess, token, n - 1, eos)
                    ids, finished, got = ids + chunk.ids, chunk.finished, chunk.maps
        except (AttnvizError, Cancelled):
            raise
        except Exception as e:
            raise AttnvizError(f"generation with the KV cache failed: {ort_message(e)}") from None
        if not got:
            return values, ids, finished, None, {}
        return values, ids, finished, *self._loop_maps(sess, exposed, got, t0)

    def _loop_plan(self, plan: StepPlan, sess, exposed) -> StepPlan:
        """The caller's plan with this file's fetch list and where the loop keeps the cache (the session's provider
        decides: :func:`~attnviz.runtime.steps.loop_device`)."""
        device = loop_device(sess.get_providers()[0])
        self._loop_cache = device or "numpy"
        return dataclasses.replace(plan, fetch=tuple(self._fetch_list("dense", exposed)), device=device)

    def _advance_here(self, sess, token: int, n: int, eos) -> Chunk:
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

    def _loop_maps(self, sess, exposed, got: dict, t0: float) -> tuple[list[np.ndarray], dict]:
        """A chunk's maps in this file's site order, from the rows the loop fetched, and its run facts."""
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


_HEAD_ATTRIBUTES = ("num_heads", "q_num_heads", "kv_num_heads")


def _zero_head_node(graph: gr.Graph) -> str | None:
    """The first fused attention node (ONNX ``Attention``, com.microsoft ``Attention`` / ``MultiHeadAttention`` /
    ``GroupQueryAttention``) whose head-count attribute is 0 or less, as "'NAME' (OP, ATTR=0)"; None if none."""
    for n in graph.nodes:
        if "Attention" not in n.op_type:
            continue
        for a in n.attribute:
            if a.name in _HEAD_ATTRIBUTES and a.type == onnx.AttributeProto.INT and a.i <= 0:
                return f"{n.name or n.op_type!r} ({n.op_type}, {a.name}={a.i})"
    return None


def _normalises_keys(s: gr.Site, raw: np.ndarray) -> bool:
    """A Softmax with an explicit axis must normalise the last (key) axis of the tensor it produced."""
    axis = s.extra.get("softmax_axis")
    if axis is None:
        return True
    rank = raw.ndim - (1 if s.loop else 0)
    return (axis % rank if rank else axis) == rank - 1


def _with_stage(info: SiteInfo, m) -> SiteInfo:
    """A windowed site is labelled with its stage: stages have grids of their own and form blocks of their own."""
    if not isinstance(m, win.WindowedMap):
        return info
    import dataclasses

    return dataclasses.replace(info, stage=m.layout.stage)


def _iteration_site(s: gr.Site, it: int) -> gr.Site:
    import dataclasses

    return dataclasses.replace(s, layer=s.layer + it, node_name=f"{s.node_name}[iteration {it}]", extra=dict(s.extra))


def _renumber(sites: list[gr.Site]) -> None:
    """Layers numbered 0.. per (stack, kind) again after loop iterations were added or sites skipped."""
    count: dict[tuple[str, str], int] = {}
    for s in sites:
        key = (s.stack, s.kind)
        s.layer = count.get(key, 0)
        count[key] = s.layer + 1


_CASTABLE = ("float32", "float16", "float64", "int64", "int32", "bool", "uint8", "int8")


def _cast_feed(name: str, i: IOInfo, a: np.ndarray, cast_to: np.dtype) -> np.ndarray:
    """A feed cast to the input's dtype, refused where the cast would change its values."""
    if cast_to.kind in "iu" and a.dtype.kind == "f":
        if not np.all(np.isfinite(a)) or not np.all(a == np.round(a)):
            raise AttnvizError(f"input {name!r} expects {i.dtype} ids, got {a.dtype} with non-integer values")
    if cast_to.kind == "f" and a.dtype.kind not in "fiub":
        raise AttnvizError(f"input {name!r} expects {i.dtype}, got {a.dtype}")
    if cast_to.kind in "iu" and a.dtype.kind in "iu" and a.size:  # a cast would wrap (uint64 2⁶⁴-1 -> -1)
        lo, hi = np.iinfo(cast_to).min, np.iinfo(cast_to).max
        if int(a.min()) < lo or int(a.max()) > hi:
            raise AttnvizError(f"input {name!r} has values outside {i.dtype}'s range ({a.dtype}); fix the feeds")
    return a.astype(cast_to)


def _check_values(name: str, a: np.ndarray, vocab: int | None) -> None:
    """NaN never is a legal feed (±inf is, as an additive mask); token ids must index the embedding table."""
    if a.dtype.kind == "f" and np.isnan(a).any():
        raise AttnvizError(f"input {name!r} contains NaN values; every map would be NaN — fix the inputs")
    if vocab is None or a.dtype.kind not in "iu" or a.size == 0:
        return
    hi, lo = int(a.max()), int(a.min())
    if hi >= vocab or lo < 0:  # a negative id is no token: Gather would wrap it to the end of the vocabulary
        bad = a[(a >= vocab) | (a < 0)]
        raise AttnvizError(
            f"token id {int(bad.flat[0])} in input {name!r} is out of range: the model's vocabulary has {vocab} "
            f"entries, ids 0 to {vocab - 1}"
        )


@dataclasses.dataclass
class PreparedRun:
    """A model's run checked and planned (:meth:`AttentionModel.prepare`): the feeds as checked, the memory mode,
    the session and what it exposes, the names it fetches."""

    model: AttentionModel
    feeds: dict
    mode: str
    sess: Any
    exposed: Any
    fetch: list[str]


def run_stages(runs: list[PreparedRun]) -> list[list[np.ndarray]]:
    """Prepared runs one after another, a later one's :class:`~attnviz.runtime.isolation.Spliced` feeds made from
    earlier ones' outputs (:mod:`attnviz.runtime.chain`): with crash isolation one request to the child, so the
    outputs in between never leave it; in-process the same stages here.  Each run's values in its fetch order."""
    try:
        if len(runs) == 1:  # one run: the plain request (the child's kept bindings and early replies)
            return [_run_bound(runs[0].sess, runs[0].fetch, runs[0].feeds)]
        if all(isinstance(p.sess, RemoteSession) for p in runs):
            return run_chain([(p.sess, p.fetch, p.feeds) for p in runs])
        return run_local([(p.fetch, p.feeds) for p in runs], lambda i, names, f: _run_bound(runs[i].sess, names, f))
    except AttnvizError:  # the memory check's refusal, a crash, a splice refused: already one line in attnviz's words
        raise
    except Exception as e:
        name = runs[-1].model.path.name
        raise AttnvizError(
            f"the model failed to run: {ort_message(e)}; check the inputs (attnviz inspect {name} lists them)"
        ) from None


def _run_bound(sess, fetch: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Run with I/O binding: outputs land in onnxruntime-allocated host buffers handed to numpy,
    measured ~5 % faster than ``sess.run`` when 72 MB of maps come back (MiniLM, 512 tokens)."""
    if hasattr(sess, "run_bound"):  # a session in the crash-isolation child binds there
        return sess.run_bound(fetch, feeds)
    io = sess.io_binding()
    for k, v in feeds.items():
        io.bind_cpu_input(k, np.ascontiguousarray(v))
    for n in fetch:
        io.bind_output(n, "cpu")
    sess.run_with_iobinding(io)
    return [o.numpy() for o in io.get_outputs()]


class ExtraSession:
    """A session of an edited copy of a model's graph (:meth:`AttentionModel.extra_session`)."""

    def __init__(self, sess):
        self._sess = sess

    @property
    def provider(self) -> str:
        """The execution provider it runs on."""
        return self._sess.get_providers()[0]

    def run(self, fetch: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The ``fetch`` outputs for ``feeds`` (onnxruntime's errors pass through unchanged)."""
        return _run_bound(self._sess, fetch, feeds)


def _serialize(model: onnx.ModelProto) -> bytes:
    try:
        return model.SerializeToString()
    except ValueError as e:  # > 2 GB: protobuf cannot serialize in one piece
        raise AttnvizError(
            f"model too large to instrument in memory ({e}); models over 2 GB are not supported yet"
        ) from None


def open_model(
    path: str | Path, provider: str = "auto", tokenizer: str | None = None, threads: int | None = None
) -> AttentionModel:
    return AttentionModel(path, provider=provider, tokenizer=tokenizer, threads=threads)


def grid_for(model: AttentionModel, n_keys: int, image_hw: tuple[int, int] | None = None) -> PatchGrid | None:
    """How ``n_keys`` image tokens lie on the image: attnviz metadata, else read from the graph at the size the
    image was fed (conv / reshape / concat), else an exact square.  CLS or register tokens are only labelled
    where the graph concatenates them; a layout the graph does not show gets no grid."""
    im = md.section(model.meta, "image")
    hint: tuple[int, int] | None = None
    if im.get("grid"):
        rows, cols = im["grid"]
        hint = (int(rows), int(cols))
    if hint is not None:
        g = PatchGrid.infer(n_keys, hint)
        if g is not None and im.get("offset") is not None:
            g = PatchGrid(int(hint[0]), int(hint[1]), int(im["offset"]))
        return g
    image = next((i.name for i in model.inputs if model.roles.get(i.name) == "image"), None)
    if image is not None and image_hw is not None:
        hw = (int(image_hw[0]), int(image_hw[1]))
        key = (image, hw, n_keys)
        if key not in model._grids:
            model._grids[key] = gr.token_grid(model.graph, image, hw, n_keys)
        tg = model._grids[key]
        if tg is not None:
            return PatchGrid(tg.rows, tg.cols, tg.lead)
        return None
    side = int(round(n_keys**0.5))
    return PatchGrid(side, side, 0) if side * side == n_keys else None


_: type[AttnModel] = AttentionModel  # mypy checks here that a file model satisfies the model Protocol

__all__ = ["AttentionModel", "Cancelled", "IOInfo", "open_model", "TokenAxis", "DenseMap"]
