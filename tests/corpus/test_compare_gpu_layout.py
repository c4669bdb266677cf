"""``attnviz compare`` lays its workers out for a GPU only where ``--provider auto`` can land there: not on a machine
whose onnxruntime has no CUDA provider (pip's CPU build), whatever GPU the machine has (runtime/device.py, as the
corpus decides; runtime/ort_build.py names the build)."""

import pytest

from attnviz.corpus import compare_run
from attnviz.runtime import isolation, ort_build


def _build(*libraries: str) -> list:
    """A build as ort_build.described names one: path, size, mtime, the description's hash, its libraries."""
    return ["/x/onnxruntime/__init__.py", 1, 1, None, [[name, 1, 1] for name in libraries]]


@pytest.mark.parametrize(
    ("provider", "gpu", "libraries", "laid_out_for_gpu"),
    [
        ("cpu", True, ("libonnxruntime_providers_cuda.so",), False),
        ("cuda", False, (), True),  # asked for: the session refuses a CPU fallback
        ("auto", False, ("libonnxruntime_providers_cuda.so",), False),  # no NVIDIA GPU
        ("auto", True, ("libonnxruntime_providers_shared.so",), False),  # a CPU-only build on a GPU machine
        ("auto", True, ("libonnxruntime_providers_cuda.so", "libonnxruntime_providers_shared.so"), True),
    ],
)
def test_auto_lays_out_for_the_gpu_only_where_it_can_land_there(
    monkeypatch, tmp_path, provider, gpu, libraries, laid_out_for_gpu
):
    monkeypatch.setattr(isolation, "gpu_present", lambda: gpu)
    monkeypatch.setattr(ort_build, "installed", lambda: _build(*libraries))
    assert compare_run._gpu(provider, tmp_path / "a.onnx") is laid_out_for_gpu
