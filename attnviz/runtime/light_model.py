"""A corpus worker's model on a second command, read back from the cache without importing onnx.

A text corpus's worker (on the CPU, or on CUDA where ``cuda`` was asked for or ``auto`` landed) opens the model file
(onnx's import, the parse, the sites and labels), answers the driver's probe from the probe an earlier command kept, and
makes its statistics session from the statistics graph an earlier command kept (runtime/statgraph_kept.py), whose memory
plan parses it again: ~0.065-0.075 s CPU a worker, of which onnx's import is ~0.04 s (bench/RESULTS.md, session 15).
None of it changes from one command to the next on the same file, code and versions.  What the worker needs of it is
kept here, beside the driver's model summary (runtime/model_summary.py, whose key parts it shares):

- the probe (its state and the provider its session ran on), as :mod:`attnviz.runtime.probe_kept` keeps it;
- per statistics session (the sites as described when it was built, the sites wanted, ``rows``, ``join``): the
  cache key of its kept statistics graph, the sha256 of the bytes the session was made from (so the kept graph's
  bytes are handed to onnxruntime as they are, and find the same kept optimised graph: optcache.graph_key), which
  sites the graph reduces, and the memory plan's head (:class:`attnviz.runtime.memory_kept.PlanHead`).

Each is keyed by the file's sha256 (never hashed for this: optcache.file_key), the sidecar files' bytes, attnviz's
source digest, the onnx and numpy installations, onnxruntime's build (runtime/ort_build.py), the provider asked
for and whether a GPU is present.  ``--provider auto`` with a GPU present keeps the provider its probe landed on,
and a later command's worker runs where it says (:func:`landed`, runtime/device.py).
Only a model the summary keeps is kept here (one ``.onnx`` file with every weight in it, a text encoder or
decoder), and only a statistics session that reduces every site it was asked for in the graph, whose optimised
graph is kept.  Whatever is missing, changed or refused (another file, sidecar, code or version, a record that
does not read back, a graph whose bytes are not the recorded ones, a session onnxruntime refuses, sites the
record does not name) opens the model as before (:meth:`LightModel.opened`), at the point where it is needed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from attnviz.core.attention import SiteInfo
from attnviz.runtime import landings, model_summary, optcache
from attnviz.runtime import probe_kept as pk
from attnviz.runtime.extra_session import ExtraSession
from attnviz.runtime.memory_kept import PlanHead

if TYPE_CHECKING:
    import onnx

    from attnviz.runtime.model import AttentionModel

FORMAT = 1  # the records' layout: a new layout is a new key, never a misread record
KIND = "worker"


class LightModel:
    """The model as a corpus worker reads it, from what earlier commands kept (:func:`light`): its description
    (the driver's :class:`~attnviz.runtime.model_summary.ModelSummary`), its probe (:meth:`take_probe`) and its
    statistics sessions (:meth:`stats_session`).  Anything else opens the model itself (:meth:`opened`)."""

    def __init__(self, summary: model_summary.ModelSummary, threads: int | None, device: str):
        self.summary = summary
        self.path = summary.path
        self.threads = threads
        self.requested_provider = summary.requested_provider
        # where its sessions run, known before one exists: "cuda" or "cpu" (``auto``: where it landed before,
        # :func:`landed`); the statistics session is made there, and its graph laid out for it
        self.device = device

    @property
    def meta(self) -> dict:
        return self.summary.meta

    @property
    def inputs(self):
        return self.summary.inputs

    @property
    def sites(self) -> list[SiteInfo]:
        return self.summary.sites

    @property
    def roles(self) -> dict[str, str]:
        return self.summary.roles

    @property
    def kind(self) -> str:
        return self.summary.kind

    @property
    def probed(self) -> bool:
        return self.summary.probe_state()[0]

    def probe_state(self) -> tuple[bool, bool, list[tuple[str, int]]]:
        return self.summary.probe_state()

    def take_probe(self) -> str | None:
        """The probe an earlier command's worker kept (:func:`keep_probe`), taken over: the provider its session
        ran on; None (nothing taken) where there is none for this file, code and versions."""
        key = _key(self.path, self.requested_provider, ["probe"])
        found = pk.kept(key, len(self.summary.sites), KIND) if key is not None else None
        if found is None or not self.summary.adopt_probe(found.state):
            return None
        return found.provider

    def stats_session(self, wanted: set[int], rows: bool, join: bool) -> tuple[ExtraSession, list[int]] | None:
        """The statistics session an earlier command's worker made for these sites and arguments
        (:func:`keep_stats`), made again from the kept graph's bytes, and the sites it reduces; None where nothing
        whole is kept for them, or onnxruntime refuses the session (the caller opens the model as before)."""
        key = _key(self.path, self.requested_provider, _stats_what(self.sites, wanted, rows, join))
        rec = _record(optcache.kept_json(KIND, key) if key is not None else None, wanted)
        if key is None or rec is None:
            return None
        graph_key, sha, on, head, external = rec
        entry = optcache.kept_bytes("statgraph", optcache.GraphKey(key.folder, graph_key))
        graph = entry.split(b"\n", 1)[1] if entry is not None and b"\n" in entry else None
        if graph is None or hashlib.sha256(graph).hexdigest() != sha:
            return None  # not the bytes the session was made from (damaged, or another graph)
        from attnviz.runtime.host import make_session

        optimized = optcache.graph_key(self.path, graph)
        try:
            sess, _ = make_session(
                graph,
                self.device,  # (``auto`` that landed on CUDA: CUDA or an error, never a silent CPU session)
                self.threads,
                external_dir=str(self.path.resolve().parent) if external else None,
                label=self.path.name,
                optimized=optimized,
                plan=head,
            )
        except Exception:  # refused (a kept graph onnxruntime no longer takes): opened and built as before
            if self.device != self.requested_provider:
                # ``auto`` where it landed on CUDA before, and CUDA cannot be used now: the model is opened as
                # ``auto`` opens it (on the CPU, laid out for it), and the next command's worker probes again
                forget_landing(self.path)
            return None
        return ExtraSession(sess, sha, optimized is not None), on

    def opened(self) -> AttentionModel:
        """The model itself, opened as a worker opens it, with the probe taken over where one was."""
        from attnviz.runtime import open_model

        model = open_model(
            self.path, provider=self.requested_provider, tokenizer=self.summary.tokenizer_arg, threads=self.threads
        )
        if self.probed:
            model.adopt_probe(self.probe_state())
        return model


def light(
    path: str | Path, provider: str, tokenizer: str | None, threads: int | None, device: str | None = None
) -> LightModel | None:
    """The model at ``path`` as earlier commands kept it for a worker, else None (open it as before).  Only where
    the ``device`` ("cpu", "cuda"; None: ``provider``'s) is known before a session exists (the caller checks,
    runtime/device.py: the statistics graph's layout depends on it) and for a file."""
    path = Path(path)
    if not path.is_file():
        return None
    summary = model_summary.kept(path, provider, tokenizer)
    return LightModel(summary, threads, device or provider) if summary is not None else None


def landed(path: str | Path) -> str | None:
    """Where ``--provider auto`` landed with a GPU present the last time a worker probed the model at ``path``
    with this onnxruntime build, as the probe it kept says: "cuda" where its session ran on CUDA; None where
    nothing says (no record; another file, code or build; no GPU then; a record forgotten since) or it ran on the
    CPU (a build with a CUDA provider whose CUDA libraries were missing then: installed since, perhaps).  (A
    CPU-only build lands on the CPU whatever it kept: runtime/device.py knows that without a record.)"""
    from attnviz.runtime import ort_build

    path = Path(path)
    build = ort_build.installed()
    key = _key(path, "auto", ["probe"], build) if path.is_file() and build is not None else None
    got = pk.kept_provider(optcache.kept_json(KIND, key)) if key is not None else None
    return "cuda" if got is not None and got.startswith("CUDA") else None


def forget_landing(path: Path) -> None:
    """Forget where ``auto`` landed for ``path`` (:func:`landed` then says nothing): CUDA failed after it said CUDA."""
    key = _key(path, "auto", ["probe"])
    if key is not None:
        pk.forget(key, KIND)
        landings.changed()


def keep_probe(model: AttentionModel, probe: pk.KeptProbe) -> None:
    """Keep ``model``'s probe (a worker's, or one it took from probe_kept) for the next command's light worker."""
    if _keeps(model):
        key = _key(model.path, model.requested_provider, ["probe"])
        if key is not None:
            pk.keep(key, probe, KIND)
            if model.requested_provider == "auto":  # where ``auto`` landed (landed): before_session's record
                landings.changed()


def keep_stats(
    model: AttentionModel,
    wanted: set[int],
    rows: bool,
    join: bool,
    edited: onnx.ModelProto,
    sess: ExtraSession,
    on: list[int],
) -> None:
    """Keep what makes ``sess`` (a statistics session of ``edited``, reducing sites ``on`` in the graph) again
    without ``model``: only where it reduces every site in ``wanted`` there, its graph is kept
    (statgraph_kept) and so is onnxruntime's optimised graph of it."""
    from attnviz.runtime import statgraph_kept as sgk

    if not (_keeps(model) and sess.kept and set(wanted) <= set(on)):
        return
    graph_key = sgk.graph_key(model, wanted, rows, join)
    key = _key(model.path, model.requested_provider, _stats_what(model.sites, wanted, rows, join))
    if graph_key is None or key is None:
        return
    from attnviz.runtime.memory import plan_head

    record = {
        "format": FORMAT,
        "statgraph": graph_key.key,
        "sha256": sess.graph_sha256,
        "on": list(on),
        "plan": plan_head(edited).to_json(),
        "external": model.external_dir is not None,
    }
    optcache.keep_json(KIND, key, record)


def _keeps(model: AttentionModel) -> bool:
    """A model whose worker records are kept: one the driver's summary describes (runtime/model_summary.py)."""
    return (
        model.encoder_pairing is None
        and bool(model.sites)
        and model.kind in model_summary.KINDS_KEPT
        and "audio" not in model.meta
        and not model.data_files
        and model.frames is None
    )


def _stats_what(sites: list[SiteInfo], wanted: set[int], rows: bool, join: bool) -> list:
    return ["stats", [s.to_dict() for s in sites], sorted(wanted), rows, join]


def _key(path: Path, provider: str, what: list, build: list | None = None) -> optcache.GraphKey | None:
    """``build``: onnxruntime's (runtime/ort_build.py: a CPU-only build installed over a GPU one of the same version
    is another key), where the caller has it already."""
    from attnviz.runtime import ort_build
    from attnviz.runtime.isolation import gpu_present

    parts = model_summary.key_parts(path)
    ort = build if build is not None else ort_build.installed()
    if parts is None or ort is None:
        return None
    return optcache.file_key(path, KIND, [FORMAT, *parts, ort, provider, gpu_present(), what])


def _record(value: object, wanted: set[int]) -> tuple[str, str, list[int], PlanHead, bool] | None:
    """A stats record as :func:`keep_stats` wrote it, reducing every ``wanted`` site; else None."""
    if not isinstance(value, dict) or value.get("format") != FORMAT:
        return None
    graph_key, sha, on, external = value.get("statgraph"), value.get("sha256"), value.get("on"), value.get("external")
    head = PlanHead.from_json(value.get("plan"))
    if not (isinstance(graph_key, str) and isinstance(sha, str) and isinstance(external, bool) and head is not None):
        return None
    if not (isinstance(on, list) and all(type(i) is int for i in on) and set(wanted) <= set(on)):
        return None
    return graph_key, sha, on, head, external
