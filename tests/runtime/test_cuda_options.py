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


def test_helper_sessions_ask_for_an_arena_they_can_give_back(monkeypatch):
    """A kept site's helper (runtime/kept.py) asks for an arena grown by what is asked (so that it can be freed whole)
    and runs with the shrinkage run option on its own GPU; another CUDA session asks for neither.  On a GPU
    tests/runtime/test_ondemand_kept_memory.py reads both back from onnxruntime (bench/gpu/run_kept_mem.sh)."""
    asked = []

    class Recorder:
        def __init__(self, model, so=None, providers=None, **kw):
            asked.append(providers[0][1])
            self.options = providers[0][1]

        def get_providers(self):
            return [session.CUDA, session.CPU]

        def get_provider_options(self):  # as onnxruntime reports them, every value a string (here the second GPU)
            return {session.CUDA: {"device_id": "1", **self.options}, session.CPU: {}}

    monkeypatch.setattr(ort, "get_available_providers", lambda: [session.CUDA, session.CPU])
    monkeypatch.setattr(ort, "preload_dlls", lambda *a, **k: None, raising=False)
    monkeypatch.setattr(ort, "InferenceSession", Recorder)
    helper, _ = session.make_session(b"model bytes", "cuda", helper=True)
    plain, _ = session.make_session(b"model bytes", "cuda")
    assert asked[0] == {"use_tf32": "0", "arena_extend_strategy": "kSameAsRequested"}
    assert "arena_extend_strategy" not in asked[1] and asked[1]["use_tf32"] == "0"
    run = session.release_options(helper)
    assert run is not None and run.get_run_config_entry("memory.enable_memory_arena_shrinkage") == "gpu:1"
    assert session.release_options(plain) is None
