import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# faulthandler stays armed through Ray's resets and past the session's end (tests/crash_trace.py)
pytest_plugins = ["crash_trace"]

# helpers shared by test folders (hf_models, onnx_builders) live beside this file
sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("ATTNVIZ_FORCE_CPU", "1")  # CI has no GPU; keep onnxruntime's CUDA probing quiet
# the app's settings (recent files, window, session, export folder) go to a throwaway file, also in the
# `attnviz open --screenshot` subprocesses, never to the user's real ones; one folder per run, gone with it
_settings_dir = tempfile.mkdtemp(prefix="attnviz-test-settings-")
atexit.register(shutil.rmtree, _settings_dir, ignore_errors=True)
os.environ["ATTNVIZ_SETTINGS"] = os.path.join(_settings_dir, "settings.ini")
# model hashes and optimised graphs kept between commands (runtime/optcache.py): in that folder too, not the user's
os.environ["ATTNVIZ_CACHE_DIR"] = os.path.join(_settings_dir, "cache")


def pytest_sessionstart(session):
    """The checkout's attnviz compiled to bytecode once, before any test.  Where the environment says
    PYTHONDONTWRITEBYTECODE (this machine's does) nothing writes it otherwise, and every ``attnviz`` subprocess and
    isolation child the suite starts (well over a thousand) compiled the package from source again: 0.2-0.4 s each,
    a quarter of a CLI-heavy test file's time in a fresh clone (tests/test_hostile_sweep21.py + test_hostile_outputs.py
    45.3 -> 34.4 s).  Compiled as Python would on import, into the package's own ``__pycache__`` (git ignores it)."""
    import compileall

    compileall.compile_dir(Path(__file__).resolve().parents[1] / "attnviz", quiet=1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    """Once a test has made the QApplication, cyclic garbage is collected in this (the GUI) thread only, as in the
    app (attnviz/gui/gcguard.py): Ray's and tqdm's threads linger in this process and would otherwise collect the
    windows of earlier tests off the GUI thread."""
    yield
    widgets = sys.modules.get("PySide6.QtWidgets")
    if widgets is not None and widgets.QApplication.instance() is not None:
        from attnviz.gui import gcguard

        gcguard.install(widgets.QApplication.instance())


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    guard = sys.modules.get("attnviz.gui.gcguard")
    if guard is not None:
        guard.collect_due()


@pytest.fixture(scope="session")
def hf_export(tmp_path_factory):
    """hf_export(arch, exporter, attn, opset) -> (onnx path, feeds, reference maps, labels); cached per session."""
    cache = {}
    folder = tmp_path_factory.mktemp("hf")

    def get(arch, exporter="legacy", attn="eager", opset=17):
        key = (arch, exporter, attn, opset)
        if key not in cache:
            import hf_models

            cache[key] = hf_models.export(arch, exporter, attn, opset, folder)
        return cache[key]

    return get


@pytest.fixture(scope="session")
def llava_repo(tmp_path_factory):
    """A tiny random-init LLaVA as a Hub repository with the three-file ONNX layout (tests/vlm_models.py);
    exported once per machine (tests/vlm_build.py: cached_repo), copied once per session."""
    import vlm_build
    import vlm_models

    return vlm_build.cached_repo(vlm_models.save_repo, tmp_path_factory.mktemp("llava") / "tiny-llava")


@pytest.fixture(scope="session")
def llava_with_past_repo(tmp_path_factory):
    """The same LLaVA with its with-past decoder (no ``If``) written under the merged name, as some Hub exports."""
    import vlm_build
    import vlm_models

    out = tmp_path_factory.mktemp("llava-past") / "tiny-llava"
    return vlm_build.cached_repo(vlm_models.save_repo, out, merged=False)


@pytest.fixture(scope="session")
def llava_variants_repo(llava_repo, tmp_path_factory):
    """The LLaVA repository with quantized siblings of its three files, as Hub repositories keep them
    (onnxruntime's quantize_dynamic: ``_int8`` QInt8 and ``_uint8`` QUInt8 weights)."""
    import shutil

    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = tmp_path_factory.mktemp("variants") / "tiny-llava"
    shutil.copytree(llava_repo, out)
    for name, qt in {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}.items():
        for f in ("vision_encoder", "embed_tokens", "decoder_model_merged"):
            quantize_dynamic(out / "onnx" / f"{f}.onnx", out / "onnx" / f"{f}_{name}.onnx", weight_type=qt)
    return out


@pytest.fixture(scope="session")
def idefics3_repo(tmp_path_factory):
    """A tiny random-init Idefics3 (SmolVLM's architecture) as a Hub repository (tests/idefics3_models.py)."""
    import idefics3_models
    import vlm_build

    return vlm_build.cached_repo(idefics3_models.save_repo, tmp_path_factory.mktemp("idefics3") / "tiny-idefics3")


@pytest.fixture(scope="session")
def qwen2vl_repo(tmp_path_factory):
    """A tiny random-init Qwen2-VL as a Hub repository (tests/qwen2vl_models.py)."""
    import qwen2vl_models
    import vlm_build

    return vlm_build.cached_repo(qwen2vl_models.save_repo, tmp_path_factory.mktemp("qwen2vl") / "tiny-qwen2-vl")


@pytest.fixture(scope="session")
def paligemma_repo(tmp_path_factory):
    """A tiny random-init PaliGemma whose decoder takes token_type_ids (the prefix mask in the graph; positions
    counted from 1), as a Hub repository (tests/paligemma_models.py)."""
    import paligemma_models
    import vlm_build

    out = tmp_path_factory.mktemp("paligemma") / "tiny-paligemma"
    return vlm_build.cached_repo(paligemma_models.save_repo, out, prefix=True)


@pytest.fixture(scope="session")
def qwen25vl_repo(tmp_path_factory):
    """A tiny random-init Qwen2.5-VL (windowed vision blocks) as a Hub repository (tests/qwen25vl_models.py)."""
    import qwen25vl_models
    import vlm_build

    return vlm_build.cached_repo(qwen25vl_models.save_repo, tmp_path_factory.mktemp("qwen25vl") / "tiny-qwen2.5-vl")


@pytest.fixture(scope="session")
def optimum_export():
    """optimum_export(arch) -> folder with hf/ (the random-init HF model) and onnx/ (optimum's export).

    Exports run in a second venv (transformers<4.58 + optimum-onnx); venv and exports are built once per machine
    under ~/.cache/attnviz-tests (keyed on the export script and pins), so later runs only read them.
    """

    def get(arch):
        import optimum_env

        return optimum_env.cached_export(arch)

    return get


FAULT_DIR = Path(__file__).parent / "fault_injection"


def _onnxruntime_crashes_on_zero_heads(folder: Path) -> bool:
    """Does the installed onnxruntime die (SIGFPE) creating a session for the 115-byte zero-head Attention?"""
    import subprocess

    from test_hostile_crash import sigfpe_model

    model = sigfpe_model(folder / "fpe.onnx")
    code = "import onnxruntime as ort, sys; ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", code, str(model)], capture_output=True, timeout=120, env=env)
    return r.returncode < 0


@pytest.fixture(scope="session", autouse=True)
def native_fault_for_crash_isolation(tmp_path_factory):
    """Crash-isolation tests need a model that kills onnxruntime.  Where the installed onnxruntime refuses the
    zero-head Attention instead of crashing (1.32+), child processes get tests/fault_injection on PYTHONPATH,
    which raises the same SIGFPE at the same point; the isolation under test is unchanged."""
    if _onnxruntime_crashes_on_zero_heads(tmp_path_factory.mktemp("fpe-probe")):
        yield False
        return
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(FAULT_DIR), *([old] if old else [])])
    from attnviz.runtime import host

    host.shutdown()  # a child started before this point would not have the fault
    try:
        yield True
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
        host.shutdown()


@pytest.fixture
def young_gc():
    """``gc.collect()`` in the test looks only at the objects made since it began: everything older (in the whole
    suite's process: torch, transformers, Qt, Ray and every earlier test, millions of objects) is frozen for the
    test's span and thawed after it.  A collection there took seconds under load instead of milliseconds; the
    tests using this drop results they made themselves and check that those (young) objects are freed, which a
    young collection decides exactly as a full one (an older object referring to one would keep it alive in both)."""
    import gc

    gc.freeze()  # (moves the tracked objects to the permanent generation: no traversal, no collection)
    try:
        yield
    finally:
        gc.unfreeze()  # back into the oldest generation: a later full collection sees them as before


@pytest.fixture
def runs(monkeypatch):
    """Every run of an instrumented session, as the feeds' shapes (a probe runs through the same call)."""
    import numpy as np

    import attnviz.runtime.model as am

    got: list[dict] = []
    real = am._run_bound

    def spy(sess, fetch, feeds):
        got.append({k: np.shape(v) for k, v in feeds.items()})
        return real(sess, fetch, feeds)

    monkeypatch.setattr(am, "_run_bound", spy)
    return got


@pytest.fixture
def never_laid_out(monkeypatch):
    """A tower's frames (core/frames.py FramesMap) that refuse to be laid out as a whole ``[Tq, Tk]`` (a head, an
    aggregate, the array): a test using it fails if any path it drives builds the block-diagonal map."""
    from attnviz.core.frames import FramesMap

    def refuse(*_a, **_k):
        raise AssertionError("the whole [Tq, Tk] of a tower's frames was laid out")

    for name in ("lay_out", "head", "heads", "array"):
        monkeypatch.setattr(FramesMap, name, refuse)
