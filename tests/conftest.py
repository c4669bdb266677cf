import os
import sys
from pathlib import Path

# helpers shared by test folders (hf_models, onnx_builders) live beside this file
sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("ATTNVIZ_FORCE_CPU", "1")  # CI has no GPU; keep onnxruntime's CUDA probing quiet
# the app's settings (recent files, window, session, export folder) go to a throwaway file, also in the
# `attnviz open --screenshot` subprocesses, never to the user's real ones
import tempfile

os.environ["ATTNVIZ_SETTINGS"] = os.path.join(tempfile.mkdtemp(prefix="attnviz-test-settings-"), "settings.ini")

import pytest


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
def optimum_export():
    """optimum_export(arch) -> folder with hf/ (the random-init HF model) and onnx/ (optimum's export).

    Exports run in a second venv (transformers<4.58 + optimum-onnx); venv and exports are built once per machine
    under ~/.cache/attnviz-tests (keyed on the export script and pins), so later runs only read them.
    """

    def get(arch):
        import optimum_env

        return optimum_env.cached_export(arch)

    return get
