"""Open an ONNX model, find its attention, run it and return core objects."""

from __future__ import annotations

import dataclasses
import threading
import time
import weakref
from collections.abc import Callable, Collection, Mapping
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from attnviz import AttnvizError
from attnviz.core import metadata as md
from attnviz.core.attention import VISION_TOWER_KEY, AttentionResult, DenseMap, PatchGrid, SiteInfo, TokenAxis
from attnviz.runtime import analyze as engine
from attnviz.runtime import assemble as asm
from attnviz.runtime import feedcheck as fc
from attnviz.runtime import fidelity as fid
from attnviz.runtime import graph as gr
from attnviz.runtime import inputs as ip
from attnviz.runtime import probing

# run_bound's old private name here: bench/ and tests' spies read and patch model._run_bound
from attnviz.runtime.chain import run_bound as _run_bound
from attnviz.runtime.chain import run_local
from attnviz.runtime.errors import Cancelled, ort_message
from attnviz.runtime.extra_session import ExtraSession
from attnviz.runtime.host import ModelCrashed, RemoteSession, make_session, run_chain
from attnviz.runtime.inputs import IOInfo
from attnviz.runtime.isolation import Spliced, Taken
from attnviz.runtime.kept import helper_arena
from attnviz.runtime.limits import PositionLimit, find_position_limit
from attnviz.runtime.loading import load_model_and_data
from attnviz.runtime.model_loop import ModelLoop
from attnviz.runtime.model_summary import kind_of, roles_of
from attnviz.runtime.naming import model_name

# PROBE_MAX_ELEMENTS and the map objects are re-exported: their home was this module
from attnviz.runtime.probing import PROBE_MAX_ELEMENTS  # noqa: F401
from attnviz.runtime.protocol import AttnModel, EncoderPair
from attnviz.runtime.sidecar import sidecar_json
from attnviz.runtime.sitemaps import PackedMap, RecomputeMap, softmax, to_bhqk  # noqa: F401

if TYPE_CHECKING:
    from attnviz.runtime.generate import FileCache
    from attnviz.runtime.optcache import GraphKey
    from attnviz.runtime.steps import Loop
    from attnviz.runtime.vlm_tower import TowerFrames

# a dtype compared with a dtype, not with the type np.float16: numpy makes a dtype of that for each comparison
_FLOAT16 = np.dtype(np.float16)
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


class AttentionModel(ModelLoop, engine.AnalyzeMethod):
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
        # data_files: the files beside it that its tensors come from (a kept summary's key names this file only)
        self.proto, self.external_dir, self.data_files = load_model_and_data(self.path)
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
        unshowable = fid.unshowable(model_type)
        if unshowable:  # an architecture whose attention is known to be no [query, key] map: none shown, and why
            sites, self.no_attention_reason = [], unshowable
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
        # its own sessions' optimised graphs kept on disk as extra_session(keep=True) keeps them (a corpus worker's
        # probe: the dense session it opens for one run on dummy inputs)
        self.keep_optimized = False
        # extra_session's sessions, alive while their callers hold them (a dropped one frees its memory)
        self._extra_sessions: weakref.WeakValueDictionary[str, ExtraSession] = weakref.WeakValueDictionary()
        self._plan: dict[str, tuple] | None = None  # check_feeds' per-input checks (_feed_plan)
        self._roles: tuple[tuple, dict[str, str]] | None = None  # (what they were worked out from, the roles)
        self._fetch: dict[str, tuple] = {}  # per session mode: (its exposed outputs, the names a run fetches)
        self._epilogues: dict[int, object] = {}
        # per site: its head model's session and its pooling twin's (runtime/kept.py), None: no head model
        self._heads: dict[int, tuple | None] = {}
        self.provider_note = ""
        # the graph or the config already said why this is an encoder (a dual encoder's tower): no map overrules it
        self._stack_confirmed = any("encoder_why" in s.extra for s in self._sites)
        self._probed = False
        self._grids: dict[tuple, gr.TokenGrid | None] = {}  # (image input, fed size, keys) -> the graph's grid
        self.encoder_pairing = encoder_pairing
        # a VLM's vision file opened alone (Idefics3's): its images are its family processor's frames, its maps one
        # per row (runtime/vlm_tower.py); folder.open_model sets it, as it sets encoder_pairing
        self.frames: TowerFrames | None = None
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
            self._roles = (key, roles_of(self.inputs, self.meta))
        return dict(self._roles[1])

    @property
    def kind(self) -> str:
        return kind_of(self.roles, self._sites)

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
        feeds = probing.dummy_feeds(self.inputs, self.roles)
        if feeds is None:
            return False
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
        } | self._describe_audio()

    def _describe_audio(self) -> dict:
        """A raw-sample speech encoder's hearing (wav2vec2: its rate and frames), for ``inspect``."""
        from attnviz.runtime.waveform import WaveSpec, on_raw_samples

        return {"audio": WaveSpec.from_dict(self.meta["audio"]).describe()} if on_raw_samples(self.meta) else {}

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
                    keep=_kept_names(exposed, self.outputs) if mode == "ondemand" else (),
                    optimized=self._graph_key(self.proto, data) if self.keep_optimized else None,
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

    def extra_session(self, edited: onnx.ModelProto, key: str, keep: bool = False) -> ExtraSession:
        """A session of ``edited`` (a changed copy of this model's graph) with this model's provider, threads,
        external-data folder and crash isolation.  Cached under ``key`` while the caller holds it: the same key
        returns the same session, so the key must name everything the edit depends on.  ``keep``: onnxruntime's
        optimised graph of it is kept on disk for the next command's session (:mod:`attnviz.runtime.optcache`;
        on the CPU, where this model file's sha256 is known and every weight lies in the file itself)."""
        extra = self._extra_sessions.get(key)
        if extra is None:
            import hashlib

            data = _serialize(edited)
            optimized = self._graph_key(edited, data) if keep else None
            sess, _ = make_session(
                data,
                self.requested_provider,
                self.threads,
                external_dir=self.external_dir,
                label=self.path.name,
                optimized=optimized,
            )
            digest = hashlib.sha256(data).hexdigest()
            extra = self._extra_sessions[key] = ExtraSession(sess, digest, optimized is not None)
        return extra

    def _graph_key(self, edited: onnx.ModelProto, data: bytes) -> GraphKey | None:
        """:func:`attnviz.runtime.optcache.graph_key` of ``data`` (``edited`` serialised, or a graph with its
        weights), None where a weight lies outside this file (a .data file beside it: the key, this file's hash,
        would not name those weights).  The small tensors the loader read in from a .data file are in ``data``,
        which the key hashes: new values there are another key."""
        from attnviz.runtime import optcache
        from attnviz.runtime.loading import all_tensors

        for t in all_tensors(edited):
            if t.data_location == onnx.TensorProto.EXTERNAL:
                where = next((e.value for e in t.external_data if e.key == "location"), None)
                if where != self.path.name:
                    return None
        return optcache.graph_key(self.path, data)

    def file_key(self, what: bytes) -> GraphKey | None:
        """The cache's name of ``what`` about this model's own file (:meth:`_graph_key` of its graph: None where
        nothing is kept), e.g. its probe (:mod:`attnviz.runtime.probe_kept`), its statistics graph
        (:mod:`attnviz.runtime.statgraph_kept`).  None for a model with any tensor in a .data file beside it, as
        for its kept summary (runtime/model_summary.py): the loader read the small ones into the graph, which then
        no longer says where they lay, and this key names the .onnx file's bytes and ``what``, not the graph's
        (:meth:`_graph_key`'s optimised graph and memory estimates hash the bytes that hold them: a new .data file
        there is a new key).  Nothing hashes a .data file (a corpus driver hashes the .onnx file), and naming them
        would mean hashing gigabytes for the models that have them."""
        if self.data_files:
            return None
        return self._graph_key(self.proto, what)

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
        if self.frames is not None:  # a VLM's tower alone: the frames' mask made, a rank-4 image refused
            feeds = self.frames.feeds(feeds)
        return fc.check_feeds(self._feed_plan(), feeds, made)

    def _feed_plan(self) -> dict[str, tuple]:
        """Per input, what :meth:`check_feeds` checks, worked out once: the IOInfo, its fixed axes, the dtype
        feeds are cast to, and the vocabulary size of every embedding table it indexes (token ids beyond it
        crash inside onnxruntime).  A run's checks then cost a few microseconds, not a graph lookup each."""
        if self._plan is None:
            self._plan = fc.feed_plan(self.inputs, self.graph)
        return self._plan

    # -- running ---------------------------------------------------------------------
    def estimate_mb(self, feeds: dict[str, np.ndarray]) -> float:
        b = max((a.shape[0] for a in feeds.values() if np.ndim(a) >= 1), default=1)
        audio = [n for n, a in feeds.items() if self.roles.get(n) == "audio" and np.ndim(a) >= 2]
        t = max((a.shape[-1] for n, a in feeds.items() if np.ndim(a) == 2 and n not in audio), default=0)
        for n in audio:  # a clip's samples (or log-mel frames) are not its positions: 320 samples make one frame
            from attnviz.runtime.audio_specs import map_positions

            t = max(t, map_positions(self.meta, feeds[n]))
        for n, a in feeds.items():
            if n in audio:
                continue
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
        from attnviz.core.limits import memory_cap

        # dense keeps every map and makes each from scores as large: past half the memory cap (--max-memory) the
        # run is refused where on-demand fits, and a refusal's --max-seconds suggestion (found on the plan of the
        # mode this run took) must not take the run that follows it to the other mode (a 0.2 GB cap: 60 s on
        # demand said 45.4 s, which went dense and was refused again)
        if self.estimate_mb(feeds) <= min(DENSE_LIMIT_MB, memory_cap()[0] / 2 / 2**20):
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
        mode = self.choose_mode(checked, mode if self.frames is None else self.frames.mode(checked, mode))
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
        kept, maps, notes = self._collect_maps(exposed, got, batch, mode, self._tower_batches(feeds))
        if self.frames is not None:  # a VLM's tower alone: each row's frames' maps as one (as the whole model's)
            maps = self.frames.maps(feeds, maps)
        elif self.maps_per_image:
            roles = self.roles  # (a copy each time it is asked)
            image = next((i.name for i in self.inputs if roles[i.name] == "image" and i.name in feeds), None)
            maps = asm.place_windows(self.path.name, self.meta, image, kept, maps, feeds)
        sites = [s.info(m.shape[1]) for s, m in zip(kept, maps)]
        if not self._stack_confirmed:
            self._confirm_stack(sites, maps, kept)
            sites = [s.info(m.shape[1]) for s, m in zip(kept, maps)]  # the stacks it may have relabelled
        sites = [asm.with_stage(i, m) for i, m in zip(sites, maps)]
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
        if self.frames is not None:  # a VLM's vision file alone: its block named as the whole model's (Block.name)
            info[VISION_TOWER_KEY] = True
        if info["provider"] == "CUDAExecutionProvider" and hasattr(sess, "pinned"):
            info["pinned"] = sess.pinned()  # the outputs' host buffers page-locked or why not (runtime/pinning.py)
        if notes:
            info["notes"] = notes  # analyze() appends its own notes to these
        if fidelity:
            info["fidelity"] = fidelity  # the export's maps differ from the model's eager attention (also a note)
        if any(getattr(got.get(n), "dtype", None) == _FLOAT16 for n in fetch[len(own) :]):
            # an fp16 graph (a Hub _fp16 file): its maps are float16 numbers shown as float32, and a NaN/Inf in
            # them is float16's range overflowing, not broken weights (analyze.refuse_non_finite says so)
            info["map_dtype"] = "float16"
        return AttentionResult(maps=maps, sites=sites, outputs={n: got[n] for n in own}, info=info)

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

    def _collect_maps(
        self, exposed, got: dict, batch: int, mode: str, towers: dict[str, int] | None = None
    ) -> tuple[list[gr.Site], list, list[str]]:
        """Maps in canonical order, with the sites they belong to (:func:`attnviz.runtime.assemble.collect_maps`);
        ``towers``: a dual encoder's batch per tower where its towers were fed apart (:meth:`_tower_batches`)."""
        towers = towers or {}
        return asm.collect_maps(
            self.path.name,
            self._sites,
            exposed,
            got,
            lambda s, ex, fetched: self._site_map(s, ex, fetched, towers.get(str(s.extra.get("tower")), batch), mode),
        )

    def _tower_batches(self, feeds: dict) -> dict[str, int]:
        """A dual encoder's rows per tower, ``{"image": images, "text": texts}``: its towers run apart in one
        graph, so each image once and each text once can be fed (runtime/dual_towers.py), and a site's map is
        shaped by its own tower's batch, not the run's first input's.  Empty for every other model (and a dual
        encoder's rows fed as pairs have the same batch in both)."""
        if not any(s.extra.get("tower") == "text" for s in self._sites):
            return {}
        roles = self.roles
        fed = {roles.get(n): v.shape[0] for n, v in feeds.items() if isinstance(v, np.ndarray) and v.ndim >= 1}
        return {t: int(fed[r]) for t, r in (("image", "image"), ("text", "tokens")) if r in fed}

    def _site_map(self, s: gr.Site, ex: dict, got: dict, batch: int, mode: str):
        return asm.site_map(self.graph, s, ex, got, batch, mode, self._epilogue_session, self._head_session)

    def _head_session(self, s: gr.Site, got: dict, attrs: Mapping):
        """Site ``s``'s head model's session and its pooling twin's (:func:`attnviz.runtime.graph.head_model`; the
        twin None below its opset), made once beside the session that keeps its Q and Kᵀ on their device: the
        same provider, in the same process (the child's); each made on its first request.  None: no head model."""
        if s.node_index in self._heads:
            return self._heads[s.node_index]
        side = gr.epilogue_side_inputs(self.graph, s)
        q, k = got[s.q], got[s.k]
        dtypes = {s.qk: (q.dtype, 4), **{n: (got[n].dtype, 4) for n in side}}
        # side inputs the run left beside Q and Kᵀ: fed whole, sliced in the head model (runtime/kept.py)
        kept_side = {n: len(got[n].shape) for n in side if not isinstance(got[n], np.ndarray)}
        made = None
        if not any(len(got[n].shape) > 4 for n in side):
            ranks = (len(q.shape), len(k.shape))
            models = [
                gr.head_model(self.graph, s, self.proto.opset_import, dtypes, attrs, ranks, pool=p, kept_side=kept_side)
                for p in (False, True)
            ]
            if models[0] is not None:
                made = tuple(None if m is None else self._lazy(_serialize(m)) for m in models)
        self._heads[s.node_index] = made
        return made

    def _lazy(self, data: bytes) -> LazySession:
        """A session of the serialized model ``data`` on this model's provider, made on its first request; a helper
        (runtime/session.py: on CUDA it gives back what a request grew, on the CPU it shares one arena with the
        other helpers), so that the dozen site sessions an overview makes do not each keep their peak (a request is
        up to :data:`~attnviz.runtime.sitemaps.KeptMap.SITE_ELEMS` scores: ~0.25 GB an intermediate)."""
        helper = not helper_arena()  # read where the model is: the parent, which sends it to the child
        return LazySession(
            lambda: make_session(data, self.requested_provider, self.threads, label=self.path.name, helper=helper)[0]
        )

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
        want = probing.stack_of(maps[0])
        if want is None:
            return
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

    @property
    def vision_tower(self) -> bool:
        """A VLM's vision file opened alone: its encoder sites are the tower's, shown as "vision" (as its results'
        blocks are: ``info[VISION_TOWER_KEY]``)."""
        return self.frames is not None

    @cached_property
    def position_limit(self) -> PositionLimit | None:
        """The longest token input: metadata, the graph's position table, or the folder's tokenizer_config.json."""
        return find_position_limit(self.meta, self.proto, self.path)

    def pair_with_encoder(self) -> EncoderPair | None:
        """The set that runs this decoder file behind the encoder beside it, when it takes encoder states."""
        return self.encoder_pairing() if self.encoder_pairing is not None else None

    def grid(self, n_keys: int, image_hw: tuple[int, int] | None = None) -> PatchGrid | None:
        tower = self.frames.grid(n_keys) if self.frames is not None else None
        return tower or grid_for(self, n_keys, image_hw)

    def load_image(self, source, spec):
        # a file's image goes through attnviz's own resize / rescale / normalise; a VLM's tower alone, its family's
        return self.frames.load_image(source, spec) if self.frames is not None else None

    def several_images(self, count: int) -> str | None:
        ip.one_image_per_run(self.path.name, count)
        return None

    def vision_grids(self, n_keys: int) -> list[PatchGrid]:
        return []  # one image a run

    def tower_rows(self, n_keys: int) -> list[PatchGrid]:
        return self.frames.rows(n_keys) if self.frames is not None else []  # else every row's image on one grid

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
        from attnviz.runtime.generate import FileCache  # (a run without --generate never loads generate.py)

        return FileCache.for_model(self)


def _kept_names(exposed, outputs: list[IOInfo]) -> tuple[str, ...]:
    """The Q and Kᵀ an on-demand session exposes, and their epilogues' side inputs (a mask), which its runs may
    leave on the device (runtime/kept.py): never one that is also a model output (the caller reads those as
    arrays), and a site's side inputs only where its Q or Kᵀ stays there too (its head model then slices them:
    a site whose Q and Kᵀ are both model outputs is recomputed on the host, from host arrays)."""
    own = {o.name for o in outputs}
    names: list[str] = []
    for ex in exposed.site_extra:
        qk = [n for n in (ex["q"], ex["k"]) if n not in own] if "q" in ex else []
        if qk:
            names += qk + [n for n in ex.get("side", []) if n not in own]
    return tuple(dict.fromkeys(names))


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


class LazySession:
    """A session made on first use: a site's head model (:meth:`AttentionModel._head_session`) is opened when one of
    its heads is first drawn, not for every site at a model's first on-demand run (a CUDA session each)."""

    def __init__(self, make: Callable[[], Any]):
        self._make = make
        self._sess: Any = None
        self._lock = threading.Lock()  # the window's thread and its worker may draw at once: one session

    def _get(self):
        with self._lock:
            if self._sess is None:
                self._sess = self._make()
            return self._sess

    def get_outputs(self) -> list:
        return self._get().get_outputs()

    def run_kept(self, names, feeds, values, hints) -> list:
        return self._get().run_kept(names, feeds, values, hints)

    def helper_memory(self):
        """How the session holds memory (:func:`attnviz.runtime.kept.helper_memory`; made here if not yet)."""
        return self._get().helper_memory()


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
