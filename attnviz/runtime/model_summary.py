"""What a corpus driver reads of a model file, kept between commands, so that a second command's driver need not
import onnx and parse the file.

The driver of a text corpus on the CPU asks of its model only what the graph and its folder say -- the kind, the
sites and their labels, the inputs and their roles, the metadata, the position limit -- and its tokenizer; the
probe that counts the heads runs in a worker (corpus/run.py).  Opening the model for that imported onnx and
parsed the file: ~0.07 s of a second 1k command's ~0.43 s driver CPU.  :class:`ModelSummary` is that description,
taken from the opened model before its probe and kept under:

- the file's sha256, where a command hashed it before (never hashed for this: :func:`optcache.file_key`);
- the bytes of the sidecar files the open reads (config.json, generation_config.json, preprocessor_config.json,
  tokenizer_config.json: labels, special tokens, position limits);
- attnviz's source digest (:func:`optcache.code_digest`: the code that found and labelled the sites), and onnx's
  and numpy's installations.

A changed file, sidecar, code or onnx names another entry, and the model is opened as before.  Only a model whose
description depends on nothing else is kept: one ``.onnx`` file with its weights in it, an encoder or a decoder of
text, not paired with an encoder file.  What only the model itself can answer (a probe that the worker could not
run, the provider of a session) opens it then (:meth:`ModelSummary.model`), as the driver did before.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path

from attnviz import AttnvizError
from attnviz.core import metadata as md
from attnviz.core.attention import SiteInfo
from attnviz.core.untrusted import JSON_MAX_BYTES, parse_json, read_bytes
from attnviz.runtime import inputs as ip
from attnviz.runtime import optcache
from attnviz.runtime.limits import PositionLimit
from attnviz.runtime.sidecar import sidecar

FORMAT = 1  # the entry's layout: a new layout is a new key, never a misread entry
KIND = "summary"
SIDECARS = ("config.json", "generation_config.json", "preprocessor_config.json", "tokenizer_config.json")
KINDS_KEPT = ("encoder", "decoder")  # (what a text corpus's driver probes in a worker: corpus/run.py _overlaps)


def roles_of(inputs: list[ip.IOInfo], meta: dict) -> dict[str, str]:
    """Each input's role: the metadata's, else guessed from its name, type and rank."""
    given = md.section(meta, "inputs")
    return {i.name: given.get(i.name) or ip.guess_role(i.name, i.dtype, i.rank) for i in inputs}


def kind_of(roles: dict[str, str], sites) -> str:
    """The model's kind from its inputs' roles and its sites' stacks and kinds (objects with ``stack`` and ``kind``)."""
    values = set(roles.values())
    stacks = {s.stack for s in sites}
    has_cross = any(s.kind == "cross" for s in sites)
    if "image" in values:
        return "vision-decoder" if has_cross or "decoder" in stacks else "vision"
    if has_cross or ("encoder" in stacks and "decoder" in stacks):
        return "encoder-decoder"
    if stacks == {"decoder"}:
        return "decoder"
    return "encoder"


DUAL_ENCODER_WORDS = "dual encoder (image tower + text tower)"


def kind_words(kind: str, sites) -> str:
    """The model's kind as inspect, the window and its sidebar say it: a whole dual encoder (CLIP, SigLIP: sites in
    an image tower and a text tower) is no "vision" model to its user, though the engine treats it as one (an
    image input, encoders only); every other kind as it is."""
    towers = {getattr(s, "tower", None) for s in sites}
    return DUAL_ENCODER_WORDS if {"image", "text"} <= towers else kind


class ModelSummary:
    """The opened model as the corpus driver reads it (the same attributes and answers), from a kept entry."""

    def __init__(self, path: Path, entry: dict, provider: str, tokenizer: str | None):
        self.path = path
        self.meta: dict = entry["meta"]
        self.inputs = [ip.IOInfo(str(n), str(d), list(s)) for n, d, s in entry["inputs"]]
        self._sites: list[dict] = entry["sites"]
        self.no_attention_reason: str | None = entry["no_attention_reason"]
        limit = entry["position_limit"]
        self.position_limit = PositionLimit(int(limit[0]), str(limit[1])) if limit is not None else None
        self._probed, self._stack_confirmed = False, bool(entry["confirmed"])
        self.requested_provider, self.tokenizer_arg = provider, tokenizer
        self._tokenizers: tuple[ip.TextEncoder | None, ip.TextEncoder | None] | None = None
        self._model = None

    @property
    def sites(self) -> list[SiteInfo]:
        return [SiteInfo.from_dict(d) for d in self._sites]

    @property
    def roles(self) -> dict[str, str]:
        return roles_of(self.inputs, self.meta)

    @property
    def kind(self) -> str:
        return kind_of(self.roles, self.sites)

    @property
    def tokenizers(self) -> tuple[ip.TextEncoder | None, ip.TextEncoder | None]:
        if self._tokenizers is None:
            self._tokenizers = ip.find_tokenizers(self.path, self.meta, self.tokenizer_arg)
        return self._tokenizers

    def adopt_probe(self, state: tuple[bool, bool, list[tuple[str, int]]]) -> bool:
        """:meth:`AttentionModel.adopt_probe`: a probe's state taken over; False (nothing changed) where its sites
        are not these."""
        probed, confirmed, sites = state
        if len(sites) != len(self._sites):
            return False
        for d, (stack, heads) in zip(self._sites, sites):
            d["stack"], d["heads"] = str(stack), int(heads)
        self._probed, self._stack_confirmed = bool(probed), bool(confirmed)
        return True

    def probe_state(self) -> tuple[bool, bool, list[tuple[str, int]]]:
        """:meth:`AttentionModel.probe_state` of this description (after :meth:`adopt_probe`, the probe's)."""
        return self._probed, self._stack_confirmed, [(str(d["stack"]), int(d["heads"] or 0)) for d in self._sites]

    def model(self):
        """The model itself, opened on first use (what only it can answer)."""
        if self._model is None:
            from attnviz.runtime import open_model

            self._model = open_model(self.path, provider=self.requested_provider, tokenizer=self.tokenizer_arg)
        return self._model

    def probe(self) -> bool:
        """The model's own probe (where no worker's could be taken over), and its state taken over here."""
        model = self.model()
        ran = model.probe()
        self.adopt_probe(model.probe_state())
        return ran

    @property
    def provider(self) -> str:
        return self.model().provider


def kept(path: str | Path, provider: str, tokenizer: str | None) -> ModelSummary | None:
    """The summary an earlier command kept of the model file at ``path`` as it is now, else None."""
    key = _key(Path(path))
    entry = optcache.kept_json(KIND, key) if key is not None else None
    if not _well_formed(entry):
        return None
    assert isinstance(entry, dict)
    return ModelSummary(Path(path), entry, provider, tokenizer)


def describe(model) -> dict | None:
    """What a summary keeps of ``model`` (one file's :class:`AttentionModel` just opened, not yet probed: the caller
    checks the type, as this module is imported by model.py), None where its
    description depends on more than the key names (or is not a text encoder's or decoder's)."""
    if (
        model.encoder_pairing is not None
        or model._probed
        or not model.sites
        or model.kind not in KINDS_KEPT
        or "audio" in model.meta
        or model.data_files  # tensors in a .data file beside it: the file's hash would not name them
    ):
        return None
    limit = model.position_limit
    entry = {
        "format": FORMAT,
        "meta": model.meta,
        "inputs": [[i.name, i.dtype, list(i.shape)] for i in model.inputs],
        "sites": [s.to_dict() for s in model.sites],
        "no_attention_reason": model.no_attention_reason,
        "position_limit": None if limit is None else [limit.tokens, limit.source],
        "confirmed": model._stack_confirmed,
    }
    try:  # read back as kept() reads it: metadata that JSON would not give back as it is is not kept
        copy = parse_json(json.dumps(entry), "a model summary")
    except (TypeError, ValueError, AttnvizError):
        return None
    return copy if copy == entry else None  # (a copy: the model's metadata may change after, with its probe)


def keep(path: str | Path, entry: dict) -> None:
    """Keep ``entry`` (:func:`describe`) for the model file at ``path``: where its sha256 is known by now (the
    driver keeps it once its hash is in) and caching is on."""
    key = _key(Path(path))
    if key is not None:
        optcache.keep_json(KIND, key, entry)


def _key(path: Path) -> optcache.GraphKey | None:
    parts = key_parts(path)
    return optcache.file_key(path, KIND, [FORMAT, *parts]) if parts is not None else None


def key_parts(path: Path) -> list | None:
    """What a summary depends on besides the file's sha256 (its key then names the file): attnviz's source digest,
    the sidecars' bytes, onnx's and numpy's installations; None where one cannot be named (nothing is kept)."""
    code = optcache.code_digest()
    sidecars = _sidecars(path)
    installed = [installed_package("onnx"), installed_package("numpy")]
    if code is None or sidecars is None or None in installed:
        return None
    return [code, sidecars, installed]


def _sidecars(path: Path) -> list | None:
    """Each sidecar the open reads: where it is and its bytes' sha256 (None: absent); None where one cannot be read
    as the open reads it (not a regular file, too large: the open's own guards decide what that means)."""
    out: list = []
    for name in SIDECARS:
        p = sidecar(path, name)
        if p is None:
            out.append([name, None])
            continue
        try:  # through the guard the open reads them with (regular files, JSON's size cap)
            out.append([str(p), hashlib.sha256(read_bytes(p, p.name, JSON_MAX_BYTES)).hexdigest()])
        except AttnvizError:
            return None
    return out


def installed_package(package: str) -> list | None:
    """A package's installation, named without importing it (onnx: ~0.04 s): its ``__init__.py``'s path, size and
    modification time, which an upgrade or a reinstall rewrites."""
    try:
        spec = importlib.util.find_spec(package)
        origin = spec.origin if spec is not None else None
        if origin is None:
            return None
        st = os.stat(origin)
    except (ImportError, OSError, ValueError):
        return None
    return [origin, st.st_size, st.st_mtime_ns]


def _well_formed(entry: object) -> bool:
    """An entry that reads back as :func:`keep` writes it (else it is not believed: the model is opened)."""
    if not isinstance(entry, dict) or entry.get("format") != FORMAT:
        return False
    try:
        meta, inputs, sites, limit = entry["meta"], entry["inputs"], entry["sites"], entry["position_limit"]
        reason, confirmed = entry["no_attention_reason"], entry["confirmed"]
        ok = (
            isinstance(meta, dict)
            and isinstance(inputs, list)
            and all(
                isinstance(i, list)
                and len(i) == 3
                and isinstance(i[0], str)
                and isinstance(i[1], str)
                and isinstance(i[2], list)
                for i in inputs
            )
            and isinstance(sites, list)
            and bool(sites)
            and all(isinstance(s, dict) for s in sites)
            and (limit is None or (isinstance(limit, list) and len(limit) == 2 and type(limit[0]) is int))
            and (reason is None or isinstance(reason, str))
            and isinstance(confirmed, bool)
        )
        if ok:
            for s in sites:
                SiteInfo.from_dict(s)
    except (KeyError, TypeError, ValueError):
        return False
    return ok
