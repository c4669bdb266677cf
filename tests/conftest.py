import os
import sys
from pathlib import Path

# helpers shared by test folders (hf_models, onnx_builders) live beside this file
sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("ATTNVIZ_FORCE_CPU", "1")  # CI has no GPU; keep onnxruntime's CUDA probing quiet
# the app's settings (recent files, window, session, export folder) go to a throwaway file, also in the
# `attnviz open --screenshot` subprocesses, never to the user's real ones
import tempfile  # noqa: E402

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
