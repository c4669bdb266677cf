"""The stamps of bench/corpus_timeline.py: installed as ``sitecustomize`` on PYTHONPATH (no source edits).

Every process of a timed command (the driver, its pool workers, the resource tracker, plain's one process) appends
one line per event to ``$ATTNVIZ_TL_DIR/<pid>.tl``: the event, ``CLOCK_BOOTTIME`` (the clock ``/proc/PID/stat``'s
start time counts in, so a process's birth lies on the same axis as its stamps) and the process's CPU seconds.  One
``os.write`` of one line each, so a pool worker that is terminated keeps every stamp it made.  Events:

- ``up``: this interpreter reached its site customisation; ``born``: the kernel's start time of the process;
- ``import NAME``: start and end of the import of a key module (onnx, onnxruntime, tokenizers, pyarrow, numpy,
  torch, attnviz.corpus.run / reduce / graph_reduce);
- ``call NAME``: start and end of each call of the functions in :data:`WRAPS` (the driver's and the workers' phases,
  each session made, with its provider; plain's tokenisation, session and loop), wrapped right after their module
  ran, so every later lookup (module globals, ``from`` imports, pickled pool tasks) finds the wrapper;
- ``call ort.InferenceSession`` / ``call ort.first_run`` / ``call ort.preload_dlls``: each onnxruntime session made,
  the process's first run (``run`` or IO binding's), the CUDA libraries' preload (runtime/session.py's, on CUDA);
- ``exit``: atexit, or ``os._exit`` (the corpus command leaves without the interpreter's teardown).

Without ``ATTNVIZ_TL_DIR`` it does nothing but hand over to the next ``sitecustomize`` on the path, as it does after
installing itself (an image may ship one).
"""

import os
import sys
import time

_DIR = os.environ.get("ATTNVIZ_TL_DIR")

# module -> attributes to wrap ("Class.method" for methods; classmethods are wrapped as such)
WRAPS = {
    "attnviz.corpus.prestart": ["prestart"],
    "attnviz.corpus.engines": [
        "WarmPool.start",
        "_probe",
        "_warm_up",
        "_work",
        "_enter_worker",
        "WorkerSetup.light",
        "WorkerSetup.probed",
        "WorkerSetup.warm",
        "WorkerSetup.reducer",
    ],
    "attnviz.corpus.run": ["_open", "_probe_while_reading", "_adopt_probe", "_planned", "_read_again", "_versions"],
    "attnviz.corpus.output": ["write", "prepare_write"],
    "attnviz.corpus.reduce": ["BatchReducer.prepare", "Accumulator.fold"],
    "attnviz.corpus.graph_reduce": ["InGraphReducer.build", "InGraphReducer.kept"],
    "attnviz.runtime.session": ["make_session"],
    "attnviz.runtime.folder": ["open_model"],
    "attnviz.runtime.model": ["AttentionModel.probe", "AttentionModel.adopt_probe"],
    "attnviz.runtime.light_model": ["light", "LightModel.take_probe", "LightModel.stats_session"],
    "attnviz.runtime.statgraph_kept": ["stats_model"],
    "corpus_bench": ["plain_batches", "_plain_session", "plain_rate"],
}
IMPORTS = {
    "onnx",
    "onnxruntime",
    "tokenizers",
    "pyarrow",
    "numpy",
    "torch",
    "attnviz.corpus.run",
    "attnviz.corpus.reduce",
    "attnviz.corpus.graph_reduce",
}


def _boot() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


_FD = None


def stamp(event: str, what: str = "") -> None:
    if _FD is None:
        return
    line = f"{event}\t{what}\t{_boot():.6f}\t{time.process_time():.6f}\n"
    os.write(_FD, line.encode())


def _wrap(fn, name: str):
    import functools

    @functools.wraps(fn)
    def wrapper(*a, **k):
        label = name
        if name.endswith("make_session"):  # each session made, with the provider asked for
            label = f"{name}[{k.get('provider', a[1] if len(a) > 1 else 'auto')}]"
        stamp("call+", label)
        try:
            return fn(*a, **k)
        finally:
            stamp("call-", label)

    return wrapper


def _patch(module) -> None:
    for attr in WRAPS.get(module.__name__, ()):
        owner, _, leaf = attr.rpartition(".")
        target = module
        for part in owner.split(".") if owner else ():
            target = getattr(target, part, None)
        if target is None:
            continue
        raw = target.__dict__.get(leaf) if isinstance(target, type) else getattr(target, leaf, None)
        if raw is None:
            continue
        name = f"{module.__name__.rsplit('.', 1)[-1]}.{attr}"
        if isinstance(raw, classmethod):
            setattr(target, leaf, classmethod(_wrap(raw.__func__, name)))
        elif isinstance(raw, staticmethod):
            setattr(target, leaf, staticmethod(_wrap(raw.__func__, name)))
        elif callable(raw):
            setattr(target, leaf, _wrap(raw, name))
    if module.__name__ == "onnxruntime":
        _patch_ort(module)


def _patch_ort(ort) -> None:
    """Each session made (``ort.InferenceSession``), and the process's first run (``run`` or IO binding's)."""
    cls = ort.InferenceSession
    init = cls.__init__
    first = []

    def __init__(self, *a, **k):
        stamp("call+", "ort.InferenceSession")
        try:
            init(self, *a, **k)
        finally:
            stamp("call-", "ort.InferenceSession")

    def once(run):
        def run_(self, *a, **k):
            if first:
                return run(self, *a, **k)
            first.append(1)
            stamp("call+", "ort.first_run")
            try:
                return run(self, *a, **k)
            finally:
                stamp("call-", "ort.first_run")

        return run_

    cls.__init__ = __init__
    preload = getattr(ort, "preload_dlls", None)
    if preload is not None:  # (runtime/session.py calls it before each CUDA session; plain never does)
        ort.preload_dlls = _wrap(preload, "ort.preload_dlls")
    for name in ("run", "run_with_iobinding", "run_with_ort_values"):
        if hasattr(cls, name):
            setattr(cls, name, once(getattr(cls, name)))


class _Finder:
    """Finds a watched module with the other finders and wraps its loader's ``exec_module`` (the instance's)."""

    def find_spec(self, name, path, target=None):
        if name not in WRAPS and name not in IMPORTS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute = loader.exec_module

        def exec_module(module, execute=execute, name=name):
            if name in IMPORTS:
                stamp("import+", name)
            try:
                execute(module)
            finally:
                if name in IMPORTS:
                    stamp("import-", name)
            _patch(module)

        try:
            loader.exec_module = exec_module
        except Exception:
            pass
        return spec


def _install() -> None:
    global _FD
    _FD = os.open(os.path.join(_DIR, f"{os.getpid()}.tl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        with open("/proc/self/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        born = ticks / os.sysconf("SC_CLK_TCK")
    except OSError:
        cmd, born = "?", 0.0
    os.write(_FD, f"#proc\t{cmd[:300].replace(chr(9), ' ')}\t{born:.6f}\t0\n".encode())
    stamp("up")
    sys.meta_path.insert(0, _Finder())
    import atexit

    atexit.register(stamp, "exit", "atexit")
    leave = os._exit

    def _exit(code):
        stamp("exit", "os._exit")
        leave(code)

    os._exit = _exit


def _chain() -> None:
    """Run the next ``sitecustomize`` on the path (this one shadows it)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for p in sys.path:
        if not p or os.path.abspath(p) == here:
            continue
        f = os.path.join(p, "sitecustomize.py")
        if os.path.isfile(f):
            with open(f, encoding="utf-8") as fh:
                code = fh.read()
            exec(compile(code, f, "exec"), {"__name__": "sitecustomize", "__file__": f})
            return


if _DIR:
    _install()
_chain()
