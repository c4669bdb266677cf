"""Work kept on disk between commands: a model file's sha256, and onnxruntime's optimised graph of a session.

A researcher runs ``attnviz corpus`` on one model again and again.  Each command hashed the whole file (90 MB:
~0.1 s CPU) and each of its workers had onnxruntime optimise the same statistics graph (~0.04 s CPU of a ~0.08 s
session).  Both are kept in ``ATTNVIZ_CACHE_DIR`` (default ``$XDG_CACHE_HOME/attnviz``, else ``~/.cache/attnviz``;
``ATTNVIZ_CACHE_DIR=off`` keeps nothing):

- a file's sha256, keyed by what the file system says of the file (device, inode, size, modification and change
  times in ns, as git's index does): any write changes its change time, so a changed file is hashed again;
- an optimised graph (:func:`graph_key`, :func:`optimized_path`), keyed by the model file's sha256, the exact graph bytes handed to
  onnxruntime, onnxruntime's version and this CPU (an optimised graph may hold layouts for its instruction set);
- a session's memory estimates (:func:`kept_json`, :func:`keep_json`; :class:`attnviz.runtime.memory.MemoryPlan`),
  by the same graph key, the shapes, the cap and onnx's and onnxruntime's versions (its shape inferences);
- a model's probe (:mod:`attnviz.runtime.probe_kept`), by the file's sha256 and :func:`code_digest` (what attnviz's
  own code decided is named by that code: an edit or an upgrade works it out again);
- that a model file passed a check whose first call is costly (:func:`file_key`; runtime/loading.py: the nodes'
  input and output counts against onnx's schemas), by its sha256, onnx's version and the checking code; that a
  tokenizer.json passed the JSON guard (:func:`text_key`; runtime/inputs.py), by the text's sha256 and the guard's code;
- what a corpus driver reads of a model file (:mod:`attnviz.runtime.model_summary`), by its sha256, the sidecar
  files the open reads, :func:`code_digest` and onnx's installation;
- a corpus worker's statistics graph (:mod:`attnviz.runtime.statgraph_kept`: the edited graph's bytes and what
  it exposes), by the same two and the sites it was built for;
- what a corpus worker reads of a model file and its kept statistics session, so that a second command's worker
  imports no onnx (:mod:`attnviz.runtime.light_model`), keyed as the driver's summary and onnxruntime's install;
- that ``--provider auto`` found CUDA unusable (:mod:`attnviz.runtime.cuda_kept`), by onnxruntime's install, the
  NVIDIA driver and the library path.

A model with a tensor in a .data file beside it keeps nothing named by its file's hash (the probe, the statistics
graph, the summary: :meth:`attnviz.runtime.model.AttentionModel.file_key`); an optimised graph is named by the bytes
it is made from, which hold the small tensors the loader read in from that file, and is not kept where a large one
stays there.

An optimised graph is loaded with graph optimisation off (:func:`attnviz.runtime.session.make_session`): the graph
onnxruntime would have made again, so the outputs are byte-equal (tests/runtime/test_optcache.py).

An entry that cannot be read is ignored (and written again); writes go to a temporary file that is renamed.  The
folder is held to ``ATTNVIZ_CACHE_MAX_MB`` (default 512), the entries used longest ago removed first, checked only
after a write (:mod:`attnviz.runtime.cache_prune`: old versions' entries would otherwise pile up for good); a killed
write's temporary file is removed there once it is a day old.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from attnviz.runtime import cache_prune

_OFF = ("", "0", "off", "none")
_SHA = re.compile(r"[0-9a-f]{64}")
KEEP_MAX_BYTES = 64 * 2**20  # an optimised graph larger than this (weights folded into it) is not kept
# The cache's kind folders: the only ones an entry is written to, and the only ones pruned (cache_prune).
KINDS = frozenset(
    {"sha256", "optimized", "memory", "probe", "statgraph", "arity", "json-checked", "summary", "worker", "cuda"}
)


def folder() -> Path | None:
    """The cache folder (not created here), or None where caching is off.  An invalid ``ATTNVIZ_CACHE_MAX_MB`` is
    refused here (:func:`cache_prune.max_bytes`: one line, AttnvizError): at a command's first use of the cache,
    as it opens a model, before any work, rather than at a write, which may come late in a command (a session's
    optimised graph)."""
    given = os.environ.get("ATTNVIZ_CACHE_DIR")
    if given is not None and given.strip().lower() in _OFF:
        return None  # nothing kept: the cap means nothing, and is not checked
    cache_prune.max_bytes()
    if given is not None:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "attnviz"


def _stat_key(path: Path) -> str | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"{os.path.realpath(path)}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}"


def _usable(root: Path) -> bool:
    """A cache folder another user may write to could hand this one planted graphs and hashes, so kept work is
    read and written only in a folder this user owns and no one else may write (POSIX); a missing one is made so."""
    if os.name != "posix":
        return True
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.stat(root)
    except OSError:  # a read-only home: nothing kept, each command works it out again
        return False
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def _entry(kind: str, key: str, root: Path | None = None) -> Path | None:
    if kind not in KINDS:  # an unlisted kind would never be pruned
        raise ValueError(f"cache kind {kind!r} is not in optcache.KINDS")
    root = root or folder()
    if root is None or not _usable(root):
        return None
    return root / kind / hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class GraphKey:
    """What names a session's graph in the cache (:func:`graph_key`), and the cache folder it was found in: a
    session made in the crash-isolation child keeps its graph there, whatever that process's environment says."""

    folder: str
    key: str


def known_sha256(path: str | Path) -> str | None:
    """The file's sha256 where a command hashed it before and the file has not changed since; never hashes."""
    key = _stat_key(Path(path))
    entry = _entry("sha256", key) if key else None
    if entry is None:
        return None
    try:
        text = entry.read_text("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not _SHA.fullmatch(text):
        return None
    cache_prune.refresh(entry)
    return text


def stat_key(path: str | Path) -> str | None:
    """What :func:`remember_sha256` compares: taken before hashing, so that a file written meanwhile is not kept."""
    return _stat_key(Path(path))


def remember_sha256(path: str | Path, sha: str, before: str | None) -> None:
    """Keep ``sha`` for the file, if it is still as it was when its hashing began (``before``: :func:`stat_key`)."""
    key = _stat_key(Path(path))
    entry = _entry("sha256", key) if key else None
    if entry is None or key != before or not _SHA.fullmatch(sha):
        return
    _write(entry, sha.encode("ascii"))


def _write(entry: Path, data: bytes) -> None:
    from attnviz import AttnvizError
    from attnviz.core.writes import atomic_write_bytes

    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(entry, data)
    except (OSError, AttnvizError):  # a read-only or full disk: the next command works it out again
        return
    cache_prune.wrote(entry.parent.parent, KINDS, len(data))


def kept_json(kind: str, key: GraphKey) -> object | None:
    """What :func:`keep_json` kept under ``key`` (None: nothing, or not readable as JSON)."""
    from attnviz import AttnvizError
    from attnviz.core.untrusted import parse_json

    entry = _entry(kind, key.key, Path(key.folder))
    if entry is None:
        return None
    try:
        value = parse_json(entry.read_bytes(), str(entry))
    except (OSError, AttnvizError):
        return None
    cache_prune.refresh(entry)
    return value


def keep_json(kind: str, key: GraphKey, value: object) -> None:
    import json

    entry = _entry(kind, key.key, Path(key.folder))
    if entry is not None:
        _write(entry, json.dumps(value).encode())


def kept_bytes(kind: str, key: GraphKey) -> bytes | None:
    """What :func:`keep_bytes` kept under ``key`` (None: nothing, or not readable)."""
    entry = _entry(kind, key.key, Path(key.folder))
    if entry is None:
        return None
    try:
        data = entry.read_bytes()
    except OSError:
        return None
    cache_prune.refresh(entry)
    return data


def keep_bytes(kind: str, key: GraphKey, data: bytes) -> None:
    entry = _entry(kind, key.key, Path(key.folder))
    if entry is not None and len(data) <= KEEP_MAX_BYTES:
        _write(entry, data)


def _cpu() -> str:
    """This CPU's instruction sets (Linux), else the machine's name: optimised graphs are kept per CPU."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return f"{platform.machine()} {platform.processor()}"


def graph_key(model_file: str | Path, graph: bytes) -> GraphKey | None:
    """What names onnxruntime's optimised graph of ``graph`` (bytes of an edited copy of ``model_file``'s graph whose
    weights stay in that file), for :func:`optimized_path` where the session is made; None where nothing is kept:
    caching off, or a model file whose sha256 no command has computed yet (no file is hashed only for this)."""
    root = folder()
    sha = known_sha256(model_file) if root is not None else None
    return None if root is None or sha is None else GraphKey(str(root), f"{sha}|{hashlib.sha256(graph).hexdigest()}")


def file_key(path: str | Path, what: str, described: list) -> GraphKey | None:
    """What names a fact ``what`` about the file at ``path`` (e.g. a check it passed, as ``described``: the versions
    and code that decided it); None where caching is off or the file's sha256 is not known (never hashed for this)."""
    root = _made_folder()
    sha = known_sha256(path) if root is not None else None
    return None if root is None or sha is None else fact_key(root, [sha, what, described])


def text_key(text: str, what: str, described: list) -> GraphKey | None:
    """What names a fact ``what`` about ``text`` (by its sha256; e.g. that it passed a check); None where caching
    is off or no command made the cache folder yet."""
    root = _made_folder()
    if root is None:
        return None
    return fact_key(root, [hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(), what, described])


def fact_key(root: Path, described: list) -> GraphKey:
    return GraphKey(str(root), json.dumps(described))


def passed(kind: str, key: GraphKey | None) -> bool:
    """Whether an earlier process kept a pass (:func:`keep_passed`) of the check ``key`` names (a file's or a text's:
    :func:`file_key`, :func:`text_key`).  Only passes are kept: a refusal is worked out, and said, every time."""
    kept = kept_json(kind, key) if key is not None else None
    return isinstance(kept, dict) and kept.get("passed") is True  # (is: JSON's 1 equals True)


def keep_passed(kind: str, key: GraphKey | None) -> None:
    if key is not None:
        keep_json(kind, key, {"passed": True})


def sources_digest(*files: str | None) -> str | None:
    """sha256 of the source ``files`` (the code that makes a check: a kept pass names it); None where one cannot be
    read (nothing is kept then)."""
    h = hashlib.sha256()
    for f in files:
        try:
            if f is None:  # a module without a file (a frozen install)
                return None
            h.update(Path(f).read_bytes() + b"\0")
        except OSError:
            return None
    return h.hexdigest()


def _made_folder() -> Path | None:
    """The cache folder where it exists: a folder no command made yet holds nothing, and is not made for a lookup
    (opening a model must not create it)."""
    root = folder()
    return root if root is not None and root.is_dir() else None


def optimized_path(key: GraphKey, onnxruntime_version: str) -> str | None:
    """The file of a :func:`graph_key`'s optimised graph for a CPU session of this onnxruntime on this CPU."""
    entry = _entry(
        "optimized", "|".join([key.key, onnxruntime_version, "CPUExecutionProvider", _cpu()]), Path(key.folder)
    )
    return None if entry is None else str(entry.with_suffix(".onnx"))


@functools.cache
def code_digest() -> str | None:
    """:func:`source_digest` of the attnviz package this process runs (computed once a process: ~5 ms)."""
    return source_digest(Path(__file__).resolve().parents[1])


def source_digest(package: Path) -> str | None:
    """sha256 of every ``.py`` file under ``package``, by relative path and bytes; None where there is none (an
    install without sources): work that attnviz's code decides (a probe's labels and head counts) is then not
    kept, as nothing would say which code made it."""
    h = hashlib.sha256()
    found = False
    try:
        for dirpath, dirnames, filenames in os.walk(package):
            dirnames.sort()  # os.walk's order is the file system's: the digest must not depend on it
            for name in sorted(filenames):
                if name.endswith(".py"):
                    path = Path(dirpath, name)
                    h.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
                    found = True
    except OSError:
        return None
    return h.hexdigest() if found else None


def optimized_written(entry: str) -> None:
    """onnxruntime wrote an optimised graph: over :data:`KEEP_MAX_BYTES` (weights folded into it) it is not kept;
    one kept counts towards the folder's cap (:func:`attnviz.runtime.cache_prune.wrote`)."""
    try:
        size = os.path.getsize(entry)
        if size > KEEP_MAX_BYTES:
            os.unlink(entry)
            return
    except OSError:
        return
    cache_prune.wrote(Path(entry).parent.parent, KINDS, size)


def used(entry: str) -> None:
    """An optimised graph (:func:`optimized_path`) was read: it counts as used (cache_prune)."""
    cache_prune.refresh(entry)


def code_key(file_key: GraphKey | None, described: Callable[[str], list]) -> GraphKey | None:
    """A key for work that depends on a model file (``file_key``: its sha256, :meth:`AttentionModel.file_key`), on
    attnviz's code (:func:`code_digest`) and on what ``described(code)`` lists; None where the file's hash or the
    sources are not known (nothing is kept then)."""
    code = code_digest() if file_key is not None else None
    if file_key is None or code is None:
        return None
    return GraphKey(file_key.folder, f"{file_key.key}|{json.dumps(described(code), sort_keys=True)}")
