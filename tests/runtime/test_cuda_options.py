"""The CUDA provider is asked for full-precision matmuls (no TF32): maps must match the CPU's, not be near them.

No GPU in CI: onnxruntime's session class is replaced by a recorder, so this checks what attnviz asks
onnxruntime for; bench/gpu_bench.py measures the effect on a GPU (max |CUDA - CPU| 5.5e-3 with TF32, 8e-6 without).
"""

import onnxruntime as ort

from attnviz.runtime import session


def test_cuda_sessions_turn_tf32_off(monkeypatch):
    asked = []

    class Recorder:
        def __init__(self, model, so=None, providers=None, **kw):
            asked.append(providers)

        def get_providers(self):
            return [session.CUDA, session.CPU]

    monkeypatch.setattr(ort, "get_available_providers", lambda: [session.CUDA, session.CPU])
    monkeypatch.setattr(ort, "preload_dlls", lambda *a, **k: None, raising=False)
    monkeypatch.setattr(ort, "InferenceSession", Recorder)
    _, note = session.make_session(b"model bytes", "cuda")
    assert note == ""
    (providers,) = asked
    name, options = providers[0]
    assert name == session.CUDA and options["use_tf32"] == "0"
    assert providers[1] == session.CPU
