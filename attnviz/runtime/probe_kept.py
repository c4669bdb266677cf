"""A model's probe (each site's stack and head count: :meth:`AttentionModel.probe`) kept between commands.

A corpus worker probed the model at every command: a session with every map exposed, made for one run on dummy inputs
(~0.1 s CPU of MiniLM's worker start-up), to find what the last command on the same file found.  What a probe finds
depends on the model file, on attnviz's code (finding, labelling and instrumenting the sites, the dummy feeds, the
causal check) and on onnx, onnxruntime and numpy, so the key names all of them: the file's sha256 where every weight
lies in it (:meth:`AttentionModel.file_key`), a digest of attnviz's source
(:func:`attnviz.runtime.optcache.code_digest`), the versions and onnxruntime's build (runtime/ort_build.py), the
provider asked for and whether a GPU is present, and the sites and inputs as the graph and its folder's config.json
label them before the probe.  An entry that does not read back as a probe of these sites is not believed: the probe
runs, and keeps its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnviz.runtime import optcache

if TYPE_CHECKING:
    from attnviz.runtime.model import AttentionModel

FORMAT = 1  # the entry's layout: a new layout is a new key, never a misread entry
KIND = "probe"


@dataclass(frozen=True)
class KeptProbe:
    """:meth:`AttentionModel.probe_state` after a probe, and the provider its session ran on."""

    state: tuple[bool, bool, list[tuple[str, int]]]
    provider: str


def probe_key(model: AttentionModel) -> optcache.GraphKey | None:
    """What names ``model``'s probe in the cache; None where nothing is kept (caching off, the file's hash not
    known yet, a weight outside the file, no attnviz sources to name the code by)."""
    import numpy
    import onnx
    import onnxruntime

    from attnviz.runtime import ort_build
    from attnviz.runtime.isolation import gpu_present

    build = ort_build.installed()
    if build is None:
        return None

    def described(code: str) -> list:
        return [
            FORMAT,
            code,
            onnx.__version__,
            onnxruntime.__version__,
            build,
            numpy.__version__,
            model.requested_provider,
            gpu_present(),
            model.needs_probe,
            [s.to_dict() for s in model.sites],
            [[i.name, i.dtype, i.shape] for i in model.inputs],
            sorted(model.roles.items()),
        ]

    return optcache.code_key(model.file_key(b"probe"), described)


def kept(key: optcache.GraphKey, sites: int, kind: str = KIND) -> KeptProbe | None:
    """The probe an earlier command kept under ``key`` (:func:`probe_key`, taken before this command's probe), None
    where there is none, or one that does not read as a probe of ``sites`` sites.  ``kind``: the cache folder (a
    light worker's probe is kept under its own key: runtime/light_model.py)."""
    return _parsed(optcache.kept_json(kind, key), sites)


def _parsed(entry: object, sites: int) -> KeptProbe | None:
    if not isinstance(entry, dict) or entry.get("format") != FORMAT:
        return None
    state, provider = entry.get("state"), entry.get("provider")
    if not isinstance(provider, str) or not isinstance(state, list) or len(state) != 3:
        return None
    probed, confirmed, found = state
    if not isinstance(probed, bool) or not isinstance(confirmed, bool) or not isinstance(found, list):
        return None
    if len(found) != sites:
        return None
    heads = []
    for s in found:
        if not (isinstance(s, list) and len(s) == 2 and isinstance(s[0], str) and type(s[1]) is int and s[1] > 0):
            return None
        heads.append((s[0], s[1]))
    return KeptProbe((probed, confirmed, heads), provider)


def kept_provider(entry: object) -> str | None:
    """The provider a kept probe's session ran on (an entry as :func:`keep` wrote it, read with
    ``optcache.kept_json``), without checking its sites; None where it does not read as one."""
    if not isinstance(entry, dict) or entry.get("format") != FORMAT or not isinstance(entry.get("state"), list):
        return None
    provider = entry.get("provider")
    return provider if isinstance(provider, str) else None


def forget(key: optcache.GraphKey, kind: str = KIND) -> None:
    """Forget the probe kept under ``key``: an entry that reads back as none (the next probe runs and keeps its own)."""
    optcache.keep_json(kind, key, {"format": FORMAT, "state": None, "provider": None})


def keep(key: optcache.GraphKey, probe: KeptProbe, kind: str = KIND) -> None:
    """Keep a probe under ``key`` (:func:`probe_key` as it was before the probe, which may relabel the stacks):
    only a whole one (every site's heads counted)."""
    probed, confirmed, found = probe.state
    if not probed or not found or any(h < 1 for _, h in found):
        return
    value = {"format": FORMAT, "state": [probed, confirmed, [list(s) for s in found]], "provider": probe.provider}
    optcache.keep_json(kind, key, value)
